// Replays of real n8n 1.123.81 answers (testdata/real/, see its README.md
// for how they were recorded) through the agent and the real core. The
// synthetic fixtures of n8n_test.go model the protocol as n8n's source
// describes it; these pin what one real release actually sends, so a guess
// that reality contradicts fails here.

package n8n_test

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/n8n"
	"github.com/threadline/threadline/instanceai"
)

const realDir = "testdata/real"

// recordedHeaders reads a .headers file (the status line and headers as
// curl -D wrote them) and returns the status and the headers a handler can
// set again: connection-level ones are left to the test server.
func recordedHeaders(t *testing.T, name string) (int, http.Header) {
	t.Helper()
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(readFixture(t, filepath.Join(realDir, name)))))
	line, err := r.ReadLine()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(line, " ", 3)
	status, err := strconv.Atoi(parts[1])
	if len(parts) < 2 || err != nil {
		t.Fatalf("%s: status line %q", name, line)
	}
	mh, err := r.ReadMIMEHeader()
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	h := http.Header(mh)
	for _, k := range []string{"Transfer-Encoding", "Connection", "Keep-Alive", "Date"} {
		h.Del(k)
	}
	return status, h
}

// stall pauses a replay once, after the first at bytes of the body.
type stall struct {
	at int
	d  time.Duration
}

// replayRecorded serves a recorded answer: its status and headers at once,
// then the body in small writes (1–7 bytes) cut at arbitrary offsets, each
// flushed, as the existing fixtures are replayed.
func replayRecorded(t *testing.T, status int, header http.Header, body []byte, seed uint64, pause stall) http.HandlerFunc {
	if cl := header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
		t.Fatalf("recorded Content-Length %s, body has %d bytes", cl, len(body))
	}
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		w.(http.Flusher).Flush()
		rng := rand.New(rand.NewPCG(seed, 42))
		sent := 0
		for rest := body; len(rest) > 0; {
			n := min(1+rng.IntN(7), len(rest))
			if pause.d > 0 && sent < pause.at && sent+n >= pause.at {
				n = pause.at - sent
			}
			if _, err := w.Write(rest[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			rest, sent = rest[n:], sent+n
			if pause.d > 0 && sent == pause.at {
				select {
				case <-time.After(pause.d):
				case <-r.Context().Done():
					return
				}
			}
		}
	}
}

// matches compares summary lines; a wanted line "PREFIX ~PART" matches a
// line that starts with PREFIX and contains PART (for long guidance texts).
func matches(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		prefix, part, ok := strings.Cut(want[i], " ~")
		if !ok {
			if got[i] != want[i] {
				return false
			}
			continue
		}
		if !strings.HasPrefix(got[i], prefix+" ") || !strings.Contains(got[i], part) {
			return false
		}
	}
	return true
}

// The text the fake model of the recordings answers with: seed 004 objects
// inside prose, with multi-byte characters.
const (
	realBefore = "Checking… "
	realCall   = `call #1 show_diff {"path":"src/a.go"}`
	realResult = `result #1 {"status":"announced"}`
	realAfter  = ` done. Ünïcode ✓ héllo`
)

