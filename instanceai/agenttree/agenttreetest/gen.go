// Package agenttreetest generates event streams for the tests of the agent
// tree folds: the Go reducer against n8n's, and the console's JavaScript
// fold against the Go one.
package agenttreetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/threadline/threadline/instanceai"
)

// Chooser picks small numbers: a seeded generator for the random
// equivalence tests, a fuzzer's bytes for a fuzz test.
type Chooser interface {
	Intn(n int) int
}

// ByteChooser draws from a byte string, then zeros once it runs out.
type ByteChooser struct{ B []byte }

// Intn returns the next byte modulo n.
func (c *ByteChooser) Intn(n int) int {
	if len(c.B) == 0 {
		return 0
	}
	v := int(c.B[0])
	c.B = c.B[1:]
	return v % n
}

// RandChooser draws from a seeded generator.
type RandChooser struct{ R *rand.Rand }

// Intn returns R.IntN(n).
func (c RandChooser) Intn(n int) int { return c.R.IntN(n) }

// The alphabet of generated streams: few ids, so that events collide on the
// same agents, calls and responses, and texts that are prefixes and suffixes
// of each other, so that blocks exercise every REPLACE branch. The ids
// include unknown agents, unsafe keys and Object.prototype member names.
var (
	genAgents    = []string{"orchestrator-run_1", "orchestrator-run_1", "orchestrator-run_2", "agent-a", "agent-b", "agent-ghost", "agent-001", "toString", "__proto__", "valueOf"}
	genRuns      = []string{"run_1", "run_2"}
	genResponses = []string{"", "r1", "r2"}
	genToolCalls = []string{"c1", "c2", "c3", "toString", "constructor"}
	genToolNames = []string{"search-nodes", "build-workflow", "task-control", "load_skill"}
	genTexts     = []string{"", "a", "b", "ab", "ba", "Hel", "lo", "Hello", "\u00e9\u4e16", "Hello, world"}
	genFinish    = []string{"completed", "cancelled", "error", "interrupted"}
	genReasons   = []string{"", "user_cancelled", "timeout", "service_shutdown", "crash_interrupted", "boom"}
	genResults   = []string{`null`, `{"ok":true}`, `"done"`, `[1,2]`, `0`}
	genWorkflows = []string{"wf_1", "wf_2", "__proto__"}
	// A ts far outside the JS Date range makes the reference throw; a
	// negative one renders an extended year.
	genOddTS = []int64{8_640_000_000_000_001, -62_198_755_200_000, -8_640_000_000_000_000}
)

func pick[T any](c Chooser, xs []T) T { return xs[c.Intn(len(xs))] }

