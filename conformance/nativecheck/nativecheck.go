// Package nativecheck judges streams of n8n's Instance AI protocol (the
// native protocol of Threadline) as a client received them: the envelope and
// payload of each event, the durability classes on the wire (which frames
// carry ids, which never arrive live), the order of a run's events, and the
// equivalence of live and replayed streams folded into agent trees.
//
// Every rule is judged from the recording alone (plus, for replay, the
// cursors the caller chose); nothing asks the server again.
package nativecheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/instanceai"
)

// Rule ids.
const (
	RuleEventName        = "native.frame.event-name"
	RuleJSONObject       = "native.frame.json-object"
	RuleEnvelope         = "native.envelope.shape"
	RulePayload          = "native.envelope.payload"
	RuleRunSync          = "native.runsync.shape"
	RuleReset            = "native.reset.shape"
	RuleIDIncreasing     = "native.id.increasing"
	RuleStoredCarryID    = "native.id.stored-carry-id"
	RuleEphemeralNoID    = "native.durability.ephemeral-no-id"
	RuleBlocksNotLive    = "native.durability.blocks-not-live"
	RuleRunStartFirst    = "native.run.start-first"
	RuleRunSingleFinish  = "native.run.single-finish"
	RuleRunAfterFinish   = "native.run.after-finish"
	RuleReplayStoredOnly = "native.replay.full-stored-only"
	RuleReplayContiguous = "native.replay.full-contiguous"
	RuleReplayLiveIDs    = "native.replay.live-ids-match"
	RuleReplayCursor     = "native.replay.after-cursor"
	RuleReplaySuffix     = "native.replay.after-suffix"
	RuleReplayLiveTree   = "native.replay.live-tree"
	RuleReplayAfterTree  = "native.replay.after-tree"
)

const (
	srcFrames     = "PROTOCOLS.md §1 SSE frames"
	srcEnvelope   = "PROTOCOLS.md §1 Envelope"
	srcPayloads   = "PROTOCOLS.md §1 Event types and payloads"
	srcDurability = "PROTOCOLS.md §1 Durability classes"
	srcLog        = "PROTOCOLS.md §1 The durable log"
	srcHandoff    = "PROTOCOLS.md §1 Replay handoff"
	srcReducer    = "PROTOCOLS.md §1 The agent-run reducer"
	srcRuns       = "PROTOCOLS.md §1 Event types and payloads (run-start, run-finish, agent-completed); docs/native-protocol.md Background agents"
	srcReset      = "PROTOCOLS.md §1 The durable log (memory mode: reset frames)"
)

// Rules are the rules of this checker: CheckConnection reports the
// connection rules (the first thirteen), CheckReplay the replay rules.
var Rules = []conformance.Rule{
	{ID: RuleEventName, Title: "frames carry no SSE event field except the id-less run-sync and reset", Source: srcFrames},
	{ID: RuleJSONObject, Title: "the data of every frame is exactly one JSON object", Source: srcFrames},
	{ID: RuleEnvelope, Title: "envelope: known type, non-empty runId and agentId strings, integer ts, object payload, userId/responseId strings", Source: srcEnvelope},
	{ID: RulePayload, Title: "the payload is valid for the event's type", Source: srcPayloads},
	{ID: RuleRunSync, Title: "run-sync frames carry no id and a runId with an agentTree object", Source: srcFrames},
	{ID: RuleReset, Title: "a reset frame carries a reason and nextEventId, and the id nextEventId-1", Source: srcReset},
	{ID: RuleIDIncreasing, Title: "frame ids are positive integers, strictly increasing on a connection", Source: srcLog},
	{ID: RuleStoredCarryID, Title: "stored events carry their seq as id; a structural event loses it only by stripping, after which no frame has an id", Source: srcHandoff},
	{ID: RuleEphemeralNoID, Title: "ephemeral events (text-delta, reasoning-delta, status, filesystem-request) never carry an id", Source: srcDurability},
	{ID: RuleBlocksNotLive, Title: "text-block and reasoning-block are replayed; after the connection went live one comes only where the deltas it sent do not make up the block's text (they were lost on the way), never repeating them", Source: srcDurability},
	{ID: RuleRunStartFirst, Title: "a run's run-start comes once, before any other event of the run", Source: srcRuns},
	{ID: RuleRunSingleFinish, Title: "a run has at most one run-finish", Source: srcRuns},
	{ID: RuleRunAfterFinish, Title: "after run-finish the orchestrator is silent; an agent is silent after its agent-completed", Source: srcRuns},
	{ID: RuleReplayStoredOnly, Title: "the replay of a finished thread holds only stored events, each with an id", Source: srcDurability},
	{ID: RuleReplayContiguous, Title: "the replay of a finished thread has consecutive ids (the log is contiguous)", Source: srcLog},
	{ID: RuleReplayLiveIDs, Title: "an id sent live names the same event as that id in the replay", Source: srcLog},
	{ID: RuleReplayCursor, Title: "a connection with Last-Event-ID c sends only ids greater than c", Source: srcHandoff},
	{ID: RuleReplaySuffix, Title: "a connection with Last-Event-ID c replays exactly the log after c", Source: srcHandoff},
	{ID: RuleReplayLiveTree, Title: "the agent tree folded from the live stream equals the one folded from the replay", Source: srcReducer},
	{ID: RuleReplayAfterTree, Title: "the replay up to c plus a reconnection after c folds to the replay's agent tree", Source: srcReducer},
}

