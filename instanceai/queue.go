package instanceai

import "sync"

// The queue: what producers hand a thread's drain, and how a producer
// faster than the drain is slowed to its pace.

// queueRoomEvents is how many of the largest events a thread's queue
// holds before its producers wait for the drain (see awaitRoom).
const queueRoomEvents = 4

// maxDrainPass bounds the events one drain pass takes from the queue. A
// producer faster than the drain (an agent emitting deltas in a loop)
// queues tens of thousands of events during one pass; published as one
// batch they would overflow every subscriber's queue at once, however fast
// it reads (a batch reaches a subscriber whole or not at all). A pass of
// this size is one multi-row append and one publish that fit a default
// queue many times over, and costs nothing measurable per event.
const maxDrainPass = 1024

// queued is an event waiting in a drain, with its encoding when its
// producer made it (nil: the drain makes it) and the holder of the token
// it is written under (nil: none).
type queued struct {
	ev    Event
	data  []byte
	fence *fence
}

// queuedSize is what an event takes in a queue, near enough: a delta its
// text, another event its encoding (or a small record's worth).
func queuedSize(ev *Event, data []byte) int {
	if t, ok := ev.Payload.(*Text); ok {
		return len(t.Text) + 256
	}
	return len(data) + 256
}

// waiter is a Sync caller, released once the drain has taken at events.
type waiter struct {
	at   int
	done chan struct{}
}

// threadQueue is what producers share with one thread's drain: the
// events they queued, the Sync callers waiting for them, and the claims
// to discard. Producers and the drain goroutine both use it; its lock is
// held for no more than a slice operation.
type threadQueue struct {
	// wake tells the drain there is work: an event, a waiter, a stop.
	wake chan struct{}

	mu    sync.Mutex
	items []queued
	// bytes is what items hold (queuedSize); roomMade, when set, is
	// closed when the drain takes from the queue, for producers waiting
	// in awaitRoom.
	bytes    int
	roomMade chan struct{}
	taken    int // events the drain took so far
	waiters  []waiter
	stop     bool
	drop     []*fence // claims to discard, from dropFence
}

func newThreadQueue() *threadQueue {
	return &threadQueue{wake: make(chan struct{}, 1)}
}

// signal wakes the drain unless a wake is pending already.
func (q *threadQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// push queues an event and wakes the drain.
func (q *threadQueue) push(it queued) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.bytes += queuedSize(&it.ev, it.data)
	q.mu.Unlock()
	q.signal()
}

// queuedBytes is what the queue holds (see awaitRoom).
func (q *threadQueue) queuedBytes() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// full reports whether the queue holds more than room bytes, and then
// returns the channel closed when the drain next takes from it. A
// stopping queue is never full: its producers are not held up.
func (q *threadQueue) full(room int) (<-chan struct{}, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes <= room || q.stop {
		return nil, false
	}
	if q.roomMade == nil {
		q.roomMade = make(chan struct{})
	}
	return q.roomMade, true
}

// await adds a Sync caller for everything queued so far; done is closed
// once the drain has taken it all (see release).
func (q *threadQueue) await(done chan struct{}) {
	q.mu.Lock()
	q.waiters = append(q.waiters, waiter{at: q.taken + len(q.items), done: done})
	q.mu.Unlock()
	q.signal()
}

// dropClaim asks the drain to discard f's claim at its next pass.
func (q *threadQueue) dropClaim(f *fence) {
	q.mu.Lock()
	q.drop = append(q.drop, f)
	q.mu.Unlock()
}

// stopping tells the drain to close what it holds and retire, and lets
// every producer waiting for room go.
func (q *threadQueue) stopping() {
	q.mu.Lock()
	q.stop = true
	q.makeRoom()
	q.mu.Unlock()
	q.signal()
}

// makeRoom releases the producers waiting in awaitRoom. The caller holds
// q.mu.
func (q *threadQueue) makeRoom() {
	if q.roomMade != nil {
		close(q.roomMade)
		q.roomMade = nil
	}
}

// pass is what one drain pass takes from the queue.
type pass struct {
	batch []queued
	// backlog is set when the queue held more than one pass: the drain
	// takes the rest at once.
	backlog bool
	stop    bool
	drop    []*fence
}

// take hands the drain up to maxDrainPass events, the stop flag and the
// claims to discard.
func (q *threadQueue) take() pass {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := pass{batch: q.items, stop: q.stop, drop: q.drop}
	q.items, q.drop = nil, nil
	p.backlog = len(p.batch) > maxDrainPass
	if p.backlog {
		q.items, p.batch = p.batch[maxDrainPass:], p.batch[:maxDrainPass]
	}
	q.taken += len(p.batch)
	for i := range p.batch {
		q.bytes -= queuedSize(&p.batch[i].ev, p.batch[i].data)
	}
	q.makeRoom()
	return p
}

// release wakes Sync callers whose events have all been handled.
func (q *threadQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.waiters[:0]
	for _, wt := range q.waiters {
		if wt.at <= q.taken {
			close(wt.done)
		} else {
			kept = append(kept, wt)
		}
	}
	q.waiters = kept
}

// empty reports whether no event waits.
func (q *threadQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) == 0
}

// idle reports whether nothing waits on the queue and it is not stopping:
// its drain may retire. The caller holds the writer's lock, so that no
// producer finds the drain between this answer and its removal.
func (q *threadQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) == 0 && len(q.waiters) == 0 && !q.stop
}

// releaseAll wakes every Sync caller: the drain retires.
func (q *threadQueue) releaseAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, wt := range q.waiters {
		close(wt.done)
	}
	q.waiters = nil
}
