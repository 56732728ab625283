package storagetest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/threadline/threadline/instanceai"
)

// FixtureUser is the user the rich events of EveryType carry: a thread
// they are appended to must be this user's, since a log stores a user's
// events only in that user's thread.
const FixtureUser = "user-1"

// richEvents are wire-format events whose payloads exercise the encoding:
// optional fields set and unset, raw JSON of every kind (a number beyond
// float64, nested arrays, a bare string), non-ASCII text and characters that
// JSON escapes. They are written as JSON, not Go literals, so that they
// follow the event model as it grows. {{run}} stands for the run id.
var richEvents = []string{
	`{"type":"run-start","runId":"{{run}}","agentId":"orchestrator-{{run}}","userId":"user-1","ts":1700000000123,"payload":{"messageId":"msg-1","traceId":"trace-1","messageGroupId":"group-1"}}`,
	`{"type":"text-delta","runId":"{{run}}","agentId":"orchestrator-{{run}}","responseId":"resp-1","payload":{"text":"Hé, ☃ and 😀 "}}`,
	`{"type":"reasoning-block","runId":"{{run}}","agentId":"orchestrator-{{run}}","responseId":"resp-1","payload":{"text":"thinking\n\t\"quoted\" in full"}}`,
	`{"type":"text-block","runId":"{{run}}","agentId":"orchestrator-{{run}}","responseId":"resp-1","payload":{"text":"<b>HTML</b> & \u2028 separators\u2029, \\ backslashes, \u0001 control"}}`,
	`{"type":"tool-call","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"toolCallId":"call-1","toolName":"search_nodes","args":{"query":"slack","limit":10,"big":123456789012345678901234567890,"f":1.5e-300,"nested":{"a":[1,"x",null,true]}}}}`,
	`{"type":"tool-result","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"toolCallId":"call-1","result":[{"name":"Slack","score":0.97}]}}`,
	`{"type":"tool-result","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"toolCallId":"call-2","result":"just a string"}}`,
	`{"type":"tool-error","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"toolCallId":"call-3","error":"boom: \"bad\" input"}}`,
	`{"type":"agent-spawned","runId":"{{run}}","agentId":"agent-builder-{{run}}","payload":{"parentId":"orchestrator-{{run}}","role":"builder","tools":["a","b"],"title":"Build"}}`,
	`{"type":"thread-title-updated","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"title":"Ein Titel — mit Umlauten äöü"}}`,
	`{"type":"error","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"content":"rate limited","statusCode":429,"provider":"openai"}}`,
	`{"type":"run-finish","runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{"status":"error","reason":"crash_interrupted"}}`,
}

// EveryType returns one event of every type in instanceai.AllTypes (with an
// empty payload object, which the model fills with its defaults) followed by
// the rich events above, all of run runID.
//
// Each event is in canonical form: decoded from its own encoding, as a read
// from the log returns it. So a store that keeps the bytes returns events
// deeply equal to these, and encoding them again yields the same bytes.
func EveryType(runID string) []instanceai.Event {
	var raw []string
	for _, t := range instanceai.AllTypes {
		raw = append(raw, fmt.Sprintf(`{"type":%q,"runId":"{{run}}","agentId":"orchestrator-{{run}}","payload":{}}`, t))
	}
	raw = append(raw, richEvents...)
	out := make([]instanceai.Event, len(raw))
	for i, r := range raw {
		r = strings.ReplaceAll(r, `"R"`, fmt.Sprintf("%q", runID))
		r = strings.ReplaceAll(r, `-{{run}}"`, "-"+runID+`"`)
		out[i] = canonical(r)
	}
	return out
}

// canonical decodes wire JSON into an event, encodes it and decodes that,
// so that defaults the model adds on encoding are in the returned value.
func canonical(wire string) instanceai.Event {
	var e instanceai.Event
	if err := json.Unmarshal([]byte(wire), &e); err != nil {
		panic(fmt.Sprintf("storagetest: fixture %s does not decode: %v", wire, err))
	}
	b, err := json.Marshal(&e)
	if err != nil {
		panic(fmt.Sprintf("storagetest: fixture %s does not encode: %v", wire, err))
	}
	var c instanceai.Event
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("storagetest: fixture %s does not decode after encoding (%s): %v", wire, b, err))
	}
	return c
}

// TypicalBatch returns n events shaped like a busy agent's output: tool
// calls, their results and text blocks, 230 bytes each on average when
// encoded.
func TypicalBatch(runID string, n int) []instanceai.Event {
	orch := instanceai.OrchestratorAgentID(runID)
	text := strings.Repeat("The workflow now posts to Slack. ", 3)
	out := make([]instanceai.Event, n)
	for i := range out {
		e := instanceai.Event{RunID: runID, AgentID: orch, TS: 1_700_000_000_000 + int64(i)}
		call := fmt.Sprintf("call-%04d", i/3)
		switch i % 3 {
		case 0:
			e.Type = instanceai.TypeToolCall
			e.Payload = &instanceai.ToolCall{ToolCallID: call, ToolName: "add_node",
				Args: json.RawMessage(`{"type":"n8n-nodes-base.slack","name":"Post message","position":[640,300]}`)}
		case 1:
			e.Type = instanceai.TypeToolResult
			e.Payload = &instanceai.ToolResult{ToolCallID: call,
				Result: json.RawMessage(`{"ok":true,"nodeId":"6f1c2a90-53be-4c1e-9d1a-2b7f0e4c8a11","warnings":[]}`)}
		default:
			e.Type = instanceai.TypeTextBlock
			e.ResponseID = "resp-" + call
			e.Payload = &instanceai.Text{Text: text}
		}
		out[i] = e
	}
	return out
}
