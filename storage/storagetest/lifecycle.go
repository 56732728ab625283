package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// The cases of this file check the promises of the instanceai.EventLog and
// instanceai.Store docs that are about concurrency and Close.

// testReadersSeeCommitOrder: while appenders race on one thread, an append
// that returned reads back at once where it said, and readers paging with
// a cursor never see a seq before every smaller one: seq order is commit
// order.
func testReadersSeeCommitOrder(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "order", "owner")
	const workers, batches, maxBatch = 8, 25, 5
	var (
		appenders sync.WaitGroup
		readers   sync.WaitGroup
		mu        sync.Mutex
		errs      []error
		total     int64
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	done := make(chan struct{})
	for w := range workers {
		appenders.Go(func() {
			stream := "w" + strconv.Itoa(w)
			for b := range batches {
				n := 1 + (w+b)%maxBatch
				events := make([]instanceai.Event, n)
				for k := range events {
					events[k] = textEvent(stream, b*maxBatch+k)
				}
				first, err := s.Append(ctx, "order", events)
				if err != nil {
					fail(fmt.Errorf("%s: Append: %w", stream, err))
					return
				}
				mu.Lock()
				total += int64(n)
				mu.Unlock()
				// Read-your-writes: the batch is where Append said.
				got, err := s.ReadAfter(ctx, "order", first-1, n)
				if err != nil || len(got) != n {
					fail(fmt.Errorf("%s: ReadAfter(%d, %d) right after the append = %d events, %v", stream, first-1, n, len(got), err))
					return
				}
				for k, se := range got {
					if want := stream + "#" + strconv.Itoa(b*maxBatch+k); se.Seq != first+int64(k) || textOf(se.Event) != want {
						fail(fmt.Errorf("%s: seq %d holds %q, want seq %d %q", stream, se.Seq, textOf(se.Event), first+int64(k), want))
						return
					}
				}
				if next, err := s.NextSeq(ctx, "order"); err != nil || next < first+int64(n) {
					fail(fmt.Errorf("%s: NextSeq after appending up to %d = %d, %v", stream, first+int64(n)-1, next, err))
					return
				}
			}
		})
	}
	for r := range 2 {
		readers.Go(func() {
			var cursor int64
			for {
				finished := false
				select {
				case <-done:
					finished = true
				default:
				}
				page, err := s.ReadAfter(ctx, "order", cursor, 7)
				if err != nil {
					fail(fmt.Errorf("reader %d: ReadAfter(%d): %v", r, cursor, err))
					return
				}
				for k, se := range page {
					if se.Seq != cursor+int64(k)+1 {
						fail(fmt.Errorf("reader %d: after %d read seq %d at position %d: a seq became visible before a smaller one", r, cursor, se.Seq, k))
						return
					}
				}
				if len(page) > 0 {
					cursor = page[len(page)-1].Seq
					continue
				}
				if finished {
					mu.Lock()
					defer mu.Unlock()
					if cursor != total {
						errs = append(errs, fmt.Errorf("reader %d stopped at seq %d of %d", r, cursor, total))
					}
					return
				}
				time.Sleep(time.Millisecond) // caught up; let the appenders run
			}
		})
	}
	appenders.Wait()
	close(done)
	readers.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// testConcurrentThreads: appends to different threads run at once, and
// each thread counts its own seqs, holding its own events only.
func testConcurrentThreads(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	const threads, perThread, batches = 6, 2, 15
	for i := range threads {
		ensure(t, s, "par-"+strconv.Itoa(i), "owner")
	}
	var wg sync.WaitGroup
	errs := make([]error, threads*perThread)
	for w := range threads * perThread {
		wg.Go(func() {
			thread := "par-" + strconv.Itoa(w%threads)
			stream := "w" + strconv.Itoa(w)
			for b := range batches {
				events := []instanceai.Event{textEvent(stream, 2*b), textEvent(stream, 2*b+1)}
				if _, err := s.Append(ctx, thread, events); err != nil {
					errs[w] = fmt.Errorf("%s on %s: Append: %w", stream, thread, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range threads {
		thread := "par-" + strconv.Itoa(i)
		got, err := s.ReadAfter(ctx, thread, 0, 0)
		if err != nil {
			t.Fatalf("ReadAfter(%s): %v", thread, err)
		}
		if want := perThread * batches * 2; len(got) != want {
			t.Fatalf("%s holds %d events, want %d", thread, len(got), want)
		}
		next := map[string]int{}
		for k, se := range got {
			if se.Seq != int64(k+1) {
				t.Fatalf("%s: event %d has seq %d", thread, k, se.Seq)
			}
			stream, num, _ := strings.Cut(textOf(se.Event), "#")
			w, _ := strconv.Atoi(strings.TrimPrefix(stream, "w"))
			if w%threads != i {
				t.Fatalf("%s holds %q, appended to another thread", thread, textOf(se.Event))
			}
			if n, _ := strconv.Atoi(num); n != next[stream] {
				t.Fatalf("%s: %s's event %d where %d was due", thread, stream, n, next[stream])
			}
			next[stream]++
		}
	}
}

// testCloseIdempotent: Close twice is safe (and the suite's cleanup closes
// a third time).
func testCloseIdempotent(t *testing.T, s instanceai.Store) {
	ensure(t, s, "t", "owner")
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
}

// testCallsAfterClose: once Close has returned, every method fails with an
// error matching instanceai.ErrClosed, and none panics.
func testCallsAfterClose(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t", "owner")
	appendTexts(t, s, "t", 0, 3)
	if err := s.AddMessage(ctx, instanceai.Message{ID: "m", ThreadID: "t", Role: "user", Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	addConfirmation(t, s, newConfirmation("t", "c", time.Time{}))
	claim, err := s.ClaimThread(ctx, "t", "r", "inst", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	ev := []instanceai.Event{textEvent("s", 3)}
	data, _ := json.Marshal(&ev[0])
	calls := map[string]func() error{
		"Append":        func() error { _, err := s.Append(ctx, "t", ev); return err },
		"Append(empty)": func() error { _, err := s.Append(ctx, "t", nil); return err },
		"AppendEncoded": func() error { _, err := s.AppendEncoded(ctx, "t", ev, [][]byte{data}); return err },
		"ReadAfter":     func() error { _, err := s.ReadAfter(ctx, "t", 0, 0); return err },
		"NextSeq":       func() error { _, err := s.NextSeq(ctx, "t"); return err },
		"ReadRowsAfter": func() error { _, err := s.ReadRowsAfter(ctx, "t", 0, 0, 0); return err },
		"ReadPage": func() error {
			_, err := s.ReadPage(ctx, "t", instanceai.PageQuery{MaxBytes: 100})
			return err
		},
		"AppendFenced": func() error {
			_, err := s.AppendFenced(ctx, "t", ev, [][]byte{data}, []int64{claim.Fence})
			return err
		},
		"EnsureThread": func() error {
			_, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "new", OwnerID: "owner"})
			return err
		},
		"GetThread": func() error { _, err := s.GetThread(ctx, "t"); return err },
		"ListThreads": func() error {
			_, err := s.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "owner", Limit: 0, Offset: 0})
			return err
		},
		"RenameThread":  func() error { return s.RenameThread(ctx, "t", "x") },
		"ArchiveThread": func() error { return s.ArchiveThread(ctx, "t", true) },
		"DeleteThread":  func() error { return s.DeleteThread(ctx, "t") },
		"AddMessage": func() error {
			return s.AddMessage(ctx, instanceai.Message{ID: "m2", ThreadID: "t", Role: "user", Content: "hi"})
		},
		"ListMessages":    func() error { _, err := s.ListMessages(ctx, "t"); return err },
		"AddConfirmation": func() error { return s.AddConfirmation(ctx, newConfirmation("t", "c2", time.Time{})) },
		"GetConfirmation": func() error { _, err := s.GetConfirmation(ctx, "c"); return err },
		"AnswerConfirmation": func() error {
			return s.AnswerConfirmation(ctx, "c", instanceai.ConfirmationApproved, nil)
		},
		"PendingConfirmations": func() error { _, err := s.PendingConfirmations(ctx, "t"); return err },
		"UnfinishedRuns":       func() error { _, err := s.UnfinishedRuns(ctx); return err },
		"RunEvents":            func() error { _, err := s.RunEvents(ctx, "t", "run-s"); return err },
		"ClaimThread":          func() error { _, err := s.ClaimThread(ctx, "t", "r2", "inst", time.Minute); return err },
		"ActiveRun":            func() error { _, err := s.ActiveRun(ctx, "t"); return err },
		"TakeRun":              func() error { _, _, err := s.TakeRun(ctx, "t", "r", "other", time.Minute); return err },
		"SuspendRun":           func() error { return s.SuspendRun(ctx, "t", "r", claim.Fence, true) },
		"DisownRun":            func() error { return s.DisownRun(ctx, "t", "r", claim.Fence) },
		"ReleaseRun":           func() error { return s.ReleaseRun(ctx, "t", "r", claim.Fence) },
		"RenewRuns":            func() error { _, err := s.RenewRuns(ctx, "inst", time.Minute); return err },
		"ExpiredRuns":          func() error { _, err := s.ExpiredRuns(ctx); return err },
		"Migrate":              func() error { return s.Migrate(ctx) },
	}
	allFailAfterClose(t, calls)
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Close: %v", err)
	}
}

// allFailAfterClose checks that each call fails with an error matching
// instanceai.ErrClosed, and none panics.
func allFailAfterClose(t *testing.T, calls map[string]func() error) {
	t.Helper()
	for name, call := range calls {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s after Close panicked: %v", name, p)
				}
			}()
			if err := call(); !errors.Is(err, instanceai.ErrClosed) {
				t.Errorf("%s after Close: %v, want an error matching instanceai.ErrClosed", name, err)
			}
		}()
	}
}

// testCloseDuringCalls: Close while appends and reads are running. Every
// call returns (it completes or fails, none hangs or panics), and an
// append that reported success did so with a seq in order.
func testCloseDuringCalls(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "t", "owner")
	appendTexts(t, s, "t", 0, 1)
	var wg sync.WaitGroup
	started := make(chan struct{}, 4)
	errs := make([]error, 4)
	for w := range 4 {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[w] = fmt.Errorf("worker %d panicked: %v", w, p)
				}
			}()
			var last int64
			for i := 0; ; i++ {
				if i == 1 {
					started <- struct{}{}
				}
				if w%2 == 0 {
					first, err := s.Append(ctx, "t", []instanceai.Event{textEvent("w"+strconv.Itoa(w), i)})
					if err != nil {
						return
					}
					if first <= last {
						errs[w] = fmt.Errorf("worker %d: Append returned seq %d after %d", w, first, last)
						return
					}
					last = first
				} else if _, err := s.ReadAfter(ctx, "t", 0, 10); err != nil {
					return
				}
			}
		})
	}
	for range 4 {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("calls running at Close did not return")
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
