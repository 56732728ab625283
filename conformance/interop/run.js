// Runs @ag-ui/client's HttpAgent against an AG-UI endpoint and prints one
// JSON report on stdout.
//
//   node run.js <url> '<scenarios JSON>'
//
// Each scenario is {name, message (a string, or an array of content parts),
// state?, headers?, tools?, resume?,
// toolResult?, forwardedProps?, abortAfter?, rejoin?}: one runAgent() with a
// single user message (and `tools` as its frontend tools, `forwardedProps`
// as its forwarded props). With `abortAfter` (an event type), the client
// calls agent.abortRun() on the first event of that type; the report's
// `aborted` says whether it did. With `rejoin`, once that run is over the
// client fetches GET /agui/threads/{threadId}/events on the same server,
// parses it with the client's own transformHttpEventStream, checks it with
// verifyEvents and folds it with defaultApplyEvents; the report's `rejoin`
// holds the event types, the error (if any) and the messages it yields. With `resume` ({status, payload?}), a second
// runAgent() answers every interrupt the first run ended with, built with
// buildResumeArray from agent.pendingInterrupts. With `toolResult`, the
// client "runs" each pending frontend tool call of the first run: it adds a
// `tool` message with that content and calls runAgent() again. The report
// lists, per scenario, the event types seen, the run's outcome, the agent's
// messages and state afterwards, the error runAgent() threw (if any), the
// RUN_ERROR it saw (if any), the second run's report as followUp, and every
// console warning or error the client printed while it ran. With
// `protobuf`, every request of the scenario asks for AG-UI's protobuf
// binding (Accept: application/vnd.ag-ui.event+proto) and the client reads
// the answer with its own protobuf parser; `contentType` reports what the
// first run's response said it was. With `full`, the report's
// `eventObjects` holds the events themselves as the client's subscribers
// saw them.
const {
  HttpAgent,
  buildResumeArray,
  defaultApplyEvents,
  runHttpRequest,
  transformHttpEventStream,
  verifyEvents,
} = require("@ag-ui/client");
const { lastValueFrom, tap } = require("rxjs");
const { AGUI_MEDIA_TYPE } = require("@ag-ui/proto");

// ProtoHttpAgent is HttpAgent asking for the protobuf binding: HttpAgent's
// own requestInit hard-codes text/event-stream, and its response parser
// picks protobuf when the Content-Type is exactly AGUI_MEDIA_TYPE.
class ProtoHttpAgent extends HttpAgent {
  requestInit(input) {
    const init = super.requestInit(input);
    return { ...init, headers: { ...init.headers, Accept: AGUI_MEDIA_TYPE } };
  }
}

// recordingFetch wraps fetch to keep the Content-Type of each response.
function recordingFetch(seen) {
  return async (url, init) => {
    const res = await fetch(url, init);
    seen.push(res.headers.get("content-type"));
    return res;
  };
}

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
  const contentTypes = [];
  const Agent = sc.protobuf ? ProtoHttpAgent : HttpAgent;
  const agent = new Agent({
    url,
    threadId,
    headers: sc.headers || {},
    initialMessages: [{ id: `user-${index}`, role: "user", content: sc.message }],
    initialState: sc.state,
    fetch: recordingFetch(contentTypes),
  });
  const before = captured.length;
  const report = {
    name: sc.name,
    threadId,
    ...(await run(agent, { runId: `interop-run-${index}`, tools: sc.tools, forwardedProps: sc.forwardedProps }, sc.abortAfter, sc.full)),
    warnings: [],
  };
  report.contentType = contentTypes[0] || null;
  if (sc.rejoin) report.rejoin = await rejoin(url, threadId, sc.headers || {}, sc.protobuf);
  if (!report.error && sc.resume) {
    const responses = {};
    for (const interrupt of agent.pendingInterrupts) responses[interrupt.id] = sc.resume;
    let resume;
    try {
      resume = buildResumeArray(agent.pendingInterrupts, responses);
    } catch (err) {
      report.followUp = { error: err.message };
    }
    if (resume) report.followUp = await run(agent, { runId: `interop-run-${index}-resume`, resume }, undefined, sc.full);
  }
  if (!report.error && sc.toolResult !== undefined) {
    for (const id of report.pendingToolCallIds || []) {
      agent.addMessage({ id: `tool-${id}`, role: "tool", toolCallId: id, content: sc.toolResult });
    }
    report.followUp = await run(agent, { runId: `interop-run-${index}-continue`, tools: sc.tools }, undefined, sc.full);
  }
  report.messages = agent.messages;
  report.state = agent.state;
  report.warnings = captured.slice(before);
  return report;
}

// run calls runAgent once and reports what the client saw of that run.
// With abortAfter, it aborts the run on the first event of that type; with
// full, it keeps the events themselves in eventObjects.
async function run(agent, params, abortAfter, full) {
  const out = { events: [], outcome: null, pendingToolCallIds: null, interrupts: null, runError: null, error: null };
  if (abortAfter) out.aborted = false;
  if (full) out.eventObjects = [];
  try {
    await agent.runAgent(params, {
      onEvent: ({ event }) => {
        out.events.push(event.type);
        if (full) out.eventObjects.push(event);
        if (abortAfter && !out.aborted && event.type === abortAfter) {
          out.aborted = true;
          agent.abortRun();
        }
      },
      onRunFinishedEvent: ({ outcome, pendingToolCallIds, interrupts }) => {
        out.outcome = outcome;
        out.pendingToolCallIds = pendingToolCallIds || null;
        out.interrupts = interrupts || null;
      },
      onRunErrorEvent: ({ event }) => {
        out.runError = { message: event.message, code: event.code };
      },
    });
  } catch (err) {
    out.error = err && err.message ? err.message : String(err);
  }
  return out;
}

// rejoin reads the thread's rejoin stream (SSE, or protobuf when asked)
// with the client's own HTTP, stream parsing and verification pipeline and folds it into messages as an agent would.
async function rejoin(runURL, threadId, headers, protobuf) {
  const url = new URL(`/agui/threads/${encodeURIComponent(threadId)}/events`, runURL).toString();
  const out = { events: [], runError: null, error: null, messages: [] };
  const agent = new HttpAgent({ url: runURL, threadId });
  const input = { threadId, runId: `rejoin-${threadId}`, state: {}, messages: [], tools: [], context: [], forwardedProps: {} };
  try {
    const events$ = transformHttpEventStream(
      runHttpRequest(() => fetch(url, { headers: { ...headers, Accept: protobuf ? AGUI_MEDIA_TYPE : "text/event-stream" } })),
    ).pipe(
      verifyEvents(),
      tap((event) => {
        out.events.push(event.type);
        if (event.type === "RUN_ERROR") out.runError = { message: event.message, code: event.code };
      }),
    );
    await lastValueFrom(
      defaultApplyEvents(input, events$, agent, []).pipe(
        tap((mutation) => {
          if (mutation.messages) out.messages = mutation.messages;
        }),
      ),
      { defaultValue: null },
    );
  } catch (err) {
    out.error = err && err.message ? err.message : String(err);
  }
  return out;
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
