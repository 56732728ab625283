package mapping

import (
	"encoding/json"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/threadline/threadline/agui"
)

// CompactState restates the shared state of one finished AG-UI run as a
// single STATE_SNAPSHOT, as AG-UI's compaction does for replayed history
// (docs/concepts/serialization.mdx: consecutive STATE_DELTA merged into
// one final STATE_SNAPSHOT): every STATE_SNAPSHOT and STATE_DELTA of evs,
// Threadline's own and an upstream agent's alike, goes, and the state they
// build is sent once where the last of them was. base is the state before
// the run (nil when unknown); the state after it is returned. When the
// state cannot be built (a delta before any snapshot with no base, a
// patch that does not apply) evs are returned as they are, with a nil
// state.
func CompactState(evs []agui.Event, base json.RawMessage) ([]agui.Event, json.RawMessage) {
	state := base
	last, n := -1, 0
	var at agui.Base
	for i, ev := range evs {
		typ, data := ev.Type(), agui.Event(ev)
		if v, ok := ev.(*agui.Verbatim); ok && (typ == agui.TypeStateSnapshot || typ == agui.TypeStateDelta) {
			decoded, err := agui.DecodeEvent(v.Data)
			if err != nil {
				return evs, nil
			}
			data = decoded
		}
		switch e := data.(type) {
		case *agui.StateSnapshot:
			state = e.Snapshot
		case *agui.StateDelta:
			if state == nil {
				return evs, nil
			}
			raw, err := json.Marshal(e.Delta)
			if err != nil {
				return evs, nil
			}
			patch, err := jsonpatch.DecodePatch(raw)
			if err != nil {
				return evs, nil
			}
			next, err := applyBounded(patch, state)
			if err != nil {
				return evs, nil
			}
			state = next
		default:
			continue
		}
		last, n = i, n+1
		at = *data.Common()
	}
	if last < 0 {
		return evs, state
	}
	snap := &agui.StateSnapshot{Snapshot: state}
	snap.Timestamp = at.Timestamp
	if n == 1 {
		if _, ok := evs[last].(*agui.StateSnapshot); ok {
			return evs, state // already one snapshot
		}
	}
	out := make([]agui.Event, 0, len(evs)-n+1)
	for i, ev := range evs {
		switch {
		case i == last:
			out = append(out, snap)
		case ev.Type() == agui.TypeStateSnapshot || ev.Type() == agui.TypeStateDelta:
		default:
			out = append(out, ev)
		}
	}
	return out, state
}
