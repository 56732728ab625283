// Package storagetest is the contract every storage backend passes: one
// suite, run by each backend's own tests, so that the core can rely on the
// same behaviour from SQLite, PostgreSQL and memory alike.
package storagetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// Opener returns a fresh, empty store. It may register cleanups on t (to
// drop a schema, say); the suite migrates the store and closes it.
type Opener func(t *testing.T) instanceai.Store

// Run runs the contract suite. Subtests run in parallel, each on its own
// store from open. The store must keep at least 10,000 events per thread
// (a bounded backend is opened with larger bounds for the suite).
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s instanceai.Store)
	}{
		{"MigrateIsIdempotent", testMigrateIdempotent},
		{"ConcurrentAppendersGetContiguousSeqs", testConcurrentAppenders},
		{"ThreadsHaveIndependentSeqs", testIndependentThreads},
		{"ReadAfterEveryCursor", testReadAfterEveryCursor},
		{"ReadRowsAfterMatchesReadAfter", testReadRowsAfter},
		{"PartReader", testPartReader},
		{"PageReader", testPageReader},
		{"HeadsOfManyThreads", testHeads},
		{"Instances", testInstances},
		{"CancelRequests", testCancelRequests},
		{"DisownedRowsTheSweepTakes", testDisownedRowsTheSweepTakes},
		{"NextSeqIsMaxPlusOne", testNextSeq},
		{"EmptyAppend", testEmptyAppend},
		{"LargeBatch", testLargeBatch},
		{"RoundTripIsByteIdentical", testRoundTrip},
		{"AppendCopiesEvents", testAppendCopies},
		{"Threads", testThreads},
		{"ListThreadsPages", testListThreadsPages},
		{"ArchivedThreads", testArchivedThreads},
		{"NotFound", testNotFound},
		{"DeleteCascadesToLog", testDeleteCascades},
		{"AppendChecksOwner", testAppendChecksOwner},
		{"CancelledContextWritesNothing", testCancelledContext},
		{"Messages", testMessages},
		{"MessageAttachments", testMessageAttachments},
		{"Confirmations", testConfirmations},
		{"ConcurrentAnswersOneWins", testConcurrentAnswers},
		{"UnfinishedRuns", testUnfinishedRuns},
		{"RunEvents", testRunEvents},
		{"DeleteCascadesToRecords", testDeleteCascadesToRecords},
		{"AppendEncoded", testAppendEncoded},
		{"Claims", testClaims},
		{"StaleHolderChangesNothing", testStaleHolderChangesNothing},
		{"FencedAppends", testFencedAppends},
		{"FencedAppendRacesTake", testFencedAppendRacesTake},
		{"DeleteDuringFencedAppends", testDeleteDuringFencedAppends},
		{"FencedConfirmations", testFencedConfirmations},
		{"AgentClaims", testAgentClaims},
		{"AgentClaimsUnderRun", testAgentClaimsUnderRun},
		{"AgentRenewalByToken", testAgentRenewalByToken},
		{"ReadersSeeCommitOrder", testReadersSeeCommitOrder},
		{"ConcurrentAppendsToDifferentThreads", testConcurrentThreads},
		{"CloseIsIdempotent", testCloseIdempotent},
		{"CallsAfterCloseFail", testCallsAfterClose},
		{"CloseDuringCalls", testCloseDuringCalls},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, openMigrated(t, open))
		})
	}
}

// migrator is what openMigrated needs of a store.
type migrator interface {
	Migrate(ctx context.Context) error
	Close() error
}

