// Follows a native event stream with the `eventsource` package (the
// WHATWG EventSource, as browsers implement it: no custom headers, so the
// token rides in the URL) and prints every message as a JSON line until a
// run-finish of the given run. An error event (a refused connection, say)
// is printed to stderr and exits with status 3.
//
//   node follow.js <url> <runId>
const { EventSource } = require("eventsource");

const [url, runId] = process.argv.slice(2);
const es = new EventSource(url);
const timer = setTimeout(() => {
  console.error("timed out");
  process.exit(2);
}, 20000);
es.addEventListener("message", (e) => {
  const ev = JSON.parse(e.data);
  console.log(JSON.stringify({ id: e.lastEventId, type: ev.type, runId: ev.runId }));
  if (ev.type === "run-finish" && ev.runId === runId) {
    clearTimeout(timer);
    es.close();
  }
});
es.addEventListener("error", (e) => {
  console.error(JSON.stringify({ error: e.message || "error", code: e.code }));
  clearTimeout(timer);
  es.close();
  process.exit(3);
});
