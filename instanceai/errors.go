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