// openMigrated opens a store, migrates it and closes it after the test.
func openMigrated[S migrator](t *testing.T, open func(t *testing.T) S) S {
	t.Helper()
	s := open(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// RunTwoPools checks that two Store instances on the same database (two
// connection pools, as two server processes would have) can append to the
// same thread at once and still produce one contiguous log without
// duplicates. openA and openB must return stores on the same database; the
// suite migrates both (concurrently, which is part of the test) and closes
// them.
func RunTwoPools(t *testing.T, openA, openB Opener) {
	ctx := context.Background()
	a, b := openA(t), openB(t)
	for _, s := range []instanceai.Store{a, b} {
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []instanceai.Store{a, b} {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}

	// Both create the thread at once: exactly one of them made it.
	var created [2]bool
	for i, s := range []instanceai.Store{a, b} {
		wg.Go(func() {
			_, created[i], errs[i] = s.EnsureThread(ctx, instanceai.Thread{ID: "shared", OwnerID: "owner"})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent EnsureThread: %v", err)
	}
	if created[0] == created[1] {
		t.Fatalf("EnsureThread created = %v on the two stores, want exactly one true", created)
	}

	checkConcurrentAppends(t, []instanceai.Store{a, b}, "shared", 8, 40, 20)
	// Answers racing from both pools: still exactly one wins.
	checkConcurrentAnswers(t, []instanceai.Store{a, b}, "shared", 3, 8)

	checkClaimsAcrossStores(t, []instanceai.Store{a, b}, "shared")
	checkAgentClaimsUnderRun(t, a, b, 20)

	// What one pool deletes, the other no longer sees.
	if err := a.DeleteThread(ctx, "shared"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	if _, err := b.ReadAfter(ctx, "shared", 0, 0); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("ReadAfter on the other store after delete: err = %v, want ErrNotFound", err)
	}
}

// RunFenceRaceAcrossPools races appends under a run's token on one store
// against another store's take of the run, both on one database, as two
// instances would (see checkFencedAppendRacesTake); the suite migrates and
// closes both. It is for PostgreSQL: SQLite serialises the processes that
// share a file on the file's lock, and one that appends without a pause
// can keep another's take waiting past its busy timeout, which says
// nothing about fencing.
func RunFenceRaceAcrossPools(t *testing.T, openA, openB Opener) {
	a := openMigrated(t, openA)
	b := openMigrated(t, openB)
	checkFencedAppendRacesTake(t, a, b, 1, fenceRaceRounds)
}

func testMigrateIdempotent(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t1", "owner")
	appendTexts(t, s, "t1", 0, 3)
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}
	// Migrating again neither fails nor touches the data.
	checkTexts(t, s, "t1", 0, 1, 3)
}

// ensure creates a thread and fails the test unless it was new.
func ensure(t *testing.T, s instanceai.Store, id, owner string) instanceai.Thread {
	t.Helper()
	th, created, err := s.EnsureThread(context.Background(), instanceai.Thread{ID: id, OwnerID: owner})
	if err != nil {
		t.Fatalf("EnsureThread(%q): %v", id, err)
	}
	if !created {
		t.Fatalf("EnsureThread(%q): created = false for a new thread", id)
	}
	return th
}

// textEvent is event number i of a test stream, recognisable on read.
func textEvent(stream string, i int) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "run-" + stream,
		AgentID: "agent-" + stream, Payload: &instanceai.Text{Text: stream + "#" + strconv.Itoa(i)}}
}

// appendTexts appends events i0..i0+n-1 of stream "s" in one batch and
// returns the first seq.
func appendTexts(t *testing.T, s instanceai.Store, thread string, i0, n int) int64 {
	t.Helper()
	batch := make([]instanceai.Event, n)
	for k := range batch {
		batch[k] = textEvent("s", i0+k)
	}
	first, err := s.Append(context.Background(), thread, batch)
	if err != nil {
		t.Fatalf("Append(%q, %d events): %v", thread, n, err)
	}
	return first
}

// checkTexts reads the whole thread and checks that it holds events
// i0..i0+n-1 of stream "s" at seqs seq0..seq0+n-1.
func checkTexts(t *testing.T, s instanceai.Store, thread string, i0 int, seq0 int64, n int) {
	t.Helper()
	got, err := s.ReadAfter(context.Background(), thread, 0, 0)
	if err != nil {
		t.Fatalf("ReadAfter(%q): %v", thread, err)
	}
	if len(got) != n {
		t.Fatalf("thread %q holds %d events, want %d", thread, len(got), n)
	}
	for k, se := range got {
		if want := seq0 + int64(k); se.Seq != want {
			t.Fatalf("thread %q event %d has seq %d, want %d", thread, k, se.Seq, want)
		}
		if want := "s#" + strconv.Itoa(i0+k); textOf(se.Event) != want {
			t.Fatalf("thread %q seq %d holds %q, want %q", thread, se.Seq, textOf(se.Event), want)
		}
	}
}

func textOf(e instanceai.Event) string {
	if p, ok := e.Payload.(*instanceai.Text); ok {
		return p.Text
	}
	return fmt.Sprintf("<%T>", e.Payload)
}

func testConcurrentAppenders(t *testing.T, s instanceai.Store) {
	ensure(t, s, "busy", "owner")
	checkConcurrentAppends(t, []instanceai.Store{s}, "busy", 16, 50, 20)
}

// checkConcurrentAppends runs workers goroutines (spread over stores), each
// appending batches batches of 1..maxBatch events, then checks that the log
// is exactly seqs 1..N, that every batch got the seqs Append reported, and
// that each worker's events appear in its own order.
func checkConcurrentAppends(t *testing.T, stores []instanceai.Store, thread string, workers, batches, maxBatch int) {
	t.Helper()
	ctx := context.Background()
	type batch struct {
		first  int64
		i0, n  int
		worker int
	}
	results := make([][]batch, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			stream := "w" + strconv.Itoa(w)
			next := 0
			for range batches {
				n := 1 + rng.IntN(maxBatch)
				events := make([]instanceai.Event, n)
				for k := range events {
					events[k] = textEvent(stream, next+k)
				}
				first, err := s.Append(ctx, thread, events)
				if err != nil {
					errs[w] = fmt.Errorf("worker %d: Append: %w", w, err)
					return
				}
				results[w] = append(results[w], batch{first: first, i0: next, n: n, worker: w})
				next += n
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	total := 0
	for _, rs := range results {
		for _, r := range rs {
			total += r.n
		}
	}
	got, err := stores[0].ReadAfter(ctx, thread, 0, 0)
	if err != nil {
		t.Fatalf("ReadAfter: %v", err)
	}
	if len(got) != total {
		t.Fatalf("log holds %d events, appended %d", len(got), total)
	}
	for k, se := range got {
		if se.Seq != int64(k+1) {
			t.Fatalf("event %d has seq %d: seqs are not 1..%d", k, se.Seq, total)
		}
	}
	// Every batch sits where Append said, intact.
	for _, rs := range results {
		for _, r := range rs {
			if r.first < 1 || r.first+int64(r.n)-1 > int64(total) {
				t.Fatalf("worker %d: Append returned first seq %d for %d events, log has %d", r.worker, r.first, r.n, total)
			}
			for k := range r.n {
				se := got[r.first-1+int64(k)]
				if want := fmt.Sprintf("w%d#%d", r.worker, r.i0+k); textOf(se.Event) != want {
					t.Fatalf("seq %d holds %q, want %q (worker %d's batch starting at %d)", se.Seq, textOf(se.Event), want, r.worker, r.first)
				}
			}
		}
	}
	// Each worker's events in its own order (implied by the above when
	// first seqs increase per worker; checked directly for clarity).
	lastOf := map[string]int{}
	for _, se := range got {
		stream, num, _ := strings.Cut(textOf(se.Event), "#")
		i, _ := strconv.Atoi(num)
		if prev, seen := lastOf[stream]; seen && i != prev+1 {
			t.Fatalf("stream %s: event %d follows %d", stream, i, prev)
		}
		lastOf[stream] = i
	}
	next, err := stores[0].NextSeq(ctx, thread)
	if err != nil || next != int64(total)+1 {
		t.Fatalf("NextSeq = %d, %v; want %d", next, err, total+1)
	}
}

func testIndependentThreads(t *testing.T, s instanceai.Store) {
	ensure(t, s, "a", "owner")
	ensure(t, s, "b", "owner")
	// Interleaved, each thread counts on its own.
	for i := range 5 {
		if first := appendTexts(t, s, "a", 2*i, 2); first != int64(2*i+1) {
			t.Fatalf("thread a batch %d: first seq %d, want %d", i, first, 2*i+1)
		}
		if first := appendTexts(t, s, "b", i, 1); first != int64(i+1) {
			t.Fatalf("thread b batch %d: first seq %d, want %d", i, first, i+1)
		}
	}
	checkTexts(t, s, "a", 0, 1, 10)
	checkTexts(t, s, "b", 0, 1, 5)
}

// testReadRowsAfter: reading rows undecoded (instanceai.RowReader)
// returns, for every cursor and limit, the seqs, types, run ids and bytes
// ReadAfter returns.
func testReadRowsAfter(t *testing.T, s instanceai.Store) {
	var rr instanceai.RowReader = s
	ctx := context.Background()
	ensure(t, s, "rows", "owner")
	batch := TypicalBatch("run-rows", 60)
	for len(batch) > 0 { // in uneven appends, so that pages cross them
		n := min(len(batch), 7)
		if _, err := s.Append(ctx, "rows", batch[:n]); err != nil {
			t.Fatalf("Append: %v", err)
		}
		batch = batch[n:]
	}
	types := map[instanceai.EventType]bool{}
	for after := int64(-1); after <= 62; after += 3 {
		for _, limit := range []int{0, 1, 8, 100} {
			want, err := s.ReadAfter(ctx, "rows", after, limit)
			if err != nil {
				t.Fatalf("ReadAfter(%d, %d): %v", after, limit, err)
			}
			for _, maxBytes := range []int{0, 1, 150, 600, 1 << 20} {
				checkRowsPage(t, rr, "rows", after, limit, maxBytes, want, types)
			}
		}
	}
	if len(types) < 3 {
		t.Fatalf("the batch covered only the types %v", types)
	}
}

// checkRowsPage checks one ReadRowsAfter page against ReadAfter's (want):
// the same rows, cut at the byte budget as RowReader says, recording the
// types it met.
func checkRowsPage(t *testing.T, rr instanceai.RowReader, thread string, after int64, limit, maxBytes int, want []instanceai.StoredEvent, types map[instanceai.EventType]bool) {
	t.Helper()
	got, err := rr.ReadRowsAfter(context.Background(), thread, after, limit, maxBytes)
	if err != nil {
		t.Fatalf("ReadRowsAfter(%d, %d, %d): %v", after, limit, maxBytes, err)
	}
	// The budget keeps the shortest prefix whose bytes reach it.
	if maxBytes > 0 {
		total := 0
		for i := range want {
			total += len(want[i].Data)
			if total >= maxBytes {
				want = want[:i+1]
				break
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ReadRowsAfter(%d, %d, %d) returned %d rows, want %d", after, limit, maxBytes, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Type != w.Event.Type || g.RunID != w.Event.RunID || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("ReadRowsAfter(%d, %d, %d)[%d] = seq %d %s run %q %s, ReadAfter seq %d %s run %q %s",
				after, limit, maxBytes, i, g.Seq, g.Type, g.RunID, g.Data, w.Seq, w.Event.Type, w.Event.RunID, w.Data)
		}
		types[g.Type] = true
	}
}

func testReadAfterEveryCursor(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "r", "owner")
	const n = 37
	i := 0
	for _, size := range []int{1, 5, 10, 21} {
		appendTexts(t, s, "r", i, size)
		i += size
	}
	check := func(after int64, limit int) {
		t.Helper()
		got, err := s.ReadAfter(ctx, "r", after, limit)
		if err != nil {
			t.Fatalf("ReadAfter(%d, %d): %v", after, limit, err)
		}
		from := max(after, 0) + 1
		want := max(0, n-int(from)+1)
		if limit > 0 {
			want = min(want, limit)
		}
		if len(got) != want {
			t.Fatalf("ReadAfter(%d, %d) returned %d events, want %d", after, limit, len(got), want)
		}
		for k, se := range got {
			seq := from + int64(k)
			if se.Seq != seq || textOf(se.Event) != "s#"+strconv.Itoa(int(seq-1)) {
				t.Fatalf("ReadAfter(%d, %d)[%d] = seq %d %q, want seq %d", after, limit, k, se.Seq, textOf(se.Event), seq)
			}
		}
	}
	for after := int64(-1); after <= n+2; after++ {
		for _, limit := range []int{-1, 0, 1, 3, n, n + 10} {
			check(after, limit)
		}
	}
	check(1<<40, 0)
	check(math.MaxInt64, 0)
	check(math.MinInt64, 0)

	// Paging with a cursor reassembles the whole log.
	var all []int64
	for cursor := int64(0); ; {
		page, err := s.ReadAfter(ctx, "r", cursor, 4)
		if err != nil {
			t.Fatalf("ReadAfter(%d, 4): %v", cursor, err)
		}
		if len(page) == 0 {
			break
		}
		for _, se := range page {
			all = append(all, se.Seq)
		}
		cursor = page[len(page)-1].Seq
	}
	if len(all) != n || all[0] != 1 || all[n-1] != n {
		t.Fatalf("paging read seqs %v, want 1..%d", all, n)
	}
}

func testNextSeq(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "n", "owner")
	want := int64(1)
	for _, size := range []int{0, 1, 4, 0, 9} {
		next, err := s.NextSeq(ctx, "n")
		if err != nil || next != want {
			t.Fatalf("NextSeq = %d, %v; want %d", next, err, want)
		}
		if size > 0 {
			if first := appendTexts(t, s, "n", int(want-1), size); first != want {
				t.Fatalf("Append returned first seq %d, NextSeq said %d", first, want)
			}
		}
		want += int64(size)
	}
	// NextSeq is MAX(seq)+1 of the log: compare with what a read returns.
	got, err := s.ReadAfter(ctx, "n", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	next, err := s.NextSeq(ctx, "n")
	if err != nil || next != got[len(got)-1].Seq+1 {
		t.Fatalf("NextSeq = %d, %v; last seq read is %d", next, err, got[len(got)-1].Seq)
	}
}

func testEmptyAppend(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "e", "owner")
	for _, empty := range [][]instanceai.Event{nil, {}} {
		first, err := s.Append(ctx, "e", empty)
		if err != nil || first != 1 {
			t.Fatalf("Append(empty) on an empty thread = %d, %v; want 1, nil", first, err)
		}
	}
	appendTexts(t, s, "e", 0, 3)
	first, err := s.Append(ctx, "e", nil)
	if err != nil || first != 4 {
		t.Fatalf("Append(empty) after 3 events = %d, %v; want 4, nil", first, err)
	}
	if first := appendTexts(t, s, "e", 3, 1); first != 4 {
		t.Fatalf("Append after an empty append started at %d, want 4", first)
	}
	checkTexts(t, s, "e", 0, 1, 4)
}

func testLargeBatch(t *testing.T, s instanceai.Store) {
	ensure(t, s, "big", "owner")
	if first := appendTexts(t, s, "big", 0, 1); first != 1 {
		t.Fatalf("first seq %d, want 1", first)
	}
	if first := appendTexts(t, s, "big", 1, 7000); first != 2 {
		t.Fatalf("first seq of the large batch %d, want 2", first)
	}
	checkTexts(t, s, "big", 0, 1, 7001)
}

func testRoundTrip(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "rt", FixtureUser)
	events := EveryType("run-rt")
	// Half in one batch, the rest one by one: both paths must preserve bytes.
	half := len(events) / 2
	if _, err := s.Append(ctx, "rt", events[:half]); err != nil {
		t.Fatalf("Append: %v", err)
	}
	for i := half; i < len(events); i++ {
		if _, err := s.Append(ctx, "rt", events[i:i+1]); err != nil {
			t.Fatalf("Append(%s): %v", events[i].Type, err)
		}
	}
	got, err := s.ReadAfter(ctx, "rt", 0, 0)
	if err != nil {
		t.Fatalf("ReadAfter: %v", err)
	}
	if len(got) != len(events) {
		t.Fatalf("read %d events, appended %d", len(got), len(events))
	}
	types := map[instanceai.EventType]bool{}
	for i, se := range got {
		want, err := json.Marshal(&events[i])
		if err != nil {
			t.Fatal(err)
		}
		have, err := json.Marshal(&se.Event)
		if err != nil {
			t.Fatal(err)
		}
		if string(have) != string(want) {
			t.Errorf("seq %d (%s) does not round-trip:\n got %s\nwant %s", se.Seq, events[i].Type, have, want)
		}
		if !reflect.DeepEqual(se.Event, events[i]) {
			t.Errorf("seq %d (%s) decodes to %#v, want %#v", se.Seq, events[i].Type, se.Event, events[i])
		}
		types[se.Event.Type] = true
	}
	for _, typ := range instanceai.AllTypes {
		if !types[typ] {
			t.Errorf("no %s event came back", typ)
		}
	}
}

func testAppendCopies(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "c", "owner")
	p := &instanceai.Text{Text: "original"}
	events := []instanceai.Event{{Type: instanceai.TypeTextBlock, RunID: "r", AgentID: "a", Payload: p}}
	if _, err := s.Append(ctx, "c", events); err != nil {
		t.Fatal(err)
	}
	// The caller reuses its buffers; the log must not change with them.
	p.Text = "changed"
	events[0].RunID = "changed"
	got, err := s.ReadAfter(ctx, "c", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || textOf(got[0].Event) != "original" || got[0].Event.RunID != "r" {
		t.Fatalf("stored event changed with the caller's copy: %+v", got)
	}
	// Nor must a reader's changes reach the log.
	got[0].Event.Payload.(*instanceai.Text).Text = "reader"
	again, err := s.ReadAfter(ctx, "c", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if textOf(again[0].Event) != "original" {
		t.Fatalf("a reader's change reached the log: %q", textOf(again[0].Event))
	}
}

// timeWindow is how far a store's clock may be from the test's (a database
// server's clock on the same machine, rounded to microseconds).
const timeWindow = time.Minute

func testThreads(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	before := time.Now()
	th, created, err := s.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "alice", Title: "First"})
	if err != nil || !created {
		t.Fatalf("EnsureThread new = %v, %v; want created", created, err)
	}
	if th.ID != "th" || th.OwnerID != "alice" || th.Title != "First" {
		t.Fatalf("EnsureThread stored %+v", th)
	}
	for name, ts := range map[string]time.Time{"CreatedAt": th.CreatedAt, "UpdatedAt": th.UpdatedAt} {
		if ts.Location() != time.UTC {
			t.Errorf("%s %v is not in UTC", name, ts)
		}
		if ts.Before(before.Add(-timeWindow)) || ts.After(time.Now().Add(timeWindow)) {
			t.Errorf("%s %v is not about now (%v)", name, ts, before)
		}
	}
	if th.UpdatedAt.Before(th.CreatedAt) {
		t.Errorf("UpdatedAt %v before CreatedAt %v", th.UpdatedAt, th.CreatedAt)
	}

	// Idempotent: the stored record wins over the second call's fields.
	again, created, err := s.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "mallory", Title: "Other"})
	if err != nil || created {
		t.Fatalf("EnsureThread existing = %v, %v; want not created", created, err)
	}
	if !again.CreatedAt.Equal(th.CreatedAt) || again.OwnerID != "alice" || again.Title != "First" {
		t.Fatalf("EnsureThread existing returned %+v, want %+v", again, th)
	}
	got, err := s.GetThread(ctx, "th")
	if err != nil {
		t.Fatalf("GetThread: %v", err)
	}
	if !sameThread(got, th) {
		t.Fatalf("GetThread = %+v, want %+v", got, th)
	}

	// Rename changes the title and nothing else, and bumps UpdatedAt.
	time.Sleep(2 * time.Millisecond)
	if err := s.RenameThread(ctx, "th", "Renamed ✓"); err != nil {
		t.Fatalf("RenameThread: %v", err)
	}
	renamed, err := s.GetThread(ctx, "th")
	if err != nil {
		t.Fatalf("GetThread: %v", err)
	}
	if renamed.Title != "Renamed ✓" || renamed.OwnerID != "alice" || !renamed.CreatedAt.Equal(th.CreatedAt) {
		t.Fatalf("after rename: %+v", renamed)
	}
	if !renamed.UpdatedAt.After(th.UpdatedAt) {
		t.Fatalf("rename did not advance UpdatedAt: %v then %v", th.UpdatedAt, renamed.UpdatedAt)
	}
	if list, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "alice", Limit: 0, Offset: 0}); err != nil || len(list) != 1 || list[0].Title != "Renamed ✓" {
		t.Fatalf("ListThreads after rename = %+v, %v", list, err)
	}

	// An explicit CreatedAt is kept, in UTC, at microsecond precision.
	at := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("X", 5*3600+1800))
	old, created, err := s.EnsureThread(ctx, instanceai.Thread{ID: "old", OwnerID: "alice", CreatedAt: at})
	if err != nil || !created {
		t.Fatalf("EnsureThread with CreatedAt = %v, %v", created, err)
	}
	want := at.UTC().Truncate(time.Microsecond)
	if !old.CreatedAt.Equal(want) || old.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreatedAt = %v, want %v", old.CreatedAt, want)
	}
	if got, err := s.GetThread(ctx, "old"); err != nil || !got.CreatedAt.Equal(want) || got.Title != "" {
		t.Fatalf("GetThread(old) = %+v, %v; want CreatedAt %v and an empty title", got, err, want)
	}

	// Appending counts as activity.
	appendTexts(t, s, "old", 0, 1)
	if got, err := s.GetThread(ctx, "old"); err != nil || !got.UpdatedAt.After(old.UpdatedAt) {
		t.Fatalf("after Append UpdatedAt = %v (%v), was %v", got.UpdatedAt, err, old.UpdatedAt)
	}

	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{OwnerID: "alice"}); err == nil {
		t.Fatal("EnsureThread accepted an empty id")
	}
}

