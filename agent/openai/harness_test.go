package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// harness runs the agent for real through the core: a memory store, the
// hub, the writer and the run registry.
type harness struct {
	store  *memory.Store
	writer *instanceai.Writer
	runs   *instanceai.Runs
	agent  *openai.Agent
	// hub is the live fan-out, where the ephemeral events (status) are.
	hub *instanceai.Hub
}

const (
	thread = "t1"
	user   = "u1"
)

func newHarness(t *testing.T, cfg openai.Config) *harness {
	t.Helper()
	store := memory.New(memory.WithMaxEvents(1 << 20))
	ctx := context.Background()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: thread, OwnerID: user}); err != nil {
		t.Fatal(err)
	}
	if cfg.Store == nil {
		cfg.Store = store
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	agent, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(1 << 16)
	writer := instanceai.NewWriter(store, hub, instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	runs := instanceai.NewRuns(writer, agent, instanceai.RunsConfig{Confirmations: store, Logger: cfg.Logger})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = runs.Shutdown(ctx)
	})
	return &harness{store: store, writer: writer, runs: runs, agent: agent, hub: hub}
}

// start starts a run and records the user message as the HTTP API does.
func (h *harness) start(t *testing.T, req instanceai.StartRequest) *instanceai.Run {
	t.Helper()
	req.ThreadID, req.UserID = thread, user
	run, err := h.runs.Start(req)
	if err != nil {
		t.Fatal(err)
	}
	if req.Message != "" || len(req.Attachments) > 0 {
		if err := h.store.AddMessage(context.Background(), instanceai.Message{ID: instanceai.NewID("msg_"),
			ThreadID: thread, RunID: run.ID, Role: "user", Content: req.Message, Attachments: req.Attachments}); err != nil {
			t.Fatal(err)
		}
	}
	return run
}

// wait waits for the run's agent to return and the log to be written, and
// returns the run's stored events (in seq order).
func (h *harness) wait(t *testing.T, run *instanceai.Run) []instanceai.Event {
	t.Helper()
	select {
	case <-run.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("run did not finish")
	}
	return h.finishedRun(t, run.ID)
}

func (h *harness) play(t *testing.T, req instanceai.StartRequest) []instanceai.Event {
	t.Helper()
	return h.wait(t, h.start(t, req))
}

func shape(evs []instanceai.Event) string {
	var b []string
	for _, e := range evs {
		b = append(b, string(e.Type))
	}
	return strings.Join(b, " ")
}

func finishOf(t *testing.T, evs []instanceai.Event) *instanceai.RunFinish {
	t.Helper()
	return evs[len(evs)-1].Payload.(*instanceai.RunFinish)
}

// text joins the run's stored text (or reasoning) blocks.
func text(evs []instanceai.Event, typ instanceai.EventType) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == typ {
			b.WriteString(e.Payload.(*instanceai.Text).Text)
		}
	}
	return b.String()
}

func ofType[T instanceai.Payload](evs []instanceai.Event, typ instanceai.EventType) []T {
	var out []T
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e.Payload.(T))
		}
	}
	return out
}

func errorOf(t *testing.T, evs []instanceai.Event) *instanceai.ErrorPayload {
	t.Helper()
	errs := ofType[*instanceai.ErrorPayload](evs, instanceai.TypeError)
	if len(errs) != 1 {
		t.Fatalf("want one error event, got %d: %s", len(errs), shape(evs))
	}
	if f := finishOf(t, evs); f.Status != instanceai.RunError {
		t.Fatalf("run-finish status %q, want error", f.Status)
	}
	return errs[0]
}

