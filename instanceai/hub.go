package instanceai

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// segKey identifies an open coalescing segment: one per agent of a run and kind.
type segKey struct {
	runID, agentID string
	kind           EventType // TypeTextDelta or TypeReasoningDelta
}

// Hub fans published frames out to the live subscribers of each thread and
// hands a new subscriber from replay to the live tail without a gap or a
// duplicate. Publishing never blocks: a subscriber whose bounded queue is
// full is dropped and reconnects with its cursor.
//
// Every method may be called from any goroutine. Threads are independent:
// each has its own lock, its own subscribers and its own published state.
// Within a thread, Publish and Subscribe are serialised, which gives the
// guarantees the feed relies on:
//   - a batch (one Publish call) reaches a subscriber whole, or the
//     subscriber is dropped: never a part of it;
//   - every subscriber of a thread gets the batches in the same order, the
//     order the Publish calls took the thread's lock (the writer publishes
//     each thread from one goroutine, in commit order, so that is the
//     log's order), and the frames of a batch in their order;
//   - a subscriber gets exactly the batches published after its Subscribe
//     (see Subscribe for what it gets of the earlier ones).
//
// Frames are shared by every subscriber and must not be changed once
// published.
type Hub struct {
	queueSize  int
	queueBytes int
	// onWatch is told about threads whose Watched may have changed (see
	// NotifyWatch).
	onWatch func(threadID string)

	mu     sync.Mutex
	topics map[string]*topic
}

// NewHub returns a hub whose subscribers may fall up to queueSize frames
// behind (see Publish).
func NewHub(queueSize int) *Hub {
	if queueSize <= 0 {
		queueSize = 4096
	}
	return &Hub{queueSize: queueSize, queueBytes: DefaultQueueBytes, topics: map[string]*topic{}}
}

// DefaultQueueBytes is the bytes of frames a subscriber may fall behind by
// unless LimitQueueBytes says otherwise.
const DefaultQueueBytes = 16 << 20

// LimitQueueBytes bounds the bytes of the frames a subscriber may fall
// behind by, beside their number (n <= 0 keeps the default): frames are
// shared, but a queue that no longer moves keeps them alive after every
// other subscriber let go of them. Call it before the hub is used.
func (h *Hub) LimitQueueBytes(n int) {
	if n > 0 {
		h.queueBytes = n
	}
}

type topic struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
	// ledger follows what the topic passed on of each segment, with the
	// text, for snapshots.
	ledger segmentLedger
	// committed is the highest seq published on this topic. Every seq at or
	// below it is in the log; every later one reaches subscribers through
	// their queue.
	committed int64
	// contiguous is the seq up to which the topic was published every
	// stored frame (or was told the rest is in the log: see CaughtUp); a
	// gap below committed is a frame the bus lost or has not delivered.
	contiguous int64
	// lastFrame is when the topic last had frames published (see Behind).
	lastFrame time.Time
	// gone is set when the topic left the hub (Evict, Forget): whoever
	// finds it so under its lock takes the thread's topic again.
	gone bool
	// watched is set at the topic's first subscriber: from then until the
	// topic leaves the hub, its state is kept up to date from the other
	// instances (see Watched).
	watched bool
	// heard are the latest runs whose run-start was published live here
	// while the topic was watched (see HeardRun), at most heardRuns of
	// them.
	heard []string
}

// heardRuns bounds the runs a topic remembers hearing from their start: a
// thread has one active run at a time.
const heardRuns = 8

func (h *Hub) topic(threadID string) *topic {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[threadID]
	if t == nil {
		t = &topic{subs: map[*Subscription]struct{}{}, ledger: segmentLedger{keepText: true}}
		h.topics[threadID] = t
	}
	return t
}

// lockedTopic returns the thread's topic, locked: one the hub still
// holds, not one Evict or Forget took away between the lookup and the
// lock (what a subscriber added to that one would never be sent).
func (h *Hub) lockedTopic(threadID string) *topic {
	for {
		t := h.topic(threadID)
		t.mu.Lock()
		if !t.gone {
			return t
		}
		t.mu.Unlock()
	}
}

// DefaultTopicIdle is how long a thread's published state stays in
// memory with nothing to do (see Evict).
const DefaultTopicIdle = time.Minute

