package instanceai

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// busMessage is what travels on the bus, as JSON. Exactly one of Frames,
// Resync and Control is set.
type busMessage struct {
	Origin string `json:"o"`
	Thread string `json:"t,omitempty"`
	// Frames are committed frames of Thread, in commit order.
	Frames []busFrame `json:"f,omitempty"`
	// Resync: frames of Thread were committed that this message does not
	// carry (too large for the bus, or their publish failed).
	Resync bool     `json:"r,omitempty"`
	Ctl    *Control `json:"c,omitempty"`
	// Sent is when the writer handed the message's first frames to the
	// bus, in Unix microseconds (0 from a version that did not stamp):
	// the receiver measures the bus's lag from it, the sender's queue
	// included.
	Sent int64 `json:"ts,omitempty"`
	// Trace is the W3C traceparent of the writer's publish that sent the
	// frames (empty while tracing is off): the receiver links its span to
	// it. An instance of a version without it ignores the field.
	Trace string `json:"tp,omitempty"`
}

// size is the message's share of the outbound bound.
func (m *busMessage) size() int {
	n := envelope + len(m.Thread)
	for i := range m.Frames {
		n += len(m.Frames[i].Event) + perFrame
	}
	return n
}

type busFrame struct {
	Seq   int64           `json:"s,omitempty"`
	Event json.RawMessage `json:"e"`
	// Pos is a delta's Frame.Offset plus one (0: the delta is not
	// placed), and After its Frame.After.
	Pos   int64 `json:"x,omitempty"`
	After int64 `json:"a,omitempty"`
	// delta is set on a text or reasoning delta (see HoldDeltas).
	delta bool
}

// busFrameOf is the bus form of a frame whose event encodes as data.
func busFrameOf(f *Frame, data []byte) busFrame {
	bf := busFrame{Seq: f.Seq, Event: data, After: f.After}
	if f.Event != nil {
		bf.delta = f.Event.Type == TypeTextDelta || f.Event.Type == TypeReasoningDelta
	}
	if f.HasOffset {
		bf.Pos = f.Offset + 1
	}
	return bf
}

// frame is the frame a bus frame carries, ev decoded from it.
func (bf *busFrame) frame(ev *Event) Frame {
	f := EncodedFrame(bf.Seq, ev, bf.Event)
	if bf.Pos > 0 {
		f.Offset, f.HasOffset = bf.Pos-1, true
	}
	f.After = bf.After
	return f
}

// envelope is the size of a message without its frames, and perFrame a
// frame's overhead beside its event, both with room to spare.
const (
	envelope = 256
	perFrame = 48
)

// packMessages packs frames into as few messages as the bus's payload
// limit allows (0: no limit). A delta too large for one message is split
// into several deltas of the same segment, which the clients append back
// together; any other frame too large travels as a resync notice, and the
// other instances read it from the log.
func packMessages(threadID string, frames []Frame, limit int) []busMessage {
	var out []busMessage
	cur := busMessage{Thread: threadID}
	size := envelope + len(threadID)
	sent := time.Now().UnixMicro()
	flush := func() {
		if len(cur.Frames) > 0 || cur.Resync {
			cur.Sent = sent
			out = append(out, cur)
		}
		cur = busMessage{Thread: threadID}
		size = envelope + len(threadID)
	}
	add := func(bf busFrame) {
		if limit > 0 && size+len(bf.Event)+perFrame > limit {
			flush()
		}
		cur.Frames = append(cur.Frames, bf)
		size += len(bf.Event) + perFrame
	}
	for i := range frames {
		f := &frames[i]
		if limit <= 0 || envelope+len(threadID)+len(f.Data)+perFrame <= limit {
			add(busFrameOf(f, f.Data))
			continue
		}
		if pieces := splitDelta(f, limit-envelope-len(threadID)-perFrame); pieces != nil {
			for _, p := range pieces {
				add(p)
			}
			continue
		}
		flush()
		out = append(out, busMessage{Thread: threadID, Resync: true})
	}
	flush()
	return out
}

// splitDelta splits a text or reasoning delta into deltas whose encodings
// each fit in limit bytes, cutting at character boundaries, each placed
// where its text stands in the segment; nil for any other frame.
func splitDelta(f *Frame, limit int) []busFrame {
	if f.Seq != 0 || (f.Event.Type != TypeTextDelta && f.Event.Type != TypeReasoningDelta) || limit < 512 {
		return nil
	}
	text := f.Event.Payload.(*Text).Text
	var out []busFrame
	piece0 := *f // each piece's frame, for its place in the segment
	// JSON escaping can make text up to six times longer (\u00XX);
	// halving the piece until it fits covers every case.
	piece := (limit - 256) / 2
	for len(text) > 0 {
		n := min(piece, len(text))
		for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		ev := *f.Event
		ev.Payload = &Text{Text: text[:n]}
		data, err := json.Marshal(&ev)
		if err != nil {
			return nil
		}
		if len(data) > limit && n > 1 {
			piece = max(n/2, 1)
			continue
		}
		out = append(out, busFrameOf(&piece0, data))
		piece0.Offset += int64(n)
		text = text[n:]
	}
	return out
}
