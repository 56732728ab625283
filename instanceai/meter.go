package instanceai

import "fmt"

// maxOpenSegments bounds the segments one run streams at once (an agent's
// text and its reasoning count apart): each may grow to MaxSegmentBytes in
// the writer and in every hub that hears it, so their number is what
// bounds a run's open text.
const maxOpenSegments = 64

// segmentMeter measures, at a run's door, the text each open segment has
// taken so far, as the writer will store it (JSON escaped), so that a
// segment's block is never larger than its bound. It closes segments where
// the writer closes them for good: at the agent's next stored event, at
// a delta with another responseId, and at the run's finish. (The writer
// also closes a segment after a silence; more text under the same
// responseId continues it in a block of its own, so the meter counts on.)
// Its methods are called with the run's lock held.
type segmentMeter struct {
	open map[meterKey]*meteredSegment
}

type meterKey struct {
	agentID string
	kind    EventType
}

type meteredSegment struct {
	responseID string
	size       int
}

// admit measures a delta against limit. It returns the delta's text that
// fits: all of it and nil, or the part before the bound and the
// *LimitError that ends the segment (the part may be empty). A delta that
// would open more than maxOpenSegments segments is refused (*RuleError).
func (m *segmentMeter) admit(ev *Event, text string, limit int) (string, error) {
	if m.open == nil {
		m.open = map[meterKey]*meteredSegment{}
	}
	key := meterKey{ev.AgentID, ev.Type}
	s := m.open[key]
	if s != nil && s.responseID != ev.ResponseID {
		s = nil
	}
	if s == nil {
		if _, known := m.open[key]; !known && len(m.open) >= maxOpenSegments {
			return "", &RuleError{Rule: RuleTooMany, Type: ev.Type, Field: "responseId",
				Reason: fmt.Sprintf("a run streams at most %d messages at once (each agent's text and reasoning count apart)", maxOpenSegments)}
		}
		s = &meteredSegment{responseID: ev.ResponseID}
		m.open[key] = s
	}
	n := escapedLen(text)
	if s.size+n <= limit {
		s.size += n
		return text, nil
	}
	fits := cutEscaped(text, limit-s.size)
	s.size += escapedLen(fits)
	return fits, &LimitError{Code: CodeSegmentTooLarge, Type: ev.Type, Size: s.size - escapedLen(fits) + n, Limit: limit}
}

// closeAgent forgets the agent's open segments: a stored event of it
// closed them.
func (m *segmentMeter) closeAgent(agentID string) {
	delete(m.open, meterKey{agentID, TypeTextDelta})
	delete(m.open, meterKey{agentID, TypeReasoningDelta})
}

// closeAll forgets every open segment: the run finished.
func (m *segmentMeter) closeAll() { clear(m.open) }
