package instanceai

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
)

// ErrSubscriberDropped is reported by a subscription whose queue overflowed.
var ErrSubscriberDropped = errors.New("subscriber fell behind and was disconnected")

// ErrThreadClosed is reported by a subscription whose thread was deleted.
var ErrThreadClosed = errors.New("thread was deleted")

// Subscription is one live subscriber's bounded queue.
type Subscription struct {
	hub      *Hub
	threadID string
	topic    *topic

	mu sync.Mutex
	// queue holds the published batches not taken yet, each shared with
	// every subscriber it was offered to (frames are never copied per
	// subscriber); queued counts their frames, which the bound applies to.
	queue  [][]Frame
	spare  [][]Frame
	queued int
	// queuedBytes is the bytes of the queued frames' encodings, which a
	// second bound applies to (Hub.LimitQueueBytes).
	queuedBytes int
	notify      chan struct{}
	// wake, when set, is called instead of signalling notify (which is
	// then nil): a consumer with no goroutine of its own waiting (see
	// Feed.Poll) is told this way that there is something to take.
	wake func()
	// parked is set by a subscriber about to wait for notify, so that
	// publishers signal only subscribers that are actually waiting.
	parked bool
	err    error
	closed bool
}

// Snapshot is what a subscriber gets at registration: the state published
// so far that its replay must line up with.
type Snapshot struct {
	// Committed is the highest seq published before the subscription began.
	Committed int64
	// Open are the still-open segments, as one id-less delta each, in the
	// order they opened: the text the hub passed on of each, without a
	// gap from its start.
	Open []Event
	// OpenAfter are the After of each open segment's first delta
	// (negative: unknown): a block or run-finish with a later seq closed
	// the segment, though the hub has not seen it yet.
	OpenAfter []int64
}

// Subscribe registers a subscriber and, atomically with it, captures the
// snapshot its replay must reach: every frame published later lands in the
// subscription's queue, every earlier one is in the log (seq <= Committed)
// or in Snapshot.Open.
func (h *Hub) Subscribe(threadID string) (*Subscription, Snapshot) {
	return h.subscribe(threadID, nil)
}

// subscribe is Subscribe for a subscriber woken by calling wake (which
// must not block) rather than by a channel, when wake is set.
func (h *Hub) subscribe(threadID string, wake func()) (*Subscription, Snapshot) {
	s := &Subscription{hub: h, threadID: threadID, wake: wake}
	if wake == nil {
		s.notify = make(chan struct{}, 1)
	}
	t := h.lockedTopic(threadID)
	s.topic = t
	t.subs[s] = struct{}{}
	snap := Snapshot{Committed: t.committed}
	snap.Open, snap.OpenAfter = t.ledger.snapshot()
	first := !t.watched
	t.watched = true
	t.mu.Unlock()
	if first {
		h.watchChanged(threadID)
	}
	return s, snap
}

// unparkAndUnlock releases s.mu and, if the subscriber was waiting, wakes
// it: publishers signal only subscribers that are actually parked.
func (s *Subscription) unparkAndUnlock() {
	wake := s.parked
	s.parked = false
	s.mu.Unlock()
	if !wake {
		return
	}
	if s.wake != nil {
		s.wake()
		return
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns, without waiting, the queued batches. The batches' outer
// slice is the subscription's own and is reused by the take after next:
// the caller must be done with it when it calls take again (one consumer
// at a time).
func (s *Subscription) take() (batches [][]Frame, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.err
	}
	batches = s.queue
	// The spare was handed out by the previous take, whose caller is done
	// with it now: cleared (so it holds no frames alive) and reused, unless
	// a burst grew it beyond what an idle subscriber should keep.
	clear(s.spare)
	s.queue, s.spare = s.spare[:0], batches
	if cap(s.queue) > maxSpareBatches {
		s.queue = nil
	}
	s.queued, s.queuedBytes = 0, 0
	return batches, nil
}

// maxSpareBatches bounds the outer slice a subscription keeps for reuse.
const maxSpareBatches = 16

// offer appends frames (of size bytes) to the queue without blocking; it
// reports false (and closes the subscription) when the subscriber is a
// full queue behind, in frames or bytes, even after its queued deltas were
// merged (see compact). The bound is on the backlog before the batch, so
// that a reader that keeps up is never dropped for the size of one batch;
// what a slow one holds is at most the queue's bounds plus one batch.
func (s *Subscription) offer(frames []Frame, size int) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if s.full() {
		s.compact()
	}
	if s.full() {
		s.mu.Unlock()
		s.close(ErrSubscriberDropped)
		return false
	}
	// Capped, so that no consumer's append can write into the shared batch.
	s.queue = append(s.queue, frames[:len(frames):len(frames)])
	s.queued += len(frames)
	s.queuedBytes += size
	s.unparkAndUnlock()
	return true
}

