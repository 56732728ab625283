package mapping

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/workflow"
)

func builderTypes(evs []BuilderEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// An unavailable model: LLM_UNAVAILABLE with the step's llm_service
// detail, and the operation's error carries the same detail.
func TestBuilderLLMUnavailable(t *testing.T) {
	m := NewInstanceToBuilder(op.Iterate, "th", "run_1", "")
	detail := &workflow.ErrorDetail{Category: workflow.CategoryLLMService, Severity: workflow.SeverityError,
		Title: "LLM Service Crashed", Message: "Model crashed with exit code 137", UserGuidance: "Restart it",
		FixSuggestions: []string{"Restart your LLM service"}, TechnicalDetails: "exit 137"}
	args, _ := json.Marshal(op.Request{Kind: op.Iterate, WorkflowID: "wf_9"})
	result := func(r op.StepResult) json.RawMessage { raw, _ := json.Marshal(r); return raw }
	var out []BuilderEvent
	for _, ev := range []instanceai.Event{
		{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: op.StepValidateRequest, Args: args}},
		{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: "c1", Result: result(op.StepResult{OK: true, Message: "ok"})}},
		{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "c2", ToolName: op.StepCheckLLM, Args: args}},
		{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: "c2", Result: result(op.StepResult{Message: detail.Message, Error: detail})}},
		{Type: instanceai.TypeError, Payload: &instanceai.ErrorPayload{Content: "LLM Service Crashed: Model crashed"}},
		{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunError}},
	} {
		ev.TS = 1736556506000
		out = append(out, m.Push(ev)...)
	}
	want := []string{"ITERATION_STARTED", "VALIDATION_STARTED", "VALIDATION_COMPLETED", "LLM_CHECK_STARTED", "LLM_UNAVAILABLE", "ITERATION_ERROR"}
	if got := builderTypes(out); !slices.Equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	if out[0].WorkflowID != "wf_9" || out[0].Timestamp != "2025-01-11T00:48:26.000Z" || out[0].RunID != "run_1" {
		t.Fatalf("ITERATION_STARTED = %+v", out[0])
	}
	if out[4].Error == nil || out[4].Error.Category != workflow.CategoryLLMService {
		t.Fatalf("LLM_UNAVAILABLE = %+v", out[4])
	}
	last := out[5]
	if last.Success == nil || *last.Success || last.Error == nil || last.Error.Title != "LLM Service Crashed" || !m.Finished() {
		t.Fatalf("ITERATION_ERROR = %+v", last)
	}
	if more := m.Push(instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}}); more != nil {
		t.Fatalf("events after the terminal one: %v", more)
	}
}

// A stream cut short ends with the operation's error; a cancelled run
// with one that says how it ended.
func TestBuilderCloseAndCancel(t *testing.T) {
	m := NewInstanceToBuilder(op.Generate, "th", "r", "wf")
	m.Push(instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}})
	out := m.Close(errors.New("log failed"))
	if got := builderTypes(out); len(got) != 2 || got[0] != "RUN_STARTED" || got[1] != "RUN_ERROR" || out[1].Error.Message != "log failed" {
		t.Fatalf("Close = %+v", out)
	}
	m = NewInstanceToBuilder(op.Modify, "th", "r", "wf")
	out = m.Push(instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}})
	out = append(out, m.Push(instanceai.Event{Type: instanceai.TypeRunFinish,
		Payload: &instanceai.RunFinish{Status: instanceai.RunCancelled, Reason: instanceai.ReasonUserCancelled}})...)
	if got := builderTypes(out); len(got) != 2 || got[1] != "MODIFICATION_ERROR" || out[1].Error == nil ||
		out[1].Error.Message != "The run ended cancelled ("+instanceai.ReasonUserCancelled+")" {
		t.Fatalf("cancelled = %+v", out)
	}
}

// A custom event is AG-UI's CUSTOM under the agent's own name and value.
func TestCustomToAGUI(t *testing.T) {
	m := NewInstanceToAGUI("th", "r")
	out := m.Push(instanceai.Event{Type: instanceai.TypeRunStart, RunID: "x", AgentID: "a", Payload: &instanceai.RunStart{MessageID: "m"}})
	out = append(out, m.Push(instanceai.Event{Type: instanceai.TypeCustom, RunID: "x", AgentID: "a",
		Payload: &instanceai.Custom{Name: "progress", Value: json.RawMessage(`{"percent":5}`)}})...)
	c, ok := out[len(out)-1].(*agui.Custom)
	if !ok || c.Name != "progress" || string(c.Value) != `{"percent":5}` {
		t.Fatalf("events %+v", out)
	}
}
