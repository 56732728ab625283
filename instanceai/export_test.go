package instanceai

import (
	"encoding/json"
	"fmt"
)

// MaxDrainPass exposes maxDrainPass to the external tests.
const MaxDrainPass = maxDrainPass

// OnRunFinished sets the writer's stored-run-finish callback, which the run
// registry sets in production.
func OnRunFinished(w *Writer, f func(threadID, runID string, fence int64)) { w.onRunFinished(f) }

// Fence is a claim's token holder, for tests that queue events under one.
type Fence = fence

// NewFence returns a holder of token for a run's claim (agentID "") or a
// background agent's.
func NewFence(runID, agentID string, token int64) *Fence { return newFence(runID, agentID, token) }

// EnqueueFenced queues ev under f's claim, as the run registry does.
func EnqueueFenced(w *Writer, threadID string, ev Event, f *Fence) error {
	return w.enqueue(threadID, ev, f)
}

// Drains returns how many threads the writer holds state for.
func Drains(w *Writer) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.threads)
}

// QueuedBytes returns what the thread's queue holds (see awaitRoom).
func QueuedBytes(w *Writer, threadID string) int {
	d := w.drain(threadID)
	if d == nil {
		return 0
	}
	return d.queue.queuedBytes()
}

// EscapedLen and CutEscaped expose the door's measure of a segment's text.
var (
	EscapedLen = escapedLen
	CutEscaped = cutEscaped
)

// RowsOf is what a log answers ReadRowsAfter with when it holds events:
// the rows of those ReadAfter returned, encoded again where they came
// without their bytes, cut at maxBytes as RowReader says. A test's log
// that keeps only events reads its rows so.
func RowsOf(events []StoredEvent, maxBytes int) ([]StoredRow, error) {
	out := make([]StoredRow, 0, len(events))
	size := 0
	for i := range events {
		if maxBytes > 0 && size >= maxBytes {
			break
		}
		e := &events[i]
		data := e.Data
		if len(data) == 0 {
			var err error
			if data, err = json.Marshal(&e.Event); err != nil {
				return nil, fmt.Errorf("encode event %d: %w", e.Seq, err)
			}
		}
		size += len(data)
		out = append(out, StoredRow{Seq: e.Seq, Type: e.Event.Type, RunID: e.Event.RunID, Data: data})
	}
	return out, nil
}

// PageOf is RowsOf as ReadPage answers q, each row's bytes left out for
// q.SizesOnly.
func PageOf(events []StoredEvent, q PageQuery) ([]StoredRow, error) {
	rows, err := RowsOf(events, q.MaxBytes)
	if err != nil || !q.SizesOnly {
		return rows, err
	}
	for i := range rows {
		rows[i].Size, rows[i].Data = len(rows[i].Data), nil
	}
	return rows, nil
}