func sameThread(a, b instanceai.Thread) bool {
	return a.ID == b.ID && a.OwnerID == b.OwnerID && a.Title == b.Title &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

func testListThreadsPages(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id, owner string, minutes int) {
		t.Helper()
		_, created, err := s.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: owner, Title: "title " + id,
			CreatedAt: base.Add(time.Duration(minutes) * time.Minute)})
		if err != nil || !created {
			t.Fatalf("EnsureThread(%s) = %v, %v", id, created, err)
		}
	}
	// Created out of order, with a tie on created_at (broken by id, descending).
	mk("c", "alice", 3)
	mk("a", "alice", 1)
	mk("bob-1", "bob", 10)
	mk("e", "alice", 5)
	mk("tie-1", "alice", 4)
	mk("tie-2", "alice", 4)
	mk("b", "alice", 2)
	want := []string{"e", "tie-2", "tie-1", "c", "b", "a"}

	ids := func(ts []instanceai.Thread) []string {
		var out []string
		for _, th := range ts {
			if th.OwnerID != "alice" {
				t.Fatalf("ListThreads(alice) returned %+v", th)
			}
			out = append(out, th.ID)
		}
		return out
	}
	for _, limit := range []int{0, -1, 100} {
		all, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "alice", Limit: limit, Offset: 0})
		if err != nil {
			t.Fatalf("ListThreads: %v", err)
		}
		if got := ids(all); !slices.Equal(got, want) {
			t.Fatalf("ListThreads(alice, limit %d) = %v, want %v", limit, got, want)
		}
	}
	for _, size := range []int{1, 2, 4} {
		var paged []string
		for off := 0; off < len(want)+size; off += size {
			page, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "alice", Limit: size, Offset: off})
			if err != nil {
				t.Fatalf("ListThreads(limit %d, offset %d): %v", size, off, err)
			}
			if len(page) > size {
				t.Fatalf("ListThreads(limit %d) returned %d", size, len(page))
			}
			paged = append(paged, ids(page)...)
		}
		if !slices.Equal(paged, want) {
			t.Fatalf("pages of %d = %v, want %v", size, paged, want)
		}
	}
	if page, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "alice", Limit: 2, Offset: 100}); err != nil || len(page) != 0 {
		t.Fatalf("ListThreads past the end = %v, %v; want empty", page, err)
	}
	if page, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "nobody", Limit: 0, Offset: 0}); err != nil || len(page) != 0 {
		t.Fatalf("ListThreads(nobody) = %v, %v; want empty", page, err)
	}
	bobs, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "bob", Limit: 0, Offset: 0})
	if err != nil || len(bobs) != 1 || bobs[0].ID != "bob-1" || bobs[0].Title != "title bob-1" ||
		!bobs[0].CreatedAt.Equal(base.Add(10*time.Minute)) {
		t.Fatalf("ListThreads(bob) = %+v, %v", bobs, err)
	}
}

