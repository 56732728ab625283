package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// slowClaims holds a run's claim until release is closed: the moment
// between a run's registration and its run-start, stretched.
type slowClaims struct {
	*memory.Store
	claiming chan struct{}
	release  chan struct{}
}

func (s *slowClaims) ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (instanceai.ActiveRun, error) {
	close(s.claiming)
	<-s.release
	return s.Store.ClaimThread(ctx, threadID, runID, owner, ttl)
}

// A cancel that reaches a run while it starts, before its run-start is
// queued, does not write a run-finish ahead of it nor fail the start: the
// run begins and ends cancelled at once.
func TestCancelWhileARunStarts(t *testing.T) {
	store := memory.New()
	ctx := context.Background()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	claims := &slowClaims{Store: store, claiming: make(chan struct{}), release: make(chan struct{})}
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		<-ctx.Done()
		return ctx.Err()
	})
	core := instanceai.NewCore(claims, agent, instanceai.CoreConfig{Writer: instanceai.WriterConfig{IdleFlush: time.Hour}})
	l := &lifecycle{t: t, store: store, core: core, agents: map[string]string{}}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		_ = core.Runs().Shutdown(sctx)
		_ = core.Writer().Close(sctx)
	})
	started := make(chan error, 1)
	var run *instanceai.Run
	go func() {
		var err error
		run, err = core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "work"})
		started <- err
	}()
	<-claims.claiming
	if r, _, _ := core.Runs().Cancel("t", instanceai.ReasonUserCancelled); r == nil {
		t.Fatal("the starting run was not found to cancel")
	}
	close(claims.release)
	if err := <-started; err != nil {
		t.Fatalf("Start after a cancel while it started: %v", err)
	}
	l.settle(run)
	l.expectLog("t", run.ID, "run-start @orch", "run-finish:cancelled:user_cancelled @orch")
	if _, err := store.ActiveRun(ctx, "t"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the cancelled run's claim: %v, want released", err)
	}
}

// A claim left by a process that died (or was cut off) before the run's
// run-start was stored: its client may hold the run's id, so the sweep
// writes the run as begun and interrupted at once.
func TestSweepSettlesARunThatNeverBegan(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	l := newLifecycleOn(t, store, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }),
		instanceai.CoreConfig{Instance: "inst-b"}, "never")
	if _, err := store.ClaimThread(ctx, "never", "run_never", "inst-dead", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead instance's lease expired", func() bool {
		row, err := store.ActiveRun(ctx, "never")
		return err == nil && row.Free(time.Now())
	})
	if n, err := l.core.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired = %d, %v; want the run settled", n, err)
	}
	l.sync("never")
	l.expectLog("never", "run_never", "run-start @orch", "run-finish:interrupted:crash_interrupted @orch")
	if _, err := store.ActiveRun(ctx, "never"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the claim: %v, want released", err)
	}
}

// leaveAnsweredRun writes a run that asked for a confirmation, which was
// answered, then what came after (after), with a suspended claim of a dead
// instance whose lease ran out: what an instance that resumed the run and
// then lost its database link (so its row's release failed) leaves.
func leaveAnsweredRun(t *testing.T, store *memory.Store, thread, runID string, after ...instanceai.Event) {
	t.Helper()
	ctx := context.Background()
	orch := instanceai.OrchestratorAgentID(runID)
	req := &instanceai.ConfirmationRequest{RequestID: "cr-" + thread, ToolCallID: "c1", ToolName: "tool",
		Args: json.RawMessage(`{}`), Severity: instanceai.SeverityWarning, Message: "Go on?"}
	events := append([]instanceai.Event{
		{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeToolCall, AgentID: orch, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "tool", Args: json.RawMessage(`{}`)}},
		{Type: instanceai.TypeConfirmRequest, AgentID: orch, Payload: req},
	}, after...)
	for i := range events {
		if events[i].AgentID == "" {
			events[i].AgentID = orch
		}
	}
	appendRun(t, store, thread, runID, events)
	raw, _ := json.Marshal(req)
	if err := store.AddConfirmation(ctx, instanceai.Confirmation{RequestID: req.RequestID, ThreadID: thread, RunID: runID,
		AgentID: orch, ToolCallID: "c1", OwnerID: "u", Request: raw, Status: instanceai.ConfirmationPending, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.AnswerConfirmation(ctx, req.RequestID, instanceai.ConfirmationApproved, []byte(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	row, err := store.ClaimThread(ctx, thread, runID, "inst-dead", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SuspendRun(ctx, thread, runID, row.Fence, true); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead instance's lease expired", func() bool {
		row, err := store.ActiveRun(ctx, thread)
		return err == nil && row.Free(time.Now())
	})
}

// A suspended row is resumed by the sweep only when the run's log shows it
// waiting: a run that an instance resumed and finished (its release
// failed) is released, and one resumed and then left by a dead instance
// is settled as a crashed run, never resumed a second time.
func TestSweepResumesOnlyARunThatWaits(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	var resumes atomic.Int32
	agent := resumingAgent{instanceai.AgentFunc(askingAgent)}
	l := newLifecycleOn(t, store, countingResumer{agent, &resumes}, instanceai.CoreConfig{Instance: "inst-b"}, "finished", "went-on", "waits")
	l.name("agent_dead", "helper")
	leaveAnsweredRun(t, store, "finished", "run_finished",
		toolResult("c1", `"done"`), instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}})
	leaveAnsweredRun(t, store, "went-on", "run_went_on", toolResult("c1", `"done"`))
	leaveAnsweredRun(t, store, "waits", "run_waits")
	if _, err := l.core.Runs().SweepExpired(ctx); err != nil {
		t.Fatal(err)
	}
	for _, th := range []string{"finished", "went-on", "waits"} {
		l.sync(th)
	}
	waitUntil(t, "the waiting run resumed and finished", func() bool {
		_, err := store.ActiveRun(ctx, "waits")
		return errors.Is(err, instanceai.ErrNotFound)
	})
	if n := resumes.Load(); n != 1 {
		t.Fatalf("%d runs resumed, want only the one that waits", n)
	}
	l.expectLog("finished", "run_finished", "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr-finished @orch",
		`tool-result:c1="done" @orch`, "run-finish:completed: @orch")
	l.expectLog("went-on", "run_went_on", "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr-went-on @orch",
		`tool-result:c1="done" @orch`, "run-finish:interrupted:crash_interrupted @orch")
	for _, th := range []string{"finished", "went-on"} {
		if _, err := store.ActiveRun(ctx, th); !errors.Is(err, instanceai.ErrNotFound) {
			t.Fatalf("the claim of %s: %v, want released", th, err)
		}
	}
}

// countingResumer counts the runs it resumes.
type countingResumer struct {
	resumingAgent
	n *atomic.Int32
}

func (c countingResumer) Resume(ctx context.Context, run *instanceai.Run, req *instanceai.ConfirmationRequest, a instanceai.Answer) error {
	c.n.Add(1)
	return c.resumingAgent.Resume(ctx, run, req, a)
}
