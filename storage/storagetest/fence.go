package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// appendFenced appends events of stream "f" (i0 on), events[i] under
// fences[i].
func appendFenced(s instanceai.FencedAppender, thread string, i0 int, fences ...int64) (int64, error) {
	return appendStream(s, thread, "f", i0, fences...)
}

// appendStream appends events of stream (i0 on), events[i] under
// fences[i].
func appendStream(s instanceai.FencedAppender, thread, stream string, i0 int, fences ...int64) (int64, error) {
	events := make([]instanceai.Event, len(fences))
	data := make([][]byte, len(fences))
	for i := range events {
		events[i] = textEvent(stream, i0+i)
		data[i], _ = json.Marshal(&events[i])
	}
	return s.AppendFenced(context.Background(), thread, events, data, fences)
}

// wantStale checks that err is a refusal for exactly the tokens stale.
func wantStale(t *testing.T, what string, err error, stale ...int64) {
	t.Helper()
	var se *instanceai.StaleFenceError
	if !errors.Is(err, instanceai.ErrStaleFence) || !errors.As(err, &se) || !slices.Equal(se.Tokens, stale) {
		t.Fatalf("%s: err = %v, want a StaleFenceError naming %v", what, err, stale)
	}
}

// wantNext checks the seq the thread's next append takes.
func wantNext(t *testing.T, s instanceai.Store, thread string, want int64) {
	t.Helper()
	if next, err := s.NextSeq(context.Background(), thread); err != nil || next != want {
		t.Fatalf("NextSeq(%q) = %d, %v; want %d", thread, next, err, want)
	}
}

// testFencedAppends: an append stores only while every token it carries
// is held by a claim row of its thread. A stale token (taken, released,
// or another thread's) stores nothing, takes no seq, and is named by the
// error, alone among the batch's tokens; a missing thread or another
// owner's is ErrNotFound whatever the tokens; 0 is no token.
func testFencedAppends(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	var fa instanceai.FencedAppender = s
	ensure(t, s, "t", "owner")
	ensure(t, s, "other", "owner")
	run, err := s.ClaimThread(ctx, "t", "r", "inst_a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if first, err := appendFenced(fa, "t", 0, run.Fence, 0, run.Fence); err != nil || first != 1 {
		t.Fatalf("append under the current token = %d, %v; want 1", first, err)
	}
	if first, err := appendFenced(fa, "t", 3, 0); err != nil || first != 4 {
		t.Fatalf("append with no token = %d, %v; want 4", first, err)
	}

	// Another instance takes the run: the old token stores nothing more.
	taken, won, err := s.TakeRun(ctx, "t", "r", "inst_b", time.Minute)
	if err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	_, err = appendFenced(fa, "t", 4, run.Fence)
	wantStale(t, "append under the taken token", err, run.Fence)
	_, err = appendFenced(fa, "t", 4, taken, 0, run.Fence, run.Fence)
	wantStale(t, "a batch mixing the current token and the taken one", err, run.Fence)
	wantNext(t, s, "t", 5)
	if first, err := appendFenced(fa, "t", 4, taken); err != nil || first != 5 {
		t.Fatalf("append under the taker's token = %d, %v; want 5, right after the last stored", first, err)
	}

	// A background agent's token is a claim of the thread as well.
	ref := instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "a"}
	agent, err := s.ClaimAgent(ctx, ref, "inst_a", -time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first, err := appendFenced(fa, "t", 5, agent, taken); err != nil || first != 6 {
		t.Fatalf("append under the agent's and the run's tokens = %d, %v; want 6", first, err)
	}
	agentTaken, won, err := s.TakeAgent(ctx, ref, "inst_b", time.Minute)
	if err != nil || !won {
		t.Fatalf("TakeAgent = %v, %v", won, err)
	}
	_, err = appendFenced(fa, "t", 7, agent)
	wantStale(t, "append under the agent's taken token", err, agent)
	// Each stale token is named once, in the order the batch gives them.
	_, err = appendFenced(fa, "t", 7, agent, agentTaken, run.Fence, agent, taken)
	wantStale(t, "a batch with two stale tokens", err, agent, run.Fence)
	if err := s.ReleaseAgent(ctx, ref, agentTaken); err != nil {
		t.Fatal(err)
	}
	_, err = appendFenced(fa, "t", 7, agentTaken)
	wantStale(t, "append under a released agent's token", err, agentTaken)

	// A token of another thread's claim is not one of this thread's.
	elsewhere, err := s.ClaimThread(ctx, "other", "r", "inst_a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = appendFenced(fa, "t", 7, elsewhere.Fence)
	wantStale(t, "append under another thread's token", err, elsewhere.Fence)

	// Released, the run's token is stale too.
	if err := s.ReleaseRun(ctx, "t", "r", taken); err != nil {
		t.Fatal(err)
	}
	_, err = appendFenced(fa, "t", 7, taken)
	wantStale(t, "append under a released run's token", err, taken)
	wantNext(t, s, "t", 8)
	checkStream(t, s, "t", 7)

	// A missing thread, or another owner's, is ErrNotFound first.
	if _, err := appendFenced(fa, "missing", 0, taken); !errors.Is(err, instanceai.ErrNotFound) || errors.Is(err, instanceai.ErrStaleFence) {
		t.Fatalf("append to a missing thread under a stale token: %v, want ErrNotFound", err)
	}
	ev := textEvent("f", 7)
	ev.UserID = "somebody else"
	data, _ := json.Marshal(&ev)
	if _, err := fa.AppendFenced(ctx, "t", []instanceai.Event{ev}, [][]byte{data}, []int64{taken}); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("append of another user's event under a stale token: %v, want ErrNotFound", err)
	}
	// One token per event, or nothing.
	if _, err := fa.AppendFenced(ctx, "t", []instanceai.Event{textEvent("f", 7)}, [][]byte{data}, nil); err == nil ||
		errors.Is(err, instanceai.ErrStaleFence) || errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("append with no token for its event: %v, want an error of its own", err)
	}
	wantNext(t, s, "t", 8)
	// With no events, it says where the next append starts.
	if next, err := fa.AppendFenced(ctx, "t", nil, nil, nil); err != nil || next != 8 {
		t.Fatalf("empty AppendFenced = %d, %v; want 8", next, err)
	}
}