// Archiving takes a thread out of its owner's list, unless the list asks
// for archived ones, and changes nothing else about it: its log is read
// and written as before, and unarchiving brings it back in its place.
func testArchivedThreads(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c"} {
		if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "alice", Title: id,
			CreatedAt: base.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	appendTexts(t, s, "b", 0, 2)
	before, err := s.GetThread(ctx, "b")
	if err != nil || before.Archived {
		t.Fatalf("GetThread(b) = %+v, %v; want it not archived", before, err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := s.ArchiveThread(ctx, "b", true); err != nil {
		t.Fatalf("ArchiveThread: %v", err)
	}
	list := func(q instanceai.ThreadQuery) string {
		t.Helper()
		q.OwnerID = "alice"
		ts, err := s.ListThreads(ctx, q)
		if err != nil {
			t.Fatalf("ListThreads(%+v): %v", q, err)
		}
		var out []string
		for _, th := range ts {
			out = append(out, fmt.Sprintf("%s:%v", th.ID, th.Archived))
		}
		return strings.Join(out, " ")
	}
	if got := list(instanceai.ThreadQuery{}); got != "c:false a:false" {
		t.Fatalf("list without archived = %q", got)
	}
	if got := list(instanceai.ThreadQuery{Limit: 1, Offset: 1}); got != "a:false" {
		t.Fatalf("second page of one without archived = %q", got)
	}
	if got := list(instanceai.ThreadQuery{IncludeArchived: true}); got != "c:false b:true a:false" {
		t.Fatalf("list with archived = %q", got)
	}
	after, err := s.GetThread(ctx, "b")
	if err != nil || !after.Archived || after.Title != "b" || !after.CreatedAt.Equal(before.CreatedAt) ||
		!after.UpdatedAt.After(before.UpdatedAt) {
		t.Fatalf("archived thread = %+v, %v (was %+v)", after, err, before)
	}
	appendTexts(t, s, "b", 2, 1)
	if evs, err := s.ReadAfter(ctx, "b", 0, 0); err != nil || len(evs) != 3 {
		t.Fatalf("the archived thread's log = %d events, %v; want 3", len(evs), err)
	}
	if err := s.ArchiveThread(ctx, "b", false); err != nil {
		t.Fatalf("ArchiveThread(false): %v", err)
	}
	if got := list(instanceai.ThreadQuery{}); got != "c:false b:false a:false" {
		t.Fatalf("list after unarchiving = %q", got)
	}
}

func testNotFound(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "exists", "owner")
	appendTexts(t, s, "exists", 0, 2)
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("%s on a missing thread: err = %v, want ErrNotFound", op, err)
		}
	}
	_, err := s.Append(ctx, "missing", []instanceai.Event{textEvent("s", 0)})
	check("Append", err)
	_, err = s.Append(ctx, "missing", nil)
	check("Append(empty)", err)
	_, err = s.ReadAfter(ctx, "missing", 0, 0)
	check("ReadAfter", err)
	_, err = s.ReadAfter(ctx, "missing", 5, 1)
	check("ReadAfter(5, 1)", err)
	_, err = s.ReadRowsAfter(ctx, "missing", 0, 0, 0)
	check("ReadRowsAfter", err)
	_, err = s.ReadRowsAfter(ctx, "missing", 0, 10, 100)
	check("ReadRowsAfter(sized)", err)
	for _, q := range []instanceai.PageQuery{{}, {After: 5, Limit: 10, MaxBytes: 100}, {Limit: 10, SizesOnly: true}} {
		_, err = s.ReadPage(ctx, "missing", q)
		check(fmt.Sprintf("ReadPage(%+v)", q), err)
	}
	_, err = s.NextSeq(ctx, "missing")
	check("NextSeq", err)
	_, err = s.GetThread(ctx, "missing")
	check("GetThread", err)
	check("RenameThread", s.RenameThread(ctx, "missing", "x"))
	check("ArchiveThread", s.ArchiveThread(ctx, "missing", true))
	check("DeleteThread", s.DeleteThread(ctx, "missing"))

	// None of that created the thread, nor touched the other one.
	if _, err := s.GetThread(ctx, "missing"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("missing thread exists after the calls: %v", err)
	}
	checkTexts(t, s, "exists", 0, 1, 2)
	// A read past the end of an existing thread is empty, not an error.
	if got, err := s.ReadAfter(ctx, "exists", 2, 0); err != nil || len(got) != 0 {
		t.Errorf("ReadAfter past the end = %v, %v; want empty, nil", got, err)
	}
}

