package instanceai

import (
	"encoding/json"

	"github.com/threadline/threadline/ssestream"
)

// Frame is one event as the hub hands it to subscribers: encoded once at
// publish, shared by every subscriber.
type Frame struct {
	// Seq is the log position of a stored event, 0 for an ephemeral one.
	Seq   int64
	Event *Event
	// Data is the JSON encoding of Event.
	Data []byte
	// Wire is Data framed as SSE data lines ending in the blank line, built
	// once here so that fanning out to many connections copies bytes
	// instead of re-framing per connection. A connection writes its own
	// `id:` line before it.
	Wire []byte
	// Hidden marks a coalesced block: not written to a live connection
	// that was sent all of its text as deltas, but it moves the
	// connection's cursor (see Feed for when a connection sends it).
	Hidden bool
	// Offset is a delta's byte offset in its segment's text, when
	// HasOffset; After is then the highest seq its writer had committed
	// when it published it (negative: unknown). They let every point a
	// delta passes tell a gap, a repeat or a late delta (see
	// segmentLedger). A delta without them is taken as continuing its
	// segment.
	Offset    int64
	HasOffset bool
	After     int64
	// Echo marks the stored copy of frames that went out live without ids
	// because they could not be stored then (a failed run's ending): a
	// connection that was sent them live only moves its cursor past it;
	// any other connection is sent it.
	Echo bool
}

// NewFrame encodes an event into a frame.
func NewFrame(seq int64, ev *Event) (Frame, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return Frame{}, err
	}
	return EncodedFrame(seq, ev, data), nil
}

// EncodedFrame is the frame of an event whose JSON encoding is data.
func EncodedFrame(seq int64, ev *Event, data []byte) Frame {
	return Frame{Seq: seq, Event: ev, Data: data, Wire: ssestream.DataFrame(data), Hidden: DurabilityOf(ev.Type) == Coalesced}
}

// framesBytes is the bytes of the frames' encodings.
func framesBytes(frames []Frame) int {
	n := 0
	for i := range frames {
		n += len(frames[i].Data)
	}
	return n
}

// trimDelta is f without the first skip bytes of its text, at the same
// place in the segment.
func trimDelta(f *Frame, skip int64) (Frame, error) {
	ev := *f.Event
	ev.Payload = &Text{Text: f.Event.Payload.(*Text).Text[skip:]}
	out, err := NewFrame(0, &ev)
	if err != nil {
		return Frame{}, err
	}
	out.Offset, out.HasOffset, out.After = f.Offset+skip, true, f.After
	return out, nil
}
