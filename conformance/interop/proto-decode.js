// Decodes AG-UI protobuf streams (@ag-ui/proto's binding: each event a
// 4-byte big-endian length, then an ag_ui.Event message) with the pinned
// @ag-ui/proto's own decode, and prints them as JSON on stdout.
//
//   node proto-decode.js <file>...
//
// The output is {"streams": [[event, ...], ...]}, one array per file. A
// truncated frame, trailing bytes or an event decode rejects fails the run
// with the file and frame named on stderr.
const fs = require("fs");
const { decode } = require("@ag-ui/proto");

function decodeStream(buf, name) {
  const events = [];
  let off = 0;
  while (off < buf.length) {
    if (buf.length - off < 4) throw new Error(`${name}: ${buf.length - off} trailing bytes after frame ${events.length}`);
    const len = buf.readUInt32BE(off);
    off += 4;
    if (buf.length - off < len) throw new Error(`${name}: frame ${events.length} claims ${len} bytes, ${buf.length - off} left`);
    const bytes = new Uint8Array(buf.buffer, buf.byteOffset + off, len);
    off += len;
    try {
      events.push(decode(bytes));
    } catch (err) {
      throw new Error(`${name}: frame ${events.length}: ${err.message}`);
    }
  }
  return events;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  process.stderr.write("usage: node proto-decode.js <file>...\n");
  process.exit(2);
}
try {
  const streams = files.map((f) => decodeStream(fs.readFileSync(f), f));
  process.stdout.write(JSON.stringify({ decoder: "@ag-ui/proto@1.0.0", streams }) + "\n");
} catch (err) {
  process.stderr.write(err.message + "\n");
  process.exit(1);
}