// Evict drops the published state of the threads that had no frame for
// idle or longer and that hold nothing a later subscriber needs from
// memory: no subscriber, no open segment, no text a live ending closed.
// What is left of such a thread's state (its highest seq, the blocks
// and run-finishes that judge late deltas) is in the log; its next frame
// or subscriber starts it afresh, as after a restart: a subscriber
// replays the log, and a frame whose seq skips the fresh topic's count
// is read from the log by the cluster's head check. A hub that served
// many threads thus holds only the ones in use. It returns how many it
// dropped.
func (h *Hub) Evict(idle time.Duration) int {
	now := time.Now()
	var unwatched []string
	h.mu.Lock()
	n := 0
	for id, t := range h.topics {
		t.mu.Lock()
		if len(t.subs) == 0 && now.Sub(t.lastFrame) >= idle && t.ledger.idle() {
			t.gone = true
			delete(h.topics, id)
			n++
			if t.watched {
				unwatched = append(unwatched, id)
			}
		}
		t.mu.Unlock()
	}
	if n > len(h.topics) {
		// A map keeps its buckets after its keys are deleted: one that
		// held many more threads than it does now is made anew.
		h.topics = maps.Clone(h.topics)
	}
	h.mu.Unlock()
	for _, id := range unwatched {
		h.watchChanged(id)
	}
	return n
}

// NotifyWatch has fn told, from the goroutine that made the change, about
// each thread whose Watched may have changed: at its first subscriber, and
// when it leaves the hub. fn must not block; it reads the state anew with
// Watched, since calls for one thread may come out of order. Call it
// before the hub is used.
func (h *Hub) NotifyWatch(fn func(threadID string)) { h.onWatch = fn }

func (h *Hub) watchChanged(threadID string) {
	if h.onWatch != nil {
		h.onWatch(threadID)
	}
}

// Watch marks the thread watched, as its first subscriber would, before
// there is one: the cluster follows it from now on (see Core.Follow).
func (h *Hub) Watch(threadID string) {
	t := h.lockedTopic(threadID)
	first := !t.watched
	t.watched = true
	if first && len(t.subs) == 0 && t.lastFrame.IsZero() {
		// Not idle yet: a subscriber is on its way.
		t.lastFrame = time.Now()
	}
	t.mu.Unlock()
	if first {
		h.watchChanged(threadID)
	}
}

// HeardRun reports whether the run's run-start was published live here
// (by this instance's writer, or from the bus) while the thread was
// watched, and the thread has been watched since, with no bus outage in
// between (see Unhear): the hub then heard the run's text from its start,
// whichever instance wrote it, as far as the bus delivered it, and a
// settlement of the run written from it holds what this instance's
// clients were sent. A run this instance started on a thread it did not
// watch is not heard: with routing by thread, what another instance wrote
// of it after taking it over (an approval answered there) never came here.
func (h *Hub) HeardRun(threadID, runID string) bool {
	return h.held(threadID, func(t *topic) bool { return slices.Contains(t.heard, runID) })
}

// Withhold marks the thread's open segments as not carried to the other
// instances: this instance's sender dropped their deltas (its leases may
// have run out) or could not send them. Whatever this hub's subscribers
// were sent of them stays theirs, but no later subscriber is handed their
// text (it comes in their blocks, if stored), and no settlement written
// here takes it: a client must not be shown text that the instance
// settling the run may never have heard.
func (h *Hub) Withhold(threadID string) {
	h.mu.Lock()
	t := h.topics[threadID]
	h.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, seg := range t.ledger.open {
		seg.withheld = true
	}
}

// Unhear forgets every run heard so far (see HeardRun): the bus listener
// was away, and what the other instances published meanwhile never came.
func (h *Hub) Unhear() {
	h.mu.Lock()
	topics := slices.Collect(maps.Values(h.topics))
	h.mu.Unlock()
	for _, t := range topics {
		t.mu.Lock()
		t.heard = nil
		t.mu.Unlock()
	}
}

