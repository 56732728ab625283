package conversation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/conversation"
	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

type env struct {
	store  *memory.Store
	writer *instanceai.Writer
	runs   *instanceai.Runs
}

func newEnv(t *testing.T) *env {
	t.Helper()
	store := memory.New(memory.WithMaxEvents(1 << 20))
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	writer := instanceai.NewWriter(store, instanceai.NewHub(1<<16), instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	return &env{store: store, writer: writer, runs: instanceai.NewRuns(writer, &script.Agent{}, instanceai.RunsConfig{})}
}

// play runs the script agent and stores the user message as the API does.
func (e *env) play(t *testing.T, req instanceai.StartRequest) string {
	t.Helper()
	req.ThreadID, req.UserID = "t", "u"
	run, err := e.runs.Start(req)
	if err != nil {
		t.Fatal(err)
	}
	if req.Message != "" {
		if err := e.store.AddMessage(context.Background(), instanceai.Message{ID: instanceai.NewID("m_"), ThreadID: "t", RunID: run.ID, Role: "user", Content: req.Message}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-run.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("run did not finish")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	return run.ID
}

func render(h []instanceai.HistoryMessage) []string {
	var out []string
	for _, m := range h {
		s := m.Role + ":" + m.Content
		for _, c := range m.ToolCalls {
			s += fmt.Sprintf(" [%s %s %s]", c.ID, c.Name, c.Arguments)
		}
		if m.ToolCallID != "" {
			s = "tool(" + m.ToolCallID + "):" + m.Content
		}
		out = append(out, s)
	}
	return out
}

func load(t *testing.T, e *env, current string) []string {
	t.Helper()
	h, err := conversation.Load(context.Background(), e.store, "t", current)
	if err != nil {
		t.Fatal(err)
	}
	return render(h)
}

func TestLoadScriptRuns(t *testing.T) {
	e := newEnv(t)
	r1 := e.play(t, instanceai.StartRequest{Message: "hi"})
	r2 := e.play(t, instanceai.StartRequest{Message: "tools"})
	want := []string{
		"user:hi",
		`assistant: [` + r1 + `:tc:1 workflows {"action":"list"}]`,
		`tool(` + r1 + `:tc:1):{"workflows":[{"active":true,"id":"1","name":"Daily report"},{"active":false,"id":"2","name":"Slack alerts"}]}`,
		"assistant:You have 2 workflows. You said: hi",
	}
	if got := load(t, e, r2); !slices.Equal(got, want) {
		t.Errorf("before run 2:\n got %q\nwant %q", got, want)
	}
	all := load(t, e, "")
	tail := []string{
		"user:tools",
		`assistant:Checking a few things. [` + r2 + `:tc:1 workflows {"action":"list"}] [` + r2 + `:tc:2 build-workflow {"name":"Weather to Slack","nodes":3}] [` + r2 + `:tc:3 executions {"action":"run","workflowId":"wf-123"}]`,
		"tool(" + r2 + `:tc:1):{"count":2}`,
		"tool(" + r2 + `:tc:2):{"workflowId":"wf-123"}`,
		"tool(" + r2 + ":tc:3):Error: Credential 'Slack' is missing",
		"assistant:The workflow is built, but the test run needs a Slack credential.",
	}
	if !slices.Equal(all[len(want):], tail) {
		t.Errorf("whole thread:\n got %q\nwant %q", all[len(want):], tail)
	}
	// The error scenario's notice is the server's, not the model's: the
	// run leaves only its user message.
	r3 := e.play(t, instanceai.StartRequest{Message: "error"})
	if got := load(t, e, ""); got[len(got)-1] != "user:error" {
		t.Errorf("after a failed run (%s): %q", r3, got[len(got)-1])
	}
}

func TestLoadFrontendToolContinuation(t *testing.T) {
	e := newEnv(t)
	tools := []instanceai.ToolSpec{{Name: "browser_ask", Parameters: json.RawMessage(`{"type":"object"}`)}}
	r1 := e.play(t, instanceai.StartRequest{Message: "frontend-tool please", Tools: tools})
	call := r1 + ":tc:1"
	before := []string{"user:frontend-tool please", "assistant:Let me ask the browser. [" + call + " browser_ask {}]"}

	// Unanswered, the call gets a made-up result: OpenAI needs one.
	if got, want := load(t, e, ""), append(slices.Clone(before), "tool("+call+"):"+conversation.NoResult); !slices.Equal(got, want) {
		t.Errorf("open call:\n got %q\nwant %q", got, want)
	}

	r2 := e.play(t, instanceai.StartRequest{Tools: tools, ToolResult: &instanceai.ClientToolResult{
		RunID: r1, AgentID: instanceai.OrchestratorAgentID(r1), ToolCallID: call, ToolName: "browser_ask", Content: "42 tabs"}})
	withResult := append(slices.Clone(before), "tool("+call+"):42 tabs")
	if got := load(t, e, r2); !slices.Equal(got, withResult) {
		t.Errorf("before the continuation:\n got %q\nwant %q", got, withResult)
	}
	want := append(slices.Clone(withResult), "assistant:The browser answered: 42 tabs")
	if got := load(t, e, ""); !slices.Equal(got, want) {
		t.Errorf("after the continuation:\n got %q\nwant %q", got, want)
	}
}

func TestLoadRunOpenCalls(t *testing.T) {
	e := newEnv(t)
	r1 := e.play(t, instanceai.StartRequest{Message: "frontend-tool", Tools: []instanceai.ToolSpec{{Name: "ask"}}})
	h, open, steps, err := conversation.LoadRun(context.Background(), e.store, "t", r1)
	if err != nil {
		t.Fatal(err)
	}
	if got := render(h); !slices.Equal(got, []string{"user:frontend-tool", "assistant:Let me ask the browser. [" + r1 + ":tc:1 ask {}]"}) {
		t.Errorf("history %q", got)
	}
	if len(open) != 1 || open[0].ID != r1+":tc:1" || steps != 1 {
		t.Errorf("open %+v steps %d", open, steps)
	}
}

func TestLoadBound(t *testing.T) {
	e := newEnv(t)
	for i := range conversation.MaxRuns + 2 {
		e.play(t, instanceai.StartRequest{Message: fmt.Sprintf("tasks %d", i)})
	}
	got := load(t, e, "")
	if got[0] != "user:tasks 2" || len(got) != 2*conversation.MaxRuns {
		t.Errorf("first %q, %d messages", got[0], len(got))
	}
}

func TestWithToolResult(t *testing.T) {
	h := []instanceai.HistoryMessage{
		{Role: "user", Content: "q"},
		{Role: "assistant", ToolCalls: []instanceai.HistoryToolCall{{ID: "a", Name: "x"}, {ID: "b", Name: "y"}}},
		{Role: "tool", ToolCallID: "a", Content: "1"},
		{Role: "user", Content: "next"},
	}
	got := render(conversation.WithToolResult(h, "b", "2"))
	want := []string{"user:q", "assistant: [a x ] [b y ]", "tool(a):1", "tool(b):2", "user:next"}
	if !slices.Equal(got, want) {
		t.Errorf("insert: %q", got)
	}
	if got := render(conversation.WithToolResult(h, "a", "9")); got[2] != "tool(a):9" || render(h)[2] != "tool(a):1" {
		t.Errorf("replace: %q (original must not change)", got)
	}
	if got := conversation.WithToolResult(h, "zz", "1"); len(got) != len(h) {
		t.Errorf("unknown call changed the history")
	}
}

// pagesOnly is a store that records the rows whose bytes are read and
// fails the test on a read of the whole thread.
type pagesOnly struct {
	*memory.Store
	t    *testing.T
	read []int64
}

func (s *pagesOnly) ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	s.t.Errorf("ReadAfter(%d, %d): the whole log read", after, limit)
	return s.Store.ReadAfter(ctx, threadID, after, limit)
}

func (s *pagesOnly) ListMessages(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	s.t.Error("ListMessages: every message read whole")
	return s.Store.ListMessages(ctx, threadID)
}

func (s *pagesOnly) ReadPage(ctx context.Context, threadID string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	rows, err := s.Store.ReadPage(ctx, threadID, q)
	if !q.SizesOnly {
		for _, r := range rows {
			s.read = append(s.read, r.Seq)
		}
	}
	return rows, err
}

// TestLoadReadsTheRunsItSends: the conversation before a run reads the
// thread's list from sizes and the bytes of the earlier runs only, not the
// log of the run and of those after it.
func TestLoadReadsTheRunsItSends(t *testing.T) {
	e := newEnv(t)
	e.play(t, instanceai.StartRequest{Message: "hi"})
	r2 := e.play(t, instanceai.StartRequest{Message: "tools"})
	e.play(t, instanceai.StartRequest{Message: "hi again"})
	rows, err := e.store.RunEvents(context.Background(), "t", r2)
	if err != nil || len(rows) == 0 {
		t.Fatalf("run 2's rows: %d, %v", len(rows), err)
	}
	s := &pagesOnly{Store: e.store, t: t}
	h, err := conversation.Load(context.Background(), s, "t", r2)
	if err != nil {
		t.Fatal(err)
	}
	if want := load(t, e, r2); !slices.Equal(render(h), want) {
		t.Fatalf("through the pages: %q, want %q", render(h), want)
	}
	if len(s.read) == 0 || slices.Max(s.read) >= rows[0].Seq {
		t.Fatalf("read the bytes of rows %v; run 2 starts at %d", s.read, rows[0].Seq)
	}
}
