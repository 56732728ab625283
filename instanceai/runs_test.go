package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// The run lifecycle, driven through the real Core (registry, writer, hub)
// over the memory store, with agents scripted in each test.

// waitFor bounds every wait of these tests, so a broken handoff fails
// instead of hanging.
const waitFor = 10 * time.Second

// cancelledResult is the result a cancel settles an open tool call with.
const cancelledResult = `{"message":"The run was cancelled before this tool finished.","status":"cancelled"}`

// lifecycle is a Core over a memory store with the given threads.
type lifecycle struct {
	t     *testing.T
	store *memory.Store
	core  *instanceai.Core
	// agents names agent ids in the rendered log (the orchestrator is
	// always "orch").
	mu     sync.Mutex
	agents map[string]string
	// resumes: the agent can resume a run suspended across a restart, so
	// a waiting run is disowned once its request is stored.
	resumes bool
}

func newLifecycle(t *testing.T, agent instanceai.Agent, threads ...string) *lifecycle {
	t.Helper()
	store := memory.New()
	return newLifecycleOn(t, store, agent, instanceai.CoreConfig{}, threads...)
}

func newLifecycleOn(t *testing.T, store *memory.Store, agent instanceai.Agent, cfg instanceai.CoreConfig, threads ...string) *lifecycle {
	t.Helper()
	ctx := context.Background()
	for _, id := range threads {
		if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	// Segments close on structural events only, never on a timer, so the
	// stored log does not depend on how fast the test runs.
	cfg.Writer.IdleFlush = time.Hour
	core := instanceai.NewCore(store, agent, cfg)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		_ = core.Runs().Shutdown(sctx)
		_ = core.Writer().Close(sctx)
	})
	_, resumes := agent.(instanceai.Resumer)
	return &lifecycle{t: t, store: store, core: core, agents: map[string]string{}, resumes: resumes}
}

func (l *lifecycle) start(thread, message string) *instanceai.Run {
	l.t.Helper()
	run, err := l.core.Runs().Start(instanceai.StartRequest{ThreadID: thread, UserID: "u", Message: message})
	if err != nil {
		l.t.Fatalf("start a run on %s: %v", thread, err)
	}
	return run
}

// name makes an agent id show as name in the rendered log.
func (l *lifecycle) name(agentID, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.agents[agentID] = name
}

// settle waits until the run's agent returned and everything queued for
// its thread is stored.
func (l *lifecycle) settle(run *instanceai.Run) {
	l.t.Helper()
	select {
	case <-run.Done():
	case <-time.After(waitFor):
		l.t.Fatalf("run %s did not end", run.ID)
	}
	l.sync(run.ThreadID)
}

func (l *lifecycle) sync(thread string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := l.core.Writer().Sync(ctx, thread); err != nil {
		l.t.Fatal(err)
	}
}

