package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// askingAgent calls tool c1 only once a person approved it.
func askingAgent(ctx context.Context, run *instanceai.Run) error {
	if err := run.Emit(toolCall("c1")); err != nil {
		return err
	}
	a, err := run.Confirm(ctx, "", instanceai.ConfirmationRequest{RequestID: "cr1", ToolCallID: "c1", ToolName: "tool",
		Args: json.RawMessage(`{}`), Severity: instanceai.SeverityDestructive, Message: "Delete it?"})
	if err != nil {
		return err
	}
	if !a.Approved {
		return run.Emit(instanceai.Event{Type: instanceai.TypeToolError,
			Payload: &instanceai.ToolError{ToolCallID: "c1", Error: "denied: " + a.UserInput}})
	}
	return run.Emit(toolResult("c1", `"deleted"`))
}

// resumingAgent is an agent that can continue a run suspended across a
// restart: its runs are disowned while they wait for a person.
type resumingAgent struct{ instanceai.AgentFunc }

func (resumingAgent) Resume(ctx context.Context, run *instanceai.Run, _ *instanceai.ConfirmationRequest, a instanceai.Answer) error {
	return run.Emit(toolResult("c1", `"resumed"`))
}

// suspended starts the asking agent's run and waits until it waits for
// the answer, checking what a waiting run looks like.
func (l *lifecycle) suspended(thread string) *instanceai.Run {
	l.t.Helper()
	ctx := context.Background()
	run := l.start(thread, "delete it")
	// The suspension is recorded before the request is queued, so the
	// request in the log is what says the run waits.
	waitUntil(l.t, "the confirmation-request is stored", func() bool {
		rows, err := l.store.ReadAfter(ctx, thread, 0, 0)
		return err == nil && slices.ContainsFunc(rows, func(r instanceai.StoredEvent) bool {
			return r.Event.Type == instanceai.TypeConfirmRequest
		})
	})
	if !l.core.Runs().Status(ctx, thread).IsSuspended {
		l.t.Fatal("a run whose request is out is not suspended")
	}
	l.expectLog(thread, run.ID, "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr1 @orch")
	awaited, err := l.core.Runs().Awaited(ctx, thread)
	if err != nil || len(awaited) != 1 || awaited[0].RequestID != "cr1" || awaited[0].RunID != run.ID ||
		awaited[0].ToolCallID != "c1" || awaited[0].OwnerID != "u" {
		l.t.Fatalf("awaited = %+v, %v", awaited, err)
	}
	if c, err := l.store.GetConfirmation(ctx, "cr1"); err != nil || c.Status != instanceai.ConfirmationPending {
		l.t.Fatalf("stored confirmation = %+v, %v", c, err)
	}
	// A run the agent can resume is handed to no process once its
	// request is stored, just after.
	waitUntil(l.t, "the waiting run's claim is settled", func() bool {
		row, err := l.store.ActiveRun(ctx, thread)
		return err == nil && (row.Owner == "") == l.resumes
	})
	row, err := l.store.ActiveRun(ctx, thread)
	if err != nil || row.RunID != run.ID || !row.Suspended {
		l.t.Fatalf("claim of a waiting run = %+v, %v", row, err)
	}
	return run
}

