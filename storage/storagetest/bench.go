package storagetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// BatchSize is the number of events per Append in BenchAppend.
const BatchSize = 64

// RawAppend is a backend's baseline for BenchAppend: the same events written
// with a hand-written batched INSERT (or its equivalent) at seqs chosen by
// the caller, with no counter row, no transaction of its own and nothing the
// Store adds. It must encode the events itself, as Append does.
type RawAppend func(ctx context.Context, threadID string, firstSeq int64, events []instanceai.Event) error

// rate is one measurement.
type rate struct {
	events  int
	elapsed time.Duration
}

func (r rate) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.events) / r.elapsed.Seconds()
}

// BenchAppend measures s.Append against raw, on the same database in the
// same run, with batches of BatchSize typical events. Sub-benchmarks:
//
//	store  Append alone; reports events/s
//	raw    the baseline alone; reports events/s
//	ratio  one store batch and one raw batch per iteration, alternating
//	       which goes first, each timed on its own; reports both rates and
//	       store/raw, store's events/s divided by raw's (1 means the store
//	       costs nothing over a bare INSERT; 0.5 means half as fast)
//	fenced, fenced-ratio
//	       as store and ratio, for AppendFenced with every event under
//	       the token of the thread's run (when the store is a
//	       FencedAppender): what checking the token costs
//
// The ratio interleaves the two because a commit's cost is dominated by the
// disk's sync latency, which drifts over seconds: measured back to back, the
// two halves would see different disks. ns/op of ratio is the pair's time.
func BenchAppend(b *testing.B, s instanceai.Store, raw RawAppend) {
	ctx := context.Background()
	batch := TypicalBatch("run-bench", BatchSize)
	threads := 0
	newThread := func(tb testing.TB, kind string) string {
		threads++
		id := fmt.Sprintf("bench-%s-%d-%d", kind, time.Now().UnixNano(), threads)
		if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "bench"}); err != nil {
			tb.Fatalf("EnsureThread: %v", err)
		}
		return id
	}
	// appendRaw writes the next batch of a raw thread; next counts its
	// seqs, since raw has no counter of its own.
	appendRaw := func(b *testing.B, id string, next *int64) {
		if err := raw(ctx, id, *next, batch); err != nil {
			b.Fatalf("raw append: %v", err)
		}
		*next += BatchSize
	}
	appendStore := func(b *testing.B, id string) {
		if _, err := s.Append(ctx, id, batch); err != nil {
			b.Fatalf("Append: %v", err)
		}
	}

	b.Run("store", func(b *testing.B) {
		id := newThread(b, "store")
		throughput(b, func() { appendStore(b, id) })
	})
	b.Run("raw", func(b *testing.B) {
		id, next := newThread(b, "raw"), int64(1)
		throughput(b, func() { appendRaw(b, id, &next) })
	})
	b.Run("ratio", func(b *testing.B) {
		storeID := newThread(b, "store")
		rawID, next := newThread(b, "raw"), int64(1)
		interleave(b, "store", func() { appendStore(b, storeID) }, func() { appendRaw(b, rawID, &next) })
	})

	var fa instanceai.FencedAppender = s
	// fencedThread is a thread whose run holds its row, and the run's
	// token for every event of a batch.
	fencedThread := func(b *testing.B) (string, []int64) {
		id := newThread(b, "fenced")
		row, err := s.ClaimThread(ctx, id, "run-bench", "bench", time.Hour)
		if err != nil {
			b.Fatalf("ClaimThread: %v", err)
		}
		fences := make([]int64, BatchSize)
		for i := range fences {
			fences[i] = row.Fence
		}
		return id, fences
	}
	appendFenced := func(b *testing.B, id string, fences []int64) {
		data := make([][]byte, len(batch))
		for i := range batch {
			var err error
			if data[i], err = json.Marshal(&batch[i]); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := fa.AppendFenced(ctx, id, batch, data, fences); err != nil {
			b.Fatalf("AppendFenced: %v", err)
		}
	}
	b.Run("fenced", func(b *testing.B) {
		id, fences := fencedThread(b)
		throughput(b, func() { appendFenced(b, id, fences) })
	})
	b.Run("fenced-ratio", func(b *testing.B) {
		id, fences := fencedThread(b)
		rawID, next := newThread(b, "raw"), int64(1)
		interleave(b, "fenced", func() { appendFenced(b, id, fences) }, func() { appendRaw(b, rawID, &next) })
	})
}

