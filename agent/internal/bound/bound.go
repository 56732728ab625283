// Package bound is what the producers share about the core's size bounds
// (instanceai.Limits): how much of an upstream's stream they hold for one
// event before they refuse it, and how a refusal names the bound, so that
// every producer says it the same way.
package bound

import (
	"fmt"

	"github.com/threadline/threadline/instanceai"
)

// EventFlag is the flag that sets the bound on one event, as messages name
// it.
const EventFlag = "--max-event-bytes"

// Envelope is the room a stream takes around one event's payload: an AG-UI
// event's type and ids, an n8n chunk's metadata, an SSE field's name, a
// Chat Completions chunk's choice. A line, frame or message that carries
// one event is bounded at the event's bound plus this: an upstream is
// refused no sooner than the core would refuse the event it makes, and
// nothing much larger is held before it is.
const Envelope = 64 << 10

// Event is the bound on one event: maxEvent, or the core's default when it
// is 0 or less (as instanceai.Limits reads it).
func Event(maxEvent int) int {
	if maxEvent <= 0 {
		return instanceai.DefaultMaxEventBytes
	}
	return maxEvent
}

// Stream is the bound on one piece of an upstream's stream that carries
// one event (an SSE frame or line, an NDJSON line, an MCP message).
func Stream(maxEvent int) int { return Event(maxEvent) + Envelope }

// Size writes a byte count as people read it: "4 MiB", "1.5 MiB",
// "64 KiB", "100 bytes".
func Size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// Named is how a message names the bound on one event: "4 MiB, the bound
// on one event (--max-event-bytes)".
func Named(maxEvent int) string {
	return fmt.Sprintf("%s, the bound on one event (%s)", Size(Event(maxEvent)), EventFlag)
}