// userTexts is n text events of stream "s" from i0 on, carrying user.
func userTexts(user string, i0, n int) []instanceai.Event {
	batch := make([]instanceai.Event, n)
	for k := range batch {
		batch[k] = textEvent("s", i0+k)
		batch[k].UserID = user
	}
	return batch
}

// testAppendChecksOwner: events that carry a user are stored only in a
// thread that user owns. A run that outlived its thread's deletion holds
// the old owner's id; when another user creates a thread with the same id,
// the run's appends must fail as on a missing thread, and leave the new
// thread's log untouched. The batch sizes cover a store's one-statement
// append and its chunked one (more rows than one INSERT takes).
func testAppendChecksOwner(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "owned", "alice")
	if _, err := s.Append(ctx, "owned", userTexts("alice", 0, 2)); err != nil {
		t.Fatalf("Append of the owner's events: %v", err)
	}
	if err := s.DeleteThread(ctx, "owned"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	ensure(t, s, "owned", "bob")
	for _, n := range []int{1, 3, 14000} {
		if _, err := s.Append(ctx, "owned", userTexts("alice", 0, n)); !errors.Is(err, instanceai.ErrNotFound) {
			t.Fatalf("Append of %d events of the old owner: %v, want ErrNotFound", n, err)
		}
	}
	mixed := append(userTexts("bob", 0, 1), userTexts("alice", 1, 1)...)
	if _, err := s.Append(ctx, "owned", mixed); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("Append of a batch of two users: %v, want ErrNotFound", err)
	}
	// Nothing of the refused appends is there, and no seq was taken.
	if next, err := s.NextSeq(ctx, "owned"); err != nil || next != 1 {
		t.Fatalf("NextSeq after refused appends = %d, %v; want 1", next, err)
	}
	// The new owner's events, and events that carry no user (the store's
	// own callers), go in from seq 1.
	if first, err := s.Append(ctx, "owned", userTexts("bob", 0, 2)); err != nil || first != 1 {
		t.Fatalf("Append of the new owner's events = %d, %v; want 1", first, err)
	}
	if first, err := s.Append(ctx, "owned", userTexts("", 2, 1)); err != nil || first != 3 {
		t.Fatalf("Append of events without a user = %d, %v; want 3", first, err)
	}
	got, err := s.ReadAfter(ctx, "owned", 0, 0)
	if err != nil {
		t.Fatalf("ReadAfter: %v", err)
	}
	for i, e := range got {
		if e.Event.UserID == "alice" || e.Seq != int64(i+1) {
			t.Fatalf("event %d of the new thread: seq %d, user %q", i, e.Seq, e.Event.UserID)
		}
	}
	if len(got) != 3 {
		t.Fatalf("new thread holds %d events, want 3", len(got))
	}
}

