package instanceai_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// BenchmarkCheckpointCost measures what storing open text in pieces costs
// a long reply: each iteration streams one run of 5,000 deltas (65 KB of
// text) through the writer onto SQLite and waits until its block is
// stored, with the default checkpoint rules (a 16 KiB piece every few
// passes, deleted at the close) and with checkpoints off. "ratio" runs the
// two interleaved, so that disk noise hits both alike, and reports
// on/off.
func BenchmarkCheckpointCost(b *testing.B) {
	store := openCheckpointStore(b, checkpointStores[0].spec(b))
	writer := func(cfg instanceai.WriterConfig) *instanceai.Writer {
		cfg.IdleFlush = time.Hour
		w := instanceai.NewWriter(store, instanceai.NewHub(1<<20), cfg)
		b.Cleanup(func() { _ = w.Close(context.Background()) })
		return w
	}
	on := writer(instanceai.WriterConfig{})
	off := writer(instanceai.WriterConfig{CheckpointBytes: -1, CheckpointInterval: -1})
	// Each writer has a thread of its own, as each thread has one writer.
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t-off", OwnerID: "u"}); err != nil {
		b.Fatal(err)
	}
	threads := map[*instanceai.Writer]string{on: "t", off: "t-off"}
	const deltas = 5000
	runs := 0
	stream := func(b *testing.B, w *instanceai.Writer) time.Duration {
		runs++
		start := time.Now()
		streamReply(b, w, threads[w], runs, deltas)
		return time.Since(start)
	}
	b.Run("on", func(b *testing.B) {
		for b.Loop() {
			stream(b, on)
		}
	})
	b.Run("off", func(b *testing.B) {
		for b.Loop() {
			stream(b, off)
		}
	})
	b.Run("ratio", func(b *testing.B) {
		var tOn, tOff time.Duration
		for b.Loop() {
			tOn += stream(b, on)
			tOff += stream(b, off)
		}
		b.ReportMetric(float64(tOn)/float64(tOff), "on/off")
	})
}

// streamReply streams run i, n deltas of text, through w into thread and
// waits until it is stored.
func streamReply(tb testing.TB, w *instanceai.Writer, thread string, i, n int) {
	runID := fmt.Sprintf("run-%d", i)
	orch := instanceai.OrchestratorAgentID(runID)
	chunk := strings.Repeat("x", 12) + " "
	emit := func(ev instanceai.Event) {
		ev.RunID, ev.AgentID, ev.UserID, ev.TS = runID, orch, "u", 1
		if err := w.Enqueue(thread, ev); err != nil {
			tb.Fatal(err)
		}
	}
	emit(instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}})
	for range n {
		emit(instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: runID, Payload: &instanceai.Text{Text: chunk}})
	}
	emit(instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}})
	if err := w.Sync(context.Background(), thread); err != nil {
		tb.Fatal(err)
	}
}
