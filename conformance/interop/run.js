// Runs @ag-ui/client's HttpAgent against an AG-UI endpoint and prints one
// JSON report on stdout.
//
//   node run.js <url> '<scenarios JSON>'
//
// Each scenario is {name, message, state?, headers?}: one runAgent() with a
// single user message. The report lists, per scenario, the event types seen,
// the agent's messages and state afterwards, the error runAgent() threw (if
// any), the RUN_ERROR it saw (if any) and every console warning or error the
// client printed while it ran.
const { HttpAgent } = require("@ag-ui/client");

const captured = [];
for (const level of ["warn", "error"]) {
  const original = console[level];
  console[level] = (...args) => {
    captured.push({ level, text: args.map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : JSON.stringify(a))).join(" ") });
    if (process.env.INTEROP_VERBOSE) original(...args);
  };
}

async function runScenario(url, sc, index) {
  const threadId = sc.threadId || `interop-${process.pid}-${Date.now()}-${index}`;
  const agent = new HttpAgent({
    url,
    threadId,
    headers: sc.headers || {},
    initialMessages: [{ id: `user-${index}`, role: "user", content: sc.message }],
    initialState: sc.state,
  });
  const report = { name: sc.name, threadId, events: [], runError: null, error: null, warnings: [] };
  const before = captured.length;
  try {
    await agent.runAgent(
      { runId: `interop-run-${index}` },
      {
        onEvent: ({ event }) => {
          report.events.push(event.type);
        },
        onRunErrorEvent: ({ event }) => {
          report.runError = { message: event.message, code: event.code };
        },
      },
    );
  } catch (err) {
    report.error = err && err.message ? err.message : String(err);
  }
  report.messages = agent.messages;
  report.state = agent.state;
  report.warnings = captured.slice(before);
  return report;
}

async function main() {
  const [url, raw] = process.argv.slice(2);
  if (!url || !raw) {
    process.stderr.write("usage: node run.js <url> '<scenarios JSON>'\n");
    process.exit(2);
  }
  const scenarios = JSON.parse(raw);
  const results = [];
  for (const [i, sc] of scenarios.entries()) results.push(await runScenario(url, sc, i));
  process.stdout.write(JSON.stringify({ client: "@ag-ui/client@1.0.0", results }, null, 2) + "\n");
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