// connectionRules is how many of Rules CheckConnection reports.
const connectionRules = 13

// event is one decoded event frame of a connection.
type event struct {
	index int // position among the recording's frames
	id    int64
	hasID bool
	data  string
	ev    instanceai.Event
	// idOnly marks a frame of an id alone: a stored event not shown.
	idOnly bool
}

// runState is what a connection has seen of one run.
type runState struct {
	started      bool
	orchestrator string
	seenOther    bool // an event of the run other than run-start
	finished     bool
}

// connection is the outcome of judging one recording: the findings and the
// events that decoded, for the replay checks.
type connection struct {
	tally *conformance.Tally
	// events are those after the last reset frame: a client drops its
	// state for the thread at a reset, so only these fold into its view.
	events []event
	// resetID is the id of the last reset frame, 0 when there was none.
	resetID int64
}

// CheckConnection judges one native event-stream connection as received.
func CheckConnection(rec *conformance.Recording) []conformance.Finding {
	return judge(rec).tally.Findings()
}

func judge(rec *conformance.Recording) *connection {
	c := &connection{tally: conformance.NewTally(Rules[:connectionRules])}
	t := c.tally
	var (
		lastID int64
		// live turns true at the first frame that only a live connection
		// sends: an ephemeral event, a run-sync frame, or a structural
		// event stripped of its id. The handoff sends the replay (blocks
		// among it) strictly before all of these, so a block after one was
		// sent live.
		live     bool
		stripped string // the first stripped frame, once one was seen
		runs     = map[string]*runState{}
		done     = map[string]bool{} // "runId/agentId" of completed agents
		// liveText is the text deltas sent of each segment, by liveKey.
		liveText = map[string]string{}
	)
	for i, f := range rec.Frames {
		if f.Data == "" && f.Event == "" && !f.HasID {
			continue // comments and empty frames
		}
		where := fmt.Sprintf("frame %d", i)
		if f.HasID {
			where += " (id " + f.ID + ")"
		}
		if f.HasID {
			n, err := strconv.ParseInt(f.ID, 10, 64)
			switch {
			case err != nil || n < 1 || strings.TrimSpace(f.ID) != f.ID || strings.HasPrefix(f.ID, "+"):
				t.Fail(RuleIDIncreasing, "%s: id %q is not a positive integer", where, f.ID)
			case n <= lastID:
				t.Fail(RuleIDIncreasing, "%s: id %d after id %d", where, n, lastID)
			default:
				t.Pass(RuleIDIncreasing)
				lastID = n
			}
		}
		if f.Data == "" && f.Event == "" {
			// An id alone: a stored event the stream does not show (an
			// extension type), which still moves the client's cursor.
			n, _ := strconv.ParseInt(f.ID, 10, 64)
			c.events = append(c.events, event{index: i, hasID: true, id: n, idOnly: true})
			continue
		}
		switch f.Event {
		case "":
			t.Pass(RuleEventName)
		case "run-sync", "reset":
			t.Pass(RuleEventName)
		default:
			t.Fail(RuleEventName, "%s: event field %q (only run-sync and reset are defined; a client's onmessage never sees other names)", where, f.Event)
			continue
		}
		if err := oneObject(f.Data); err != nil {
			t.Fail(RuleJSONObject, "%s: %v", where, err)
			continue
		}
		t.Pass(RuleJSONObject)
		if f.Event == "run-sync" {
			live = true
			judgeRunSync(t, where, f.HasID, f.Data)
			continue
		}
		if f.Event == "reset" {
			if judgeReset(t, where, f.ID, f.Data) {
				// The client starts over: what it was sent before folds
				// into nothing, and runs may continue without their start.
				c.resetID, _ = strconv.ParseInt(f.ID, 10, 64)
				c.events = nil
				runs, done = map[string]*runState{}, map[string]bool{}
			}
			continue
		}
		ev, ok := decode(t, where, f.Data)
		if !ok {
			continue
		}
		e := event{index: i, hasID: f.HasID, data: f.Data, ev: ev}
		if f.HasID {
			e.id, _ = strconv.ParseInt(f.ID, 10, 64)
		}
		c.events = append(c.events, e)

		switch instanceai.DurabilityOf(ev.Type) {
		case instanceai.Ephemeral:
			live = true
			t.Expect(RuleEphemeralNoID, !f.HasID, "%s: %s carries id %q", where, ev.Type, f.ID)
			if p, ok := ev.Payload.(*instanceai.Text); ok {
				liveText[liveKey(ev)] += p.Text
			}
		case instanceai.Coalesced:
			key := liveKey(ev)
			t.Expect(RuleBlocksNotLive, !live || liveText[key] != blockText(ev),
				"%s: %s after the connection went live, repeating the text its deltas sent", where, ev.Type)
			delete(liveText, key)
			switch {
			case !f.HasID:
				t.Fail(RuleStoredCarryID, "%s: %s without an id (blocks come from the log only)", where, ev.Type)
			case stripped != "":
				t.Fail(RuleStoredCarryID, "%s: %s has an id after %s was stripped of its", where, ev.Type, stripped)
			default:
				t.Pass(RuleStoredCarryID)
			}
		default:
			switch {
			case !f.HasID:
				// Stripping happens live only, and once the connection's
				// cursor stopped advancing every later stored event is
				// beyond it as well.
				live = true
				if stripped == "" {
					stripped = where
				}
				t.Pass(RuleStoredCarryID)
			case stripped != "":
				t.Fail(RuleStoredCarryID, "%s: %s has an id after %s was stripped of its", where, ev.Type, stripped)
			default:
				t.Pass(RuleStoredCarryID)
			}
		}
		judgeRun(t, where, ev, runs, done)
	}
	for _, r := range runs {
		if r.finished {
			t.Pass(RuleRunAfterFinish)
		}
	}
	return c
}