// checkStream checks that the thread holds events 0..n-1 of stream "f" at
// seqs 1..n.
func checkStream(t *testing.T, s instanceai.Store, thread string, n int) {
	t.Helper()
	got, err := s.ReadAfter(context.Background(), thread, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("thread %q holds %d events, want %d", thread, len(got), n)
	}
	for i, se := range got {
		if want := fmt.Sprintf("f#%d", i); se.Seq != int64(i+1) || textOf(se.Event) != want {
			t.Fatalf("thread %q: seq %d holds %q, want seq %d holding %q", thread, se.Seq, textOf(se.Event), i+1, want)
		}
	}
}

// fenceRaceRounds is how many times testFencedAppendRacesTake races a
// take against appends.
const fenceRaceRounds = 10

func testFencedAppendRacesTake(t *testing.T, s instanceai.Store) {
	checkFencedAppendRacesTake(t, s, s, 1, fenceRaceRounds)
}

// contenders is how many appenders race a fenced one on its thread, under
// no token: each append under the token then waits for the thread's
// counter row, the wait during which PostgreSQL would not see a take that
// commits (see storage/postgres's appendFencedSQL).
const contenders = 3

// checkFencedAppendRacesTake races an appender on s, which appends batches
// of batch events under one token in a loop while others append under
// none, against another instance's take of the token's row on taker (s
// itself, or another pool on its database): once TakeRun has returned,
// every append under the old token that succeeded is in the log before
// the next seq read then, and no later one succeeds. Each round has a
// thread of its own. (One appender under the token, as the writer's
// drain of a thread is: a take waits for the append under the token in
// flight, and appends under it overlapping without end could keep it
// waiting on PostgreSQL, whose shared row locks let new holders in while
// a writer waits.)
func checkFencedAppendRacesTake(t *testing.T, s, taker instanceai.Store, batch, rounds int) {
	ctx := context.Background()
	var fa instanceai.FencedAppender = s
	for round := range rounds {
		thread := fmt.Sprintf("race-%d-%d", batch, round)
		ensure(t, s, thread, "owner")
		row, err := s.ClaimThread(ctx, thread, "r", "inst_a", -time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fences := make([]int64, batch)
		for i := range fences {
			fences[i] = row.Fence
		}
		var firsts []int64
		var fencedErr error
		landed := make(chan struct{})
		// stop ends every appender, whatever happens: none may outlive
		// the round (the one under the token otherwise stops at its
		// first refusal).
		var stop atomic.Bool
		var wg sync.WaitGroup
		halt := func() {
			stop.Store(true)
			wg.Wait()
		}
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				first, err := appendFenced(fa, thread, i*batch, fences...)
				if errors.Is(err, instanceai.ErrStaleFence) {
					return
				}
				if err != nil {
					fencedErr = err
					return
				}
				firsts = append(firsts, first)
				if i == 0 {
					close(landed)
				}
			}
		})
		unfenced := make([]int64, batch)
		var contending sync.WaitGroup
		for c := range contenders {
			contending.Go(func() {
				for i := 0; !stop.Load(); i++ {
					if _, err := appendStream(fa, thread, fmt.Sprint("c", c), i*batch, unfenced...); err != nil {
						t.Errorf("append under no token: %v", err)
						return
					}
				}
			})
		}
		fenced := make(chan struct{})
		go func() { wg.Wait(); close(fenced) }()
		stopAll := func() {
			halt()
			contending.Wait()
		}
		select {
		case <-landed:
		case <-fenced:
			stopAll()
			t.Fatalf("round %d: the appends under the token stopped before any landed: %v", round, fencedErr)
		}
		_, won, err := taker.TakeRun(ctx, thread, "r", "inst_b", time.Minute)
		if err != nil || !won {
			stopAll()
			t.Fatalf("round %d: TakeRun = %v, %v", round, won, err)
		}
		next, err := taker.NextSeq(ctx, thread)
		if err != nil {
			stopAll()
			t.Fatal(err)
		}
		<-fenced
		stopAll()
		if fencedErr != nil {
			t.Fatalf("round %d: append under the token before the take: %v", round, fencedErr)
		}
		for _, first := range firsts {
			if last := first + int64(batch) - 1; last >= next {
				t.Fatalf("round %d: an append under the taken token stored seqs %d..%d, yet the next seq once the take returned was %d",
					round, first, last, next)
			}
		}
		// The log agrees: nothing under the token at or past that seq.
		later, err := s.ReadAfter(ctx, thread, next-1, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, se := range later {
			if strings.HasPrefix(textOf(se.Event), "f#") {
				t.Fatalf("round %d: seq %d holds %q, stored under the taken token after the take returned (next seq then %d)",
					round, se.Seq, textOf(se.Event), next)
			}
		}
	}
}

