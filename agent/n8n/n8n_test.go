package n8n_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/n8n"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

const wait = 10 * time.Second

// harness is the core as the server builds it: store, hub, writer, runs.
type harness struct {
	t      *testing.T
	store  *memory.Store
	hub    *instanceai.Hub
	writer *instanceai.Writer
	runs   *instanceai.Runs
}

func newHarness(t *testing.T, agent instanceai.Agent) *harness {
	t.Helper()
	store := memory.New(memory.WithMaxEvents(1 << 20))
	hub := instanceai.NewHub(1 << 20)
	writer := instanceai.NewWriter(store, hub, instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	runs := instanceai.NewRuns(writer, agent, instanceai.RunsConfig{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = runs.Shutdown(ctx)
	})
	return &harness{t: t, store: store, hub: hub, writer: writer, runs: runs}
}

// play starts a run on a new thread and returns what a live subscriber saw
// up to the run-finish. during, when set, runs once the run has started.
func (h *harness) play(thread string, req instanceai.StartRequest, during func(run *instanceai.Run)) []instanceai.Event {
	h.t.Helper()
	ctx := context.Background()
	if _, _, err := h.store.EnsureThread(ctx, instanceai.Thread{ID: thread, OwnerID: "u"}); err != nil {
		h.t.Fatal(err)
	}
	sub, _ := h.hub.Subscribe(thread)
	defer sub.Close()
	req.ThreadID, req.UserID = thread, "u"
	run, err := h.runs.Start(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if during != nil {
		go during(run)
	}
	tctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []instanceai.Event
	for {
		frames, err := sub.Next(tctx)
		if err != nil {
			h.t.Fatalf("after %d events: %v", len(out), err)
		}
		for _, f := range frames {
			if f.Hidden {
				continue
			}
			out = append(out, *f.Event)
			if f.Event.Type == instanceai.TypeRunFinish && f.Event.RunID == run.ID {
				select {
				case <-run.Done():
				case <-time.After(wait):
					h.t.Fatal("the agent did not return after the run-finish")
				}
				return out
			}
		}
	}
}

// stored waits for the run-finish to reach the store and returns the log.
func (h *harness) stored(thread string) []instanceai.Event {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		rows, err := h.store.ReadAfter(context.Background(), thread, 0, 0)
		if err != nil {
			h.t.Fatal(err)
		}
		var evs []instanceai.Event
		for _, r := range rows {
			evs = append(evs, r.Event)
		}
		if n := len(evs); n > 0 && evs[n-1].Type == instanceai.TypeRunFinish {
			return evs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no run-finish stored; log has %d events", len(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// summary renders events compactly: consecutive text (deltas or blocks) of
// one responseId is joined, responseIds are named r1, r2… and tool calls
// #1, #2… in order of appearance.
func summary(t *testing.T, evs []instanceai.Event) []string {
	t.Helper()
	rids, calls := map[string]int{}, map[string]int{}
	name := func(m map[string]int, k string) int {
		if _, ok := m[k]; !ok {
			m[k] = len(m) + 1
		}
		return m[k]
	}
	var out []string
	lastRID := ""
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			t.Errorf("invalid %s event: %v", e.Type, err)
		}
		switch p := e.Payload.(type) {
		case *instanceai.Text:
			if e.ResponseID == "" {
				t.Errorf("%s without responseId", e.Type)
			}
			line := fmt.Sprintf("text r%d ", name(rids, e.ResponseID))
			if n := len(out); n > 0 && lastRID == e.ResponseID && strings.HasPrefix(out[n-1], line) {
				prev, _ := unquote(strings.TrimPrefix(out[n-1], line))
				out[n-1] = line + fmt.Sprintf("%q", prev+p.Text)
				continue
			}
			lastRID = e.ResponseID
			out = append(out, line+fmt.Sprintf("%q", p.Text))
			continue
		case *instanceai.ToolCall:
			out = append(out, fmt.Sprintf("call #%d %s %s", name(calls, p.ToolCallID), p.ToolName, compact(p.Args)))
		case *instanceai.ToolResult:
			out = append(out, fmt.Sprintf("result #%d %s", name(calls, p.ToolCallID), compact(p.Result)))
		case *instanceai.ToolError:
			out = append(out, fmt.Sprintf("tool-error #%d %s", name(calls, p.ToolCallID), p.Error))
		case *instanceai.ErrorPayload:
			out = append(out, fmt.Sprintf("error %s/%s/%d %s", p.Provider, p.Code, p.StatusCode, p.Content))
		case *instanceai.RunFinish:
			out = append(out, "run-finish "+p.Status)
		case *instanceai.Custom:
			out = append(out, fmt.Sprintf("custom %s %s", p.Name, compact(p.Value)))
		default:
			out = append(out, string(e.Type))
		}
		lastRID = ""
	}
	return out
}

func unquote(s string) (string, error) {
	var v string
	err := json.Unmarshal([]byte(s), &v)
	if err != nil {
		// %q of Go and JSON differ only in rare escapes; fall back.
		_, err = fmt.Sscanf(s, "%q", &v)
	}
	return v, err
}

func compact(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// replay serves body the way n8n streams it: headers at once, then the
// bytes in small writes cut at arbitrary offsets, each flushed.
func replay(body []byte, seed uint64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		rng := rand.New(rand.NewPCG(seed, 42))
		for rest := body; len(rest) > 0; {
			n := min(1+rng.IntN(7), len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			rest = rest[n:]
		}
	}
}

func newAgent(t *testing.T, cfg n8n.Config) *n8n.Agent {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := n8n.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// observer records what the capture layer reported.
type observer struct {
	mu        sync.Mutex
	objects   []string
	malformed []string
}

func (o *observer) CaptureObject(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.objects = append(o.objects, kind)
}

func (o *observer) CaptureMalformed(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.malformed = append(o.malformed, reason)
}

func readFixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noDescription is the error an error chunk without content becomes.
const noDescription = "error n8n/workflow_error/0 n8n reported an error in node AI Agent without a description. " +
	"Open the workflow's executions in n8n to see it; a model or tool the node could not reach fails this way."

func TestFixtures(t *testing.T) {
	cases := []struct {
		file      string
		maxObject int
		noCapture bool
		want      []string
		objects   []string
		malformed []string
	}{
		{
			file: filepath.Join("testdata", "agent_stream.ndjson"),
			want: []string{
				"run-start",
				`text r1 "Checking the diff… "`,
				`text r2 "Second item "`,
				`call #1 search {"query":"café"}`,
				`custom node-execute-before {"metadata":{"nodeId":"tool-1","nodeName":"Search","runIndex":0},"type":"node-execute-before"}`,
				`result #1 "3 results"`,
				`call #2 show_diff {"opts":{"ctx":3},"path":"src/{a}.go"}`,
				`result #2 {"status":"announced"}`,
				`text r1 " done."`,
				`text r2 "Ünïcode ✓"`,
				noDescription,
				"run-finish error",
			},
			objects: []string{"tool_call", "regular_message"},
		},
		{
			file: "testdata/split_object.ndjson",
			want: []string{
				"run-start",
				`text r1 "Let me look. "`,
				`call #1 show_diff {"note":"brace } in \"string\"","path":"src/{a}.go"}`,
				`result #1 {"status":"announced"}`,
				`text r1 " Here is the diff."`,
				"run-finish completed",
			},
			objects: []string{"tool_call", "regular_message"},
		},
		{
			file:    "testdata/utf8.ndjson",
			want:    []string{"run-start", `text r1 "Grüße, 日本語 emoji 😀 café ✓ 🎉"`, "run-finish completed"},
			objects: []string{"regular_message"},
		},
		{
			file: "testdata/keepalive.ndjson",
			want: []string{"run-start", `text r1 "Still working."`, "run-finish completed"},
		},
		{
			file: "testdata/interleaved.ndjson",
			want: []string{
				"run-start",
				`text r1 "A1 "`,
				`text r2 "B1 B2 "`,
				`call #1 lookup {"q":"x"}`,
				`result #1 {"status":"announced"}`,
				`text r1 "A2"`,
				"run-finish completed",
			},
			objects: []string{"tool_call"},
		},
		{
			file: "testdata/error_no_timestamp.ndjson",
			want: []string{
				"run-start",
				`text r1 "Partial answer"`,
				noDescription,
				"run-finish error",
			},
		},
		{
			file: "testdata/tools_pr20499.ndjson",
			want: []string{
				"run-start",
				`text r1 "Searching. "`,
				`call #1 search {"query":"weather"}`,
				`call #2 calculator {"input":"2+2"}`,
				`result #2 4`,
				`result #1 {"results":["sunny"]}`,
				`text r1 "Done."`,
				"run-finish completed",
			},
		},
		{
			file: "testdata/plain_text.ndjson",
			want: []string{"run-start", `text r1 "Hello, world!"`, "run-finish completed"},
		},
		{
			file: "testdata/non_streaming.json",
			want: []string{"run-start", `text r1 "The answer is 42."`, "run-finish completed"},
		},
		{
			file:      "testdata/unclosed.ndjson",
			want:      []string{"run-start", `text r1 "Before {\"type\":\"tool_call\",\"name\":\"x\""`, "run-finish completed"},
			malformed: []string{"unclosed"},
		},
		{
			// Seed 004's "after execution" objects: a result right after its
			// call (a newline between) answers it; one after other text
			// finds the call already settled and stays text; an error
			// result fails the call; a call the stream leaves unanswered is
			// settled as announced at the end.
			file: "testdata/tool_result.ndjson",
			want: []string{
				"run-start",
				`text r1 "Searching. "`,
				`call #1 search_nodes {"query":"email"}`,
				`result #1 {"nodes":["n8n-nodes-base.emailSend"]}`,
				`text r1 "\n Found it. "`,
				`call #2 validate {}`,
				`result #2 {"status":"announced"}`,
				`text r1 " checking {\"type\":\"tool_result\",\"name\":\"validate\",\"result\":\"ok\"} "`,
				`call #3 deploy {}`,
				`tool-error #3 n8n refused the workflow`,
				`text r1 " Last: "`,
				`call #4 notify {"to":"ops"}`,
				`result #4 {"status":"announced"}`,
				"run-finish completed",
			},
			objects:   []string{"tool_call", "tool_result", "tool_call", "tool_call", "tool_result", "tool_call"},
			malformed: []string{"unmatched"},
		},
		{
			// Seed 004's control frames on lines of their own: a tool_call
			// frame announces a call, the tool_result frame after it is its
			// result (or error); a frame of another type is passed on as a
			// custom event, and a result that answers nothing is skipped.
			file: "testdata/control_frames.ndjson",
			want: []string{
				"run-start",
				`text r1 "Let me search. "`,
				`call #1 search_nodes {"query":"slack"}`,
				`result #1 {"nodes":["n8n-nodes-base.slack"]}`,
				`text r1 "Found Slack. "`,
				`call #2 create_workflow {"name":"Notify"}`,
				`custom progress {"percent":50,"type":"progress"}`,
				`tool-error #2 n8n answered 401`,
				`text r1 "Done."`,
				"run-finish completed",
			},
			objects:   []string{"tool_call", "tool_result", "tool_call", "tool_result"},
			malformed: []string{"unmatched"},
		},
		{
			// With capture off, the frames are skipped as n8n's unknown
			// chunk types are.
			file:      "testdata/control_frames.ndjson",
			noCapture: true,
			want:      []string{"run-start", `text r1 "Let me search. Found Slack. Done."`, "run-finish completed"},
		},
		{
			// With capture off (--n8n-capture=false) the objects are text.
			file:      "testdata/split_object.ndjson",
			noCapture: true,
			want: []string{
				"run-start",
				`text r1 "Let me look. {\"type\":\"tool_call\",\"name\":\"show_diff\",\"args\":{\"path\":\"src/{a}.go\",\"note\":\"brace } in \\\"string\\\"\"}} {\"messageType\":\"regular_message\",\"content\":\"Here is the diff.\"}"`,
				"run-finish completed",
			},
		},
		{
			file:      "testdata/oversize.ndjson",
			maxObject: 64,
			want: []string{"run-start", fmt.Sprintf("text r1 %q",
				`A {"type":"tool_call","name":"huge","args":{"blob":"`+strings.Repeat("x", 200)+`"}} B`), "run-finish completed"},
			malformed: []string{"oversize"},
		},
	}
	for i, c := range cases {
		name := filepath.Base(c.file)
		if c.noCapture {
			name += "/no-capture"
		}
		t.Run(name, func(t *testing.T) {
			body := readFixture(t, c.file)
			srv := httptest.NewServer(replay(body, uint64(i)+1))
			defer srv.Close()
			obs := &observer{}
			h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}},
				MaxObject: c.maxObject, NoCapture: c.noCapture, Observer: obs}))
			live := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
			if got := summary(t, live); !slices.Equal(got, c.want) {
				t.Fatalf("live events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(c.want, "\n     "))
			}
			// The durable log tells the same story, its text coalesced into
			// blocks at the same boundaries; custom events are live only.
			var want []string
			for _, w := range c.want {
				if !strings.HasPrefix(w, "custom ") {
					want = append(want, w)
				}
			}
			if got := summary(t, h.stored("t")); !slices.Equal(got, want) {
				t.Fatalf("stored events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if !slices.Equal(obs.objects, c.objects) || !slices.Equal(obs.malformed, c.malformed) {
				t.Errorf("observer: objects %v malformed %v, want %v %v", obs.objects, obs.malformed, c.objects, c.malformed)
			}
		})
	}
}

// TestFixtureSplits replays the recorded fixture at every split size from 1
// byte up, so that every offset, inside multi-byte characters too, is a
// boundary somewhere.
func TestFixtureSplits(t *testing.T) {
	body := readFixture(t, filepath.Join("testdata", "agent_stream.ndjson"))
	want := "Checking the diff… \x00Second item \x00 done.\x00Ünïcode ✓"
	for size := 1; size <= 13; size++ {
		var got []string
		err := n8n.MapStream(&stepReader{b: body, n: size}, n8n.StreamOptions{RunID: "r", Logger: slog.New(slog.DiscardHandler)},
			func(ev instanceai.Event) error {
				if p, ok := ev.Payload.(*instanceai.Text); ok {
					got = append(got, p.Text)
				}
				return nil
			})
		var pe *instanceai.ProviderError
		if !errors.As(err, &pe) || pe.Code != n8n.CodeWorkflowError {
			t.Fatalf("size %d: err = %v", size, err)
		}
		if s := strings.Join(got, "\x00"); s != want {
			t.Fatalf("size %d: text %q", size, s)
		}
	}
}

type stepReader struct {
	b []byte
	n int
}

func (r *stepReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestRequest(t *testing.T) {
	type seen struct {
		header http.Header
		body   map[string]any
		path   string
	}
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- seen{r.Header.Clone(), body, r.URL.Path}
		replay(readFixture(t, "testdata/plain_text.ndjson"), 1)(w, r)
	}))
	defer srv.Close()
	hdr := http.Header{}
	hdr.Set("X-N8N-Auth", "secret")
	agent := newAgent(t, n8n.Config{Header: hdr, Webhooks: []n8n.Webhook{
		{Name: "first", URL: srv.URL + "/webhook/first"}, {Name: "second", URL: srv.URL + "/webhook/second"}}})
	if names := agent.Names(); !slices.Equal(names, []string{"first", "second"}) {
		t.Fatalf("Names() = %v", names)
	}
	h := newHarness(t, agent)

	h.play("thread-a", instanceai.StartRequest{Message: "Hello n8n"}, nil)
	s := <-got
	if s.path != "/webhook/first" {
		t.Errorf("default webhook: path %s", s.path)
	}
	if s.body["chatInput"] != "Hello n8n" || s.body["sessionId"] != "thread-a" || s.body["action"] != "sendMessage" || len(s.body) != 3 {
		t.Errorf("body = %v", s.body)
	}
	if s.header.Get("X-N8N-Auth") != "secret" || s.header.Get("Content-Type") != "application/json" ||
		!strings.Contains(s.header.Get("Accept"), "application/json") {
		t.Errorf("headers = %v", s.header)
	}

	h.play("thread-b", instanceai.StartRequest{Message: "again", AgentName: "second"}, nil)
	if s := <-got; s.path != "/webhook/second" || s.body["sessionId"] != "thread-b" {
		t.Errorf("named webhook: %s %v", s.path, s.body)
	}

	if _, err := h.runs.Start(instanceai.StartRequest{ThreadID: "thread-c", Message: "x", AgentName: "nope"}); err == nil ||
		!strings.Contains(err.Error(), "first, second") {
		t.Errorf("unknown name: %v", err)
	}
	// Called directly, the agent names the known webhooks as well.
	run := &instanceai.Run{ID: "r", StartRequest: instanceai.StartRequest{AgentName: "nope"}}
	if err := agent.Run(context.Background(), run); err == nil || !strings.Contains(err.Error(), "first, second") {
		t.Errorf("Run with an unknown name: %v", err)
	}
}