func testDeleteCascades(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "doomed", "owner")
	ensure(t, s, "survivor", "owner")
	appendTexts(t, s, "doomed", 0, 10)
	appendTexts(t, s, "survivor", 0, 5)

	if err := s.DeleteThread(ctx, "doomed"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	if _, err := s.GetThread(ctx, "doomed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("GetThread after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadAfter(ctx, "doomed", 0, 0); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("ReadAfter after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.NextSeq(ctx, "doomed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("NextSeq after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteThread(ctx, "doomed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("second DeleteThread: %v, want ErrNotFound", err)
	}
	if list, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "owner", Limit: 0, Offset: 0}); err != nil || len(list) != 1 || list[0].ID != "survivor" {
		t.Fatalf("ListThreads after delete = %+v, %v", list, err)
	}
	checkTexts(t, s, "survivor", 0, 1, 5)

	// The same id again is a new thread with a new log: seqs restart at 1
	// and none of the old events come back.
	ensure(t, s, "doomed", "owner")
	if next, err := s.NextSeq(ctx, "doomed"); err != nil || next != 1 {
		t.Fatalf("NextSeq of the recreated thread = %d, %v; want 1", next, err)
	}
	if got, err := s.ReadAfter(ctx, "doomed", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("recreated thread holds %d events (%v), want none", len(got), err)
	}
	if first := appendTexts(t, s, "doomed", 100, 2); first != 1 {
		t.Fatalf("first Append to the recreated thread got seq %d, want 1", first)
	}
	checkTexts(t, s, "doomed", 100, 1, 2)
}