func TestConfirmationSuspendsTheRunUntilAnswered(t *testing.T) {
	cases := []struct {
		name   string
		agent  instanceai.Agent
		answer instanceai.Answer
		status string
		last   string // the event the answer leads to
		// disowned: a run the agent can resume is owned by no process
		// while it waits.
		disowned bool
	}{
		{name: "approve", agent: instanceai.AgentFunc(askingAgent), answer: instanceai.Answer{Approved: true},
			status: instanceai.ConfirmationApproved, last: `tool-result:c1="deleted" @orch`},
		{name: "deny", agent: instanceai.AgentFunc(askingAgent), answer: instanceai.Answer{Approved: false, UserInput: "keep it"},
			status: instanceai.ConfirmationDenied, last: "tool-error:c1=denied: keep it @orch"},
		{name: "approve, resumable agent", agent: resumingAgent{askingAgent}, answer: instanceai.Answer{Approved: true},
			status: instanceai.ConfirmationApproved, last: `tool-result:c1="deleted" @orch`, disowned: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLifecycle(t, c.agent, "t")
			run := l.suspended("t")
			row, _ := l.store.ActiveRun(ctx, "t")
			if owner := row.Owner; (owner == "") != c.disowned {
				t.Fatalf("owner of the waiting run's claim = %q, disowned want %v", owner, c.disowned)
			}

			// Answers that are not this request's change nothing.
			if _, _, err := l.core.Runs().Answer(ctx, "u", "cr-unknown", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrNotFound) {
				t.Fatalf("answer to an unknown request: %v, want ErrNotFound", err)
			}
			if _, _, err := l.core.Runs().Answer(ctx, "mallory", "cr1", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrNotFound) {
				t.Fatalf("answer by another user: %v, want ErrNotFound", err)
			}
			if !l.core.Runs().Status(ctx, "t").IsSuspended {
				t.Fatal("a refused answer woke the run")
			}

			runID, _, err := l.core.Runs().Answer(ctx, "u", "cr1", c.answer)
			if err != nil || runID != run.ID {
				t.Fatalf("answer = %q, %v; want run %s", runID, err, run.ID)
			}
			l.settle(run)
			l.expectLog("t", run.ID, "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr1 @orch",
				c.last, "run-finish:completed: @orch")
			stored, err := l.store.GetConfirmation(ctx, "cr1")
			if err != nil || stored.Status != c.status {
				t.Fatalf("stored confirmation = %+v, %v; want %s", stored, err, c.status)
			}
			var got instanceai.Answer
			if err := json.Unmarshal(stored.Answer, &got); err != nil || got.Approved != c.answer.Approved ||
				got.UserInput != c.answer.UserInput {
				t.Fatalf("stored answer %s (%v), want %+v", stored.Answer, err, c.answer)
			}
			// One answer wins.
			if _, _, err := l.core.Runs().Answer(ctx, "u", "cr1", instanceai.Answer{Approved: !c.answer.Approved}); !errors.Is(err, instanceai.ErrAlreadyAnswered) {
				t.Fatalf("second answer: %v, want ErrAlreadyAnswered", err)
			}
			if awaited, err := l.core.Runs().Awaited(ctx, "t"); err != nil || len(awaited) != 0 {
				t.Fatalf("awaited after the answer = %+v, %v", awaited, err)
			}
		})
	}
}

func TestCancelWhileSuspendedClosesTheConfirmation(t *testing.T) {
	ctx := context.Background()
	l := newLifecycle(t, instanceai.AgentFunc(askingAgent), "t")
	run := l.suspended("t")
	if got, _, _ := l.core.Runs().Cancel("t", instanceai.ReasonUserCancelled); got != run {
		t.Fatalf("Cancel returned %v", got)
	}
	// The confirmation is closed before Cancel returns.
	if c, err := l.store.GetConfirmation(ctx, "cr1"); err != nil || c.Status != instanceai.ConfirmationCancelled {
		t.Fatalf("confirmation after cancel = %+v, %v", c, err)
	}
	l.settle(run)
	want := []string{"run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr1 @orch",
		"tool-result:c1=" + cancelledResult + " @orch", "run-finish:cancelled:user_cancelled @orch"}
	l.expectLog("t", run.ID, want...)
	// A late answer is refused and writes nothing.
	if _, _, err := l.core.Runs().Answer(ctx, "u", "cr1", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrAlreadyAnswered) &&
		!errors.Is(err, instanceai.ErrConfirmationClosed) {
		t.Fatalf("answer after cancel: %v, want a refusal", err)
	}
	l.sync("t")
	l.expectLog("t", run.ID, want...)
	if c, _ := l.store.GetConfirmation(ctx, "cr1"); c.Status != instanceai.ConfirmationCancelled {
		t.Fatalf("a late answer changed the confirmation to %s", c.Status)
	}
}

