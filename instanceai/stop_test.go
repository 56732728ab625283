package instanceai_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// Drain refuses new runs at once and waits for those at work, not for one
// suspended on a person; on its deadline it says how many still work.
func TestDrainRefusesNewRunsAndWaits(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	for _, id := range []string{"busy", "new"} {
		if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	writer := instanceai.NewWriter(store, instanceai.NewHub(64), instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(ctx) })
	release := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	runs := instanceai.NewRuns(writer, agent, instanceai.RunsConfig{Confirmations: store, Index: store})
	t.Cleanup(func() { _ = runs.Shutdown(ctx) })
	if _, err := runs.Start(instanceai.StartRequest{ThreadID: "busy", UserID: "u", Message: "x"}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if left := runs.Drain(short); left != 1 {
		t.Fatalf("Drain with a working run left %d, want 1", left)
	}
	if !runs.Draining() {
		t.Fatal("Draining is false after Drain")
	}
	if _, err := runs.Start(instanceai.StartRequest{ThreadID: "new", UserID: "u", Message: "x"}); err != instanceai.ErrDraining {
		t.Fatalf("Start while draining: %v, want ErrDraining", err)
	}
	close(release)
	if left := runs.Drain(ctx); left != 0 {
		t.Fatalf("Drain after the run ended left %d", left)
	}
}

func TestCancelFinishesTheRunAndSettlesOpenToolCalls(t *testing.T) {
	working := make(chan struct{})
	emitAfter := make(chan error, 1)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if err := emitAll(run, toolCall("c1"), toolCall("c2"), toolResult("c2", `"two"`), textDelta("r1", "partial")); err != nil {
			return err
		}
		close(working)
		<-ctx.Done()
		emitAfter <- run.Emit(toolResult("c1", `"late"`))
		return ctx.Err()
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	<-working
	if got, _, _ := l.core.Runs().Cancel("t", instanceai.ReasonUserCancelled); got != run {
		t.Fatalf("Cancel returned %v, want the run", got)
	}
	// The run is finished when Cancel returns, before its agent noticed.
	if a := l.core.Runs().Active("t"); a != nil {
		t.Fatalf("active run after cancel: %s", a.ID)
	}
	if err := run.Emit(toolCall("c3")); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("emit after the cancel returned: %v, want ErrRunFinished", err)
	}
	l.settle(run)
	// The agent's own late result is refused: the cancel settled the call.
	if err := <-emitAfter; err == nil {
		t.Fatal("the agent's emit after cancel was accepted")
	} else if !errors.Is(err, instanceai.ErrRunFinished) && !strings.Contains(err.Error(), "run cancelled: user_cancelled") {
		t.Fatalf("the agent's emit after cancel: %v", err)
	}
	l.expectLog("t", run.ID,
		"run-start @orch",
		"tool-call:c1 @orch",
		"tool-call:c2 @orch",
		`tool-result:c2="two" @orch`,
		"text-block:partial @orch",
		"tool-result:c1="+cancelledResult+" @orch",
		"run-finish:cancelled:user_cancelled @orch")
	// Cancel is idempotent: a second one finds nothing and writes nothing.
	if got, _, _ := l.core.Runs().Cancel("t", instanceai.ReasonUserCancelled); got != nil {
		t.Fatalf("second cancel returned %v", got)
	}
	l.sync("t")
	if n := len(l.rows("t")); n != 7 {
		t.Fatalf("a second cancel changed the log: %d rows", n)
	}
}

func TestShutdownCancelsRunsAsServiceShutdown(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if err := run.Emit(toolCall("c1")); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	waitUntil(t, "the tool call is stored", func() bool { l.sync("t"); return len(l.rows("t")) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := l.core.Runs().Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	l.settle(run)
	l.expectLog("t", run.ID, "run-start @orch", "tool-call:c1 @orch",
		"tool-result:c1="+cancelledResult+" @orch", "run-finish:cancelled:service_shutdown @orch")
}