// wireReq is the part of a chat request the tests look at.
type wireReq struct {
	Model         string           `json:"model"`
	Stream        bool             `json:"stream"`
	StreamOptions *json.RawMessage `json:"stream_options"`
	Messages      []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCallID string  `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	auth string
	body []byte
	// raw is the body's top-level fields.
	raw map[string]json.RawMessage
}

// summary renders the request's messages as role:content[calls] strings.
func (r wireReq) summary() []string {
	var out []string
	for _, m := range r.Messages {
		s := m.Role + ":"
		if m.Content != nil {
			s += *m.Content
		}
		for _, c := range m.ToolCalls {
			s += fmt.Sprintf(" [%s %s %s]", c.ID, c.Function.Name, c.Function.Arguments)
		}
		if m.ToolCallID != "" {
			s = "tool(" + m.ToolCallID + "):" + *m.Content
		}
		out = append(out, s)
	}
	return out
}

// fake is an OpenAI-compatible server that answers each chat request with
// the next scripted response (the last one repeats) and records requests.
type fake struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []wireReq
	script []http.HandlerFunc
	// models answers GET /models (nil: 404).
	models http.HandlerFunc
}

func newFake(t *testing.T, script ...http.HandlerFunc) *fake {
	f := &fake{t: t, script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) url() string { return f.srv.URL + "/v1" }

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		if f.models == nil {
			http.NotFound(w, r)
			return
		}
		f.models(w, r)
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req wireReq
	if err := json.Unmarshal(partsAsText(body), &req); err != nil {
		f.t.Errorf("request body is not JSON: %v: %s", err, body)
	}
	req.auth = r.Header.Get("Authorization")
	req.body = body
	_ = json.Unmarshal(body, &req.raw)
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, req)
	h := f.script[min(n, len(f.script)-1)]
	f.mu.Unlock()
	h(w, r)
}

// partsAsText rewrites the body so that a message's content-part array
// reads as a string holding the array's JSON, as the request encoded it:
// wireReq's Content stays a *string, and a test compares parts exactly.
func partsAsText(body []byte) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(top["messages"], &msgs) != nil {
		return body
	}
	for _, m := range msgs {
		if c := m["content"]; len(c) > 0 && c[0] == '[' {
			m["content"], _ = json.Marshal(string(c))
		}
	}
	top["messages"], _ = json.Marshal(msgs)
	out, _ := json.Marshal(top)
	return out
}

func (f *fake) requests() []wireReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wireReq(nil), f.reqs...)
}

// fixture returns the SSE body of a recorded-shape fixture, without its
// '#' provenance lines.
func fixture(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			b.WriteString(sc.Text() + "\n")
		}
	}
	return b.String()
}

// replay answers with an SSE body.
func replay(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}
}

// status answers with a status and a JSON body.
func status(code int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// sse renders chunks as an SSE body ending with [DONE].
func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func textChunk(id, s string) string {
	b, _ := json.Marshal(s)
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`, id, b)
}

func callChunk(id string, index int, callID, name, args string) string {
	b, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]},"finish_reason":null}]}`, id, index, callID, name, b)
}

func finishChunk(id, reason string) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":%q}]}`, id, reason)
}

func usageChunk(id string, in, out int) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, id, in, out, in+out)
}

// answer is a one-step text answer with usage.
func answer(id, s string, in, out int) http.HandlerFunc {
	return replay(sse(textChunk(id, s), finishChunk(id, "stop"), usageChunk(id, in, out)))
}

// stop ends the harness's process as a graceful shutdown does: its runs
// stop (a suspended run stays suspended in the store) and what its
// writer queued is stored.
//
// A run that asked for a confirmation is stopped only once it waits for
// the answer (suspended): the question is stored a moment before, and a
// run stopped in between ends cancelled, which is not what these tests
// restart.
func (h *harness) stop(t *testing.T, ctx context.Context) {
	t.Helper()
	for !h.runs.Status(ctx, thread).IsSuspended {
		if _, asked := h.awaited(t); !asked {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the run that asked for a confirmation did not suspend")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := h.runs.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.writer.Sync(ctx, thread); err != nil {
		t.Fatal(err)
	}
}

// awaited is the thread's first confirmation awaiting an answer, if any.
func (h *harness) awaited(t *testing.T) (instanceai.Confirmation, bool) {
	t.Helper()
	cs, err := h.runs.Awaited(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		return instanceai.Confirmation{}, false
	}
	return cs[0], true
}

// resumed returns the events of runID once the next process's run of it,
// resumed by an answer, has finished: it may have finished before the
// test looks for it.
func (h *harness) resumed(t *testing.T, runs *instanceai.Runs, runID string) []instanceai.Event {
	t.Helper()
	if r := runs.Active(thread); r != nil {
		if r.ID != runID {
			t.Fatalf("the active run is %s, want %s resumed", r.ID, runID)
		}
		return h.wait(t, r)
	}
	return h.finishedRun(t, runID)
}

// finishedRun returns the stored events of runID once the writer has
// stored what it was handed; the run's log must end with its run-finish.
func (h *harness) finishedRun(t *testing.T, runID string) []instanceai.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.writer.Sync(ctx, thread); err != nil {
		t.Fatal(err)
	}
	rows, err := h.store.ReadAfter(ctx, thread, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []instanceai.Event
	for _, r := range rows {
		if r.Event.RunID == runID {
			out = append(out, r.Event)
		}
	}
	if len(out) == 0 || out[len(out)-1].Type != instanceai.TypeRunFinish {
		t.Fatalf("run %s's log does not end with its run-finish: %s", runID, shape(out))
	}
	return out
}

// next starts the next process on the harness's store with the agent cfg
// builds, and makes it the harness's: its runs, its writer.
func (h *harness) next(t *testing.T, cfg openai.Config) *instanceai.Runs {
	t.Helper()
	cfg.Store, cfg.Logger = h.store, slog.New(slog.DiscardHandler)
	agent, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writer := instanceai.NewWriter(h.store, instanceai.NewHub(1<<16), instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	runs := instanceai.NewRuns(writer, agent, instanceai.RunsConfig{Confirmations: h.store, Logger: cfg.Logger})
	t.Cleanup(func() { _ = runs.Shutdown(context.Background()) })
	h.runs, h.writer, h.agent = runs, writer, agent
	return runs
}
