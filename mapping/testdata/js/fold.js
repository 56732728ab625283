// Reads streams (one JSON array of AG-UI events per line) from the file given
// as argument and applies each with @ag-ui/client's own pipeline for a run:
// transformChunks, then defaultApplyEvents, on an agent with no messages and
// state {}. Prints one line per stream: {"messages": [...], "state": ...},
// what the client holds at the end.
const fs = require("fs");
const { defaultApplyEvents, transformChunks } = require("@ag-ui/client");
const { from, lastValueFrom, tap } = require("rxjs");

async function fold(events) {
  const agent = { messages: [], state: {} };
  const input = { threadId: "t", runId: "r", state: {}, messages: [], tools: [], context: [], forwardedProps: {} };
  let messages = [];
  let state = {};
  await lastValueFrom(
    defaultApplyEvents(input, from(events).pipe(transformChunks(false)), agent, []).pipe(
      tap((m) => {
        if (m.messages) messages = m.messages;
        if (m.state !== undefined) state = m.state;
      }),
    ),
    { defaultValue: null },
  );
  return { messages, state };
}

async function main() {
  const lines = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean);
  const out = [];
  for (const line of lines) out.push(JSON.stringify(await fold(JSON.parse(line))));
  process.stdout.write(out.join("\n") + "\n");
}
main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
