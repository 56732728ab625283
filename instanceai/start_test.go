package instanceai_test

import (
	"context"
	"errors"
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
		_ = core.Runs.Shutdown(sctx)
		_ = core.Writer.Close(sctx)
	})
	started := make(chan error, 1)
	var run *instanceai.Run
	go func() {
		var err error
		run, err = core.Runs.Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "work"})
		started <- err
	}()
	<-claims.claiming
	if r, _, _ := core.Runs.Cancel("t", instanceai.ReasonUserCancelled); r == nil {
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
	if n, err := l.core.Runs.SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired = %d, %v; want the run settled", n, err)
	}
	l.sync("never")
	l.expectLog("never", "run_never", "run-start @orch", "run-finish:interrupted:crash_interrupted @orch")
	if _, err := store.ActiveRun(ctx, "never"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the claim: %v, want released", err)
	}
}
