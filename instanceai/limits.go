package instanceai

import (
	"fmt"
	"unicode/utf8"
)

// Size bounds of what producers hand the core. Everything a producer sends
// (an upstream's stream, a publish API append, a model's reply, a tool's
// result) ends up in one of two shapes in the log: one event, or the block
// of one segment's deltas. Both are bounded before they are held, so that
// no producer can make an instance hold, or the log store, more than a few
// megabytes at a time for one run.
//
// Why these numbers: the longest reply a model writes in one go is about
// 128k tokens, half a megabyte of English text, so a segment of 2 MiB
// leaves four times that; one event of 4 MiB holds a whole segment's block
// with room for its escaping and envelope, and any tool result a model can
// read; a subscriber's queue (16 MiB by default) holds several of either,
// so every stored event can be delivered; and they stay three orders of
// magnitude under PostgreSQL's 1 GB limit on one field.
const (
	// DefaultMaxEventBytes bounds one event as stored: its JSON encoding
	// (--max-event-bytes).
	DefaultMaxEventBytes = 4 << 20
	// DefaultMaxSegmentBytes bounds one segment's text as stored, JSON
	// escaped, which is its block's text (--max-segment-bytes).
	DefaultMaxSegmentBytes = 2 << 20
	// envelopeRoom is what an event's envelope and payload fields take
	// beside a block's text: ids, type, time. A segment's bound must leave
	// it under the event's.
	envelopeRoom = 64 << 10
)

// Limit codes: the error code of an event or segment over its bound, as
// the run's error event and the publish API's answer carry it.
const (
	CodeEventTooLarge   = "event_too_large"
	CodeSegmentTooLarge = "segment_too_large"
)

// Limits are the size bounds the core enforces on every producer's events.
// Zero values take the defaults.
type Limits struct {
	// MaxEventBytes bounds one event's JSON encoding.
	MaxEventBytes int
	// MaxSegmentBytes bounds one segment's text, JSON escaped.
	MaxSegmentBytes int
}

func (l *Limits) defaults() {
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	if l.MaxSegmentBytes <= 0 {
		l.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
}

// Check reports limits that cannot hold together: a segment's block must
// fit one event.
func (l Limits) Check() error {
	l.defaults()
	if l.MaxSegmentBytes > l.MaxEventBytes-envelopeRoom {
		return fmt.Errorf("--max-segment-bytes (%d) must leave %d bytes under --max-event-bytes (%d): a segment's text is stored as one event",
			l.MaxSegmentBytes, envelopeRoom, l.MaxEventBytes)
	}
	return nil
}

// LimitError is an event, or a segment's text, over its size bound. Its
// message names the bound and the flag that sets it.
type LimitError struct {
	// Code is CodeEventTooLarge or CodeSegmentTooLarge.
	Code string
	// Type is the event's type.
	Type EventType
	// Size is the event's size, or the segment's with the delta that
	// crossed the bound; Limit the bound.
	Size, Limit int
	// Agent is set when the segment was a background agent's, which
	// ends alone, rather than the run's.
	Agent bool
}

func (e *LimitError) Error() string {
	if e.Code == CodeSegmentTooLarge {
		stopped := "run"
		if e.Agent {
			stopped = "agent"
		}
		return fmt.Sprintf("the streamed %s grew past %s, the bound on one message (--max-segment-bytes): "+
			"the text up to it is kept and the %s was stopped", segmentNoun(e.Type), sizeText(e.Limit), stopped)
	}
	return fmt.Sprintf("a %s event of %s is over %s, the bound on one event (--max-event-bytes)",
		e.Type, sizeText(e.Size), sizeText(e.Limit))
}

func segmentNoun(t EventType) string {
	if t == TypeReasoningDelta {
		return "reasoning"
	}
	return "text"
}

// sizeText writes a byte count as people read it.
func sizeText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// escapedLen is the length of s once encoding/json writes it in a string,
// without its quotes: what a segment's text takes in its block.
func escapedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n += asciiEscaped[c]
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// asciiEscaped is the encoded length of each ASCII byte in a JSON string
// as encoding/json writes it (HTML escaping on).
var asciiEscaped = func() (t [utf8.RuneSelf]int) {
	for c := range t {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			t[c] = 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			t[c] = 6
		default:
			t[c] = 1
		}
	}
	return t
}()

// cutEscaped returns the longest prefix of s, ending on a character
// boundary, whose escaped length is at most room.
func cutEscaped(s string, room int) string {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		w := size
		switch {
		case r < utf8.RuneSelf:
			w = asciiEscaped[r]
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			w = 6
		}
		if n+w > room {
			return s[:i]
		}
		n += w
		i += size
	}
	return s
}
