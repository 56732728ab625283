'use strict';
// Folds Instance AI events with n8n's own agent-run reducer
// (@n8n/api-types/dist/schemas/agent-run-reducer.js), the reference the Go
// package instanceai/agenttree is checked against.
//
//   node fold.js            stdin: a JSON array of events
//                           stdout: JSON.stringify(toAgentTree(state))
//   node fold.js --report   stdin: a JSON array of event arrays
//                           stdout: [{tree, status, rootAgentId, threw}]
//
// Every event must pass instanceAiEventSchema unchanged (zod neither strips
// nor defaults anything) and carry ts, so the fold is deterministic and its
// input is exactly what the Go event model can hold. Where the reducer throws
// part-way through an event (it can, for ids such as "toString"), the event's
// index goes into threw and folding goes on with the state as the throw left
// it.
const fs = require('fs');
const { instanceAiEventSchema } = require('@n8n/api-types/dist/schemas/instance-ai.schema.js');
const reducer = require('@n8n/api-types/dist/schemas/agent-run-reducer.js');

function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = canonical(v[k]);
    return out;
  }
  return v;
}

function fold(events, label) {
  if (!Array.isArray(events)) throw new Error(`${label}: not an array of events`);
  const state = reducer.createInitialState();
  const threw = [];
  events.forEach((event, i) => {
    const where = `${label} event ${i} (${event && event.type})`;
    if (!event || typeof event.ts !== 'number') throw new Error(`${where}: ts is required`);
    const parsed = instanceAiEventSchema.safeParse(event);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((x) => `${x.path.join('.')}: ${x.message}`);
      throw new Error(`${where}: not a valid event: ${issues.join('; ')}`);
    }
    if (JSON.stringify(canonical(parsed.data)) !== JSON.stringify(canonical(event))) {
      throw new Error(`${where}: the schema changes the event (unknown or defaulted fields)`);
    }
    try {
      reducer.reduceEvent(state, parsed.data);
    } catch (err) {
      threw.push(i);
    }
  });
  return { state, threw };
}

function main() {
  const input = JSON.parse(fs.readFileSync(0, 'utf8'));
  if (process.argv.includes('--report')) {
    if (!Array.isArray(input)) throw new Error('--report wants an array of event arrays');
    const out = input.map((events, n) => {
      const { state, threw } = fold(events, `stream ${n}`);
      return {
        tree: reducer.toAgentTree(state),
        status: state.status,
        rootAgentId: state.rootAgentId,
        threw,
      };
    });
    process.stdout.write(JSON.stringify(out));
    return;
  }
  const { state } = fold(input, 'stdin');
  process.stdout.write(JSON.stringify(reducer.toAgentTree(state)));
}

try {
  main();
} catch (err) {
  process.stderr.write(`fold.js: ${err.message}\n`);
  process.exit(1);
}