// testDeleteDuringFencedAppends: a thread deleted while appends under its
// run's token go on (and others under none) is deleted, and the appends
// then fail as for a missing thread. (On PostgreSQL both take the claim
// rows and the thread's row: taken in different orders, they would
// deadlock, and the database would fail one of them.)
func testDeleteDuringFencedAppends(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	var fa instanceai.FencedAppender = s
	for round := range 5 {
		thread := fmt.Sprintf("doomed-%d", round)
		ensure(t, s, thread, "owner")
		row, err := s.ClaimThread(ctx, thread, "r", "inst_a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: thread, RunID: "r", AgentID: "a"}, "inst_a", time.Minute, 0); err != nil {
			t.Fatal(err)
		}
		landed := make(chan struct{})
		var once sync.Once
		var wg sync.WaitGroup
		errs := make([]error, 1+contenders)
		for i := range errs {
			fence := int64(0)
			if i == 0 {
				fence = row.Fence
			}
			wg.Go(func() {
				for n := 0; ; n++ {
					if _, err := appendStream(fa, thread, fmt.Sprint("a", i), n, fence); err != nil {
						errs[i] = err
						return
					}
					if i == 0 {
						once.Do(func() { close(landed) })
					}
				}
			})
		}
		<-landed
		delErr := s.DeleteThread(ctx, thread)
		if delErr != nil {
			// The appenders go on while the thread is there: stop them.
			t.Errorf("round %d: DeleteThread during appends: %v", round, delErr)
			if err := s.DeleteThread(ctx, thread); err != nil {
				t.Error(err)
			}
		}
		wg.Wait()
		if delErr != nil {
			t.FailNow()
		}
		for i, err := range errs {
			if !errors.Is(err, instanceai.ErrNotFound) {
				t.Fatalf("round %d: append %d after the thread's deletion: %v, want ErrNotFound", round, i, err)
			}
		}
	}
}

// testFencedConfirmations: a confirmation request stored under a token is
// stored only while a claim row of its thread holds the token; refused, it
// leaves nothing. The token is checked, not kept.
func testFencedConfirmations(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t", "owner")
	row, err := s.ClaimThread(ctx, "t", "r", "inst_a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	request := func(id string, fence int64) instanceai.Confirmation {
		c := newConfirmation("t", id, time.Time{})
		c.RunID, c.Fence = "r", fence
		return c
	}
	if err := s.AddConfirmation(ctx, request("c1", row.Fence)); err != nil {
		t.Fatalf("a request under the current token: %v", err)
	}
	if c, err := s.GetConfirmation(ctx, "c1"); err != nil || c.Fence != 0 {
		t.Fatalf("read back: %+v, %v; want it stored, token 0", c, err)
	}
	taken, won, err := s.TakeRun(ctx, "t", "r", "inst_b", time.Minute)
	if err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	wantStale(t, "a request under the taken token", s.AddConfirmation(ctx, request("c2", row.Fence)), row.Fence)
	if _, err := s.GetConfirmation(ctx, "c2"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the refused request: %v, want ErrNotFound", err)
	}
	if err := s.AddConfirmation(ctx, request("c2", taken)); err != nil {
		t.Fatalf("the request under the taker's token: %v", err)
	}
	if err := s.AddConfirmation(ctx, request("c3", 0)); err != nil {
		t.Fatalf("a request under no token: %v", err)
	}
	agent, err := s.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "a"}, "inst_a", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddConfirmation(ctx, request("c4", agent)); err != nil {
		t.Fatalf("a request under a background agent's token: %v", err)
	}
	pending, err := s.PendingConfirmations(ctx, "t")
	if err != nil || !slices.Equal(requestIDs(pending), []string{"c1", "c2", "c3", "c4"}) {
		t.Fatalf("pending = %v, %v; want c1..c4", requestIDs(pending), err)
	}
	missing := request("c5", row.Fence)
	missing.ThreadID = "missing"
	if err := s.AddConfirmation(ctx, missing); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("a request under a stale token in a missing thread: %v, want ErrNotFound", err)
	}
}
