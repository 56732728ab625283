package instanceai

import (
	"fmt"
	"slices"
	"time"
)

// The coalescer: how a drain turns each thread's deltas into segments, and
// segments into the blocks the log stores.

// segment is an open run of deltas of one kind from one agent.
type segment struct {
	key segKey
	// baseID is the responseId its deltas came with; responseID the one
	// it is stored and sent under (another for a continuation: see
	// openSegment).
	baseID, responseID string
	// escaped is its text's stored length, JSON escaped, its parts before
	// a silence included; overflowed is set once a delta went past the
	// bound.
	escaped    int
	overflowed bool
	userID     string
	firstTS    int64
	text       []byte
	order      int
	// fence is the token holder of the segment's deltas, which its block
	// and its checkpoint pieces are written under.
	fence *fence

	// Checkpoint pieces: text[:stored] is in pieces pieces, the first of
	// them stored with since (see Checkpoint.Since); the rest has waited
	// since waiting (zero: nothing waits).
	stored  int
	pieces  int
	since   int64
	waiting time.Time
}

// coalescer holds a drain's open segments, and those a silence closed
// whose producer may go on with them. The drain goroutine owns it.
type coalescer struct {
	open map[segKey]*segment
	// paused are the segments the last silence closed (see openSegment).
	paused    map[segKey]*pausedSegment
	nextOrder int
}

func newCoalescer() coalescer {
	return coalescer{open: map[segKey]*segment{}, paused: map[segKey]*pausedSegment{}}
}

// holdsOpen reports whether a segment is open.
func (c *coalescer) holdsOpen() bool { return len(c.open) > 0 }

// dropWhere discards the matching open segments, whose blocks are not to
// be written.
func (c *coalescer) dropWhere(match func(*segment) bool) {
	for k, s := range c.open {
		if match(s) {
			delete(c.open, k)
		}
	}
}

// batchBuilder collects, in order, what one drain pass persists and publishes.
type batchBuilder struct {
	items []batchItem
}

type batchItem struct {
	ev Event
	// data is the event's encoding when its producer made it (nil: commit
	// makes it).
	data   []byte
	stored bool
	fence  *fence
	// offset is a delta's byte offset in its segment's text.
	offset int64
}

func (b *batchBuilder) push(ev Event, stored bool, f *fence) {
	b.items = append(b.items, batchItem{ev: ev, stored: stored, fence: f})
}

// add applies the coalescing rules of the protocol to one queued event,
// written under its holder's token.
func (d *threadDrain) add(b *batchBuilder, q *queued) {
	ev, f := &q.ev, q.fence
	if err := d.refusals.refusal(ev.RunID, f); err != nil {
		f.lose(err)
		return
	}
	switch ev.Type {
	case TypeTextDelta, TypeReasoningDelta:
		key := segKey{ev.RunID, ev.AgentID, ev.Type}
		seg := d.coalescer.open[key]
		if seg != nil && seg.baseID != ev.ResponseID {
			d.closeSegment(b, seg)
			seg = nil
		}
		if seg == nil {
			seg = d.coalescer.openSegment(key, ev)
		}
		text := ev.Payload.(*Text).Text
		if n := escapedLen(text); seg.escaped+n > d.w.cfg.Limits.MaxSegmentBytes {
			// The run's door cuts a segment at its bound; a delta past
			// it came another way, and is not held.
			text = cutEscaped(text, d.w.cfg.Limits.MaxSegmentBytes-seg.escaped)
			if !seg.overflowed {
				seg.overflowed = true
				d.w.cfg.Logger.Error("a segment went past its bound; its text is cut there", "thread", d.threadID,
					"run", ev.RunID, "agent", ev.AgentID, "bound", d.w.cfg.Limits.MaxSegmentBytes)
			}
			if text == "" {
				return
			}
			ev.Payload = &Text{Text: text}
		}
		seg.escaped += escapedLen(text)
		ev.ResponseID = seg.responseID
		b.push(*ev, false, f)
		b.items[len(b.items)-1].offset = int64(len(seg.text))
		seg.text = append(seg.text, text...)
		seg.fence = f
		return
	}
	dur := DurabilityOf(ev.Type)
	if dur == Structural {
		if ev.Type == TypeRunFinish {
			// The orchestrator's finish closes every agent of the run.
			d.closeWhere(b, func(s *segment) bool { return s.key.runID == ev.RunID })
			d.coalescer.forgetPaused(func(k segKey) bool { return k.runID == ev.RunID })
		} else {
			d.closeWhere(b, func(s *segment) bool { return s.key.runID == ev.RunID && s.key.agentID == ev.AgentID })
			d.coalescer.forgetPaused(func(k segKey) bool { return k.runID == ev.RunID && k.agentID == ev.AgentID })
		}
	}
	b.push(*ev, dur.Stored(), f)
	b.items[len(b.items)-1].data = q.data
}