func TestHTTPErrors(t *testing.T) {
	cases := []struct {
		status int
		code   string
		hint   string
	}{
		{404, n8n.CodeWebhookNotFound, "Activate the workflow"},
		{401, n8n.CodeUnauthorized, "Header Auth"},
		{403, n8n.CodeUnauthorized, "Header Auth"},
		{500, n8n.CodeUpstreamError, "executions"},
		{400, n8n.CodeHTTPError, "POST"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, `{"code":404,"message":"The requested webhook \"POST x\" is not registered."}`)
			}))
			defer srv.Close()
			h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}}}))
			evs := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
			checkError(t, evs, c.code, c.status, c.hint)
			if !strings.Contains(errorPayload(t, evs).TechnicalDetails, "is not registered") {
				t.Errorf("details = %q", errorPayload(t, evs).TechnicalDetails)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there any more
	h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: "http://" + addr + "/webhook/x"}}}))
	evs := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
	checkError(t, evs, n8n.CodeConnectionFailed, 0, "running")
}

func errorPayload(t *testing.T, evs []instanceai.Event) *instanceai.ErrorPayload {
	t.Helper()
	for _, e := range evs {
		if p, ok := e.Payload.(*instanceai.ErrorPayload); ok {
			return p
		}
	}
	t.Fatal("no error event")
	return nil
}

