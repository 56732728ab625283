package mapping

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

const (
	orch = "orchestrator-run1"
	run  = "run1"
)

// ev builds an instance-ai event; ts is derived from the order of calls by
// the callers that need it.
func ev(t instanceai.EventType, agent, resp string, p instanceai.Payload) instanceai.Event {
	return instanceai.Event{Type: t, RunID: run, AgentID: agent, ResponseID: resp, Payload: p}
}

func runStart() instanceai.Event {
	return ev(instanceai.TypeRunStart, orch, "", &instanceai.RunStart{MessageID: "msg1"})
}
func textDelta(agent, resp, s string) instanceai.Event {
	return ev(instanceai.TypeTextDelta, agent, resp, &instanceai.Text{Text: s})
}
func reasoningDelta(agent, resp, s string) instanceai.Event {
	return ev(instanceai.TypeReasoningDelta, agent, resp, &instanceai.Text{Text: s})
}
func textBlock(agent, resp, s string) instanceai.Event {
	return ev(instanceai.TypeTextBlock, agent, resp, &instanceai.Text{Text: s})
}
func reasoningBlock(agent, resp, s string) instanceai.Event {
	return ev(instanceai.TypeReasoningBlock, agent, resp, &instanceai.Text{Text: s})
}
func toolInputStart(agent, id, name string) instanceai.Event {
	return ev(instanceai.TypeToolInputStart, agent, "", &instanceai.ToolInputStart{ToolCallID: id, ToolName: name})
}
func toolCall(agent, id, name, args string) instanceai.Event {
	return ev(instanceai.TypeToolCall, agent, "", &instanceai.ToolCall{ToolCallID: id, ToolName: name, Args: json.RawMessage(args)})
}
func toolResult(agent, id, result string) instanceai.Event {
	return ev(instanceai.TypeToolResult, agent, "", &instanceai.ToolResult{ToolCallID: id, Result: json.RawMessage(result)})
}
func toolError(t instanceai.EventType, agent, id, msg string) instanceai.Event {
	return ev(t, agent, "", &instanceai.ToolError{ToolCallID: id, Error: msg})
}
func spawned(agent, parent, role string) instanceai.Event {
	return ev(instanceai.TypeAgentSpawned, agent, "", &instanceai.AgentSpawned{ParentID: parent, Role: role, Tools: []string{}, Title: "Build it"})
}
func completed(agent, status, result, errText string) instanceai.Event {
	return ev(instanceai.TypeAgentCompleted, agent, "", &instanceai.AgentCompleted{Role: "builder", Result: result, Status: status, Error: errText})
}
func tasks(agent string, ts ...instanceai.Task) instanceai.Event {
	return ev(instanceai.TypeTasksUpdate, agent, "", &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: ts}})
}
func confirm(agent, req, toolCallID string) instanceai.Event {
	return ev(instanceai.TypeConfirmRequest, agent, "", &instanceai.ConfirmationRequest{RequestID: req, ToolCallID: toolCallID,
		ToolName: "delete", Severity: instanceai.SeverityDestructive, Message: "Delete it?"})
}
func finish(status, reason string) instanceai.Event {
	return ev(instanceai.TypeRunFinish, orch, "", &instanceai.RunFinish{Status: status, Reason: reason})
}

// summary renders an event as its type and its identifying fields, in a
// fixed order, for compact expectations.
func summary(e agui.Event) string {
	raw, err := json.Marshal(e)
	if err != nil {
		return "marshal error: " + err.Error()
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	parts := []string{string(e.Type())}
	for _, k := range []string{"subagentRunId", "messageId", "toolCallId", "toolCallName", "parentMessageId", "name", "delta",
		"content", "snapshot", "value", "code", "message", "parentSubagentRunId", "result"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil || k == "snapshot" || k == "value" || k == "delta" && e.Type() == agui.TypeStateDelta {
			s = string(v)
		}
		if k == "name" && e.Type() == agui.TypeCustom {
			parts = append(parts, s)
			continue
		}
		parts = append(parts, k+"="+s)
	}
	if o, ok := m["outcome"]; ok {
		var out struct {
			Type         string   `json:"type"`
			InterruptIDs []string `json:"interruptIds"`
		}
		_ = json.Unmarshal(o, &out)
		parts = append(parts, "outcome="+out.Type)
		if len(out.InterruptIDs) > 0 {
			parts = append(parts, fmt.Sprint("interruptIds=", out.InterruptIDs))
		}
	}
	return strings.Join(parts, " ")
}

func summaries(evs []agui.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = summary(e)
	}
	return out
}

// feed pushes every event and returns everything emitted.
func feed(m *InstanceToAGUI, evs ...instanceai.Event) []agui.Event {
	var out []agui.Event
	for _, e := range evs {
		out = append(out, m.Push(e)...)
	}
	return out
}