// rows returns the thread's stored log, checking that its seqs are
// contiguous from 1.
func (l *lifecycle) rows(thread string) []instanceai.StoredEvent {
	l.t.Helper()
	rows, err := l.store.ReadAfter(context.Background(), thread, 0, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	for i, r := range rows {
		if r.Seq != int64(i+1) {
			l.t.Fatalf("seq %d at position %d", r.Seq, i)
		}
	}
	return rows
}

// expectLog asserts the thread's stored log event by event: every event
// belongs to runID (when set) and renders as the next entry of want.
func (l *lifecycle) expectLog(thread, runID string, want ...string) {
	l.t.Helper()
	rows := l.rows(thread)
	var got []string
	for _, r := range rows {
		if runID != "" && r.Event.RunID != runID {
			l.t.Errorf("seq %d (%s) belongs to run %s, want %s", r.Seq, r.Event.Type, r.Event.RunID, runID)
		}
		if r.Event.UserID != "u" {
			l.t.Errorf("seq %d (%s) has user %q, want u", r.Seq, r.Event.Type, r.Event.UserID)
		}
		got = append(got, l.describe(r.Event))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		l.t.Fatalf("stored log of %s:\n  %s\nwant:\n  %s", thread, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// describe renders an event as "type:details @agent".
func (l *lifecycle) describe(e instanceai.Event) string {
	s := string(e.Type)
	switch p := e.Payload.(type) {
	case *instanceai.RunFinish:
		s += ":" + p.Status + ":" + p.Reason
	case *instanceai.Text:
		s += ":" + p.Text
	case *instanceai.ToolCall:
		s += ":" + p.ToolCallID
	case *instanceai.ToolResult:
		s += ":" + p.ToolCallID + "=" + string(p.Result)
	case *instanceai.ToolError:
		s += ":" + p.ToolCallID + "=" + p.Error
	case *instanceai.AgentSpawned:
		s += ":" + p.Role
		if p.ParentID != instanceai.OrchestratorAgentID(e.RunID) {
			s += " parent=" + p.ParentID
		}
	case *instanceai.AgentCompleted:
		s += ":" + p.Role + ":" + p.Status + ":" + p.Result + ":" + p.Error
	case *instanceai.ConfirmationRequest:
		s += ":" + p.RequestID
	case *instanceai.ErrorPayload:
		s += ":" + p.Content
	}
	agent := e.AgentID
	if agent == instanceai.OrchestratorAgentID(e.RunID) {
		agent = "orch"
	} else {
		l.mu.Lock()
		if n, ok := l.agents[agent]; ok {
			agent = n
		}
		l.mu.Unlock()
	}
	return s + " @" + agent
}

func toolCall(id string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: id, ToolName: "tool",
		Args: json.RawMessage(`{}`)}}
}

// runEnded is the error a call still open at its run's finish ends with.
const runEnded = "The tool call had no result when its agent or its run ended."

// mark is a stored event that opens and closes nothing: tasks-update
// with one task, id.
func mark(id string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeTasksUpdate, Payload: &instanceai.TasksUpdate{
		Tasks: instanceai.TaskList{Tasks: []instanceai.Task{{ID: id, Description: id, Status: "todo"}}}}}
}

func toolResult(id, result string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: id,
		Result: json.RawMessage(result)}}
}

func textDelta(responseID, text string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: responseID, Payload: &instanceai.Text{Text: text}}
}

// emitAll emits the events in order and stops at the first failure.
func emitAll(run *instanceai.Run, events ...instanceai.Event) error {
	for _, e := range events {
		if err := run.Emit(e); err != nil {
			return err
		}
	}
	return nil
}

// waitUntil polls cond until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestRunStartEventsFinishCompleted(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		return emitAll(run, textDelta("r1", "let me "), textDelta("r1", "look"), toolCall("c1"),
			toolResult("c1", `{"ok":true}`), textDelta("r2", "done"))
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "hello")
	if run.AgentID != instanceai.OrchestratorAgentID(run.ID) || run.ThreadID != "t" || run.Message != "hello" {
		t.Fatalf("run = %+v", run)
	}
	l.settle(run)
	// The run-start is the registry's, the deltas are coalesced into
	// blocks at the next structural event, the finish closes the last one.
	l.expectLog("t", run.ID,
		"run-start @orch",
		"text-block:let me look @orch",
		"tool-call:c1 @orch",
		`tool-result:c1={"ok":true} @orch`,
		"text-block:done @orch",
		"run-finish:completed: @orch")
	if a := l.core.Runs().Active("t"); a != nil {
		t.Fatalf("active run after the finish: %s", a.ID)
	}
	if _, err := l.store.ActiveRun(context.Background(), "t"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("claim after the finish is stored: %v, want ErrNotFound", err)
	}
	st := l.core.Runs().Status(context.Background(), "t")
	if st.HasActiveRun || st.IsSuspended || len(st.BackgroundTasks) != 0 {
		t.Fatalf("status after the finish = %+v", st)
	}
}

func TestRunFinishCarriesTheSummedUsage(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		run.AddUsage(instanceai.TokenUsage{Provider: "p", Model: "m", InputTokens: 1, OutputTokens: 2, TotalTokens: 3})
		run.AddUsage(instanceai.TokenUsage{Provider: "p", Model: "m", InputTokens: 10, OutputTokens: 20, TotalTokens: 30})
		run.AddUsage(instanceai.TokenUsage{Provider: "p", Model: "n", InputTokens: 5, TotalTokens: 5})
		return nil
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "hi")
	l.settle(run)
	rows := l.rows("t")
	last := rows[len(rows)-1].Event.Payload.(*instanceai.RunFinish)
	want := []instanceai.TokenUsage{{Provider: "p", Model: "m", InputTokens: 11, OutputTokens: 22, TotalTokens: 33},
		{Provider: "p", Model: "n", InputTokens: 5, TotalTokens: 5}}
	if fmt.Sprint(last.Usage) != fmt.Sprint(want) {
		t.Fatalf("usage = %+v, want %+v", last.Usage, want)
	}
}