// openSegment opens the segment of key that ev's delta begins. A delta
// that goes on with the responseId of a segment closed by a silence
// (IdleFlush) begins a continuation of it with an id of its own,
// "<responseId>:2", ":3", and so on: its block is the text since the
// silence, and a client that keys text by responseId (n8n's reducer, an
// AG-UI message id) holds both parts, live and on replay alike, instead of
// the second in place of the first.
func (c *coalescer) openSegment(key segKey, ev *Event) *segment {
	seg := &segment{key: key, baseID: ev.ResponseID, responseID: ev.ResponseID, userID: ev.UserID, firstTS: ev.TS, order: c.nextOrder}
	if p, ok := c.paused[key]; ok {
		if p.responseID == ev.ResponseID {
			p.parts++
			seg.responseID = fmt.Sprintf("%s:%d", ev.ResponseID, p.parts)
			seg.escaped = p.escaped
		} else {
			delete(c.paused, key)
		}
	}
	c.nextOrder++
	c.open[key] = seg
	return seg
}

// pausedSegment is a segment the silence closed, whose producer may go on
// with it: its responseId, the parts it has had, and the text they took
// (the segment's bound counts them all).
type pausedSegment struct {
	responseID string
	parts      int
	escaped    int
}

// forgetPaused forgets the paused segments that match: their agent wrote
// a stored event, or their run finished, so a delta under the same
// responseId begins a new segment.
func (c *coalescer) forgetPaused(match func(segKey) bool) {
	for k := range c.paused {
		if match(k) {
			delete(c.paused, k)
		}
	}
}

// pause closes every open segment after a silence on the thread, keeping
// what a continuation needs (see openSegment).
func (d *threadDrain) pause(b *batchBuilder) {
	d.coalescer.keepPaused()
	d.closeWhere(b, func(*segment) bool { return true })
}

// keepPaused notes, for each open segment, what a continuation of it
// after the silence needs.
func (c *coalescer) keepPaused() {
	for k, s := range c.open {
		p := c.paused[k]
		if p == nil || p.responseID != s.baseID {
			p = &pausedSegment{responseID: s.baseID, parts: 1}
			c.paused[k] = p
		}
		p.escaped = s.escaped
	}
}

// closeWhere closes the matching segments, oldest first and, for one agent,
// reasoning before text.
func (d *threadDrain) closeWhere(b *batchBuilder, match func(*segment) bool) {
	for _, s := range d.coalescer.matching(match) {
		d.closeSegment(b, s)
	}
}

// matching returns the matching open segments in the order they close
// (see sortForClose).
func (c *coalescer) matching(match func(*segment) bool) []*segment {
	var segs []*segment
	for _, s := range c.open {
		if match(s) {
			segs = append(segs, s)
		}
	}
	sortForClose(segs)
	return segs
}

// sortForClose orders closing segments by the agent that opened first and,
// within one agent, reasoning before text.
func sortForClose(segs []*segment) {
	type agent struct{ runID, agentID string }
	first := map[agent]int{}
	for _, s := range segs {
		a := agent{s.key.runID, s.key.agentID}
		if o, ok := first[a]; !ok || s.order < o {
			first[a] = s.order
		}
	}
	slices.SortFunc(segs, func(a, b *segment) int {
		fa, fb := first[agent{a.key.runID, a.key.agentID}], first[agent{b.key.runID, b.key.agentID}]
		if fa != fb {
			return fa - fb
		}
		return kindRank(a.key.kind) - kindRank(b.key.kind)
	})
}

func (d *threadDrain) closeSegment(b *batchBuilder, s *segment) {
	delete(d.coalescer.open, s.key)
	d.checkpoints.closed(s)
	typ := TypeTextBlock
	if s.key.kind == TypeReasoningDelta {
		typ = TypeReasoningBlock
	}
	b.push(Event{
		Type: typ, RunID: s.key.runID, AgentID: s.key.agentID, UserID: s.userID,
		ResponseID: s.responseID, TS: s.firstTS, Payload: &Text{Text: string(s.text)},
	}, true, s.fence)
}