func TestRealRecordings(t *testing.T) {
	// Every case's error text is checked against the live events and the
	// stored log.
	const agentNode = "AI Agent"
	cases := []struct {
		name      string
		body      string // file in testdata/real
		headers   string // file in testdata/real
		path      string // webhook path the agent posts to
		idle      time.Duration
		pause     stall
		want      []string
		objects   []string
		malformed []string
		details   []string // parts of the error's technical details
		noDetails []string // what the details must not carry
	}{
		{
			// begin, 35 items, end: one answer, objects split over items.
			name: "stream-normal", body: "stream-normal.ndjson", headers: "stream-normal.headers",
			want: []string{"run-start", `text r1 "` + realBefore + `"`, realCall, realResult,
				`text r1 "` + realAfter + `"`, "run-finish completed"},
			objects: []string{"tool_call", "regular_message"},
		},
		{
			// The Calculator call is an empty begin/end pair before the
			// answer: nothing to show, and the answer keeps the same
			// responseId (same node, run and item). The tool's output only
			// appears because the fake model quotes it in its text; its
			// {"response":"42"} is neither seed 004 shape, so it stays text.
			name: "stream-tool", body: "stream-tool.ndjson", headers: "stream-tool.headers",
			want: []string{"run-start", `text r1 "Tool said: [{\"response\":\"42\"}]. ` + realBefore + `"`, realCall, realResult,
				`text r1 "` + realAfter + `"`, "run-finish completed"},
			objects:   []string{"tool_call", "regular_message"},
			malformed: []string{"other_shape"},
		},
		{
			// Items 0 and 1 of one node interleaved chunk by chunk: two
			// responses, each with its own capture layer, whose text and
			// captured calls come out as the chunks complete them.
			name: "stream-2items", body: "stream-2items.ndjson", headers: "stream-2items.headers",
			want:    nil, // filled in below: the interleaving is long
			objects: []string{"tool_call", "tool_call", "regular_message", "regular_message"},
		},
		{
			// The model's 500: begin, then an error chunk with the model's
			// message and no end. The text is n8n's, passed on as is.
			name: "stream-model-500", body: "stream-model-500.ndjson", headers: "stream-model-500.headers",
			want: []string{"run-start", "error n8n/workflow_error/0 The fake server had an error processing your request.",
				"run-finish error"},
			details: []string{`error chunk from node "AI Agent"`, "run 0, item 0"},
		},
		{
			name: "stream-model-401", body: "stream-model-401.ndjson", headers: "stream-model-401.headers",
			want: []string{"run-start", "error n8n/workflow_error/0 Incorrect API key provided: sk-fake***. (fake server)",
				"run-finish error"},
		},
		{
			// Model server down: the error chunk has no content at all.
			name: "stream-model-down", body: "stream-model-down.ndjson", headers: "stream-model-down.headers",
			want: []string{"run-start", "error n8n/workflow_error/0 ~n8n reported an error in node " + agentNode +
				" without a description. Open the workflow's executions in n8n", "run-finish error"},
		},
		{
			// 35 s without a byte after begin, no keepalive, then the answer:
			// replayed at 1/100 speed against the default 120 s idle
			// timeout scaled the same way.
			name: "stream-stall35s", body: "stream-stall35s.ndjson", headers: "stream-stall35s.headers",
			idle: 1200 * time.Millisecond, pause: stall{d: 350 * time.Millisecond},
			want: []string{"run-start", `text r1 "` + realBefore + `"`, realCall, realResult,
				`text r1 "` + realAfter + `"`, "run-finish completed"},
			objects: []string{"tool_call", "regular_message"},
		},
		{
			// The same silence against an idle timeout shorter than it: 1.123
			// sends nothing to keep the stream alive, so the run stops.
			name: "stream-stall35s-idle-timeout", body: "stream-stall35s.ndjson", headers: "stream-stall35s.headers",
			idle: 100 * time.Millisecond, pause: stall{d: 2 * time.Second},
			want: []string{"run-start", "error n8n/timeout/0 ~(1.123 and older) stay silent", "run-finish error"},
		},
		{
			// Streaming webhook, agent streaming off: 200, stream headers,
			// empty body.
			name: "stream-agent-streaming-off", body: "stream-agent-streaming-off.ndjson", headers: "stream-agent-streaming-off.headers",
			want: []string{"run-start", "error n8n/empty_response/0 ~enable streaming in the AI Agent node options",
				"run-finish error"},
		},
		{
			// "When Last Node Finishes": one object {"output": …}, with
			// Content-Length, read whole and captured like a streamed item.
			name: "lastnode", body: "lastnode.json", headers: "lastnode.headers",
			want: []string{"run-start", `text r1 "` + realBefore + `"`, realCall, realResult,
				`text r1 "` + realAfter + `"`, "run-finish completed"},
			objects: []string{"tool_call", "regular_message"},
		},
		{
			name: "lastnode-model-500", body: "lastnode-model-500.json", headers: "lastnode-model-500.headers",
			want:    []string{"run-start", `error n8n/upstream_error/500 ~n8n said only "Error in workflow"`, "run-finish error"},
			details: []string{"HTTP 500: Error in workflow"},
		},
		{
			// Response mode "Immediately".
			name: "onreceived", body: "onreceived.json", headers: "onreceived.headers",
			want:    []string{"run-start", "error n8n/unexpected_response/0 ~the Webhook node answers Immediately", "run-finish error"},
			details: []string{"Workflow was started"},
		},
		{
			name: "webhook-404", body: "webhook-404.json", headers: "webhook-404.headers", path: "/webhook/no-such-path",
			want: []string{"run-start", "error n8n/webhook_not_found/404 ~Activate the workflow in n8n", "run-finish error"},
			details: []string{`HTTP 404: The requested webhook "POST no-such-path" is not registered.`,
				"(hint: The workflow must be active for a production URL"},
			noDetails: []string{"stacktrace", "ResponseError", "/tmp/n8n-real"},
		},
		{
			name: "webhook-test-404", body: "webhook-test-404.json", headers: "webhook-test-404.headers",
			path:      "/webhook-test/threadline-agent",
			want:      []string{"run-start", "error n8n/webhook_not_found/404 ~use the production URL (/webhook/)", "run-finish error"},
			details:   []string{"(hint: Click the 'Execute workflow' button"},
			noDetails: []string{"/tmp/n8n-real"},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := readFixture(t, filepath.Join(realDir, c.body))
			status, header := recordedHeaders(t, c.headers)
			if c.pause.d > 0 {
				// Right after the begin line, where n8n waited for the model.
				c.pause.at = bytes.IndexByte(body, '\n') + 1
			}
			srv := httptest.NewServer(replayRecorded(t, status, header, body, uint64(i)+100, c.pause))
			defer srv.Close()
			path := c.path
			if path == "" {
				path = "/webhook/threadline-agent"
			}
			obs := &observer{}
			h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL + path}},
				IdleTimeout: c.idle, Observer: obs}))
			want := c.want
			if c.name == "stream-2items" {
				want = twoItems
			}
			live := h.play("t", instanceai.StartRequest{Message: "hello"}, nil)
			if got := summary(t, live); !matches(got, want) {
				t.Fatalf("live events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
			}
			if got := summary(t, h.stored("t")); !matches(got, want) {
				t.Fatalf("stored events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
			}
			if len(c.details) > 0 || len(c.noDetails) > 0 {
				d := errorPayload(t, live).TechnicalDetails
				for _, p := range c.details {
					if !strings.Contains(d, p) {
						t.Errorf("details %q lack %q", d, p)
					}
				}
				for _, p := range c.noDetails {
					if strings.Contains(d, p) {
						t.Errorf("details %q carry %q", d, p)
					}
				}
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if !slices.Equal(obs.objects, c.objects) || !slices.Equal(obs.malformed, c.malformed) {
				t.Errorf("observer: objects %v malformed %v, want %v %v", obs.objects, obs.malformed, c.objects, c.malformed)
			}
		})
	}
}

