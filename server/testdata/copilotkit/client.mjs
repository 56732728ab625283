// Drives CopilotKit's runtime client, @copilotkitnext/core 1.54.1 (pinned in
// package.json), against a runtime and prints one JSON report on stdout.
//
//   node client.mjs <runtimeUrl> '<scenarios JSON>' [bearer token]
//
// Each scenario is {name, agent?, thread, message, stopAfter?, tool?}: one
// runAgent() with the user message on the thread; or {name, agent?,
// thread, connect: true}: one connectAgent() to the thread, as a page that
// reloads does (it resolves when the runtime ends the stream); or {name,
// agent?, thread, resume}: a run with forwardedProps.command.resume and no
// new message, as useInterrupt resumes, after the thread's previous
// scenario (whose messages the agent keeps). With stopAfter (ms), the
// client calls stopAgent() that long after the run began and waits for the
// run to end. With tool ({name, result}), the app registers a frontend tool
// answering result, and the client's own follow-up run after the tool is
// part of the scenario. The report lists the agents /info announced, and
// per scenario the messages the agent holds afterwards and every error the
// client reported.
globalThis.window ??= {}; // else CopilotKitCore never reads /info in Node
const { CopilotKitCore, CopilotKitCoreRuntimeConnectionStatus } = await import("@copilotkitnext/core");
const { randomUUID } = await import("node:crypto");

const [runtimeUrl, raw, token] = process.argv.slice(2);
const scenarios = JSON.parse(raw);
const headers = token ? { Authorization: `Bearer ${token}` } : {};

const copilotkit = new CopilotKitCore({ runtimeUrl, headers });
let errors = [];
copilotkit.subscribe({ onError: (e) => errors.push(`${e.code}: ${e.error && e.error.message}`) });
const deadline = Date.now() + 10000;
while (copilotkit.runtimeConnectionStatus !== CopilotKitCoreRuntimeConnectionStatus.Connected) {
  if (copilotkit.runtimeConnectionStatus === CopilotKitCoreRuntimeConnectionStatus.Error || Date.now() > deadline) {
    process.stdout.write(JSON.stringify({ infoError: copilotkit.runtimeConnectionStatus, errors }) + "\n");
    process.exit(0);
  }
  await new Promise((r) => setTimeout(r, 10));
}
const report = { agents: Object.keys(copilotkit.agents).sort(), version: copilotkit.runtimeVersion, results: [] };

for (const sc of scenarios) {
  errors = [];
  if (sc.tool) {
    copilotkit.addTool({ name: sc.tool.name, description: "a frontend tool", handler: async () => sc.tool.result });
  }
  const agent = copilotkit.getAgent(sc.agent || "default");
  const out = { name: sc.name };
  if (!agent) {
    out.error = `no agent ${sc.agent}`;
    report.results.push(out);
    continue;
  }
  agent.threadId = sc.thread;
  if (sc.resume === undefined) agent.setMessages([]);
  try {
    if (sc.connect) {
      await copilotkit.connectAgent({ agent });
    } else if (sc.resume !== undefined) {
      await copilotkit.runAgent({ agent, forwardedProps: { command: { resume: sc.resume } } });
    } else {
      agent.addMessage({ id: randomUUID(), role: "user", content: sc.message });
      const run = copilotkit.runAgent({ agent });
      if (sc.stopAfter) {
        await new Promise((r) => setTimeout(r, sc.stopAfter));
        copilotkit.stopAgent({ agent });
      }
      await run;
    }
  } catch (err) {
    out.error = err && err.message ? err.message : String(err);
  }
  if (sc.tool) copilotkit.removeTool(sc.tool.name);
  out.messages = agent.messages.map((m) => ({
    role: m.role,
    content: typeof m.content === "string" ? m.content : null,
    toolCalls: m.toolCalls ? m.toolCalls.map((t) => ({ name: t.function.name, arguments: t.function.arguments })) : undefined,
    toolCallId: m.toolCallId,
  }));
  out.errors = errors;
  report.results.push(out);
}
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(0);
