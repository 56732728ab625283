// Draws attachments with the console's render.js under Node, for
// server/console/attachments_test.go.
//
//   node render-attachments.mjs <static dir>   stdin: {thumbs: [attachment], parts: [AG-UI part]}
//
// render.js and the fold.js it imports are copied beside a package.json
// that makes them ES modules; document is a stand-in that records the
// elements built (tag, attributes, text, children), so the output shows
// exactly what the page would hold. stdout: {thumbs: [thumbSource(a)],
// parts: the nodes renderParts(parts) builds}.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const dir = mkdtempSync(join(tmpdir(), 'console-render-'));
for (const f of ['render.js', 'fold.js']) cpSync(join(process.argv[2], f), join(dir, f));
writeFileSync(join(dir, 'package.json'), '{"type":"module"}');

class Node {
  constructor(tag) { Object.assign(this, { tag, attrs: {}, children: [] }); }
  setAttribute(k, v) { this.attrs[k] = v; }
  set className(v) { this.attrs.class = v; }
  set textContent(v) { this.text = v; }
  set innerHTML(v) { throw new Error('innerHTML used'); }
  append(...c) { this.children.push(...c); }
  addEventListener() {}
  toJSON() { return { tag: this.tag, attrs: this.attrs, text: this.text, children: this.children }; }
}
globalThis.document = { createElement: (tag) => new Node(tag) };

const render = await import(join(dir, 'render.js'));
rmSync(dir, { recursive: true, force: true });
const input = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify({
  thumbs: input.thumbs.map(render.thumbSource),
  parts: render.renderParts(input.parts).filter(Boolean),
}));
