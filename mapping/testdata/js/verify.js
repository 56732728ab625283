// Reads streams (one JSON array of AG-UI events per line) from the file given
// as argument, parses every event with @ag-ui/core's EventSchemas and runs
// each stream through @ag-ui/client's verifyEvents. Exits 1 on a rejection.
const fs = require("fs");
const { verifyEvents } = require("@ag-ui/client");
const { EventSchemas } = require("@ag-ui/core/schemas");
const { from, lastValueFrom, toArray } = require("rxjs");

async function main() {
  const lines = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean);
  let failed = 0;
  for (const [i, line] of lines.entries()) {
    const events = JSON.parse(line);
    try {
      for (const e of events) EventSchemas.parse(e);
      const out = await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
      if (out.length !== events.length) throw new Error(`verifier passed ${out.length} of ${events.length} events`);
    } catch (err) {
      failed++;
      console.log(`FAIL stream ${i}: ${err.message}`);
    }
  }
  console.log(`ok ${lines.length - failed}/${lines.length}`);
  process.exit(failed ? 1 : 0);
}
main();