// GenStream builds a stream of n events. Every event is schema-valid and
// carries ts.
func GenStream(c Chooser, n int) []instanceai.Event {
	ts := int64(1767225600000)
	out := make([]instanceai.Event, 0, n)
	for range n {
		ts += int64(1 + c.Intn(500))
		ev := instanceai.Event{RunID: pick(c, genRuns), AgentID: pick(c, genAgents), UserID: "user_1",
			ResponseID: pick(c, genResponses), TS: ts}
		if c.Intn(40) == 0 {
			ev.TS = pick(c, genOddTS)
		}
		switch c.Intn(20) {
		case 0:
			ev.Type, ev.Payload = instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "msg_1"}
		case 1:
			ev.Type, ev.Payload = instanceai.TypeRunFinish, &instanceai.RunFinish{Status: pick(c, genFinish), Reason: pick(c, genReasons)}
		case 2, 3:
			ev.Type, ev.Payload = instanceai.TypeTextDelta, &instanceai.Text{Text: pick(c, genTexts)}
		case 4:
			ev.Type, ev.Payload = instanceai.TypeReasoningDelta, &instanceai.Text{Text: pick(c, genTexts)}
		case 5, 6:
			ev.Type, ev.Payload = instanceai.TypeTextBlock, &instanceai.Text{Text: pick(c, genTexts)}
		case 7:
			ev.Type, ev.Payload = instanceai.TypeReasoningBlock, &instanceai.Text{Text: pick(c, genTexts)}
		case 8:
			ev.Type, ev.Payload = instanceai.TypeToolInputStart, &instanceai.ToolInputStart{ToolCallID: pick(c, genToolCalls), ToolName: pick(c, genToolNames)}
		case 9:
			ev.Type, ev.Payload = instanceai.TypeToolCall, &instanceai.ToolCall{ToolCallID: pick(c, genToolCalls), ToolName: pick(c, genToolNames),
				Args: json.RawMessage(fmt.Sprintf(`{"n":%d}`, c.Intn(3)))}
		case 10:
			ev.Type, ev.Payload = instanceai.TypeToolResult, &instanceai.ToolResult{ToolCallID: pick(c, genToolCalls), Result: json.RawMessage(pick(c, genResults))}
		case 11:
			ev.Type = pick(c, []instanceai.EventType{instanceai.TypeToolError, instanceai.TypeToolInterrupted})
			ev.Payload = &instanceai.ToolError{ToolCallID: pick(c, genToolCalls), Error: pick(c, []string{"", "failed"})}
		case 12:
			p := &instanceai.AgentSpawned{ParentID: pick(c, genAgents), Role: "helper", Tools: []string{}}
			if c.Intn(2) == 0 {
				p.TargetResource = &instanceai.TargetResource{Type: instanceai.TargetWorkflow,
					ID: pick(c, []string{"", "wf_1"}), Name: pick(c, []string{"", "Lead intake"})}
			}
			if c.Intn(2) == 0 {
				p.Kind, p.Title, p.Tools = instanceai.AgentKindBuilder, "Building", []string{"build-workflow"}
			}
			ev.Type, ev.Payload = instanceai.TypeAgentSpawned, p
		case 13:
			ev.Type, ev.Payload = instanceai.TypeAgentCompleted, &instanceai.AgentCompleted{Role: "helper",
				Result: pick(c, []string{"", "done"}), Error: pick(c, []string{"", "broke"}), Status: pick(c, []string{"", "completed", "cancelled", "error"})}
		case 14:
			ev.Type, ev.Payload = instanceai.TypeConfirmRequest, &instanceai.ConfirmationRequest{RequestID: "req_1",
				ToolCallID: pick(c, genToolCalls), ToolName: "delete-workflow", Args: json.RawMessage(`{"id":"wf_1"}`),
				Severity: instanceai.SeverityDestructive, Message: "Delete?"}
		case 15:
			p := &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: []instanceai.Task{{ID: "t1", Description: "Build", Status: instanceai.TaskTodo}}}}
			switch c.Intn(3) {
			case 0:
				p.PlanItems = []instanceai.PlannedTask{{ID: "t1", Title: "Build", Kind: "build-workflow", Spec: "x", Deps: []string{}}}
			case 1:
				p.PlanItems = []instanceai.PlannedTask{}
			}
			ev.Type, ev.Payload = instanceai.TypeTasksUpdate, p
		case 16:
			ev.Type, ev.Payload = instanceai.TypeStatus, &instanceai.Status{Message: pick(c, []string{"", "Working..."})}
		case 17:
			ev.Type, ev.Payload = instanceai.TypeError, &instanceai.ErrorPayload{Content: "It broke.",
				Code: pick(c, []string{"", instanceai.ErrorCodeQuotaExhausted})}
		case 18:
			ev.Type, ev.Payload = instanceai.TypeSetupItems, &instanceai.SetupItems{WorkflowID: pick(c, genWorkflows),
				Items: []instanceai.SetupItem{{ID: "si_1", Kind: instanceai.SetupItemParameters, NodeName: "Webhook", ParameterNames: []string{"path"}}}}
		default:
			ev.Type, ev.Payload = instanceai.TypeThreadTitleUpdated, &instanceai.ThreadTitle{Title: "A title"}
		}
		out = append(out, ev)
	}
	return out
}