func TestOneActiveRunPerThread(t *testing.T) {
	release := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if run.Message == "wait" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	l := newLifecycle(t, agent, "t", "other")
	first := l.start("t", "wait")
	second, err := l.core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "again"})
	if !errors.Is(err, instanceai.ErrRunActive) {
		t.Fatalf("second start: %v, want ErrRunActive", err)
	}
	if second != first {
		t.Fatalf("second start returned %v, want the active run %s", second, first.ID)
	}
	// Another thread is not held by it.
	other := l.start("other", "quick")
	l.settle(other)
	if n := l.core.Runs().Count(); n != 1 {
		t.Fatalf("active runs = %d, want 1", n)
	}
	close(release)
	l.settle(first)
	// The thread is free again as soon as the finish is stored.
	third := l.start("t", "quick")
	l.settle(third)
	l.expectLog("other", other.ID, "run-start @orch", "run-finish:completed: @orch")
	rows := l.rows("t")
	if len(rows) != 4 || rows[0].Event.RunID != first.ID || rows[1].Event.RunID != first.ID ||
		rows[2].Event.RunID != third.ID || rows[3].Event.RunID != third.ID {
		t.Fatalf("log of t: %+v", rows)
	}
	l.expectLog("t", "", "run-start @orch", "run-finish:completed: @orch", "run-start @orch", "run-finish:completed: @orch")
}

func TestUnknownAgentNameIsRefusedBeforeAnythingIsWritten(t *testing.T) {
	l := newLifecycle(t, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }), "t")
	_, err := l.core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", AgentName: "nope"})
	var unknown *instanceai.UnknownAgentError
	if !errors.As(err, &unknown) || unknown.Name != "nope" {
		t.Fatalf("start with an unknown agent: %v", err)
	}
	l.sync("t")
	l.expectLog("t", "")
	if l.core.Runs().Active("t") != nil {
		t.Fatal("a refused start left an active run")
	}
}

func TestAgentFailureEndsTheRunWithAnError(t *testing.T) {
	cases := []struct {
		name    string
		fail    func() error
		content string // the error event's content, also the finish reason
		check   func(t *testing.T, p *instanceai.ErrorPayload)
	}{
		{name: "error", fail: func() error { return errors.New("model unreachable") }, content: "model unreachable"},
		{name: "provider error", content: "rate limited",
			fail: func() error {
				return &instanceai.ProviderError{Message: "rate limited", Code: "429", Provider: "acme", StatusCode: 429, Details: "retry later"}
			},
			check: func(t *testing.T, p *instanceai.ErrorPayload) {
				if p.StatusCode != 429 || p.Code != "429" || p.Provider != "acme" || p.TechnicalDetails != "retry later" {
					t.Fatalf("error payload = %+v", p)
				}
			}},
		{name: "panic", fail: func() error { panic("boom") }, content: "agent failed unexpectedly: boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
				if err := emitAll(run, toolCall("c1"), textDelta("r", "trying")); err != nil {
					return err
				}
				return c.fail()
			})
			l := newLifecycle(t, agent, "t")
			run := l.start("t", "go")
			l.settle(run)
			// The error closes the text segment as any structural event;
			// the finish gives the open call an outcome.
			l.expectLog("t", run.ID,
				"run-start @orch",
				"tool-call:c1 @orch",
				"text-block:trying @orch",
				"error:"+c.content+" @orch",
				"tool-error:c1="+runEnded+" @orch",
				"run-finish:error:"+c.content+" @orch")
			if c.check != nil {
				rows := l.rows("t")
				c.check(t, rows[3].Event.Payload.(*instanceai.ErrorPayload))
			}
			if l.core.Runs().Active("t") != nil {
				t.Fatal("a failed run is still active")
			}
			// The thread takes a next run.
			l.settle(l.start("t", "again"))
		})
	}
}
