package instanceai

import (
	"slices"
	"strings"
)

// A coalescing segment's text reaches a connection as deltas, which carry
// no seq, and then as its block, which does. On one process that is one
// ordered path, but across instances the deltas come over the bus, which
// can lose some of them or hold them back, while the block can also come
// from the log (a catch-up after a lost publish). So every delta frame
// carries where it stands: its byte offset in the segment's text, and the
// highest seq its writer had committed when it published it. With those,
// whoever passes deltas on (the hub, and each connection) follows what it
// actually delivered of each segment:
//
//   - deltas go on only while they continue the text without a gap; after
//     a gap (a lost delta, or a hub that joined mid-segment) the rest of
//     the segment's deltas are held back, so what a client holds is always
//     a prefix of the segment's text;
//   - a delta that arrives after the block or the run-finish that closed
//     its segment (it was committed before them: its After is below their
//     seq) is dropped: its text is in the block already;
//   - a block is compared with what went out: the same length means the
//     client has exactly the block's text (both are prefixes of one
//     writer's text) and the block need not be sent; a longer block
//     extends the client's text, which the client's REPLACE rule handles;
//     a shorter one means the client holds text the log does not have (a
//     settlement wrote the block of a writer that died), and the client
//     must be repaired.

// maxFinishedRuns bounds how many finished runs a ledger remembers for
// recognising their late deltas. A delta of an older run is rare (it was
// held back past that many runs) and, opening no segment there, meets the
// gap rule anyway.
const maxFinishedRuns = 64

// ledgerSegment is one open segment as a ledger follows it.
type ledgerSegment struct {
	responseID string
	// sent is how many bytes of the segment's text went out contiguously
	// from its start.
	sent int64
	// gapped is set once a delta beyond sent arrived: the segment's later
	// deltas are held back until its block.
	gapped bool
	// withheld is set when deltas of the segment did not go out on the
	// bus (see Hub.Withhold): its text is handed to no late subscriber and
	// to no settlement.
	withheld bool
	// after is the After of the segment's first delta, -1 when unknown.
	after int64
	// What a hub keeps to hand a late subscriber the segment: the text
	// that went out, and the first delta's user, time and rank.
	text   strings.Builder
	userID string
	ts     int64
	order  int
}

// responseKey names the segments of one response: an agent's kind of
// text in a run, under one response id.
type responseKey struct {
	segKey
	responseID string
}

// segmentLedger follows the segments of one thread's text as frames pass
// one point: a hub's topic or a connection. It is not safe for concurrent
// use: its owner serialises its calls.
type segmentLedger struct {
	// keepText makes the ledger keep each open segment's text (a hub's).
	keepText  bool
	nextOrder int
	open      map[segKey]*ledgerSegment
	// closed holds the seq of the last block of each response.
	closed   map[responseKey]int64
	finished map[string]int64 // run id → its run-finish's seq
	// finishOrder are the finished runs, oldest first, for the bound.
	finishOrder []string
	// ended keeps (keepText only) the text of segments that a live,
	// unstored block or run-finish ended: a writer that could not store
	// them published their ending to its clients anyway, and if another
	// instance settles the run, its block must be the text those clients
	// were sent (see Hub.LiveText). A stored block or run-finish of the
	// run drops them.
	ended map[segKey]*ledgerSegment
}

// idle reports whether the ledger holds no segment open and no text a
// live ending closed: nothing but what judges late deltas, which the log
// holds too (see Hub.Evict).
func (l *segmentLedger) idle() bool { return len(l.open) == 0 && len(l.ended) == 0 }

// maxEndedSegments bounds a ledger's ended segments; the oldest go first.
const maxEndedSegments = 256

// endLive keeps seg, ended by a live block or run-finish, for LiveText.
func (l *segmentLedger) endLive(key segKey, seg *ledgerSegment) {
	if !l.keepText || seg.text.Len() == 0 {
		return
	}
	if l.ended == nil {
		l.ended = map[segKey]*ledgerSegment{}
	}
	l.ended[key] = seg
	if len(l.ended) > maxEndedSegments {
		oldest := key
		for k, s := range l.ended {
			if s.order < l.ended[oldest].order {
				oldest = k
			}
		}
		delete(l.ended, oldest)
	}
}

// deltaVerdict is what to do with a delta.
type deltaVerdict int

const (
	// deltaDeliver: deliver it (from skip bytes on, when skip > 0).
	deltaDeliver deltaVerdict = iota
	// deltaLate: its segment was closed here before it arrived.
	deltaLate
	// deltaGap: it does not continue what went out; held back.
	deltaGap
	// deltaRepeat: all of its text went out already.
	deltaRepeat
)

