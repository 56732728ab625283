package nativeapi

import (
	"net/http"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// Stream channels (seed 004 §5, stream partitioning): a client can follow
// only the assistant's words or only the tool and system traffic of a
// thread, each on its own connection. Both keep the thread's ids and
// replay rules, so each channel resumes on its own cursor.
const (
	channelAll   = "all"
	channelText  = "text"
	channelTools = "tools"
)

// textTypes are the assistant-text channel's events: text and reasoning,
// live (deltas) and stored (blocks).
var textTypes = map[instanceai.EventType]bool{
	instanceai.TypeTextDelta: true, instanceai.TypeReasoningDelta: true,
	instanceai.TypeTextBlock: true, instanceai.TypeReasoningBlock: true,
}

// lifecycleTypes frame runs: both channels carry them, so that a client of
// either knows where a run begins and how it ended.
var lifecycleTypes = map[instanceai.EventType]bool{
	instanceai.TypeRunStart: true, instanceai.TypeRunFinish: true,
}

// channelFilter reads ?channel and returns which deliveries it keeps (nil:
// all of them).
func channelFilter(r *http.Request) (func(*instanceai.Delivery) bool, error) {
	switch ch := r.URL.Query().Get("channel"); ch {
	case "", channelAll:
		return nil, nil
	case channelText:
		return func(d *instanceai.Delivery) bool { return keep(d, true) }, nil
	case channelTools:
		return func(d *instanceai.Delivery) bool { return keep(d, false) }, nil
	default:
		return nil, httpjson.NewError(http.StatusBadRequest, "invalid_field", "channel",
			"channel must be one of all, text or tools, got %q", ch)
	}
}

func keep(d *instanceai.Delivery, text bool) bool {
	if d.Kind == "" {
		return true // run-sync and reset frames, for both channels
	}
	if lifecycleTypes[d.Kind] {
		return true
	}
	return textTypes[d.Kind] == text
}
