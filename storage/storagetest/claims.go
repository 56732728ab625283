package storagetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// testClaims checks the active-run table: one row per thread, conditional
// takes, renewals by owner, expiry, suspension and release.
func testClaims(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t1", "owner")
	ensure(t, s, "t2", "owner")
	const lease = time.Minute

	if _, err := s.ActiveRun(ctx, "t1"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("ActiveRun of a thread without a run: err = %v, want ErrNotFound", err)
	}
	row, err := s.ClaimThread(ctx, "t1", "run_a", "inst_a", lease)
	if err != nil {
		t.Fatalf("ClaimThread: %v", err)
	}
	if row.RunID != "run_a" || row.Owner != "inst_a" || row.Suspended || time.Until(row.LeaseExpires) < lease/2 {
		t.Fatalf("claimed row = %+v", row)
	}
	held, err := s.ClaimThread(ctx, "t1", "run_b", "inst_b", lease)
	if !errors.Is(err, instanceai.ErrRunActive) || held.RunID != "run_a" || held.Owner != "inst_a" {
		t.Fatalf("second claim: row %+v, err %v; want run_a's row and ErrRunActive", held, err)
	}
	if _, err := s.ClaimThread(ctx, "missing", "run_x", "inst_a", lease); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("claim on a missing thread: err = %v, want ErrNotFound", err)
	}

	// A live lease cannot be taken; an ownerless row can, once.
	if won, err := s.TakeRun(ctx, "t1", "run_a", "inst_b", lease); err != nil || won {
		t.Fatalf("TakeRun of a live lease = %v, %v; want false", won, err)
	}
	if err := s.SuspendRun(ctx, "t1", "run_a", true); err != nil {
		t.Fatal(err)
	}
	if err := s.DisownRun(ctx, "t1", "run_a", "inst_b"); err != nil {
		t.Fatal(err)
	}
	if row, _ := s.ActiveRun(ctx, "t1"); row.Owner != "inst_a" || !row.Suspended {
		t.Fatalf("after suspend and a stranger's disown: %+v, want owner inst_a, suspended", row)
	}
	if err := s.DisownRun(ctx, "t1", "run_a", "inst_a"); err != nil {
		t.Fatal(err)
	}
	if row, _ := s.ActiveRun(ctx, "t1"); row.Owner != "" || !row.Suspended {
		t.Fatalf("after disown: %+v, want no owner, suspended", row)
	}
	if won, err := s.TakeRun(ctx, "t1", "run_other", "inst_b", lease); err != nil || won {
		t.Fatalf("TakeRun naming another run = %v, %v; want false", won, err)
	}
	var wins sync.WaitGroup
	results := make([]bool, 6)
	for i := range results {
		wins.Go(func() {
			won, err := s.TakeRun(ctx, "t1", "run_a", "inst_"+string(rune('c'+i)), lease)
			if err != nil {
				t.Error(err)
			}
			results[i] = won
		})
	}
	wins.Wait()
	if n := len(slices.DeleteFunc(slices.Clone(results), func(b bool) bool { return !b })); n != 1 {
		t.Fatalf("%d of %d concurrent takes of a free run won, want exactly 1", n, len(results))
	}

	// Renewal returns what an owner holds; expiry shows in ExpiredRuns.
	if _, err := s.ClaimThread(ctx, "t2", "run_c", "inst_short", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	refs, err := s.RenewRuns(ctx, "inst_short", 50*time.Millisecond)
	if err != nil || !slices.Equal(refs, []instanceai.RunRef{{ThreadID: "t2", RunID: "run_c"}}) {
		t.Fatalf("RenewRuns = %v, %v", refs, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		expired, err := s.ExpiredRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(expired, func(a instanceai.ActiveRun) bool { return a.RunID == "run_c" }) {
			if slices.ContainsFunc(expired, func(a instanceai.ActiveRun) bool { return a.ThreadID == "t1" }) {
				t.Fatalf("ExpiredRuns lists t1, whose lease is live: %+v", expired)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run_c's 50 ms lease never shows as expired: %+v", expired)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if won, err := s.TakeRun(ctx, "t2", "run_c", "inst_d", lease); err != nil || !won {
		t.Fatalf("TakeRun of an expired lease = %v, %v; want true", won, err)
	}
	if refs, _ := s.RenewRuns(ctx, "inst_short", lease); len(refs) != 0 {
		t.Fatalf("the old owner still renews %v after the take", refs)
	}

	// Release frees the thread; releasing another run's id does nothing.
	if err := s.ReleaseRun(ctx, "t2", "run_other"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActiveRun(ctx, "t2"); err != nil {
		t.Fatalf("a release naming another run removed the row: %v", err)
	}
	if err := s.ReleaseRun(ctx, "t2", "run_c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimThread(ctx, "t2", "run_d", "inst_a", lease); err != nil {
		t.Fatalf("claim after release: %v", err)
	}

	// Deleting a thread takes its row with it.
	if err := s.DeleteThread(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	ensure(t, s, "t2", "owner")
	if _, err := s.ActiveRun(ctx, "t2"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("a re-created thread inherited the deleted one's active run: err = %v", err)
	}
}

// checkClaimsAcrossStores: claims racing from two pools on one database
// give the thread to exactly one run.
func checkClaimsAcrossStores(t *testing.T, stores []instanceai.Store, thread string) {
	ctx := context.Background()
	var wg sync.WaitGroup
	const perStore = 8
	won := make([]bool, len(stores)*perStore)
	for i := range won {
		wg.Go(func() {
			s := stores[i%len(stores)]
			_, err := s.ClaimThread(ctx, thread, "run_"+string(rune('a'+i)), "inst", time.Minute)
			switch {
			case err == nil:
				won[i] = true
			case !errors.Is(err, instanceai.ErrRunActive):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(slices.DeleteFunc(won, func(b bool) bool { return !b })); n != 1 {
		t.Fatalf("%d concurrent claims from two pools won the thread, want exactly 1", n)
	}
}

// testAgentClaims: a background agent's row is claimed, renewed by its
// owner only, listed once its lease ran out, taken by exactly one of
// several instances, released, and gone with its thread.
func testAgentClaims(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t1", "owner")
	a1 := instanceai.AgentRef{ThreadID: "t1", RunID: "run_a", AgentID: "agent_1"}
	a2 := instanceai.AgentRef{ThreadID: "t1", RunID: "run_a", AgentID: "agent_2"}
	if err := s.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "missing", RunID: "r", AgentID: "a"}, "inst_a", time.Minute); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("ClaimAgent on a missing thread: %v, want ErrNotFound", err)
	}
	// agent_1 is claimed with a lease that has already run out, agent_2
	// with a live one.
	if err := s.ClaimAgent(ctx, a1, "inst_a", -time.Second); err != nil {
		t.Fatalf("ClaimAgent: %v", err)
	}
	if err := s.ClaimAgent(ctx, a2, "inst_a", time.Minute); err != nil {
		t.Fatalf("ClaimAgent: %v", err)
	}
	expired, err := s.ExpiredAgents(ctx)
	if err != nil || len(expired) != 1 || expired[0].AgentRef != a1 || expired[0].Owner != "inst_a" || !expired[0].LeaseExpires.Before(time.Now()) {
		t.Fatalf("ExpiredAgents = %+v, %v; want agent_1 of inst_a", expired, err)
	}
	if won, err := s.TakeAgent(ctx, a2, "inst_b", time.Minute); err != nil || won {
		t.Fatalf("TakeAgent of a live lease = %v, %v; want false", won, err)
	}
	// Of several instances that take the expired row at once, one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			won, err := s.TakeAgent(ctx, a1, fmt.Sprint("inst_", i), time.Minute)
			if err != nil {
				t.Errorf("TakeAgent: %v", err)
			}
			if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d TakeAgent calls won an expired row, want 1", wins.Load())
	}
	// Renewal touches the owner's rows only, and gives them a live lease.
	if refs, err := s.RenewAgents(ctx, "inst_a", time.Minute); err != nil || len(refs) != 1 || refs[0] != a2 {
		t.Fatalf("RenewAgents of inst_a = %+v, %v; want agent_2", refs, err)
	}
	if expired, err := s.ExpiredAgents(ctx); err != nil || len(expired) != 0 {
		t.Fatalf("ExpiredAgents after the take and the renewal = %+v, %v; want none", expired, err)
	}
	if err := s.ReleaseAgent(ctx, a1); err != nil {
		t.Fatal(err)
	}
	// Whichever instance won agent_1, its row is gone now.
	for i := range 4 {
		if refs, err := s.RenewAgents(ctx, fmt.Sprint("inst_", i), time.Minute); err != nil || len(refs) != 0 {
			t.Fatalf("RenewAgents of inst_%d after release = %+v, %v", i, refs, err)
		}
	}
	// The thread's deletion takes its rows.
	if err := s.ClaimAgent(ctx, a1, "inst_a", -time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if expired, err := s.ExpiredAgents(ctx); err != nil || len(expired) != 0 {
		t.Fatalf("ExpiredAgents after the thread's deletion = %+v, %v", expired, err)
	}
	if refs, err := s.RenewAgents(ctx, "inst_a", time.Minute); err != nil || len(refs) != 0 {
		t.Fatalf("RenewAgents after the thread's deletion = %+v, %v", refs, err)
	}
}
