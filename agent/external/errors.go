package external

import (
	"errors"
	"fmt"
)

// The producer domain's refusals. Each typed error below wraps one of
// these, so a caller may test with errors.Is and read the details with
// errors.As.
var (
	// ErrRunNotFound: no producer drives the run on this instance.
	ErrRunNotFound = errors.New("no producer drives the run here")
	// ErrRunOnAnotherInstance: the run is active, driven from another
	// instance.
	ErrRunOnAnotherInstance = errors.New("the run is driven from another instance")
	// ErrProducerConflict: the run is driven by another producer id.
	ErrProducerConflict = errors.New("the run is driven by another producer")
	// ErrProducerFenced: an append of an epoch older than the producer's.
	ErrProducerFenced = errors.New("the producer's epoch is fenced off")
	// ErrSequenceGap: an append whose first sequence number is past the
	// next one.
	ErrSequenceGap = errors.New("the append leaves a gap in the sequence")
	// ErrRunCancelled: the run was cancelled; its producer appends no
	// more.
	ErrRunCancelled = errors.New("the run was cancelled")
	// ErrNotAppendable: an event type a producer does not append.
	ErrNotAppendable = errors.New("a producer does not append")
)

// RunNotFoundError is ErrRunNotFound for one run.
type RunNotFoundError struct{ ThreadID, RunID string }

func (e *RunNotFoundError) Error() string {
	return fmt.Sprintf("no producer drives a run %q of thread %q: it ended (finished, cancelled, or settled after its instance or producer was gone), never began, or is an agent's",
		e.RunID, e.ThreadID)
}

func (e *RunNotFoundError) Unwrap() error { return ErrRunNotFound }

// RunOnAnotherInstanceError is ErrRunOnAnotherInstance: Instance holds
// the run.
type RunOnAnotherInstanceError struct{ ThreadID, RunID, Instance string }

func (e *RunOnAnotherInstanceError) Error() string {
	return fmt.Sprintf("run %q of thread %q is driven from another instance (%s): a producer appends to the instance that started its run; route its requests there (by thread or by run)",
		e.RunID, e.ThreadID, e.Instance)
}

func (e *RunOnAnotherInstanceError) Unwrap() error { return ErrRunOnAnotherInstance }

// FencedError is ErrProducerFenced: Epoch was sent, Current has taken
// over.
type FencedError struct{ Epoch, Current int64 }

func (e *FencedError) Error() string {
	return fmt.Sprintf("epoch %d is fenced off: epoch %d of this producer has taken over", e.Epoch, e.Current)
}

func (e *FencedError) Unwrap() error { return ErrProducerFenced }

// SequenceGapError is ErrSequenceGap: Seq was sent, Next is expected.
type SequenceGapError struct{ Seq, Next int64 }

func (e *SequenceGapError) Error() string {
	return fmt.Sprintf("sequence number %d leaves a gap: the next event is %d", e.Seq, e.Next)
}

func (e *SequenceGapError) Unwrap() error { return ErrSequenceGap }

// RefusedError is an event of an append that the run's door refused: it
// breaks a rule of the log (*instanceai.RuleError) or a size bound
// (*instanceai.LimitError). Index is its place in the append; nothing of
// it or after it was stored, and the run goes on (unless the bound ended
// it).
type RefusedError struct {
	Index int
	Err   error
}

func (e *RefusedError) Error() string { return fmt.Sprintf("event %d: %v", e.Index, e.Err) }

func (e *RefusedError) Unwrap() error { return e.Err }
