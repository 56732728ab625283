// Folds event streams with the console's fold.js under Node, for
// server/console/fold_test.go, which compares the results with the Go fold.
//
//   node fold-run.mjs <path of fold.js>   stdin: a JSON array of cases
//
// A case is {events, fromTree?} (fold events into a fresh state, or into the
// state stateFromAgentTree(fromTree) rebuilds) or {runs: events} (fold them
// per run with Runs). stdout: one result per case, {tree, status} or
// {runs: [{id, tree, status}]}.
import { readFileSync } from 'node:fs';

const src = readFileSync(process.argv[2], 'utf8');
const fold = await import('data:text/javascript;base64,' + Buffer.from(src).toString('base64'));
const cases = JSON.parse(readFileSync(0, 'utf8'));

const out = cases.map((c) => {
  if (c.runs) {
    const runs = new fold.Runs();
    for (const ev of c.runs) runs.apply(ev);
    return { runs: runs.all().map((r) => ({ id: r.id, tree: fold.toAgentTree(r.state), status: r.state.status })) };
  }
  const state = c.fromTree ? fold.stateFromAgentTree(c.fromTree) : fold.createState();
  for (const ev of c.events) fold.reduceEvent(state, ev);
  return { tree: fold.toAgentTree(state), status: state.status };
});
process.stdout.write(JSON.stringify(out));
