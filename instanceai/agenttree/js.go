package agenttree

import (
	"fmt"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// unsafeObjectKeys is UNSAFE_OBJECT_KEYS of instance-ai.schema: ids the
// reference refuses to use as keys of its plain-object maps.
var unsafeObjectKeys = map[string]bool{"__proto__": true, "constructor": true, "prototype": true}

// isSafeObjectKey is the reference's isSafeObjectKey.
func isSafeObjectKey(key string) bool { return !unsafeObjectKeys[key] }

// inheritedKeys are the properties every plain JS object inherits from
// Object.prototype. The reference keeps agents and tool calls in plain
// objects, so looking up one of these names finds the inherited function
// instead of nothing: the lookup is truthy, yet it is no node. The port
// reproduces what the reference then does (see the lookups in reducer.go);
// __proto__ and constructor are never looked up, the unsafe-key guard runs
// first.
var inheritedKeys = map[string]bool{
	"__defineGetter__": true, "__defineSetter__": true, "__lookupGetter__": true, "__lookupSetter__": true,
	"hasOwnProperty": true, "isPrototypeOf": true, "propertyIsEnumerable": true,
	"toString": true, "toLocaleString": true, "valueOf": true,
	"__proto__": true, "constructor": true,
}

// maxDateMillis is the largest |time value| a JS Date holds: beyond it
// toISOString throws a RangeError.
const maxDateMillis = 8_640_000_000_000_000

// eventTimestamp is the reference's eventTimestamp: the event's ts as
// Date.prototype.toISOString renders it, or the current time when the event
// has none. The event model cannot tell ts 0 from an absent ts, so 0 counts
// as absent. ok is false where the reference throws (ts out of the Date
// range).
func eventTimestamp(ev instanceai.Event) (iso string, ok bool) {
	ms := ev.TS
	if ms == 0 {
		ms = time.Now().UnixMilli()
	}
	if ms > maxDateMillis || ms < -maxDateMillis {
		return "", false
	}
	return isoString(ms), true
}

// isoString renders epoch milliseconds as Date.prototype.toISOString does:
// four-digit years from 0000 to 9999, a sign and six digits outside.
func isoString(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	year := t.Year()
	var y string
	switch {
	case year >= 0 && year <= 9999:
		y = fmt.Sprintf("%04d", year)
	case year < 0:
		y = fmt.Sprintf("-%06d", -year)
	default:
		y = fmt.Sprintf("+%06d", year)
	}
	return fmt.Sprintf("%s-%02d-%02dT%02d:%02d:%02d.%03dZ", y, t.Month(), t.Day(),
		t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/int(time.Millisecond))
}

// renderHint is the reference's getRenderHint: which card the UI uses for a
// tool call.
func renderHint(toolName string) string {
	switch toolName {
	case "task-control":
		return "tasks"
	case "build-workflow", "build-workflow-with-agent":
		return "builder"
	case "research-with-agent":
		return "researcher"
	case "create-tasks":
		return "planner"
	case "eval-setup-with-agent":
		return "eval-setup"
	case "create_skills", "list_skills", "read_skill", "update_skill", "load_skill":
		return "skill"
	}
	return "default"
}

// categorizeCancellation maps a run-finish reason to the root's
// cancellationReason; other reasons map to none ("").
func categorizeCancellation(reason string) string {
	switch reason {
	case instanceai.ReasonTimeout:
		return CancelTimeout
	case instanceai.ReasonServiceShutdown:
		return CancelShutdown
	case instanceai.ReasonUserCancelled:
		return CancelUser
	case instanceai.ReasonCrashed:
		return CancelInterrupted
	}
	return ""
}

// isKnownErrorCode is isKnownInstanceAiErrorCode: error events with such a
// code are shown by the UI in their own way, not folded into the text.
func isKnownErrorCode(code string) bool { return code == instanceai.ErrorCodeQuotaExhausted }
