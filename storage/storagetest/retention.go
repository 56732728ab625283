package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
)

// RunRetention checks a store's retention.Store: an idle thread goes with
// every row it holds, a thread with work or recent activity stays, the
// transactions stay within their bounds, and a dry pass deletes nothing
// and counts what a real one deletes. No check depends on the time a step
// takes: the pruner's clock is moved, never waited for.
func RunRetention(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s instanceai.Store)
	}{
		{"IdleThreadGoesWithItsRows", testPruneIdleThread},
		{"RecentThreadsStay", testPruneKeepsRecent},
		{"ThreadsWithWorkStay", testPruneKeepsWork},
		{"BatchesAreBounded", testPruneBatches},
		{"DryRunDeletesNothing", testPruneDryRun},
		{"TrimKeepsAContiguousLog", testTrimEvents},
		{"CapKeepsTheNewestRuns", testCapRuns},
		{"CapWaitsForOpenRuns", testCapWaits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openMigrated(t, open)
			if _, ok := s.(retention.Store); !ok {
				t.Fatalf("%T does not implement retention.Store", s)
			}
			tc.fn(t, s)
		})
	}
}

// later is a clock a day ahead: with an idle age of an hour, every thread
// touched before the pass is idle.
func later() time.Time { return time.Now().Add(24 * time.Hour) }