// held reports whether the hub holds the thread's topic and is(topic)
// holds, asked under the topic's lock.
func (h *Hub) held(threadID string, is func(*topic) bool) bool {
	h.mu.Lock()
	t := h.topics[threadID]
	h.mu.Unlock()
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.gone && is(t)
}

// Watched reports whether the hub keeps the thread's state for
// subscribers: the thread has had one since its state was last started
// afresh, and has not left the hub (Evict, Forget). The cluster follows
// the frames of other instances for exactly those threads.
func (h *Hub) Watched(threadID string) bool {
	return h.held(threadID, func(t *topic) bool { return t.watched })
}

// Topics returns how many threads the hub holds state for.
func (h *Hub) Topics() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.topics)
}

// Publish delivers frames, in order, to every subscriber of the thread. The
// writer calls it after the frames' rows committed, in commit order; the
// cluster calls it with what arrives from other instances.
//
// It never waits for a subscriber: the batch is appended to each queue, and
// a subscriber that is already a full queue behind (it has queueSize frames
// or more not taken, counted after merging its queued token deltas) is
// closed with ErrSubscriberDropped and removed. Any
// other subscriber takes the whole batch, however large: batches are shared
// by every subscriber, so a large one costs a healthy reader nothing, and
// dropping it would disconnect every fast reader at once (the writer's
// passes can be larger than a small --subscriber-queue). Publish also
// records the thread's highest seq and open segments for later
// subscribers, on a thread that has none as well.
//
// Deltas that no subscriber can use are not passed on: one that arrives
// after its segment's block or its run's finish, one after a gap in its
// segment (the rest of that segment waits for its block), and the part of
// one that repeats text passed on already (see segmentLedger).
func (h *Hub) Publish(threadID string, frames []Frame) {
	h.publish(threadID, frames, true)
}

// publish is Publish; live is unset for frames read from the log, which
// were not heard as they happened (see HeardRun).
func (h *Hub) publish(threadID string, frames []Frame, live bool) {
	t := h.lockedTopic(threadID)
	defer t.mu.Unlock()
	if len(frames) > 0 {
		t.lastFrame = time.Now()
	}
	out := frames
	changed := false // out is a copy with a frame left out or replaced
	for i := range frames {
		if ev := frames[i].Event; live && t.watched && ev != nil && ev.Type == TypeRunStart {
			if len(t.heard) == heardRuns {
				t.heard = t.heard[1:]
			}
			t.heard = append(t.heard, ev.RunID)
		}
		fr, keep := t.track(&frames[i])
		if !changed && (fr != nil || !keep) {
			out, changed = slices.Clone(frames[:i]), true
		}
		switch {
		case !changed:
		case fr != nil:
			out = append(out, *fr)
		case keep:
			out = append(out, frames[i])
		}
	}
	if len(out) == 0 {
		return
	}
	size := framesBytes(out)
	for s := range t.subs {
		if !s.offer(out, size) {
			delete(t.subs, s)
		}
	}
}

// track keeps the published state a late subscriber needs (the open
// segments' text and the highest committed seq) and judges a delta: keep
// reports whether the frame goes on to the subscribers, and a non-nil
// frame replaces it (a delta whose head repeats text passed on already).
func (t *topic) track(f *Frame) (replaced *Frame, keep bool) {
	ev := f.Event
	if f.Seq > t.committed {
		t.committed = f.Seq
	}
	if f.Seq == t.contiguous+1 {
		t.contiguous = f.Seq
	}
	switch ev.Type {
	case TypeTextDelta, TypeReasoningDelta:
		off, after := f.Offset, f.After
		if !f.HasOffset {
			off, after = -1, -1
		}
		v, skip, _ := t.ledger.delta(ev, off, after, len(ev.Payload.(*Text).Text))
		switch {
		case v != deltaDeliver:
			// Late, repeated, or past a gap: what went out of the segment
			// stays a prefix of its text, and so does the snapshot's.
			return nil, false
		case skip > 0:
			trimmed, err := trimDelta(f, skip)
			if err != nil {
				return nil, false
			}
			return &trimmed, true
		}
	case TypeTextBlock, TypeReasoningBlock, TypeRunFinish, TypeRunStart:
		// A run that ended without storing its events has its open
		// segments dropped by its (live) run-finish too: a later
		// subscriber must not get their text. A run-start ends what is
		// left open of earlier runs' orchestrators.
		t.ledger.note(ev, f.Seq)
	}
	return nil, true
}

