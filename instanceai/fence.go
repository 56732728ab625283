package instanceai

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// fence is a claim's fencing token (see RunClaims) as its holder in this
// process knows it: a run's, a background agent's, or a settlement's. The
// holder and every event it queues share it, and the writer reads it when
// it commits an event, not when the event was queued: a run suspended on
// a confirmation takes its claim again when it goes on (see Run.retake),
// which gives it a new token, while what it queued before may still wait
// in the writer.
type fence struct {
	// mu is held while the claim changes hands within this process (a
	// retake): whoever judges the token by the claims table (the writer
	// refused for it, the heartbeat) waits for the outcome, rather than
	// take a token that is about to be replaced for a lost one.
	mu sync.Mutex
	v  atomic.Int64
	// runID and agentID name the claim: agentID is "" for a run's.
	runID, agentID string
	// lost is set once the log refused the claim's token: another
	// instance took it.
	lost atomic.Bool
	// fate is why the writer dropped an event written under the claim
	// (nil: it dropped none), the first reason it had: what Run.Sync
	// reports to whoever waits for the events to be stored.
	fate atomic.Pointer[error]
	// span is the span of the run the claim writes for (invalid when
	// tracing is off): the writer's appends of its events are its
	// children.
	span trace.SpanContext
	// settles marks a settlement's holder: what it writes is made from
	// the log once the run's own writers stopped, so a failure of the
	// run's earlier events, which drops whatever they still queue, does
	// not drop it (see threadDrain.add).
	settles bool
}

func newFence(runID, agentID string, token int64) *fence {
	f := &fence{runID: runID, agentID: agentID}
	f.v.Store(token)
	return f
}

// newSettlement is newFence for a settlement (see fence.settles).
func newSettlement(runID, agentID string, token int64) *fence {
	f := newFence(runID, agentID, token)
	f.settles = true
	return f
}

// settlement reports whether f is a settlement's holder.
func (f *fence) settlement() bool { return f != nil && f.settles }

// token is the current token; 0 for no holder.
func (f *fence) token() int64 {
	if f == nil {
		return 0
	}
	return f.v.Load()
}

// settled is the current token once no change of hands is under way.
func (f *fence) settled() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v.Load()
}

// lose records that an event written under the claim was not stored, and
// why; the first reason stays. A nil holder has no one to tell.
func (f *fence) lose(why error) {
	if f == nil || why == nil {
		return
	}
	f.fate.CompareAndSwap(nil, &why)
}

// lostWith is why an event written under the claim was not stored (nil:
// none was dropped).
func (f *fence) lostWith() error {
	if f == nil {
		return nil
	}
	if p := f.fate.Load(); p != nil {
		return *p
	}
	return nil
}