// checkError asserts exactly one error event with those fields, then
// run-finish{error}.
func checkError(t *testing.T, evs []instanceai.Event, code string, status int, hint string) {
	t.Helper()
	n := 0
	for _, e := range evs {
		if e.Type == instanceai.TypeError {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d error events: %v", n, summary(t, evs))
	}
	p := errorPayload(t, evs)
	if p.Provider != "n8n" || p.Code != code || p.StatusCode != status || !strings.Contains(p.Content, hint) {
		t.Errorf("error payload = %+v", p)
	}
	last := evs[len(evs)-1]
	if f, ok := last.Payload.(*instanceai.RunFinish); !ok || f.Status != instanceai.RunError {
		t.Errorf("last event = %+v", last)
	}
	if evs[len(evs)-2].Type != instanceai.TypeError {
		t.Errorf("the error event is not right before the run-finish: %v", summary(t, evs))
	}
}

// TestInterrupted cuts the connection in the middle of an item: the text
// received before the cut is kept, the run ends stream_interrupted.
func TestInterrupted(t *testing.T) {
	body := readFixture(t, "testdata/plain_text.ndjson")
	lines := strings.SplitAfter(string(body), "\n")
	head := strings.Join(lines[:3], "") + lines[3][:20] // begin, two items, part of the third
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, head)
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.Close()
	}))
	defer srv.Close()
	h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}}}))
	evs := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
	got := summary(t, evs)
	if got[1] != `text r1 "Hello, "` {
		t.Errorf("text before the cut: %v", got)
	}
	checkError(t, evs, n8n.CodeStreamInterrupted, 0, "text received so far is kept")
	stored := summary(t, h.stored("t"))
	if !slices.Contains(stored, `text r1 "Hello, "`) {
		t.Errorf("stored: %v", stored)
	}
}

