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
	if err := d.refusal(ev.RunID, f); err != nil {
		f.lose(err)
		return
	}
	switch ev.Type {
	case TypeTextDelta, TypeReasoningDelta:
		key := segKey{ev.RunID, ev.AgentID, ev.Type}
		seg := d.segs[key]
		if seg != nil && seg.baseID != ev.ResponseID {
			d.closeSegment(b, seg)
			seg = nil
		}
		if seg == nil {
			seg = d.openSegment(key, ev)
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
			d.forgetPaused(func(k segKey) bool { return k.runID == ev.RunID })
		} else {
			d.closeWhere(b, func(s *segment) bool { return s.key.runID == ev.RunID && s.key.agentID == ev.AgentID })
			d.forgetPaused(func(k segKey) bool { return k.runID == ev.RunID && k.agentID == ev.AgentID })
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
func (d *threadDrain) openSegment(key segKey, ev *Event) *segment {
	seg := &segment{key: key, baseID: ev.ResponseID, responseID: ev.ResponseID, userID: ev.UserID, firstTS: ev.TS, order: d.nextOrder}
	if p, ok := d.paused[key]; ok {
		if p.responseID == ev.ResponseID {
			p.parts++
			seg.responseID = fmt.Sprintf("%s:%d", ev.ResponseID, p.parts)
			seg.escaped = p.escaped
		} else {
			delete(d.paused, key)
		}
	}
	d.nextOrder++
	d.segs[key] = seg
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
func (d *threadDrain) forgetPaused(match func(segKey) bool) {
	for k := range d.paused {
		if match(k) {
			delete(d.paused, k)
		}
	}
}

// pause closes every open segment after a silence on the thread, keeping
// what a continuation needs (see openSegment).
func (d *threadDrain) pause(b *batchBuilder) {
	for k, s := range d.segs {
		p := d.paused[k]
		if p == nil || p.responseID != s.baseID {
			p = &pausedSegment{responseID: s.baseID, parts: 1}
			d.paused[k] = p
		}
		p.escaped = s.escaped
	}
	d.closeWhere(b, func(*segment) bool { return true })
}

// closeWhere closes the matching segments, oldest first and, for one agent,
// reasoning before text.
func (d *threadDrain) closeWhere(b *batchBuilder, match func(*segment) bool) {
	var closing []*segment
	for _, s := range d.segs {
		if match(s) {
			closing = append(closing, s)
		}
	}
	sortForClose(closing)
	for _, s := range closing {
		d.closeSegment(b, s)
	}
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
	delete(d.segs, s.key)
	if s.pieces > 0 {
		d.closing = append(d.closing, s)
	}
	typ := TypeTextBlock
	if s.key.kind == TypeReasoningDelta {
		typ = TypeReasoningBlock
	}
	b.push(Event{
		Type: typ, RunID: s.key.runID, AgentID: s.key.agentID, UserID: s.userID,
		ResponseID: s.responseID, TS: s.firstTS, Payload: &Text{Text: string(s.text)},
	}, true, s.fence)
}