// Runs.Answer documents ErrConfirmationClosed for "a request whose run
// stopped waiting (it was cancelled …)", but the cancel already marked the
// confirmation cancelled, so Answer reports ErrAlreadyAnswered and the
// native API answers 409 already_answered instead of confirmation_closed.
func TestAnswerAfterCancelIsConfirmationClosed(t *testing.T) {
	ctx := context.Background()
	l := newLifecycle(t, instanceai.AgentFunc(askingAgent), "t")
	run := l.suspended("t")
	l.core.Runs().Cancel("t", instanceai.ReasonUserCancelled)
	l.settle(run)
	if _, _, err := l.core.Runs().Answer(ctx, "u", "cr1", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrConfirmationClosed) {
		t.Fatalf("answer after cancel: %v, want ErrConfirmationClosed", err)
	}
}

func TestConfirmWithoutAStoreFails(t *testing.T) {
	store := memory.New()
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	writer := instanceai.NewWriter(store, instanceai.NewHub(16), instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	errs := make(chan error, 1)
	runs := instanceai.NewRuns(writer, instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		err := askingAgent(ctx, run)
		errs <- err
		return err
	}), instanceai.RunsConfig{})
	run, err := runs.Start(instanceai.StartRequest{ThreadID: "t", UserID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err == nil {
		t.Fatal("Confirm without a confirmation store succeeded")
	}
	<-run.Done()
	if err := writer.Sync(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	rows, _ := store.ReadAfter(context.Background(), "t", 0, 0)
	if len(rows) != 5 || rows[2].Event.Type != instanceai.TypeError || rows[3].Event.Type != instanceai.TypeToolError ||
		rows[4].Event.Type != instanceai.TypeRunFinish {
		t.Fatalf("log = %+v", rows)
	}
}

// typeGate is a memory store that holds the append of the first batch
// holding an event of type typ until open is called.
type typeGate struct {
	*memory.Store
	typ  instanceai.EventType
	once sync.Once
	held chan struct{}
	gate chan struct{}
}

func newTypeGate(store *memory.Store, typ instanceai.EventType) *typeGate {
	return &typeGate{Store: store, typ: typ, held: make(chan struct{}), gate: make(chan struct{})}
}

func (g *typeGate) open() { close(g.gate) }

func (g *typeGate) hold(events []instanceai.Event) {
	if slices.ContainsFunc(events, func(ev instanceai.Event) bool { return ev.Type == g.typ }) {
		g.once.Do(func() {
			close(g.held)
			<-g.gate
		})
	}
}

// waitHeld waits until the gated append is held.
func (g *typeGate) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(waitFor):
		t.Fatalf("no %s was appended", g.typ)
	}
}

func (g *typeGate) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	g.hold(events)
	return g.Store.AppendEncoded(ctx, thread, events, data)
}

func (g *typeGate) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	g.hold(events)
	return g.Store.AppendFenced(ctx, thread, events, data, fences)
}

// newGatedCore is a Core over gate, closed after the test.
func newGatedCore(t *testing.T, gate *typeGate, agent instanceai.Agent, cfg instanceai.CoreConfig) *instanceai.Core {
	t.Helper()
	core := instanceai.NewCore(gate, agent, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = core.Runs().Shutdown(ctx)
		_ = core.Writer().Close(ctx)
	})
	return core
}

