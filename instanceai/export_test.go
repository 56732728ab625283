package instanceai

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
