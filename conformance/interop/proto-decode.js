// Decodes AG-UI protobuf streams (@ag-ui/proto's binding: each event a
// 4-byte big-endian length, then an ag_ui.Event message) with the pinned
// @ag-ui/proto's own decode, and prints them as JSON on stdout.
//
//   node proto-decode.js <file>...
//
// The output is {"streams": [[{event, cursor}, ...], ...]}, one array per
// file: the event decode returned, and the frame's cursor (0 for none).
// The cursor is Threadline's FrameCursor.event_id (field 1000000, a varint)
// that follows the event's bytes in the frame; decode skips it as an
// unknown field, so it is read here with the protobuf wire reader
// @ag-ui/proto itself uses. A truncated frame, trailing bytes or an event
// decode rejects fails the run with the file and frame named on stderr.
const fs = require("fs");
const { decode } = require("@ag-ui/proto");
const { BinaryReader } = require("@bufbuild/protobuf/wire");

const CURSOR_FIELD = 1000000;

function cursorOf(bytes) {
  const reader = new BinaryReader(bytes);
  let cursor = 0;
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === CURSOR_FIELD && wireType === 0) cursor = Number(reader.int64());
    else reader.skip(wireType, field);
  }
  return cursor;
}

function decodeStream(buf, name) {
  const frames = [];
  let off = 0;
  while (off < buf.length) {
    if (buf.length - off < 4) throw new Error(`${name}: ${buf.length - off} trailing bytes after frame ${frames.length}`);
    const len = buf.readUInt32BE(off);
    off += 4;
    if (buf.length - off < len) throw new Error(`${name}: frame ${frames.length} claims ${len} bytes, ${buf.length - off} left`);
    const bytes = new Uint8Array(buf.buffer, buf.byteOffset + off, len);
    off += len;
    try {
      frames.push({ event: decode(bytes), cursor: cursorOf(bytes) });
    } catch (err) {
      throw new Error(`${name}: frame ${frames.length}: ${err.message}`);
    }
  }
  return frames;
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