// liveKey names the segment of a delta or block: its run, agent, kind of
// text and response.
func liveKey(ev instanceai.Event) string {
	kind := "text"
	if ev.Type == instanceai.TypeReasoningDelta || ev.Type == instanceai.TypeReasoningBlock {
		kind = "reasoning"
	}
	return ev.RunID + "\x00" + ev.AgentID + "\x00" + kind + "\x00" + ev.ResponseID
}

// blockText is a block's text ("" for anything else).
func blockText(ev instanceai.Event) string {
	if p, ok := ev.Payload.(*instanceai.Text); ok {
		return p.Text
	}
	return ""
}

// judgeRun applies the run-order rules to one event.
func judgeRun(t *conformance.Tally, where string, ev instanceai.Event, runs map[string]*runState, done map[string]bool) {
	r := runs[ev.RunID]
	if r == nil {
		r = &runState{orchestrator: instanceai.OrchestratorAgentID(ev.RunID)}
		runs[ev.RunID] = r
	}
	key := ev.RunID + "/" + ev.AgentID
	switch ev.Type {
	case instanceai.TypeRunStart:
		switch {
		case r.started:
			t.Fail(RuleRunStartFirst, "%s: second run-start of run %s", where, ev.RunID)
		case r.seenOther:
			t.Fail(RuleRunStartFirst, "%s: run-start of run %s after other events of the run", where, ev.RunID)
		default:
			t.Pass(RuleRunStartFirst)
		}
		r.started, r.orchestrator = true, ev.AgentID
		return
	case instanceai.TypeRunFinish:
		r.seenOther = true
		if r.finished {
			t.Fail(RuleRunSingleFinish, "%s: second run-finish of run %s", where, ev.RunID)
			return
		}
		t.Pass(RuleRunSingleFinish)
		r.finished = true
		return
	}
	r.seenOther = true
	switch {
	case done[key]:
		t.Fail(RuleRunAfterFinish, "%s: %s of agent %s after its agent-completed", where, ev.Type, ev.AgentID)
	case r.finished && ev.AgentID == r.orchestrator:
		t.Fail(RuleRunAfterFinish, "%s: %s of the orchestrator %s after the run-finish of run %s", where, ev.Type, ev.AgentID, ev.RunID)
	}
	if ev.Type == instanceai.TypeAgentCompleted {
		done[key] = true
	}
}

// oneObject reports whether data is exactly one JSON object.
func oneObject(data string) error {
	trimmed := bytes.TrimSpace([]byte(data))
	if !json.Valid(trimmed) {
		return errors.New("data is not one JSON value")
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("data is a JSON value but not an object: %.40s", trimmed)
	}
	return nil
}