// delta judges one delta of n bytes at offset off (negative: not placed,
// taken as continuing the segment), published after the
// writer had committed after (negative: unknown), and records it when it
// is delivered. skip is the number of its leading bytes that went out
// already (an overlap), when the verdict is deltaDeliver.
func (l *segmentLedger) delta(ev *Event, off, after int64, n int) (v deltaVerdict, skip int64, seg *ledgerSegment) {
	key := segKey{ev.RunID, ev.AgentID, ev.Type}
	if l.isLate(key, ev.ResponseID, off, after) {
		return deltaLate, 0, nil
	}
	seg = l.open[key]
	if off < 0 {
		// Not placed by its writer: taken as continuing what went out.
		off = 0
		if seg != nil && seg.responseID == ev.ResponseID {
			off = seg.sent
		}
	}
	if seg == nil || seg.responseID != ev.ResponseID {
		if l.open == nil {
			l.open = map[segKey]*ledgerSegment{}
		}
		// A segment this point has not seen begin: a delta past its start
		// means the start went elsewhere (this point joined mid-segment).
		seg = &ledgerSegment{responseID: ev.ResponseID, after: after, gapped: off > 0,
			userID: ev.UserID, ts: ev.TS, order: l.nextOrder}
		l.nextOrder++
		l.open[key] = seg
	}
	end := off + int64(n)
	switch {
	case seg.gapped:
		return deltaGap, 0, seg
	case off == seg.sent:
	case off > seg.sent:
		seg.gapped = true
		return deltaGap, 0, seg
	case end <= seg.sent:
		return deltaRepeat, 0, seg
	default:
		skip = seg.sent - off
	}
	seg.sent = end
	if l.keepText {
		seg.text.WriteString(ev.Payload.(*Text).Text[skip:])
	}
	return deltaDeliver, skip, seg
}

// holdBack opens ev's segment here as held back from its start, unless it
// is open already: its deltas do not go out, its block will.
func (l *segmentLedger) holdBack(ev *Event, after int64) {
	key := segKey{ev.RunID, ev.AgentID, ev.Type}
	if seg := l.open[key]; seg != nil && seg.responseID == ev.ResponseID {
		return
	}
	if l.open == nil {
		l.open = map[segKey]*ledgerSegment{}
	}
	l.open[key] = &ledgerSegment{responseID: ev.ResponseID, after: after, gapped: true,
		userID: ev.UserID, ts: ev.TS, order: l.nextOrder}
	l.nextOrder++
}

// isOpen reports whether ev's segment is open here.
func (l *segmentLedger) isOpen(ev *Event) bool {
	seg := l.open[segKey{ev.RunID, ev.AgentID, ev.Type}]
	return seg != nil && seg.responseID == ev.ResponseID
}

// isLate reports whether a delta belongs to a segment this ledger saw
// closed: by a block of the same response, or by its run's run-finish,
// committed after the delta was published. A delta whose After is unknown
// is late only when it continues a closed segment (an offset past 0); at
// offset 0 it begins a new segment of the same response.
func (l *segmentLedger) isLate(key segKey, responseID string, off, after int64) bool {
	before := func(seq int64) bool {
		if after >= 0 {
			return after < seq
		}
		return off > 0
	}
	if seq, ok := l.finished[key.runID]; ok && before(seq) {
		return true
	}
	seq, ok := l.closed[responseKey{key, responseID}]
	return ok && before(seq)
}

// block records the block of ev's segment, stored at seq, and reports
// what went out of the segment before it: sent bytes, and whether the
// segment was open here at all (false: none of its deltas went out). An
// open segment of the same response that began after seq is a later one,
// which the block does not close.
func (l *segmentLedger) block(ev *Event, seq int64) (sent int64, open bool) {
	kind := TypeTextDelta
	if ev.Type == TypeReasoningBlock {
		kind = TypeReasoningDelta
	}
	key := segKey{ev.RunID, ev.AgentID, kind}
	if seg := l.open[key]; seg != nil && seg.responseID == ev.ResponseID && (seq <= 0 || seg.after < seq) {
		sent, open = seg.sent, true
		delete(l.open, key)
		if seq <= 0 {
			l.endLive(key, seg)
		}
	}
	if seg := l.ended[key]; seq > 0 && seg != nil && seg.responseID == ev.ResponseID {
		delete(l.ended, key)
	}
	if seq > 0 {
		if l.closed == nil {
			l.closed = map[responseKey]int64{}
		}
		rk := responseKey{key, ev.ResponseID}
		l.closed[rk] = max(l.closed[rk], seq)
	}
	return sent, open
}