// TestEOFWithOpenItem: a clean end of body before the item's end chunk is
// still an interruption.
func TestEOFWithOpenItem(t *testing.T) {
	body := `{"type":"begin","metadata":{"nodeId":"a","nodeName":"AI Agent","runIndex":0,"itemIndex":0}}` + "\n" +
		`{"type":"item","content":"half","metadata":{"nodeId":"a","nodeName":"AI Agent","runIndex":0,"itemIndex":0}}` + "\n"
	srv := httptest.NewServer(replay([]byte(body), 3))
	defer srv.Close()
	h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}}}))
	evs := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
	if got := summary(t, evs); got[1] != `text r1 "half"` {
		t.Errorf("events: %v", got)
	}
	checkError(t, evs, n8n.CodeStreamInterrupted, 0, "broke")
}

func TestIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"type":"begin","metadata":{"nodeId":"a","runIndex":0,"itemIndex":0}}`+"\n"+
			`{"type":"item","content":"waiting","metadata":{"nodeId":"a","runIndex":0,"itemIndex":0}}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}},
		IdleTimeout: 200 * time.Millisecond}))
	evs := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
	if got := summary(t, evs); got[1] != `text r1 "waiting"` {
		t.Errorf("events: %v", got)
	}
	checkError(t, evs, n8n.CodeTimeout, 0, "sent nothing")
}