// twoItems is stream-2items through the bridge: r1 is item 0, r2 item 1.
// Each item's text leaves as its chunks arrive; a captured object leaves
// when its closing brace does, so the two calls and messages interleave as
// the items did.
var twoItems = []string{
	"run-start",
	`text r1 "Che"`, `text r2 "Che"`,
	`text r1 "cking"`, `text r2 "cking"`,
	`text r1 "… "`, `text r2 "… "`,
	`call #1 show_diff {"path":"src/a.go"}`, `result #1 {"status":"announced"}`, `text r1 " don"`,
	`call #2 show_diff {"path":"src/a.go"}`, `result #2 {"status":"announced"}`, `text r2 " don"`,
	`text r1 "e."`, `text r2 "e."`,
	`text r1 " Ün"`, `text r2 " Ün"`,
	`text r1 "ïcode"`, `text r2 "ïcode"`,
	`text r1 " ✓"`, `text r2 " ✓"`,
	`text r1 " "`, `text r2 " "`,
	`text r1 "héllo"`, `text r2 "héllo"`,
	"run-finish completed",
}

// TestRealWire serves the recorded HTTP/1.1 responses byte for byte,
// status line, headers and chunk framing included (the .headers and
// .chunked.raw files), so the client's own de-chunking is in the path too.
func TestRealWire(t *testing.T) {
	cases := []struct {
		name string
		want []string
	}{
		{"stream-normal", []string{"run-start", `text r1 "` + realBefore + `"`, realCall, realResult,
			`text r1 "` + realAfter + `"`, "run-finish completed"}},
		{"stream-agent-streaming-off", []string{"run-start",
			"error n8n/empty_response/0 ~enable streaming in the AI Agent node options", "run-finish error"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wire := append(readFixture(t, filepath.Join(realDir, c.name+".headers")),
				readFixture(t, filepath.Join(realDir, c.name+".chunked.raw"))...)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				// Read the request up to its body, as n8n would before answering.
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				rng := rand.New(rand.NewPCG(uint64(i)+200, 42))
				for rest := wire; len(rest) > 0; {
					n := min(1+rng.IntN(7), len(rest))
					if _, err := conn.Write(rest[:n]); err != nil {
						return
					}
					rest = rest[n:]
				}
			}()
			h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main",
				URL: "http://" + ln.Addr().String() + "/webhook/threadline-agent"}}}))
			if got := summary(t, h.play("t", instanceai.StartRequest{Message: "hello"}, nil)); !matches(got, c.want) {
				t.Fatalf("events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(c.want, "\n     "))
			}
		})
	}
}