func testCancelledContext(t *testing.T, s instanceai.Store) {
	ensure(t, s, "cc", "owner")
	appendTexts(t, s, "cc", 0, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Append(ctx, "cc", []instanceai.Event{textEvent("s", 2)})
	if err == nil {
		t.Fatal("Append with a cancelled context succeeded")
	}
	if errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("Append with a cancelled context: %v, want a context error", err)
	}
	checkTexts(t, s, "cc", 0, 1, 2)
	if first := appendTexts(t, s, "cc", 2, 1); first != 3 {
		t.Fatalf("Append after the cancelled one got seq %d, want 3", first)
	}
}

// testAppendEncoded checks the writer's path: rows stored from encodings
// the caller made read back exactly like rows stored by Append, and a
// count mismatch is refused without storing anything.
func testAppendEncoded(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "enc", "owner")
	events := []instanceai.Event{textEvent("a", 0), textEvent("a", 1)}
	data := make([][]byte, len(events))
	for i := range events {
		b, err := json.Marshal(&events[i])
		if err != nil {
			t.Fatal(err)
		}
		data[i] = b
	}
	if _, err := s.AppendEncoded(ctx, "enc", events, data[:1]); err == nil {
		t.Fatal("one encoding for two events was accepted")
	}
	first, err := s.AppendEncoded(ctx, "enc", events, data)
	if err != nil || first != 1 {
		t.Fatalf("AppendEncoded: first %d, %v", first, err)
	}
	if first, err := s.AppendEncoded(ctx, "enc", nil, nil); err != nil || first != 3 {
		t.Fatalf("empty AppendEncoded: %d %v", first, err)
	}
	rows, err := s.ReadAfter(ctx, "enc", 0, 0)
	if err != nil || len(rows) != 2 {
		t.Fatalf("ReadAfter: %d rows, %v", len(rows), err)
	}
	for i, row := range rows {
		got, _ := json.Marshal(&row.Event)
		if row.Seq != int64(i+1) || string(got) != string(data[i]) {
			t.Fatalf("row %d: seq %d %s, want %s", i, row.Seq, got, data[i])
		}
		// Replay sends the stored bytes: they must be the encoding given.
		if string(row.Data) != string(data[i]) {
			t.Fatalf("row %d: stored bytes %s, want %s", i, row.Data, data[i])
		}
	}
	if _, err := s.AppendEncoded(ctx, "missing", events, data); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("append to a missing thread: %v", err)
	}
}

