package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

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
	waitUntil(l.t, "the run is suspended", func() bool { return l.core.Runs.Status(ctx, thread).IsSuspended })
	l.sync(thread)
	l.expectLog(thread, run.ID, "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr1 @orch")
	awaited, err := l.core.Runs.Awaited(ctx, thread)
	if err != nil || len(awaited) != 1 || awaited[0].RequestID != "cr1" || awaited[0].RunID != run.ID ||
		awaited[0].ToolCallID != "c1" || awaited[0].OwnerID != "u" {
		l.t.Fatalf("awaited = %+v, %v", awaited, err)
	}
	if c, err := l.store.GetConfirmation(ctx, "cr1"); err != nil || c.Status != instanceai.ConfirmationPending {
		l.t.Fatalf("stored confirmation = %+v, %v", c, err)
	}
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
			if _, _, err := l.core.Runs.Answer(ctx, "u", "cr-unknown", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrNotFound) {
				t.Fatalf("answer to an unknown request: %v, want ErrNotFound", err)
			}
			if _, _, err := l.core.Runs.Answer(ctx, "mallory", "cr1", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrNotFound) {
				t.Fatalf("answer by another user: %v, want ErrNotFound", err)
			}
			if !l.core.Runs.Status(ctx, "t").IsSuspended {
				t.Fatal("a refused answer woke the run")
			}

			runID, _, err := l.core.Runs.Answer(ctx, "u", "cr1", c.answer)
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
			if _, _, err := l.core.Runs.Answer(ctx, "u", "cr1", instanceai.Answer{Approved: !c.answer.Approved}); !errors.Is(err, instanceai.ErrAlreadyAnswered) {
				t.Fatalf("second answer: %v, want ErrAlreadyAnswered", err)
			}
			if awaited, err := l.core.Runs.Awaited(ctx, "t"); err != nil || len(awaited) != 0 {
				t.Fatalf("awaited after the answer = %+v, %v", awaited, err)
			}
		})
	}
}

func TestCancelWhileSuspendedClosesTheConfirmation(t *testing.T) {
	ctx := context.Background()
	l := newLifecycle(t, instanceai.AgentFunc(askingAgent), "t")
	run := l.suspended("t")
	if got, _, _ := l.core.Runs.Cancel("t", instanceai.ReasonUserCancelled); got != run {
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
	if _, _, err := l.core.Runs.Answer(ctx, "u", "cr1", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrAlreadyAnswered) &&
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
	l.core.Runs.Cancel("t", instanceai.ReasonUserCancelled)
	l.settle(run)
	if _, _, err := l.core.Runs.Answer(ctx, "u", "cr1", instanceai.Answer{Approved: true}); !errors.Is(err, instanceai.ErrConfirmationClosed) {
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
	if len(rows) != 4 || rows[2].Event.Type != instanceai.TypeError || rows[3].Event.Type != instanceai.TypeRunFinish {
		t.Fatalf("log = %+v", rows)
	}
}