// pruner returns a Pruner of s with the clock now, whose pauses do not
// wait but are counted in pauses.
func pruner(t *testing.T, s instanceai.Store, now func() time.Time, pauses *int, cfg retention.Config) *retention.Pruner {
	t.Helper()
	if cfg.IdleAfter == 0 {
		cfg.IdleAfter = time.Hour
	}
	cfg.Now = now
	cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		if pauses != nil {
			*pauses++
		}
		return ctx.Err()
	}
	p, err := retention.New(s.(retention.Store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func prune(t *testing.T, p *retention.Pruner, dry bool) retention.Report {
	t.Helper()
	r, err := p.Prune(context.Background(), dry)
	if err != nil {
		t.Fatalf("Prune(dry=%v): %v", dry, err)
	}
	if r.Skipped {
		t.Fatal("the pass was skipped: the prune lock is taken")
	}
	return r
}

// fillThread makes a thread with n events of run "run-<id>" (finished),
// two messages and an answered confirmation.
func fillThread(t *testing.T, s instanceai.Store, id string, n int) {
	t.Helper()
	ctx := context.Background()
	ensure(t, s, id, FixtureUser)
	run := "run-" + id
	events := append([]instanceai.Event{runEvent(instanceai.TypeRunStart, run, "")}, TypicalBatch(run, n-2)...)
	appendEvents(t, s, id, append(events, runEvent(instanceai.TypeRunFinish, run, ""))...)
	for i := range 2 {
		if err := s.AddMessage(ctx, instanceai.Message{ID: fmt.Sprintf("msg-%s-%d", id, i), ThreadID: id, RunID: run,
			Role: "user", Content: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	c := newConfirmation(id, "req-"+id, time.Time{})
	addConfirmation(t, s, c)
	if err := s.AnswerConfirmation(ctx, c.RequestID, instanceai.ConfirmationApproved, []byte(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
}

// gone checks that nothing of the thread can be read any more.
func gone(t *testing.T, s instanceai.Store, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetThread(ctx, id); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("GetThread(%s) after the prune: %v, want ErrNotFound", id, err)
	}
	if _, err := s.ReadAfter(ctx, id, 0, 0); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("ReadAfter(%s) after the prune: %v, want ErrNotFound", id, err)
	}
	if _, err := s.GetConfirmation(ctx, "req-"+id); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("GetConfirmation(req-%s) after the prune: %v, want ErrNotFound", id, err)
	}
	if msgs, err := s.ListMessages(ctx, id); len(msgs) > 0 {
		t.Errorf("ListMessages(%s) after the prune: %d messages (%v)", id, len(msgs), err)
	}
	// A message id is free again: the old row is gone, not hidden.
	ensure(t, s, id, FixtureUser)
	if err := s.AddMessage(ctx, instanceai.Message{ID: "msg-" + id + "-0", ThreadID: id, Role: "user", Content: "again"}); err != nil {
		t.Errorf("AddMessage with a pruned message's id: %v", err)
	}
	if err := s.DeleteThread(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// present checks that the thread is there with n events.
func present(t *testing.T, s instanceai.Store, id string, n int) {
	t.Helper()
	events, err := s.ReadAfter(context.Background(), id, 0, 0)
	if err != nil || len(events) != n {
		t.Errorf("thread %s after the prune: %d events (%v), want %d", id, len(events), err, n)
	}
}

// hasCheckpoints reports whether s keeps checkpoints (the SQL stores).
func hasCheckpoints(s instanceai.Store) bool {
	_, ok := s.(instanceai.CheckpointStore)
	return ok
}

func testPruneIdleThread(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	fillThread(t, s, "idle", 20)
	fillThread(t, s, "other", 5)
	want := retention.Counts{retention.Threads: 2, retention.Events: 25, retention.Messages: 4, retention.Confirmations: 2}
	if hasCheckpoints(s) {
		// A piece left by a writer that died: it belongs to the thread too.
		if err := s.(instanceai.CheckpointStore).AddCheckpoint(ctx, "idle", instanceai.Checkpoint{RunID: "run-idle", AgentID: "a",
			Kind: instanceai.TypeTextDelta, Text: "open text"}); err != nil {
			t.Fatal(err)
		}
		want[retention.Checkpoints] = 1
	}
	var forgotten []string
	p := pruner(t, s, later, nil, retention.Config{Forget: func(ids []string) { forgotten = append(forgotten, ids...) }})
	r := prune(t, p, false)
	if r.Threads != 2 || !sameCounts(r.Rows, want) {
		t.Errorf("pruned %d threads, rows %v; want 2, %v", r.Threads, r.Rows, want)
	}
	if len(forgotten) != 2 || forgotten[0] != "idle" || forgotten[1] != "other" {
		t.Errorf("Forget was told %v, want [idle other]", forgotten)
	}
	if r.Size.Events != 0 {
		t.Errorf("the log holds %d events after pruning everything", r.Size.Events)
	}
	gone(t, s, "idle")
	gone(t, s, "other")
	// A second pass finds nothing.
	if r := prune(t, p, false); r.Threads != 0 || r.Rows.Total() != 0 {
		t.Errorf("second pass: %d threads, %v", r.Threads, r.Rows)
	}
}

func sameCounts(a, b retention.Counts) bool {
	for _, k := range retention.Tables {
		if a[k] != b[k] {
			return false
		}
	}
	return len(a.Sorted()) <= len(retention.Tables) && len(b.Sorted()) <= len(retention.Tables)
}

func testPruneKeepsRecent(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	fillThread(t, s, "recent", 6)
	// A thread made long ago and never written to since is idle by its
	// creation time.
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "ancient", OwnerID: FixtureUser,
		CreatedAt: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	// A year-old thread renamed just now is not idle.
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "renamed", OwnerID: FixtureUser,
		CreatedAt: time.Now().Add(-365 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RenameThread(ctx, "renamed", "new title"); err != nil {
		t.Fatal(err)
	}
	p := pruner(t, s, time.Now, nil, retention.Config{IdleAfter: 30 * 24 * time.Hour})
	r := prune(t, p, false)
	if r.Threads != 1 || r.Rows[retention.Threads] != 1 || r.Rows[retention.Events] != 0 {
		t.Errorf("pruned %d threads, %v; want the ancient one alone", r.Threads, r.Rows)
	}
	if _, err := s.GetThread(ctx, "ancient"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("the ancient thread: %v", err)
	}
	present(t, s, "recent", 6)
	if _, err := s.GetThread(ctx, "renamed"); err != nil {
		t.Errorf("the renamed thread: %v", err)
	}
}

func testPruneKeepsWork(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	for _, id := range []string{"active", "suspended", "background", "pending", "plain"} {
		fillThread(t, s, id, 4)
	}
	run, err := s.ClaimThread(ctx, "active", "run-2", "inst", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	susp, err := s.ClaimThread(ctx, "suspended", "run-2", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SuspendRun(ctx, "suspended", "run-2", susp.Fence, true); err != nil {
		t.Fatal(err)
	}
	pendingReq := newConfirmation("suspended", "req-suspended-2", time.Time{})
	pendingReq.RunID = "run-2"
	addConfirmation(t, s, pendingReq)
	// A background agent working on after its run finished.
	if _, err := s.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "background", RunID: "run-background", AgentID: "bg"},
		"inst", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	// A pending confirmation without a claim row (its run's instance is
	// gone, the sweep has not settled it yet).
	addConfirmation(t, s, newConfirmation("pending", "req-pending-2", time.Time{}))

	p := pruner(t, s, later, nil, retention.Config{})
	r := prune(t, p, false)
	if r.Threads != 1 || r.Rows[retention.Threads] != 1 {
		t.Errorf("pruned %d threads, %v; want the plain one alone", r.Threads, r.Rows)
	}
	gone(t, s, "plain")
	for _, id := range []string{"active", "suspended", "background", "pending"} {
		present(t, s, id, 4)
	}
	// The dry pass agrees.
	if r := prune(t, p, true); r.Threads != 0 {
		t.Errorf("dry pass: %d threads to prune, want 0", r.Threads)
	}
	// Once the run is over, its thread goes.
	if err := s.ReleaseRun(ctx, "active", "run-2", run.Fence); err != nil {
		t.Fatal(err)
	}
	if r := prune(t, p, false); r.Threads != 1 {
		t.Errorf("after the run's release: %d threads pruned, want 1", r.Threads)
	}
	gone(t, s, "active")
}

// recorder is a retention.Store that records the size of each of its
// deleting transactions.
type recorder struct {
	retention.Store
	mu     sync.Mutex
	trims  []int64
	prunes [][]string
	rows   []int64
}

func (r *recorder) TrimEvents(ctx context.Context, id string, cutoff time.Time, n int) (int64, error) {
	got, err := r.Store.TrimEvents(ctx, id, cutoff, n)
	r.mu.Lock()
	r.trims = append(r.trims, got)
	r.rows = append(r.rows, got)
	r.mu.Unlock()
	return got, err
}

func (r *recorder) PruneThreads(ctx context.Context, ids []string, cutoff time.Time) ([]string, retention.Counts, error) {
	pruned, counts, err := r.Store.PruneThreads(ctx, ids, cutoff)
	r.mu.Lock()
	r.prunes = append(r.prunes, ids)
	r.rows = append(r.rows, counts.Total())
	r.mu.Unlock()
	return pruned, counts, err
}

func testPruneBatches(t *testing.T, s instanceai.Store) {
	// Seven small threads (4 events + 2 messages + 1 confirmation + the
	// thread = 8 rows each) and one of 45 events (49 rows).
	for i := range 7 {
		fillThread(t, s, fmt.Sprintf("small-%d", i), 4)
	}
	fillThread(t, s, "large", 45)
	rec := &recorder{Store: s.(retention.Store)}
	pauses := 0
	p, err := retention.New(rec, retention.Config{IdleAfter: time.Hour, Now: later, BatchThreads: 3, BatchRows: 20,
		Sleep: func(context.Context, time.Duration) error { pauses++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Prune(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Threads != 8 || r.Rows[retention.Events] != 7*4+45 {
		t.Errorf("pruned %d threads, %v; want 8 threads, %d events", r.Threads, r.Rows, 7*4+45)
	}
	for i, ids := range rec.prunes {
		if len(ids) > 3 {
			t.Errorf("transaction %d deleted %d threads, more than the batch of 3", i, len(ids))
		}
	}
	for i, n := range rec.rows {
		if n > 20 {
			t.Errorf("transaction %d deleted %d rows, more than the batch of 20", i, n)
		}
	}
	// The large thread's 45 events: two trims of 20, then 5 events with
	// its 4 other rows in one transaction.
	if len(rec.trims) != 2 || rec.trims[0] != 20 || rec.trims[1] != 20 {
		t.Errorf("trims %v, want [20 20]", rec.trims)
	}
	if r.MaxTransactionRows > 20 || r.Transactions != len(rec.rows) {
		t.Errorf("report: %d transactions, at most %d rows; recorded %v", r.Transactions, r.MaxTransactionRows, rec.rows)
	}
	if pauses != len(rec.rows)-1 {
		t.Errorf("%d pauses between %d transactions", pauses, len(rec.rows))
	}
}

func testPruneDryRun(t *testing.T, s instanceai.Store) {
	for i := range 5 {
		fillThread(t, s, fmt.Sprintf("t-%d", i), 3+i*10)
	}
	p := pruner(t, s, later, nil, retention.Config{BatchThreads: 2, BatchRows: 25})
	dry := prune(t, p, true)
	for i := range 5 {
		present(t, s, fmt.Sprintf("t-%d", i), 3+i*10)
	}
	if !dry.DryRun || dry.Threads != 5 {
		t.Fatalf("dry pass: %+v", dry)
	}
	real := prune(t, p, false)
	if real.Threads != dry.Threads || !sameCounts(real.Rows, dry.Rows) || real.Transactions != dry.Transactions ||
		real.MaxTransactionRows != dry.MaxTransactionRows {
		t.Errorf("dry pass counted %d threads, %v in %d transactions (at most %d rows); the real one deleted %d, %v in %d (at most %d)",
			dry.Threads, dry.Rows, dry.Transactions, dry.MaxTransactionRows, real.Threads, real.Rows, real.Transactions, real.MaxTransactionRows)
	}
	for i := range 5 {
		gone(t, s, fmt.Sprintf("t-%d", i))
	}
}

// testTrimEvents: a trim takes the oldest events of an idle thread only,
// and leaves a log that goes on where it stopped.
func testTrimEvents(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	rs := s.(retention.Store)
	fillThread(t, s, "t", 10)
	cutoff := later()
	if n, err := rs.TrimEvents(ctx, "t", time.Now().Add(-time.Hour), 4); err != nil || n != 0 {
		t.Fatalf("trim of a thread that is not idle: %d, %v", n, err)
	}
	if n, err := rs.TrimEvents(ctx, "t", cutoff, 4); err != nil || n != 4 {
		t.Fatalf("TrimEvents: %d, %v; want 4", n, err)
	}
	events, err := s.ReadAfter(ctx, "t", 0, 0)
	if err != nil || len(events) != 6 || events[0].Seq != 5 {
		t.Fatalf("after the trim: %d events from %v (%v), want 6 from seq 5", len(events), events, err)
	}
	if next, err := s.NextSeq(ctx, "t"); err != nil || next != 11 {
		t.Errorf("NextSeq after the trim: %d, %v", next, err)
	}
	if first, err := s.Append(ctx, "t", TypicalBatch("run-2", 1)); err != nil || first != 11 {
		t.Errorf("append after the trim: first seq %d, %v; want 11", first, err)
	}
	c, err := rs.IdleThreads(ctx, later(), "", 10)
	if err != nil || len(c) != 1 || c[0].Events != 7 {
		t.Errorf("IdleThreads after the trim: %+v, %v; want t with 7 events", c, err)
	}
}

// runsThread makes a thread of n runs of 5 events each (run-start, three
// blocks, run-finish; run i is "run-<i>", seqs 5i-4 to 5i), each with its
// user message, and an answered confirmation of run-1. The last run has
// no run-finish when open is set.
func runsThread(t *testing.T, s instanceai.Store, id string, n int, open bool) {
	t.Helper()
	ctx := context.Background()
	ensure(t, s, id, FixtureUser)
	for i := 1; i <= n; i++ {
		run := fmt.Sprintf("run-%d", i)
		events := []instanceai.Event{runEvent(instanceai.TypeRunStart, run, ""), runEvent(instanceai.TypeTextBlock, run, "a"),
			runEvent(instanceai.TypeTextBlock, run, "b"), runEvent(instanceai.TypeTextBlock, run, "c"),
			runEvent(instanceai.TypeRunFinish, run, "")}
		if open && i == n {
			events[4] = runEvent(instanceai.TypeTextBlock, run, "d")
		}
		appendEvents(t, s, id, events...)
		if err := s.AddMessage(ctx, instanceai.Message{ID: fmt.Sprintf("msg-%s-%d", id, i), ThreadID: id, RunID: run,
			Role: "user", Content: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	c := newConfirmation(id, "req-"+id, time.Time{})
	c.RunID = "run-1"
	addConfirmation(t, s, c)
	if err := s.AnswerConfirmation(ctx, c.RequestID, instanceai.ConfirmationDenied, []byte(`{"approved":false}`)); err != nil {
		t.Fatal(err)
	}
}

// testCapRuns: with two runs kept, a thread of four loses its first two
// runs whole (events, messages, confirmations), in transactions of at
// most the batch; what remains is the log from the third run's
// run-start, and a dry pass counts what the real one deletes.
func testCapRuns(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	if _, ok := s.(retention.Capper); !ok {
		t.Fatalf("%T does not implement retention.Capper", s)
	}
	runsThread(t, s, "t", 4, false)
	runsThread(t, s, "short", 2, false)
	// Idle age far off: only the cap deletes.
	p := pruner(t, s, time.Now, nil, retention.Config{IdleAfter: 1000 * time.Hour, KeepRuns: 2, BatchRows: 4})
	dry := prune(t, p, true)
	want := retention.Counts{retention.Events: 10, retention.Messages: 2, retention.Confirmations: 1}
	if !sameCounts(dry.Rows, want) || dry.Threads != 0 {
		t.Errorf("dry pass: %d threads, %v; want %v", dry.Threads, dry.Rows, want)
	}
	present(t, s, "t", 20)
	real := prune(t, p, false)
	if !sameCounts(real.Rows, want) || real.Transactions != dry.Transactions || real.MaxTransactionRows > 4 ||
		real.MaxTransactionRows != dry.MaxTransactionRows {
		t.Errorf("real pass: %v in %d transactions of at most %d rows; dry: %d of at most %d; want %v, at most 4",
			real.Rows, real.Transactions, real.MaxTransactionRows, dry.Transactions, dry.MaxTransactionRows, want)
	}
	events, err := s.ReadAfter(ctx, "t", 0, 0)
	if err != nil || len(events) != 10 || events[0].Seq != 11 || events[0].Event.Type != instanceai.TypeRunStart {
		t.Fatalf("after the cap: %d events from seq %d (%v), want 10 from the run-start at 11", len(events), events[0].Seq, err)
	}
	if next, err := s.NextSeq(ctx, "t"); err != nil || next != 21 {
		t.Errorf("NextSeq after the cap: %d, %v; want 21", next, err)
	}
	msgs, err := s.ListMessages(ctx, "t")
	if err != nil || len(msgs) != 2 || msgs[0].RunID != "run-3" {
		t.Errorf("messages after the cap: %+v, %v; want those of run-3 and run-4", msgs, err)
	}
	if _, err := s.GetConfirmation(ctx, "req-t"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("run-1's confirmation after the cap: %v", err)
	}
	present(t, s, "short", 10)
	if r := prune(t, p, false); r.Rows.Total() != 0 {
		t.Errorf("second pass deleted %v", r.Rows)
	}
}

// testCapWaits: a run before the cut that is not closed (no run-finish,
// a background agent at work) holds the whole cap of its thread back.
func testCapWaits(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	runsThread(t, s, "open", 3, true)
	// "open" has runs 1, 2 closed and 3 open: keeping one run cuts at
	// run-3, whose predecessors are closed, so it is capped; keeping
	// none is not a cap. "agent" has a background agent of run-1 at work.
	runsThread(t, s, "agent", 3, false)
	if _, err := s.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "agent", RunID: "run-1", AgentID: "bg"}, "inst", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	runsThread(t, s, "openold", 2, true)
	appendEvents(t, s, "openold", runEvent(instanceai.TypeRunStart, "run-3", ""), runEvent(instanceai.TypeRunFinish, "run-3", ""))
	p := pruner(t, s, time.Now, nil, retention.Config{IdleAfter: 1000 * time.Hour, KeepRuns: 1})
	prune(t, p, false)
	present(t, s, "agent", 15)
	present(t, s, "openold", 12) // run-2, before the cut, has no run-finish
	events, err := s.ReadAfter(ctx, "open", 0, 0)
	if err != nil || len(events) != 5 || events[0].Seq != 11 {
		t.Errorf("open: %d events (%v), want run-3's 5", len(events), err)
	}
	claims, err := s.RunAgents(ctx, "agent", "run-1")
	if err != nil || len(claims) != 1 {
		t.Fatalf("RunAgents: %v, %v", claims, err)
	}
	if err := s.ReleaseAgent(ctx, claims[0].AgentRef, claims[0].Fence); err != nil {
		t.Fatal(err)
	}
	prune(t, p, false)
	present(t, s, "agent", 5)
}