// BenchWriter measures the whole write path — instanceai.Writer taking
// events from a producer, batching them, appending them to s and publishing
// them to a hub with a live subscriber — against raw, the hand-written
// batched INSERT of the same rows, on the same database in the same run.
// Each iteration hands BatchSize events to the writer and waits until they
// are stored and published. Sub-benchmarks as in BenchAppend: writer, raw,
// and ratio (writer/raw, interleaved so disk noise hits both alike).
func BenchWriter(b *testing.B, s instanceai.Store, raw RawAppend) {
	ctx := context.Background()
	batch := TypicalBatch("run-bench", BatchSize)
	threads := 0
	newThread := func(tb testing.TB, kind string) string {
		threads++
		id := fmt.Sprintf("benchw-%s-%d-%d", kind, time.Now().UnixNano(), threads)
		if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "bench"}); err != nil {
			tb.Fatalf("EnsureThread: %v", err)
		}
		return id
	}
	hub := instanceai.NewHub(1 << 20)
	writer := instanceai.NewWriter(s, hub, instanceai.WriterConfig{})
	b.Cleanup(func() { _ = writer.Close(ctx) })

	// A live subscriber per thread, drained in the background, so the
	// measured path includes the fan-out the server always does.
	subscribe := func(id string) {
		sub, _ := hub.Subscribe(id)
		sctx, cancel := context.WithCancel(ctx)
		b.Cleanup(func() { cancel(); sub.Close() })
		go func() {
			for {
				if _, err := sub.Next(sctx); err != nil {
					return
				}
			}
		}()
	}
	viaWriter := func(b *testing.B, id string) {
		for _, ev := range batch {
			if err := writer.Enqueue(id, ev); err != nil {
				b.Fatalf("Enqueue: %v", err)
			}
		}
		if err := writer.Sync(ctx, id); err != nil {
			b.Fatalf("Sync: %v", err)
		}
	}
	appendRaw := func(b *testing.B, id string, next *int64) {
		if err := raw(ctx, id, *next, batch); err != nil {
			b.Fatalf("raw append: %v", err)
		}
		*next += BatchSize
	}

	b.Run("writer", func(b *testing.B) {
		id := newThread(b, "writer")
		subscribe(id)
		throughput(b, func() { viaWriter(b, id) })
	})
	b.Run("raw", func(b *testing.B) {
		id, next := newThread(b, "raw"), int64(1)
		throughput(b, func() { appendRaw(b, id, &next) })
	})
	b.Run("ratio", func(b *testing.B) {
		writerID := newThread(b, "writer")
		subscribe(writerID)
		rawID, next := newThread(b, "raw"), int64(1)
		interleave(b, "writer", func() { viaWriter(b, writerID) }, func() { appendRaw(b, rawID, &next) })
	})
}

// interleave times measured and raw batch by batch, alternating which goes
// first so that disk and scheduler noise hits both alike, and reports both
// rates and their ratio (name/raw).
func interleave(b *testing.B, name string, measured, raw func()) {
	var m, r rate
	timed := func(into *rate, f func()) {
		t0 := time.Now()
		f()
		into.elapsed += time.Since(t0)
		into.events += BatchSize
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(&m, measured)
			timed(&r, raw)
		} else {
			timed(&r, raw)
			timed(&m, measured)
		}
		i++
	}
	if r.perSecond() == 0 {
		b.Fatal("the raw baseline measured no events")
	}
	b.ReportMetric(m.perSecond(), name+"-events/s")
	b.ReportMetric(r.perSecond(), "raw-events/s")
	b.ReportMetric(m.perSecond()/r.perSecond(), name+"/raw")
}

// throughput runs one batch per iteration and reports events/s.
func throughput(b *testing.B, batch func()) {
	n := 0
	for b.Loop() {
		batch()
		n++
	}
	b.ReportMetric(rate{n * BatchSize, b.Elapsed()}.perSecond(), "events/s")
}
