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
// part of the scenario. A scenario {name, agent?, threadOps: [...]} drives
// the client's thread store (the one useThreads reads) instead: each op is
// {list: {includeArchived?, limit?}} (a fresh listing, every page of it
// fetched), {rename: [threadId, name]}, {archive: threadId} or {delete:
// threadId}, and its step in the report holds the listed threads or the
// mutation's error. The report lists the agents /info announced, and per
// scenario the messages the agent holds afterwards and every error the
// client reported. CK_TRANSPORT=single in the environment makes the client
// use the runtime's single-route transport.
globalThis.window ??= {}; // else CopilotKitCore never reads /info in Node
const { CopilotKitCore, CopilotKitCoreRuntimeConnectionStatus, ɵcreateThreadStore } = await import("@copilotkitnext/core");
const { randomUUID } = await import("node:crypto");

const [runtimeUrl, raw, token] = process.argv.slice(2);
const scenarios = JSON.parse(raw);
const headers = token ? { Authorization: `Bearer ${token}` } : {};

const runtimeTransport = process.env.CK_TRANSPORT || "rest";
const copilotkit = new CopilotKitCore({ runtimeUrl, headers, runtimeTransport });
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

// threadSteps runs a threadOps scenario on a fresh thread store.
async function threadSteps(agentId, ops) {
  const store = ɵcreateThreadStore({ fetch: globalThis.fetch });
  store.start();
  const steps = [];
  const settled = async (busy) => {
    const until = Date.now() + 10000;
    while (busy(store.getState())) {
      if (Date.now() > until) throw new Error("the thread store did not settle");
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  for (const op of ops) {
    const step = {};
    try {
      if (op.list) {
        store.setContext({ runtimeUrl, headers, agentId, ...op.list });
        await settled((st) => st.isLoading);
        let pages = 1;
        while (store.getState().nextCursor && !store.getState().error) {
          store.fetchNextPage();
          await settled((st) => st.isFetchingNextPage);
          pages++;
        }
        const st = store.getState();
        if (st.error) throw st.error;
        step.pages = pages;
        step.threads = st.threads.map((t) => ({ id: t.id, name: t.name, archived: t.archived, agentId: t.agentId }));
      } else if (op.rename) {
        await store.renameThread(op.rename[0], op.rename[1]);
      } else if (op.archive) {
        await store.archiveThread(op.archive);
      } else if (op.delete) {
        await store.deleteThread(op.delete);
      }
    } catch (err) {
      step.error = err && err.message ? err.message : String(err);
    }
    steps.push(step);
  }
  store.stop();
  return steps;
}

for (const sc of scenarios) {
  errors = [];
  if (sc.threadOps) {
    report.results.push({ name: sc.name, steps: await threadSteps(sc.agent || "default", sc.threadOps), errors });
    continue;
  }
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
