package memory

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/storagetest"
)

func TestContract(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) instanceai.Store {
		// The suite needs more than the default window per thread.
		return New(WithMaxEvents(1<<20), WithMaxBytes(1<<30))
	})
}

func TestRetention(t *testing.T) {
	storagetest.RunRetention(t, func(t *testing.T) instanceai.Store { return New() })
}

func TestBuilderContract(t *testing.T) {
	storagetest.RunBuilder(t, func(t *testing.T) storagetest.BuilderStore { return New() })
}

func text(i int, size int) instanceai.Event {
	label := "e" + strconv.Itoa(i) + ":"
	return instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "r", AgentID: "a",
		Payload: &instanceai.Text{Text: label + strings.Repeat("x", max(0, size-len(label)))}}
}

func encodedLen(t *testing.T, e instanceai.Event) int {
	t.Helper()
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// retained returns the seqs a full read returns and checks each event is
// the one appended at that seq (text(seq-1, ...)).
func retained(t *testing.T, s *Store, thread string, after int64) []int64 {
	t.Helper()
	got, err := s.ReadAfter(context.Background(), thread, after, 0)
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]int64, len(got))
	for i, se := range got {
		seqs[i] = se.Seq
		want := "e" + strconv.FormatInt(se.Seq-1, 10) + ":"
		if p := se.Event.Payload.(*instanceai.Text); !strings.HasPrefix(p.Text, want) {
			t.Fatalf("seq %d holds %.20q, want the event appended at that seq", se.Seq, p.Text)
		}
	}
	return seqs
}

