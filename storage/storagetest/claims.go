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
	if row.RunID != "run_a" || row.Owner != "inst_a" || row.Suspended || time.Until(row.LeaseExpires) < lease/2 || row.Fence <= 0 {
		t.Fatalf("claimed row = %+v", row)
	}
	held, err := s.ClaimThread(ctx, "t1", "run_b", "inst_b", lease)
	if !errors.Is(err, instanceai.ErrRunActive) || held.RunID != "run_a" || held.Owner != "inst_a" || held.Fence != row.Fence {
		t.Fatalf("second claim: row %+v, err %v; want run_a's row (token %d) and ErrRunActive", held, err, row.Fence)
	}
	if _, err := s.ClaimThread(ctx, "missing", "run_x", "inst_a", lease); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("claim on a missing thread: err = %v, want ErrNotFound", err)
	}

	// A live lease cannot be taken; an ownerless row can, once.
	if fence, won, err := s.TakeRun(ctx, "t1", "run_a", "inst_b", lease); err != nil || won || fence != 0 {
		t.Fatalf("TakeRun of a live lease = %d, %v, %v; want 0, false", fence, won, err)
	}
	if err := s.SuspendRun(ctx, "t1", "run_a", row.Fence, true); err != nil {
		t.Fatal(err)
	}
	if err := s.DisownRun(ctx, "t1", "run_a", row.Fence+1); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("DisownRun with a token the row does not hold: %v, want ErrStaleFence", err)
	}
	if row, _ := s.ActiveRun(ctx, "t1"); row.Owner != "inst_a" || !row.Suspended {
		t.Fatalf("after suspend and a stranger's disown: %+v, want owner inst_a, suspended", row)
	}
	if err := s.DisownRun(ctx, "t1", "run_a", row.Fence); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ActiveRun(ctx, "t1"); got.Owner != "" || !got.Suspended || got.Fence != row.Fence {
		t.Fatalf("after disown: %+v, want no owner, suspended, token %d kept", got, row.Fence)
	}
	if _, won, err := s.TakeRun(ctx, "t1", "run_other", "inst_b", lease); err != nil || won {
		t.Fatalf("TakeRun naming another run = %v, %v; want false", won, err)
	}
	var wins sync.WaitGroup
	type take struct {
		fence int64
		won   bool
	}
	results := make([]take, 6)
	for i := range results {
		wins.Go(func() {
			fence, won, err := s.TakeRun(ctx, "t1", "run_a", "inst_"+string(rune('c'+i)), lease)
			if err != nil {
				t.Error(err)
			}
			results[i] = take{fence, won}
		})
	}
	wins.Wait()
	winners := slices.DeleteFunc(slices.Clone(results), func(r take) bool { return !r.won })
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent takes of a free run won, want exactly 1", len(winners), len(results))
	}
	if got, _ := s.ActiveRun(ctx, "t1"); got.Fence != winners[0].fence || got.Fence <= row.Fence {
		t.Fatalf("the row after the take holds token %d; the winner got %d, the first claim had %d", got.Fence, winners[0].fence, row.Fence)
	}

	// Renewal returns what an owner holds; expiry shows in ExpiredRuns.
	short, err := s.ClaimThread(ctx, "t2", "run_c", "inst_short", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := s.RenewRuns(ctx, "inst_short", 50*time.Millisecond)
	if err != nil || len(renewed) != 1 || renewed[0].ThreadID != "t2" || renewed[0].RunID != "run_c" ||
		renewed[0].Owner != "inst_short" || renewed[0].Fence != short.Fence {
		t.Fatalf("RenewRuns = %+v, %v; want t2's run_c with token %d", renewed, err, short.Fence)
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
	taken, won, err := s.TakeRun(ctx, "t2", "run_c", "inst_d", lease)
	if err != nil || !won || taken <= short.Fence {
		t.Fatalf("TakeRun of an expired lease = %d, %v, %v; want a token after %d", taken, won, err, short.Fence)
	}
	if refs, _ := s.RenewRuns(ctx, "inst_short", lease); len(refs) != 0 {
		t.Fatalf("the old owner still renews %v after the take", refs)
	}

	// Release frees the thread; releasing another run's id does nothing.
	if err := s.ReleaseRun(ctx, "t2", "run_other", taken); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("a release naming another run: %v, want ErrStaleFence", err)
	}
	if _, err := s.ActiveRun(ctx, "t2"); err != nil {
		t.Fatalf("a release naming another run removed the row: %v", err)
	}
	if err := s.ReleaseRun(ctx, "t2", "run_c", taken); err != nil {
		t.Fatal(err)
	}
	again, err := s.ClaimThread(ctx, "t2", "run_d", "inst_a", lease)
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if again.Fence <= taken {
		t.Fatalf("a claim after the release got token %d, not after %d", again.Fence, taken)
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

// testStaleHolderChangesNothing: once another instance took a run's row,
// the old holder's token moves nothing: not the suspension, not the owner,
// not the row itself; each refusal matches ErrStaleFence. A row's token
// survives a disown (the run is still its holder's until taken), and every
// claim, of either table, gets a token larger than all before it.
func testStaleHolderChangesNothing(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t", "owner")
	old, err := s.ClaimThread(ctx, "t", "r", "inst_a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fence, won, err := s.TakeRun(ctx, "t", "r", "inst_b", time.Minute)
	if err != nil || !won || fence <= old.Fence {
		t.Fatalf("TakeRun of an expired lease = %d, %v, %v; want a token after %d", fence, won, err, old.Fence)
	}
	want := instanceai.ActiveRun{ThreadID: "t", RunID: "r", Owner: "inst_b", Fence: fence}
	check := func(what string) {
		t.Helper()
		got, err := s.ActiveRun(ctx, "t")
		if err != nil || got.RunID != want.RunID || got.Owner != want.Owner || got.Suspended != want.Suspended || got.Fence != want.Fence {
			t.Fatalf("%s: row = %+v, %v; want %+v", what, got, err, want)
		}
	}
	for name, call := range map[string]func() error{
		"SuspendRun": func() error { return s.SuspendRun(ctx, "t", "r", old.Fence, true) },
		"DisownRun":  func() error { return s.DisownRun(ctx, "t", "r", old.Fence) },
		"ReleaseRun": func() error { return s.ReleaseRun(ctx, "t", "r", old.Fence) },
	} {
		err := call()
		var stale *instanceai.StaleFenceError
		if !errors.Is(err, instanceai.ErrStaleFence) || !errors.As(err, &stale) || !slices.Equal(stale.Tokens, []int64{old.Fence}) {
			t.Fatalf("%s with the stale token %d: %v, want a StaleFenceError naming it", name, old.Fence, err)
		}
		check(name + " with the stale token")
	}
	// The holder's own token works, and a disown keeps it.
	if err := s.SuspendRun(ctx, "t", "r", fence, true); err != nil {
		t.Fatal(err)
	}
	want.Suspended = true
	check("SuspendRun with the current token")
	if err := s.DisownRun(ctx, "t", "r", fence); err != nil {
		t.Fatal(err)
	}
	want.Owner = ""
	check("DisownRun with the current token")
	if err := s.ReleaseRun(ctx, "t", "r", fence); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseRun(ctx, "t", "r", fence); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("a second release: %v, want ErrStaleFence", err)
	}

	// Tokens only grow, across both tables.
	last := fence
	ref := instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "a"}
	next := func(what string, f int64, err error) {
		t.Helper()
		if err != nil || f <= last {
			t.Fatalf("%s: token %d, %v; want one after %d", what, f, err, last)
		}
		last = f
	}
	row, err := s.ClaimThread(ctx, "t", "r2", "inst_a", time.Minute)
	next("ClaimThread", row.Fence, err)
	f, err := s.ClaimAgent(ctx, ref, "inst_a", -time.Second, 0)
	next("ClaimAgent", f, err)
	f, err = s.ClaimAgent(ctx, ref, "inst_a", -time.Second, 0)
	next("ClaimAgent of a claimed agent", f, err)
	f, won, err = s.TakeAgent(ctx, ref, "inst_b", time.Minute)
	if !won {
		t.Fatal("TakeAgent of an expired row lost")
	}
	next("TakeAgent", f, err)
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
// several instances, released by its holder only, and gone with its
// thread.
func testAgentClaims(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t1", "owner")
	a1 := instanceai.AgentRef{ThreadID: "t1", RunID: "run_a", AgentID: "agent_1"}
	a2 := instanceai.AgentRef{ThreadID: "t1", RunID: "run_a", AgentID: "agent_2"}
	if _, err := s.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "missing", RunID: "r", AgentID: "a"}, "inst_a", time.Minute, 0); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("ClaimAgent on a missing thread: %v, want ErrNotFound", err)
	}
	// agent_1 is claimed with a lease that has already run out, agent_2
	// with a live one.
	f1, err := s.ClaimAgent(ctx, a1, "inst_a", -time.Second, 0)
	if err != nil || f1 <= 0 {
		t.Fatalf("ClaimAgent = %d, %v", f1, err)
	}
	f2, err := s.ClaimAgent(ctx, a2, "inst_a", time.Minute, 0)
	if err != nil || f2 <= f1 {
		t.Fatalf("ClaimAgent = %d, %v; want a token after %d", f2, err, f1)
	}
	expired, err := s.ExpiredAgents(ctx)
	if err != nil || len(expired) != 1 || expired[0].AgentRef != a1 || expired[0].Owner != "inst_a" ||
		!expired[0].LeaseExpires.Before(time.Now()) || expired[0].Fence != f1 {
		t.Fatalf("ExpiredAgents = %+v, %v; want agent_1 of inst_a, token %d", expired, err, f1)
	}
	if _, won, err := s.TakeAgent(ctx, a2, "inst_b", time.Minute); err != nil || won {
		t.Fatalf("TakeAgent of a live lease = %v, %v; want false", won, err)
	}
	// Of several instances that take the expired row at once, one wins.
	var wins atomic.Int32
	var taken atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			fence, won, err := s.TakeAgent(ctx, a1, fmt.Sprint("inst_", i), time.Minute)
			if err != nil {
				t.Errorf("TakeAgent: %v", err)
			}
			if won {
				wins.Add(1)
				taken.Store(fence)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || taken.Load() <= f2 {
		t.Fatalf("%d TakeAgent calls won an expired row (token %d), want 1 with a token after %d", wins.Load(), taken.Load(), f2)
	}
	// Renewal touches the owner's rows only, and gives them a live lease.
	if rows, err := s.RenewAgents(ctx, "inst_a", time.Minute, []int64{f1, f2}); err != nil || len(rows) != 1 || rows[0].AgentRef != a2 ||
		rows[0].Owner != "inst_a" || rows[0].Fence != f2 {
		t.Fatalf("RenewAgents of inst_a = %+v, %v; want agent_2 with token %d", rows, err, f2)
	}
	if expired, err := s.ExpiredAgents(ctx); err != nil || len(expired) != 0 {
		t.Fatalf("ExpiredAgents after the take and the renewal = %+v, %v; want none", expired, err)
	}
	// The old holder's token releases nothing; the taker's does.
	if err := s.ReleaseAgent(ctx, a1, f1); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("ReleaseAgent with the stale token: %v, want ErrStaleFence", err)
	}
	if err := s.ReleaseAgent(ctx, a1, taken.Load()); err != nil {
		t.Fatal(err)
	}
	// Whichever instance won agent_1, its row is gone now.
	if rows, err := s.RunAgents(ctx, "t1", "run_a"); err != nil || len(rows) != 1 || rows[0].AgentRef != a2 {
		t.Fatalf("RunAgents after the release = %+v, %v; want agent_2 alone", rows, err)
	}
	// The thread's deletion takes its rows.
	if _, err := s.ClaimAgent(ctx, a1, "inst_a", -time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if expired, err := s.ExpiredAgents(ctx); err != nil || len(expired) != 0 {
		t.Fatalf("ExpiredAgents after the thread's deletion = %+v, %v", expired, err)
	}
	if refs, err := s.RenewAgents(ctx, "inst_a", time.Minute, []int64{f2}); err != nil || len(refs) != 0 {
		t.Fatalf("RenewAgents after the thread's deletion = %+v, %v", refs, err)
	}
}