// Forget disconnects every subscriber of a deleted thread and drops its
// state. Each subscription is closed with ErrThreadClosed, frames it had
// not taken yet are discarded; the highest seq and the open segments are
// forgotten, so a later Subscribe or Publish on the thread starts afresh
// (Snapshot.Committed 0, nothing open).
func (h *Hub) Forget(threadID string) {
	h.mu.Lock()
	t := h.topics[threadID]
	delete(h.topics, threadID)
	h.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	t.gone = true
	for s := range t.subs {
		s.close(ErrThreadClosed)
		delete(t.subs, s)
	}
	watched := t.watched
	t.mu.Unlock()
	if watched {
		h.watchChanged(threadID)
	}
}

// Behind returns the threads that have subscribers and may be missing
// frames no later frame will reveal: those with a gap in the stored frames
// published to them, and those that had no frame for d or longer (every
// thread with subscribers when d is 0). See Cluster's head check.
func (h *Hub) Behind(d time.Duration) []string {
	h.mu.Lock()
	topics := make(map[string]*topic, len(h.topics))
	for id, t := range h.topics {
		topics[id] = t
	}
	h.mu.Unlock()
	now := time.Now()
	var out []string
	for id, t := range topics {
		t.mu.Lock()
		if len(t.subs) > 0 && (d == 0 || t.contiguous < t.committed || now.Sub(t.lastFrame) >= d) {
			out = append(out, id)
		}
		t.mu.Unlock()
	}
	return out
}

// LiveText returns, for the segments of the run that are open here (or
// were ended by a live block or run-finish that was not stored), the text
// the hub passed on of each without a gap from its start, as one delta
// each, with the After of its first delta: what this instance's clients
// were sent of text that may be in no block yet. A settlement
// writes a dead writer's blocks from it where it holds more than the
// writer's checkpoints (see Runs.openText).
func (h *Hub) LiveText(threadID, runID string) (open []Event, after []int64) {
	h.mu.Lock()
	t := h.topics[threadID]
	h.mu.Unlock()
	if t == nil {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	all, afters := t.ledger.snapshot()
	for i := range all {
		if all[i].RunID == runID {
			open = append(open, all[i])
			after = append(after, afters[i])
		}
	}
	// And what a live ending closed: its writer could not store it, but
	// its clients were sent it.
	ended, endedAfter := t.ledger.liveEnded(runID)
	return append(open, ended...), append(after, endedAfter...)
}

// Contiguous returns the seq up to which the thread was published every
// stored frame (0 for none).
func (h *Hub) Contiguous(threadID string) int64 {
	return h.topicSeq(threadID, func(t *topic) int64 { return t.contiguous })
}

// Committed returns the highest seq published on the thread (0 for none).
func (h *Hub) Committed(threadID string) int64 {
	return h.topicSeq(threadID, func(t *topic) int64 { return t.committed })
}

// topicSeq reads one of a thread's counters under its lock (0 when the hub
// has no topic for it).
func (h *Hub) topicSeq(threadID string, read func(*topic) int64) int64 {
	h.mu.Lock()
	t := h.topics[threadID]
	h.mu.Unlock()
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return read(t)
}

// CaughtUp publishes frames read from the log, up to head, and counts
// every stored frame up to head as published: what a page of them left
// out, each subscriber reads from the log itself when it meets the gap.
func (h *Hub) CaughtUp(threadID string, frames []Frame, head int64) {
	h.publish(threadID, frames, false)
	t := h.lockedTopic(threadID)
	t.contiguous = max(t.contiguous, head)
	t.committed = max(t.committed, head)
	t.mu.Unlock()
}

// Subscribers returns the number of live subscribers across all threads:
// dropped, closed and forgotten ones no longer count.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	topics := make([]*topic, 0, len(h.topics))
	for _, t := range h.topics {
		topics = append(topics, t)
	}
	h.mu.Unlock()
	n := 0
	for _, t := range topics {
		t.mu.Lock()
		n += len(t.subs)
		t.mu.Unlock()
	}
	return n
}
