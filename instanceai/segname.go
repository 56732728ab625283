package instanceai

import (
	"fmt"
	"time"
)

// segmentQuiet is how long a segment of deltas that came without a
// responseId may go without a delta before the agent's next delta begins
// another: well within the writer's silence that closes a segment
// (WriterConfig.IdleFlush, 3 s by default), so that a block the writer
// closed for silence is not followed by more text under its responseId.
const segmentQuiet = time.Second

// segmentNamer gives, at a run's door, a delta that came without a
// responseId the one of its segment, "{runId}:p:{n}", n the number of
// events the door had queued for the run before the segment's first delta
// (for a producer of the publish API that neither restarted nor asked for
// an approval, that delta's Producer-Seq). Without one, a client holding
// a segment's deltas that is then sent its block (a reconnection after
// the segment closed, or a gap in the deltas) could not tell that the
// block replaces them, and would show the text twice (n8n's reducer
// appends a block without a responseId).
//
// A segment runs until the agent's next stored event, the run's finish,
// or segmentQuiet without a delta; the numbers only grow, so no two of
// a run's segments share an id. Its methods are called with the run's lock
// held.
type segmentNamer struct {
	queued int64
	open   map[meterKey]namedSegment
}

// namedSegment is the responseId given to a segment and its last delta's
// time.
type namedSegment struct {
	id   string
	last time.Time
}

// name gives ev, when it is a delta without a responseId, its segment's.
func (n *segmentNamer) name(ev *Event, now time.Time) {
	if !isDelta(ev.Type) || ev.ResponseID != "" {
		return
	}
	if n.open == nil {
		n.open = map[meterKey]namedSegment{}
	}
	key := meterKey{ev.AgentID, ev.Type}
	seg, ok := n.open[key]
	if !ok || now.Sub(seg.last) > segmentQuiet {
		seg.id = fmt.Sprintf("%s:p:%d", ev.RunID, n.queued)
	}
	seg.last = now
	n.open[key] = seg
	ev.ResponseID = seg.id
}

// counted counts an event the door queued.
func (n *segmentNamer) counted() { n.queued++ }

// closeAgent ends the agent's segments: a stored event of it closed them
// in the writer.
func (n *segmentNamer) closeAgent(agentID string) {
	delete(n.open, meterKey{agentID, TypeTextDelta})
	delete(n.open, meterKey{agentID, TypeReasoningDelta})
}

// closeAll ends every segment: the run finished.
func (n *segmentNamer) closeAll() { clear(n.open) }