// testPageReader: a store whose pages cost what they return
// (instanceai.PageReader) returns, for every cursor, limit and budget,
// the page RowReader's rule cuts from ReadAfter's rows, with their bytes
// or, asked for sizes only, with their sizes alone. The rows are of every
// size from tens of bytes to several pages of a database's (a PostgreSQL
// server stores those apart, compressed), in characters of one to three
// bytes, so that sizes counted in characters, or taken from a value's
// compressed form, would show. That a page reads nothing past itself shows
// only in what the read costs, so it is measured where that is something:
// on PostgreSQL's wire (storage/postgres's TestPagesCostWhatTheyHold, and
// the history's requests in server's TestHistoryReadsWhatItServes).
func testPageReader(t *testing.T, s instanceai.Store) {
	var pr instanceai.PageReader = s
	ctx := context.Background()
	ensure(t, s, "pages", "owner")
	var events []instanceai.Event
	for i := range 24 {
		// Repeated text compresses: a size taken from the stored form
		// rather than the value would be far smaller than the value.
		text := strings.Repeat([]string{"a", "é", "☃"}[i%3], []int{10, 900, 3000, 40_000}[i%4])
		events = append(events, instanceai.Event{Type: instanceai.TypeTextBlock, RunID: fmt.Sprint("run-", i%5),
			AgentID: "a", ResponseID: fmt.Sprint("r", i), Payload: &instanceai.Text{Text: text}})
	}
	for len(events) > 0 { // in uneven appends, so that pages cross them
		n := min(len(events), 5)
		if _, err := s.Append(ctx, "pages", events[:n]); err != nil {
			t.Fatalf("Append: %v", err)
		}
		events = events[n:]
	}
	for after := int64(-1); after <= 25; after += 2 {
		for _, limit := range []int{0, 1, 3, 100} {
			all, err := s.ReadAfter(ctx, "pages", after, limit)
			if err != nil {
				t.Fatalf("ReadAfter(%d, %d): %v", after, limit, err)
			}
			for _, maxBytes := range []int{0, 1, 2000, 3000, 9001, 40_000, 200_000} {
				// The budget keeps the shortest prefix whose bytes reach it.
				want, total := all, 0
				for i := range all {
					if total += len(all[i].Data); maxBytes > 0 && total >= maxBytes {
						want = all[:i+1]
						break
					}
				}
				for _, sizesOnly := range []bool{false, true} {
					q := instanceai.PageQuery{After: after, Limit: limit, MaxBytes: maxBytes, SizesOnly: sizesOnly}
					got, err := pr.ReadPage(ctx, "pages", q)
					if err != nil {
						t.Fatalf("ReadPage(%+v): %v", q, err)
					}
					if len(got) != len(want) {
						t.Fatalf("ReadPage(%+v) returned %d rows, want %d", q, len(got), len(want))
					}
					for i, g := range got {
						w := want[i]
						if g.Seq != w.Seq || g.Type != w.Event.Type || g.RunID != w.Event.RunID {
							t.Fatalf("ReadPage(%+v)[%d] = seq %d %s run %q, want seq %d %s run %q",
								q, i, g.Seq, g.Type, g.RunID, w.Seq, w.Event.Type, w.Event.RunID)
						}
						switch {
						case sizesOnly && (g.Data != nil || g.Size != len(w.Data)):
							t.Fatalf("ReadPage(%+v)[%d]: %d bytes of data, size %d; want none and size %d",
								q, i, len(g.Data), g.Size, len(w.Data))
						case !sizesOnly && (!bytes.Equal(g.Data, w.Data) || g.Size != 0):
							t.Fatalf("ReadPage(%+v)[%d]: %d bytes of data, size %d; want the row's %d bytes",
								q, i, len(g.Data), g.Size, len(w.Data))
						}
					}
				}
			}
		}
	}
}

// testPartReader: a store that reads large rows in parts
// (instanceai.PartReader) returns the rows ReadRowsAfter does, a row of
// more than large bytes without its data and with its size, and its bytes
// (not characters) part by part. A store without it is skipped.
func testPartReader(t *testing.T, s instanceai.Store) {
	pr, ok := s.(instanceai.PartReader)
	if !ok {
		t.Skip("the store does not implement instanceai.PartReader")
	}
	var rr instanceai.RowReader = s
	ctx := context.Background()
	ensure(t, s, "parts", "owner")
	var events []instanceai.Event
	for i, text := range []string{"small", strings.Repeat("ü☃x", 700), "tiny", strings.Repeat("é", 90), strings.Repeat("abc", 5000)} {
		ev := instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "run-parts", AgentID: "a", ResponseID: fmt.Sprint("r", i),
			Payload: &instanceai.Text{Text: text}}
		events = append(events, ev)
	}
	if _, err := s.Append(ctx, "parts", events); err != nil {
		t.Fatal(err)
	}
	const large = 200
	for _, maxBytes := range []int{0, 1, 3000} {
		want, err := rr.ReadRowsAfter(ctx, "parts", 0, 100, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pr.ReadLightRowsAfter(ctx, "parts", 0, 100, maxBytes, large)
		if err != nil || len(got) != len(want) {
			t.Fatalf("ReadLightRowsAfter(max %d) = %d rows, %v; ReadRowsAfter %d", maxBytes, len(got), err, len(want))
		}
		for i, g := range got {
			w := want[i]
			if g.Seq != w.Seq || g.Type != w.Type || g.RunID != w.RunID {
				t.Fatalf("row %d: %+v, want %+v", i, g, w)
			}
			if len(w.Data) > large {
				if g.Data != nil || g.Size != len(w.Data) {
					t.Fatalf("row %d of %d bytes: data %d bytes, size %d; want none and its size", g.Seq, len(w.Data), len(g.Data), g.Size)
				}
			} else if !bytes.Equal(g.Data, w.Data) || g.Size != 0 {
				t.Fatalf("row %d: %q (size %d), want %q", g.Seq, g.Data, g.Size, w.Data)
			}
		}
	}
	all, err := rr.ReadRowsAfter(ctx, "parts", 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range all {
		for _, n := range []int{97, 1000, 1 << 20} {
			var b []byte
			for off := 0; off < len(row.Data); off += n {
				part, err := pr.ReadRowPart(ctx, "parts", row.Seq, off, n)
				if err != nil || len(part) != min(n, len(row.Data)-off) {
					t.Fatalf("ReadRowPart(%d, %d, %d) = %d bytes, %v", row.Seq, off, n, len(part), err)
				}
				b = append(b, part...)
			}
			if !bytes.Equal(b, row.Data) {
				t.Fatalf("row %d read in parts of %d differs", row.Seq, n)
			}
		}
		if past, err := pr.ReadRowPart(ctx, "parts", row.Seq, len(row.Data), 10); err != nil || len(past) != 0 {
			t.Fatalf("a part past the end of row %d: %q, %v", row.Seq, past, err)
		}
	}
	for _, c := range []struct {
		thread string
		seq    int64
	}{{"parts", 99}, {"missing", 1}} {
		if _, err := pr.ReadRowPart(ctx, c.thread, c.seq, 0, 10); !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("ReadRowPart(%s, %d): %v, want ErrNotFound", c.thread, c.seq, err)
		}
	}
}