// testAgentRenewalByToken: an owner renews only the rows whose tokens it
// names, those of the agents it still runs. A row it holds under any
// other token (an agent that ended without letting go of it) keeps the
// lease it had, runs out, and is the sweep's to take; no token renews
// nothing. A long list renews every row it names.
func testAgentRenewalByToken(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t", "owner")
	working := instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "agent_working"}
	ended := instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "agent_ended"}
	fw, err := s.ClaimAgent(ctx, working, "inst_a", -time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	fe, err := s.ClaimAgent(ctx, ended, "inst_a", -time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rows, err := s.RenewAgents(ctx, "inst_a", time.Minute, nil); err != nil || len(rows) != 0 {
		t.Fatalf("RenewAgents without tokens = %+v, %v; want nothing renewed", rows, err)
	}
	if rows, err := s.RenewAgents(ctx, "inst_b", time.Minute, []int64{fw, fe}); err != nil || len(rows) != 0 {
		t.Fatalf("RenewAgents by another owner = %+v, %v; want nothing renewed", rows, err)
	}
	// Many tokens, the live one among them at the end: more than one
	// statement may carry them.
	var tokens []int64
	for i := range 1200 {
		tokens = append(tokens, fw+fe+int64(i)+1)
	}
	tokens = append(tokens, fw)
	rows, err := s.RenewAgents(ctx, "inst_a", time.Minute, tokens)
	if err != nil || len(rows) != 1 || rows[0].AgentRef != working || rows[0].Fence != fw || !rows[0].LeaseExpires.After(time.Now()) {
		t.Fatalf("RenewAgents of the working agent's token = %+v, %v; want its row alone, with a live lease", rows, err)
	}
	expired, err := s.ExpiredAgents(ctx)
	if err != nil || len(expired) != 1 || expired[0].AgentRef != ended || expired[0].Fence != fe {
		t.Fatalf("ExpiredAgents = %+v, %v; want the ended agent's row, left to run out", expired, err)
	}
	taken, won, err := s.TakeAgent(ctx, ended, "inst_b", time.Minute)
	if err != nil || !won || taken <= fe {
		t.Fatalf("TakeAgent of the ended agent's row = %d, %v, %v", taken, won, err)
	}
	// The old owner, naming its old token, renews nothing of it.
	if rows, err := s.RenewAgents(ctx, "inst_a", time.Minute, []int64{fe, fw}); err != nil || len(rows) != 1 || rows[0].AgentRef != working {
		t.Fatalf("RenewAgents after the take = %+v, %v; want the working agent's row alone", rows, err)
	}
}

// testAgentClaimsUnderRun: an agent claimed under its run's token is made
// only while the run's row holds that token, and RunAgents lists the rows
// of one run. Then a claim under the token races another instance's take
// of the run, as a spawn races a settlement: the take's listing of the
// run's agents, read once TakeRun returned, holds every agent whose claim
// succeeded, and no claim after the take succeeds.
func testAgentClaimsUnderRun(t *testing.T, s instanceai.Store) {
	checkAgentClaimsUnderRun(t, s, s, 20)
}

func checkAgentClaimsUnderRun(t *testing.T, s, taker instanceai.Store, rounds int) {
	ctx := context.Background()
	ensure(t, s, "t", "owner")
	row, err := s.ClaimThread(ctx, "t", "r", "inst_a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "agent_a"}
	fa, err := s.ClaimAgent(ctx, a, "inst_a", time.Minute, row.Fence)
	if err != nil || fa <= row.Fence {
		t.Fatalf("ClaimAgent under the run's token = %d, %v", fa, err)
	}
	other := instanceai.AgentRef{ThreadID: "t", RunID: "r_other", AgentID: "agent_o"}
	if _, err := s.ClaimAgent(ctx, other, "inst_a", time.Minute, row.Fence); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("ClaimAgent under the token of another run's row: %v, want ErrStaleFence", err)
	}
	if _, err := s.ClaimAgent(ctx, other, "inst_a", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	listed, err := s.RunAgents(ctx, "t", "r")
	if err != nil || len(listed) != 1 || listed[0].AgentRef != a || listed[0].Fence != fa || listed[0].Owner != "inst_a" {
		t.Fatalf("RunAgents = %+v, %v; want agent_a alone, token %d", listed, err, fa)
	}
	taken, won, err := taker.TakeRun(ctx, "t", "r", "inst_b", time.Minute)
	if err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	late := instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "agent_late"}
	if _, err := s.ClaimAgent(ctx, late, "inst_a", time.Minute, row.Fence); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("ClaimAgent under a taken run's token: %v, want ErrStaleFence", err)
	}
	if listed, err := s.RunAgents(ctx, "t", "r"); err != nil || len(listed) != 1 {
		t.Fatalf("RunAgents after a refused claim = %+v, %v; want agent_a alone", listed, err)
	}
	if _, err := taker.ClaimAgent(ctx, a, "inst_b", time.Minute, taken); err != nil {
		t.Fatalf("ClaimAgent under the taker's token: %v", err)
	}
	// Once the run's row is gone (its settlement released it), no agent is
	// claimed under its old token either.
	if err := taker.ReleaseRun(ctx, "t", "r", taken); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimAgent(ctx, late, "inst_a", time.Minute, row.Fence); !errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("ClaimAgent under the token of a released run: %v, want ErrStaleFence", err)
	}

	for round := range rounds {
		thread := fmt.Sprintf("spawn-race-%d", round)
		ensure(t, s, thread, "owner")
		row, err := s.ClaimThread(ctx, thread, "r", "inst_a", -time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var claimedAt []string
		var claimErr error
		var wg sync.WaitGroup
		// Bounded: where writers queue on one lock (SQLite), the claims
		// could keep the take waiting past its busy timeout.
		wg.Go(func() {
			for i := range 200 {
				ref := instanceai.AgentRef{ThreadID: thread, RunID: "r", AgentID: fmt.Sprintf("agent_%06d", i)}
				_, err := s.ClaimAgent(ctx, ref, "inst_a", time.Minute, row.Fence)
				if errors.Is(err, instanceai.ErrStaleFence) {
					return
				}
				if err != nil {
					claimErr = err
					return
				}
				claimedAt = append(claimedAt, ref.AgentID)
			}
		})
		if _, won, err := taker.TakeRun(ctx, thread, "r", "inst_b", time.Minute); err != nil || !won {
			t.Fatalf("round %d: TakeRun = %v, %v", round, won, err)
		}
		listed, err := taker.RunAgents(ctx, thread, "r")
		wg.Wait()
		if err != nil || claimErr != nil {
			t.Fatalf("round %d: RunAgents: %v; claims: %v", round, err, claimErr)
		}
		var ids []string
		for _, c := range listed {
			ids = append(ids, c.AgentID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, claimedAt) {
			t.Fatalf("round %d: the take listed %d agents, %v…; the %d claims that succeeded were %v…", round,
				len(ids), ids[:min(len(ids), 5)], len(claimedAt), claimedAt[:min(len(claimedAt), 5)])
		}
	}
}