// judgeRunSync checks a run-sync frame: state for a client that reconnects,
// not an event, so it has no id and none of the envelope.
func judgeRunSync(t *conformance.Tally, where string, hasID bool, data string) {
	var rs struct {
		RunID     any             `json:"runId"`
		AgentTree json.RawMessage `json:"agentTree"`
	}
	_ = json.Unmarshal([]byte(data), &rs)
	runID, _ := rs.RunID.(string)
	switch {
	case hasID:
		t.Fail(RuleRunSync, "%s: run-sync carries an id (it is not in the log; a cursor on it would skip events)", where)
	case runID == "":
		t.Fail(RuleRunSync, "%s: run-sync without a runId string", where)
	case !isObject(rs.AgentTree):
		t.Fail(RuleRunSync, "%s: run-sync without an agentTree object", where)
	default:
		t.Pass(RuleRunSync)
	}
}

// judgeReset checks a reset frame: the log lost the events between the
// connection's cursor and nextEventId, and the frame's id moves the cursor
// to just before it. It reports whether the frame is well formed.
func judgeReset(t *conformance.Tally, where, id, data string) bool {
	var r struct {
		Reason      any `json:"reason"`
		NextEventID any `json:"nextEventId"`
	}
	_ = json.Unmarshal([]byte(data), &r)
	reason, _ := r.Reason.(string)
	next, isNum := r.NextEventID.(float64)
	n, err := strconv.ParseInt(id, 10, 64)
	switch {
	case id == "" || err != nil:
		t.Fail(RuleReset, "%s: reset without an integer id (a reconnect would meet the same gap again)", where)
	case reason == "":
		t.Fail(RuleReset, "%s: reset without a reason string", where)
	case !isNum || next != float64(n+1):
		t.Fail(RuleReset, "%s: reset with id %d and nextEventId %v, want %d", where, n, r.NextEventID, n+1)
	default:
		t.Pass(RuleReset)
		return true
	}
	return false
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// decode checks the envelope and then the payload of an event frame, and
// returns the event when both hold.
func decode(t *conformance.Tally, where, data string) (instanceai.Event, bool) {
	var env map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &env); err != nil {
		t.Fail(RuleEnvelope, "%s: %v", where, err)
		return instanceai.Event{}, false
	}
	if err := envelope(env); err != nil {
		t.Fail(RuleEnvelope, "%s: %v", where, err)
		return instanceai.Event{}, false
	}
	var ev instanceai.Event
	err := json.Unmarshal([]byte(data), &ev)
	if err == nil {
		err = ev.Validate()
	}
	var ve *instanceai.ValidationError
	switch {
	case err == nil:
		t.Pass(RuleEnvelope)
		t.Pass(RulePayload)
		return ev, true
	case errors.As(err, &ve) && (ve.Field == "payload" || strings.HasPrefix(ve.Field, "payload.")):
		t.Pass(RuleEnvelope)
		t.Fail(RulePayload, "%s: %s %s: %s", where, envType(env), ve.Field, ve.Reason)
	case errors.As(err, &ve):
		t.Fail(RuleEnvelope, "%s: %s: %s", where, ve.Field, ve.Reason)
	default:
		t.Fail(RulePayload, "%s: %s: %v", where, envType(env), err)
	}
	return instanceai.Event{}, false
}

func envType(env map[string]json.RawMessage) string {
	var s string
	_ = json.Unmarshal(env["type"], &s)
	return s
}

// envelope checks the envelope fields by their JSON kinds, before decoding
// into Go types would blur them (a missing string decodes as "", a float ts
// fails with a message about Go types).
func envelope(env map[string]json.RawMessage) error {
	str := func(field string, need bool) (string, error) {
		raw, ok := env[field]
		if !ok {
			if need {
				return "", fmt.Errorf("%s is missing", field)
			}
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || bytes.TrimSpace(raw)[0] != '"' {
			return "", fmt.Errorf("%s is not a string: %s", field, raw)
		}
		if need && s == "" {
			return "", fmt.Errorf("%s is empty", field)
		}
		return s, nil
	}
	typ, err := str("type", true)
	if err != nil {
		return err
	}
	if !slices.Contains(instanceai.AllTypes, instanceai.EventType(typ)) {
		return fmt.Errorf("type %q is not an Instance AI event type", typ)
	}
	for _, f := range []string{"runId", "agentId"} {
		if _, err := str(f, true); err != nil {
			return err
		}
	}
	for _, f := range []string{"userId", "responseId"} {
		if _, err := str(f, false); err != nil {
			return err
		}
	}
	// ts is optional in the schema but stamped at publish, so every event on
	// the wire has it.
	ts, ok := env["ts"]
	if !ok {
		return errors.New("ts is missing (the server stamps it at publish)")
	}
	if _, err := strconv.ParseInt(string(bytes.TrimSpace(ts)), 10, 64); err != nil {
		return fmt.Errorf("ts is not an integer: %s", ts)
	}
	if p, ok := env["payload"]; !ok || !isObject(p) {
		return fmt.Errorf("payload is not an object: %s", p)
	}
	return nil
}