// full reports whether the queue reached a bound. The caller holds s.mu.
func (s *Subscription) full() bool {
	return s.queued >= s.hub.queueSize || s.queuedBytes >= s.hub.queueBytes
}

// compact merges each run of adjacent deltas of one segment in the queue
// into one delta, for a subscriber that fell a full queue behind: a client
// folds "ab" exactly as "a" then "b" (deltas carry no id, and the fold
// appends deltas of one segment to one entry), so a reader slowed by a burst
// of tokens catches up instead of being dropped. Stored frames and deltas
// of different segments are never merged or reordered. The published
// batches stay as they are: they are shared with the other subscribers.
// The caller holds s.mu.
func (s *Subscription) compact() {
	out := make([]Frame, 0, s.queued)
	var run []*Frame // adjacent deltas of one segment, not yet in out
	flush := func() {
		switch len(run) {
		case 0:
		case 1:
			out = append(out, *run[0])
		default:
			if merged, ok := mergeDeltas(run); ok {
				out = append(out, merged)
			} else {
				for _, fr := range run {
					out = append(out, *fr)
				}
			}
		}
		run = run[:0]
	}
	for _, batch := range s.queue {
		for i := range batch {
			fr := &batch[i]
			if !isDeltaFrame(fr) {
				flush()
				out = append(out, *fr)
				continue
			}
			if len(run) > 0 && !sameSegment(run[0].Event, fr.Event) {
				flush()
			}
			run = append(run, fr)
		}
	}
	flush()
	s.queue, s.spare, s.queued, s.queuedBytes = [][]Frame{out}, nil, len(out), framesBytes(out)
}

func isDeltaFrame(fr *Frame) bool {
	return fr.Seq == 0 && !fr.Hidden && (fr.Event.Type == TypeTextDelta || fr.Event.Type == TypeReasoningDelta)
}

func sameSegment(a, b *Event) bool {
	return a.Type == b.Type && a.RunID == b.RunID && a.AgentID == b.AgentID &&
		a.ResponseID == b.ResponseID && a.UserID == b.UserID
}

// mergeDeltas is one delta with the text of run's deltas, in order, and the
// first one's envelope.
func mergeDeltas(run []*Frame) (Frame, bool) {
	var text strings.Builder
	for _, fr := range run {
		p, ok := fr.Event.Payload.(*Text)
		if !ok {
			return Frame{}, false
		}
		text.WriteString(p.Text)
	}
	ev := *run[0].Event
	ev.Payload = &Text{Text: text.String()}
	merged, err := NewFrame(0, &ev)
	// The deltas are adjacent in one queue, which the hub fills with
	// deltas that continue one another: the merged one stands where the
	// first did.
	merged.Offset, merged.HasOffset, merged.After = run[0].Offset, run[0].HasOffset, run[0].After
	return merged, err == nil
}

func (s *Subscription) close(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed, s.err = true, err
	s.queue, s.spare, s.queued, s.queuedBytes = nil, nil, 0, 0
	if s.notify != nil {
		close(s.notify)
	}
	wake := s.parked && s.wake != nil
	s.parked = false
	s.mu.Unlock()
	if wake {
		s.wake()
	}
}

// Next waits for queued frames and returns all of them, in publish order.
// It returns an error when the subscription was dropped
// (ErrSubscriberDropped), its thread forgotten (ErrThreadClosed) or it was
// closed (context.Canceled), at once and even if frames were queued, or
// when ctx ended (ctx.Err()). One goroutine at a time may call it.
func (s *Subscription) Next(ctx context.Context) ([]Frame, error) {
	for {
		s.mu.Lock()
		if s.closed {
			err := s.err
			s.mu.Unlock()
			return nil, err
		}
		if s.queued > 0 {
			q := s.queue
			s.queue, s.queued, s.queuedBytes = nil, 0, 0
			s.mu.Unlock()
			return flatten(q), nil
		}
		s.parked = true
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.notify:
		}
	}
}

// flatten returns the frames of batches in order: the one batch itself
// when there is one (it is shared, and capped), else a copy.
func flatten(batches [][]Frame) []Frame {
	var n int
	var last []Frame
	for _, b := range batches {
		if len(b) > 0 {
			n, last = n+1, b
		}
	}
	if n <= 1 {
		return last
	}
	return slices.Concat(batches...)
}

// wait reports whether frames are queued or the subscription ended. If not,
// it marks the subscriber parked and returns the channel a publisher will
// signal, for a select that also serves heartbeats and cancellation.
func (s *Subscription) wait() (ready bool, ch <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queued > 0 || s.closed {
		return true, nil
	}
	s.parked = true
	return false, s.notify
}

// Close unsubscribes: no frame published afterwards reaches it, queued
// ones are discarded and Next returns context.Canceled. Closing again, or
// after a drop, does nothing.
func (s *Subscription) Close() {
	s.topic.mu.Lock()
	delete(s.topic.subs, s)
	s.topic.mu.Unlock()
	s.close(context.Canceled)
}
