package instanceai

// MaxDrainPass exposes maxDrainPass to the external tests.
const MaxDrainPass = maxDrainPass

// OnRunFinished sets the writer's stored-run-finish callback, which the run
// registry sets in production.
func OnRunFinished(w *Writer, f func(threadID, runID string, fence int64)) { w.onRunFinished(f) }