func span(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func appendN(t *testing.T, s *Store, thread string, from, n, size int) int64 {
	t.Helper()
	batch := make([]instanceai.Event, n)
	for i := range batch {
		batch[i] = text(from+i, size)
	}
	first, err := s.Append(context.Background(), thread, batch)
	if err != nil {
		t.Fatal(err)
	}
	if first != int64(from+1) {
		t.Fatalf("Append returned first seq %d, want %d", first, from+1)
	}
	return first
}

func newThread(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, _, err := s.EnsureThread(context.Background(), instanceai.Thread{ID: id, OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
}

func TestEvictionByCount(t *testing.T) {
	ctx := context.Background()
	s := New(WithMaxEvents(10))
	newThread(t, s, "t")
	// 25 events in batches of 3 and 1: the window slides, seqs keep counting.
	for from := 0; from < 24; from += 3 {
		appendN(t, s, "t", from, 3, 20)
	}
	appendN(t, s, "t", 24, 1, 20)
	if got := retained(t, s, "t", 0); !equal(got, span(16, 25)) {
		t.Fatalf("retained %v, want 16..25", got)
	}
	// A cursor inside the evicted range gets what is left; one inside the
	// window gets the rest after it.
	if got := retained(t, s, "t", 5); !equal(got, span(16, 25)) {
		t.Fatalf("ReadAfter(5) = %v, want 16..25", got)
	}
	if got := retained(t, s, "t", 20); !equal(got, span(21, 25)) {
		t.Fatalf("ReadAfter(20) = %v, want 21..25", got)
	}
	if got := retained(t, s, "t", math.MinInt64); !equal(got, span(16, 25)) {
		t.Fatalf("ReadAfter(MinInt64) = %v, want 16..25", got)
	}
	if got := retained(t, s, "t", math.MaxInt64); len(got) != 0 {
		t.Fatalf("ReadAfter(MaxInt64) = %v, want none", got)
	}
	if next, err := s.NextSeq(ctx, "t"); err != nil || next != 26 {
		t.Fatalf("NextSeq = %d, %v; want 26", next, err)
	}
	// A batch larger than the window keeps its newest events.
	appendN(t, s, "t", 25, 15, 20)
	if got := retained(t, s, "t", 0); !equal(got, span(31, 40)) {
		t.Fatalf("after a 15-event batch retained %v, want 31..40", got)
	}
}

func TestEvictionByBytes(t *testing.T) {
	ctx := context.Background()
	size := encodedLen(t, text(0, 100))
	if encodedLen(t, text(99, 100)) != size {
		t.Fatal("test events must all encode to the same size")
	}
	// Room for 4 events and a bit.
	s := New(WithMaxEvents(1000), WithMaxBytes(int64(4*size+size/2)))
	newThread(t, s, "t")
	for i := range 10 {
		appendN(t, s, "t", i, 1, 100)
	}
	if got := retained(t, s, "t", 0); !equal(got, span(7, 10)) {
		t.Fatalf("retained %v, want 7..10", got)
	}
	// One event larger than the whole budget is kept, alone.
	if _, err := s.Append(ctx, "t", []instanceai.Event{text(10, 10*size)}); err != nil {
		t.Fatal(err)
	}
	if got := retained(t, s, "t", 0); !equal(got, []int64{11}) {
		t.Fatalf("after an oversized event retained %v, want [11]", got)
	}
	// and pushed out by the next one.
	appendN(t, s, "t", 11, 1, 100)
	if got := retained(t, s, "t", 0); !equal(got, []int64{12}) {
		t.Fatalf("retained %v, want [12]", got)
	}
	if next, err := s.NextSeq(ctx, "t"); err != nil || next != 13 {
		t.Fatalf("NextSeq = %d, %v; want 13", next, err)
	}
}

func TestDefaults(t *testing.T) {
	s := New()
	newThread(t, s, "count")
	appendN(t, s, "count", 0, 600, 50)
	if got := retained(t, s, "count", 0); !equal(got, span(101, 600)) {
		t.Fatalf("default window by count: retained %d events from %d, want 101..600", len(got), got[0])
	}

	// 10 KB events: 2 MB holds 209 of them (at a little over 10,000 bytes each).
	newThread(t, s, "bytes")
	size := encodedLen(t, text(0, 10_000))
	appendN(t, s, "bytes", 0, 300, 10_000)
	want := DefaultMaxBytes / size
	got := retained(t, s, "bytes", 0)
	if len(got) != want || got[len(got)-1] != 300 {
		t.Fatalf("default window by bytes: retained %d events ending at %d, want %d ending at 300", len(got), got[len(got)-1], want)
	}
}

// Eviction under concurrent appenders still leaves a contiguous window that
// ends at the last seq handed out.
func TestEvictionConcurrent(t *testing.T) {
	ctx := context.Background()
	s := New(WithMaxEvents(50))
	newThread(t, s, "t")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := s.Append(ctx, "t", []instanceai.Event{text(0, 10), text(1, 10)}); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.ReadAfter(ctx, "t", 0, 10); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := s.ReadAfter(ctx, "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 50 || got[0].Seq != 1551 || got[49].Seq != 1600 {
		t.Fatalf("window = %d events %d..%d, want 50 events 1551..1600", len(got), got[0].Seq, got[len(got)-1].Seq)
	}
}

// A bare map-and-slice append of the encoded events: the least any
// in-memory log could do.
func rawAppend() storagetest.RawAppend {
	var mu sync.Mutex
	var log [][]byte
	return func(_ context.Context, _ string, _ int64, events []instanceai.Event) error {
		encoded := make([][]byte, len(events))
		for i := range events {
			b, err := json.Marshal(&events[i])
			if err != nil {
				return err
			}
			encoded[i] = b
		}
		mu.Lock()
		defer mu.Unlock()
		log = append(log, encoded...)
		if len(log) > 2*DefaultMaxEvents {
			// Bounded like the store, so that a long run does not grow
			// without end; trimming rarely keeps the cost amortised.
			log = append(log[:0], log[len(log)-DefaultMaxEvents:]...)
		}
		return nil
	}
}

func BenchmarkAppend(b *testing.B) {
	storagetest.BenchAppend(b, New(), rawAppend())
}

func BenchmarkWriter(b *testing.B) {
	storagetest.BenchWriter(b, New(WithMaxEvents(1<<30), WithMaxBytes(1<<40)), rawAppend())
}