// finish records the run's run-finish, stored at seq: the writer closed
// every segment of the run before it, so what is open of the run here is
// over, and the run's deltas committed before it are late from now on.
// Background agents' deltas after the finish are committed after it.
func (l *segmentLedger) finish(runID string, seq int64) {
	for key, seg := range l.open {
		if key.runID == runID && (seq <= 0 || seg.after < seq) {
			delete(l.open, key)
			if seq <= 0 {
				l.endLive(key, seg)
			}
		}
	}
	for key := range l.ended {
		if key.runID == runID && seq > 0 {
			delete(l.ended, key)
		}
	}
	for key := range l.closed {
		if key.runID == runID {
			delete(l.closed, key)
		}
	}
	if seq <= 0 {
		return
	}
	if l.finished == nil {
		l.finished = map[string]int64{}
	}
	if old, ok := l.finished[runID]; ok {
		l.finished[runID] = max(old, seq)
		return
	}
	l.finished[runID] = seq
	l.finishOrder = append(l.finishOrder, runID)
	if len(l.finishOrder) > maxFinishedRuns {
		delete(l.finished, l.finishOrder[0])
		l.finishOrder = l.finishOrder[1:]
	}
}

// note records a stored event passing this point: blocks close their
// segments, run-finishes their runs. It returns block's verdict when ev
// is a block (see block), open false otherwise.
func (l *segmentLedger) note(ev *Event, seq int64) (sent int64, open bool) {
	switch ev.Type {
	case TypeTextBlock, TypeReasoningBlock:
		return l.block(ev, seq)
	case TypeRunFinish:
		l.finish(ev.RunID, seq)
	case TypeRunStart:
		if seq > 0 {
			l.started(ev.RunID, seq)
		}
	}
	return 0, false
}

// started records run runID's run-start, stored at seq. A thread has one
// active run at a time, so every other run's orchestrator was finished
// before it: what is open of their text here (a place that missed their
// block and run-finish, as a hub cut from the bus for a while does) is
// over, and must not reach a later subscriber as open text. Background
// agents' text is not: it may go on after its run's finish.
func (l *segmentLedger) started(runID string, seq int64) {
	for key, seg := range l.open {
		if key.runID != runID && key.agentID == OrchestratorAgentID(key.runID) && seg.after < seq {
			delete(l.open, key)
		}
	}
}

// superseded reports whether an open segment that began after after
// (negative: unknown, taken as before anything) was closed since, by a
// block of its response or its run's finish that this ledger recorded.
func (l *segmentLedger) superseded(ev *Event, after int64) bool {
	key := segKey{ev.RunID, ev.AgentID, ev.Type}
	if seq, ok := l.finished[key.runID]; ok && seq > after {
		return true
	}
	seq, ok := l.closed[responseKey{key, ev.ResponseID}]
	return ok && seq > after
}

// liveEnded returns the run's segments that a live ending closed, as
// snapshot does the open ones.
func (l *segmentLedger) liveEnded(runID string) (ended []Event, after []int64) {
	return l.texts(l.ended, func(key segKey) bool { return key.runID == runID })
}

// snapshot returns the open segments' text as one delta each, in the order
// they opened, with each one's After: a keepText ledger's open text for a
// late subscriber. A segment of which nothing went out has none.
func (l *segmentLedger) snapshot() (open []Event, after []int64) {
	return l.texts(l.open, func(segKey) bool { return true })
}

// texts returns the text of the segments of from that want accepts, as
// one delta each, in the order they opened, with each one's After.
func (l *segmentLedger) texts(from map[segKey]*ledgerSegment, want func(segKey) bool) (open []Event, after []int64) {
	type item struct {
		key segKey
		seg *ledgerSegment
	}
	var segs []item
	for key, seg := range from {
		if seg.text.Len() > 0 && !seg.withheld && want(key) {
			segs = append(segs, item{key, seg})
		}
	}
	slices.SortFunc(segs, func(a, b item) int { return a.seg.order - b.seg.order })
	for _, it := range segs {
		open = append(open, Event{Type: it.key.kind, RunID: it.key.runID, AgentID: it.key.agentID,
			UserID: it.seg.userID, ResponseID: it.seg.responseID, TS: it.seg.ts, Payload: &Text{Text: it.seg.text.String()}})
		after = append(after, it.seg.after)
	}
	return open, after
}
