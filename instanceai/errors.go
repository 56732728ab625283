package instanceai

import "fmt"

// RunActiveError is Start's refusal of a thread whose run is active, here
// or on another instance; it names that run so a client can follow or
// cancel it. errors.Is(err, ErrRunActive) holds.
type RunActiveError struct {
	ThreadID, RunID string
}

func (e *RunActiveError) Error() string {
	return fmt.Sprintf("thread %q already has an active run; cancel it or wait for its run-finish", e.ThreadID)
}

// Is makes the error match ErrRunActive.
func (e *RunActiveError) Is(target error) bool { return target == ErrRunActive }

// ThreadNotFoundError is returned for a thread that does not exist or that
// another user owns: the two are one answer, so a thread id reveals
// nothing of other users' threads. errors.Is(err, ErrNotFound) holds.
type ThreadNotFoundError struct {
	ThreadID string
}

func (e *ThreadNotFoundError) Error() string {
	return fmt.Sprintf("thread %q does not exist", e.ThreadID)
}

// Is makes the error match ErrNotFound.
func (e *ThreadNotFoundError) Is(target error) bool { return target == ErrNotFound }

// InvalidRunIDError is Start's refusal of a caller's run id that breaks
// the id rule (ThreadIDRule).
type InvalidRunIDError struct {
	RunID string
}

func (e *InvalidRunIDError) Error() string {
	return fmt.Sprintf("run id %q is not valid: it %s", e.RunID, ThreadIDRule)
}

// ErrRunTakenOver is why events of a run were not stored: another
// instance took the run's claim (its lease ran out here, a frozen database
// link or a stalled process) and settles the run.
var ErrRunTakenOver = &NotStoredError{Fate: FateTakenOver}

// The fates of events the writer did not store (NotStoredError.Fate).
const (
	// FateTakenOver: another instance took the run over.
	FateTakenOver = "run_taken_over"
	// FateStorageFailed: the store refused them past the retries; the run
	// ended with storage_unavailable.
	FateStorageFailed = "storage_unavailable"
	// FateRefused: the event cannot be stored at all (see the log line).
	FateRefused = "not_storable"
)

// NotStoredError says that events handed to the writer were dropped
// instead of stored, and why: their run's fate. Run.Sync returns it, so
// that no producer is told its events are in the log when they are not.
type NotStoredError struct {
	Fate string
	Err  error
}

func (e *NotStoredError) Error() string {
	switch e.Fate {
	case FateTakenOver:
		return "the run's events were not stored: another instance took the run over (its lease ran out on this one) and settles it"
	case FateStorageFailed:
		return fmt.Sprintf("the run's events were not stored: the store failed (%v), and the run ended with storage_unavailable", e.Err)
	default:
		return fmt.Sprintf("an event of the run was not stored: %v", e.Err)
	}
}

func (e *NotStoredError) Unwrap() error { return e.Err }