// TestCancel cancels the run mid-stream: the upstream request is aborted
// (the server sees its request context end) and the run finishes cancelled.
func TestCancel(t *testing.T) {
	started := make(chan struct{})
	aborted := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"type":"begin","metadata":{"nodeId":"a","runIndex":0,"itemIndex":0}}`+"\n"+
			`{"type":"item","content":"thinking","metadata":{"nodeId":"a","runIndex":0,"itemIndex":0}}`+"\n")
		w.(http.Flusher).Flush()
		close(started)
		for {
			select {
			case <-r.Context().Done():
				close(aborted)
				return
			case <-time.After(20 * time.Millisecond):
				// keepalives keep the idle timer from firing
				_, _ = io.WriteString(w, `{"type":"keepalive"}`+"\n")
				w.(http.Flusher).Flush()
			}
		}
	}))
	defer srv.Close()
	h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}}}))
	evs := h.play("t", instanceai.StartRequest{Message: "hi"}, func(run *instanceai.Run) {
		<-started
		h.runs.Cancel("t", instanceai.ReasonUserCancelled)
	})
	last := evs[len(evs)-1].Payload.(*instanceai.RunFinish)
	if last.Status != instanceai.RunCancelled || last.Reason != instanceai.ReasonUserCancelled {
		t.Errorf("run-finish = %+v", last)
	}
	for _, e := range evs {
		if e.Type == instanceai.TypeError {
			t.Errorf("error event on cancel: %+v", e.Payload)
		}
	}
	select {
	case <-aborted:
	case <-time.After(wait):
		t.Fatal("the upstream request was not aborted")
	}
}

func TestNew(t *testing.T) {
	cases := []struct {
		cfg  n8n.Config
		want string
	}{
		{n8n.Config{}, "Config.Webhooks: at least one"},
		{n8n.Config{Webhooks: []n8n.Webhook{{URL: "http://x"}}}, "Webhooks[0].Name"},
		{n8n.Config{Webhooks: []n8n.Webhook{{Name: "a", URL: "http://x"}, {Name: "a", URL: "http://y"}}}, "Webhooks[1].Name"},
		{n8n.Config{Webhooks: []n8n.Webhook{{Name: "a", URL: "/webhook/x"}}}, "Webhooks[0].URL"},
		{n8n.Config{Webhooks: []n8n.Webhook{{Name: "a", URL: "ftp://x/y"}}}, "Webhooks[0].URL"},
		{n8n.Config{Webhooks: []n8n.Webhook{{Name: "a", URL: "http://x"}}, IdleTimeout: -1}, "IdleTimeout"},
		{n8n.Config{Webhooks: []n8n.Webhook{{Name: "a", URL: "http://x"}}, ConnectTimeout: -1}, "ConnectTimeout"},
		{n8n.Config{Webhooks: []n8n.Webhook{{Name: "a", URL: "http://x"}}, MaxObject: -1}, "MaxObject"},
	}
	for _, c := range cases {
		if _, err := n8n.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// TestBodies covers answers that are not a normal stream, without HTTP.
func TestBodies(t *testing.T) {
	cases := []struct {
		body string
		text string
		code string
	}{
		{`{"output":"one"}`, "one", ""},
		{"{\n  \"output\": \"pretty\"\n}\n", "pretty", ""},
		{`[{"text":"a"},{"output":"b"}]`, "a\n\nb", ""},
		{`{"output":"x {\"type\":\"tool_call\",\"name\":\"n\"} y"}`, "x  y", ""},
		{"", "", n8n.CodeEmptyResponse},
		{`{"type":"keepalive"}` + "\n", "", n8n.CodeEmptyResponse},
		{`<html>Workflow Webhook Error</html>`, "", n8n.CodeUnexpectedResponse},
		{`{"message":"Workflow was started"}`, "", n8n.CodeUnexpectedResponse},
	}
	for _, c := range cases {
		var text strings.Builder
		err := n8n.MapStream(strings.NewReader(c.body), n8n.StreamOptions{Logger: slog.New(slog.DiscardHandler)},
			func(ev instanceai.Event) error {
				if p, ok := ev.Payload.(*instanceai.Text); ok {
					text.WriteString(p.Text)
				}
				return nil
			})
		var pe *instanceai.ProviderError
		switch {
		case c.code == "" && err != nil:
			t.Errorf("%q: %v", c.body, err)
		case c.code != "" && (!errors.As(err, &pe) || pe.Code != c.code):
			t.Errorf("%q: err %v, want code %s", c.body, err, c.code)
		case text.String() != c.text:
			t.Errorf("%q: text %q, want %q", c.body, text.String(), c.text)
		}
	}
}

// countingBodies counts the bytes read of the answers' bodies.
type countingBodies struct{ read atomic.Int64 }

func (c *countingBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// A line larger than the bound on one event (and a chunk's envelope) ends
// the run with event_too_large naming the bound and its flag; the text
// before it is kept. The agent reads no further than the bound: of a line
// that would be 64 MiB it reads little more than the bound, and the
// webhook is cut off before it has written it.
func TestLineOverTheEventBound(t *testing.T) {
	const maxEvent = 1 << 20
	var whole, cut atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		write := func(s string) bool {
			_, err := io.WriteString(w, s)
			return err == nil && http.NewResponseController(w).Flush() == nil
		}
		meta := `"metadata":{"nodeId":"a","nodeName":"AI Agent","runIndex":0,"itemIndex":0}`
		piece := strings.Repeat("x", 64<<10)
		ok := write(`{"type":"begin",`+meta+"}\n") && write(`{"type":"item","content":"kept",`+meta+"}\n") &&
			write(`{"type":"item",`+meta+`,"content":"`)
		for n := 0; ok && n < 64<<20; n += len(piece) {
			ok = write(piece)
		}
		if ok && write("\"}\n{\"type\":\"end\","+meta+"}\n") {
			whole.Add(1)
			return
		}
		cut.Add(1)
	}))
	defer srv.Close()
	body := &countingBodies{}
	h := newHarness(t, newAgent(t, n8n.Config{Webhooks: []n8n.Webhook{{Name: "main", URL: srv.URL}},
		HTTPClient: &http.Client{Transport: body}, MaxEventBytes: maxEvent}))
	evs := h.play("t", instanceai.StartRequest{Message: "hi"}, nil)
	if got := summary(t, evs); got[1] != `text r1 "kept"` {
		t.Errorf("events: %v", got)
	}
	checkError(t, evs, instanceai.CodeEventTooLarge, 0, "larger than 1 MiB, the bound on one event (--max-event-bytes)")
	if n := body.read.Load(); n > maxEvent+128<<10 {
		t.Fatalf("read %d bytes of a stream whose lines are bounded at about %d", n, maxEvent)
	}
	deadline := time.Now().Add(wait)
	for cut.Load() == 0 {
		if whole.Load() > 0 {
			t.Fatal("the webhook wrote its 64 MiB line whole: the agent read it all")
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook is still writing: the agent did not go away")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The line bound derives from the bound on one event: by default a line
// may be the default bound on one event and an envelope, so a 3 MiB
// line (one chunk of a long answer) is read, and one over it is refused.
func TestDefaultLineBoundIsTheEventBound(t *testing.T) {
	meta := `"metadata":{"nodeId":"a","nodeName":"AI Agent","runIndex":0,"itemIndex":0}`
	stream := func(content int) io.Reader {
		return strings.NewReader(`{"type":"begin",` + meta + "}\n" + `{"type":"item",` + meta + `,"content":"` +
			strings.Repeat("x", content) + "\"}\n" + `{"type":"end",` + meta + "}\n")
	}
	got := 0
	err := n8n.MapStream(stream(3<<20), n8n.StreamOptions{NoCapture: true, Logger: slog.New(slog.DiscardHandler)}, func(ev instanceai.Event) error {
		if p, ok := ev.Payload.(*instanceai.Text); ok {
			got += len(p.Text)
		}
		return nil
	})
	if err != nil || got != 3<<20 {
		t.Fatalf("a 3 MiB line: %d bytes of text, %v", got, err)
	}
	err = n8n.MapStream(stream(instanceai.DefaultMaxEventBytes+64<<10), n8n.StreamOptions{NoCapture: true, Logger: slog.New(slog.DiscardHandler)},
		func(instanceai.Event) error { return nil })
	var pe *instanceai.ProviderError
	if !errors.As(err, &pe) || pe.Code != instanceai.CodeEventTooLarge || !strings.Contains(pe.Message, "4 MiB") {
		t.Fatalf("a line over 4 MiB: %v", err)
	}
}