// A run that can be resumed is handed to no process only once its
// confirmation-request is in the log: until then it stays its instance's,
// so that if the instance dies there the run's lease runs out and the
// sweep settles it, rather than leaving a run waiting for an answer to a
// request nobody was sent.
func TestWaitingRunIsDisownedOnlyOnceItsRequestIsStored(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	gate := newTypeGate(store, instanceai.TypeConfirmRequest)
	core := newGatedCore(t, gate, resumingAgent{askingAgent}, instanceai.CoreConfig{Instance: "inst-a", Lease: time.Minute})
	run, err := core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "delete it"})
	if err != nil {
		t.Fatal(err)
	}
	gate.waitHeld(t)
	// The suspension is stored, the request is not: the run is still held.
	waitUntil(t, "the suspension is stored", func() bool {
		row, err := store.ActiveRun(ctx, "t")
		return err == nil && row.Suspended
	})
	if row, err := store.ActiveRun(ctx, "t"); err != nil || row.Owner != "inst-a" {
		t.Fatalf("claim of a run whose request is not stored = %+v, %v; want owned by inst-a", row, err)
	}
	gate.open()
	waitUntil(t, "the waiting run is disowned", func() bool {
		row, err := store.ActiveRun(ctx, "t")
		return err == nil && row.Owner == "" && row.Suspended && row.RunID == run.ID
	})
	if _, _, err := core.Runs().Answer(ctx, "u", "cr1", instanceai.Answer{Approved: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-time.After(waitFor):
		t.Fatal("the answered run did not end")
	}
}

// An instance whose run waits for a person in memory, and has not heard
// that another instance took it with its answer (no bus here), can still
// resume the thread's next suspended run when that run's answer reaches
// it: it holds the thread's row then, so its stale run is dropped, not
// reported as a run already active.
func TestAnswerResumesPastAStaleWaitingRun(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	agent := resumingAgent{func(ctx context.Context, run *instanceai.Run) error {
		if err := run.Emit(toolCall("c1")); err != nil {
			return err
		}
		if _, err := run.Confirm(ctx, "", instanceai.ConfirmationRequest{RequestID: run.Message, ToolCallID: "c1", ToolName: "tool",
			Args: json.RawMessage(`{}`), Severity: instanceai.SeverityDestructive, Message: "Delete it?"}); err != nil {
			return err
		}
		return run.Emit(toolResult("c1", `"deleted"`))
	}}
	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b", Lease: time.Minute}, "t")
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: time.Minute})
	waiting := func(runID string) {
		t.Helper()
		waitUntil(t, "run "+runID+" waits, owned by no process", func() bool {
			row, err := store.ActiveRun(ctx, "t")
			return err == nil && row.RunID == runID && row.Suspended && row.Owner == ""
		})
	}
	ended := func(runID string) {
		t.Helper()
		waitUntil(t, "run "+runID+" ended", func() bool {
			_, err := store.ActiveRun(ctx, "t")
			return errors.Is(err, instanceai.ErrNotFound)
		})
	}
	first := b.start("t", "cr-first")
	waiting(first.ID)
	if _, outcome, err := a.core.Runs().Answer(ctx, "u", "cr-first", instanceai.Answer{Approved: true}); err != nil || outcome != instanceai.Applied {
		t.Fatalf("answer through inst-a = %q, %v", outcome, err)
	}
	ended(first.ID)
	second := a.start("t", "cr-second")
	waiting(second.ID)
	if b.core.Runs().Active("t") != first {
		t.Fatal("inst-b no longer holds its stale run: the case is not set up")
	}
	if _, outcome, err := b.core.Runs().Answer(ctx, "u", "cr-second", instanceai.Answer{Approved: true}); err != nil || outcome != instanceai.Applied {
		t.Fatalf("answer through inst-b, which holds a stale run of the thread = %q, %v; want applied", outcome, err)
	}
	ended(second.ID)
	b.sync("t")
	a.sync("t")
	rows := b.rows("t")
	finishes := 0
	for _, r := range rows {
		if r.Event.Type == instanceai.TypeRunFinish {
			finishes++
		}
	}
	if last := rows[len(rows)-1].Event; last.Type != instanceai.TypeRunFinish || last.RunID != second.ID || finishes != 2 {
		t.Fatalf("the log ends with %s of %s, with %d run-finishes; want the second run's, and one per run", last.Type, last.RunID, finishes)
	}
}
