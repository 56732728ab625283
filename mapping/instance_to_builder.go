package mapping

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/workflow"
)

// BuilderEvent is one event of the N8N Builder's standard API stream, as
// the seed names and shapes them: `{"type": "VALIDATION_STARTED",
// "workflow_id": …, "message": …}` and so on.
type BuilderEvent struct {
	Type       string `json:"type"`
	WorkflowID string `json:"workflow_id,omitempty"`
	ThreadID   string `json:"thread_id,omitempty"`
	RunID      string `json:"run_id,omitempty"`
	// Timestamp is ISO 8601 with milliseconds, in UTC.
	Timestamp string                `json:"timestamp,omitempty"`
	Message   string                `json:"message,omitempty"`
	Success   *bool                 `json:"success,omitempty"`
	Data      *BuilderData          `json:"data,omitempty"`
	Error     *workflow.ErrorDetail `json:"error,omitempty"`
}

// BuilderData is the payload of WORKFLOW_GENERATED, _MODIFIED and
// _ITERATED.
type BuilderData struct {
	WorkflowJSON     string          `json:"workflow_json"`
	ValidationResult json.RawMessage `json:"validation_result"`
}

// builderNames are the event names that differ by operation.
type builderNames struct{ started, finished, failed, built, processing, noun string }

var builderNamesOf = map[op.Kind]builderNames{
	op.Generate: {"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "WORKFLOW_GENERATED", "Generating workflow...", "generation"},
	op.Modify:   {"MODIFICATION_STARTED", "MODIFICATION_FINISHED", "MODIFICATION_ERROR", "WORKFLOW_MODIFIED", "Modifying workflow...", "modification"},
	op.Iterate:  {"ITERATION_STARTED", "ITERATION_FINISHED", "ITERATION_ERROR", "WORKFLOW_ITERATED", "Iterating on workflow...", "iteration"},
}

// InstanceToBuilder renders one builder run's Instance AI events (those
// builder/op writes) in the builder's SSE dialect. Like InstanceToAGUI it
// is a state machine fed one event at a time; events of other runs are the
// caller's to skip.
type InstanceToBuilder struct {
	kind                        op.Kind
	names                       builderNames
	threadID, runID, workflowID string
	steps                       map[string]string // tool call id → step
	startPending                bool
	finished                    bool
	lastErr                     *workflow.ErrorDetail
	ts                          int64
}

// NewInstanceToBuilder starts the stream of a kind operation's run.
// workflowID may be empty: it is then taken from the run's first step.
func NewInstanceToBuilder(kind op.Kind, threadID, runID, workflowID string) *InstanceToBuilder {
	names, ok := builderNamesOf[kind]
	if !ok {
		names = builderNamesOf[op.Generate]
	}
	return &InstanceToBuilder{kind: kind, names: names, threadID: threadID, runID: runID, workflowID: workflowID,
		steps: map[string]string{}}
}

// Finished reports whether the terminal event (…_FINISHED or …_ERROR) was
// returned.
func (m *InstanceToBuilder) Finished() bool { return m.finished }

// Push returns the builder events for ev.
func (m *InstanceToBuilder) Push(ev instanceai.Event) []BuilderEvent {
	if m.finished {
		return nil
	}
	m.ts = ev.TS
	var out []BuilderEvent
	switch p := ev.Payload.(type) {
	case *instanceai.RunStart:
		m.startPending = true
	case *instanceai.ToolCall:
		m.steps[p.ToolCallID] = p.ToolName
		var req op.Request
		if json.Unmarshal(p.Args, &req) == nil && m.workflowID == "" {
			m.workflowID = req.WorkflowID
		}
		out = m.start(out)
		switch p.ToolName {
		case op.StepValidateRequest:
			out = append(out, m.event("VALIDATION_STARTED", "Validating workflow "+m.names.noun+" request..."))
		case op.StepCheckLLM:
			out = append(out, m.event("LLM_CHECK_STARTED", "Checking LLM service availability..."))
		case op.StepBuildWorkflow:
			out = append(out, m.event("PROCESSING_STARTED", m.names.processing))
		}
	case *instanceai.ToolResult:
		out = m.start(out)
		out = append(out, m.result(m.steps[p.ToolCallID], p.Result)...)
	case *instanceai.ErrorPayload:
		if m.lastErr == nil {
			m.lastErr = failure("The operation failed", p.Content, "Try again in a moment.", "Retry the request", p.Content)
		}
	case *instanceai.RunFinish:
		out = m.start(out)
		out = append(out, m.finish(p))
	}
	return out
}

// Close ends a stream cut short by err (the log failed, say) with the
// operation's error event.
func (m *InstanceToBuilder) Close(err error) []BuilderEvent {
	if m.finished {
		return nil
	}
	out := m.start(nil)
	m.finished = true
	e := m.event(m.names.failed, "")
	e.Success = new(bool)
	var reset *instanceai.Reset
	if errors.As(err, &reset) {
		// The cursor cannot be resumed from: events after it are gone,
		// or it is beyond the log.
		e.Error = failure("The stream cannot resume from this event id", err.Error(),
			"Read the run again from its start.", "Send the request again with the same run_id and no Last-Event-ID header", err.Error())
		return append(out, e)
	}
	e.Error = failure("The stream ended early", err.Error(), "Reconnect with the last event id to read the rest of the run.",
		"Send the request again with the same run_id and a Last-Event-ID header", err.Error())
	return append(out, e)
}

// start returns out with the operation's …_STARTED first, once.
func (m *InstanceToBuilder) start(out []BuilderEvent) []BuilderEvent {
	if !m.startPending {
		return out
	}
	m.startPending = false
	return append(out, m.event(m.names.started, ""))
}

func (m *InstanceToBuilder) result(step string, raw json.RawMessage) []BuilderEvent {
	var r op.StepResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil
	}
	if !r.OK && r.Error != nil {
		m.lastErr = r.Error
	}
	switch step {
	case op.StepValidateRequest:
		if !r.OK {
			e := m.event("VALIDATION_ERROR", r.Message)
			e.Error = r.Error
			return []BuilderEvent{e}
		}
		return []BuilderEvent{m.event("VALIDATION_COMPLETED", r.Message)}
	case op.StepCheckLLM:
		if !r.OK {
			e := m.event("LLM_UNAVAILABLE", r.Message)
			e.Error = r.Error
			return []BuilderEvent{e}
		}
		return []BuilderEvent{m.event("LLM_AVAILABLE", r.Message)}
	case op.StepValidateWorkflow:
		if r.OK {
			e := m.event(m.names.built, r.Message)
			e.Data = &BuilderData{WorkflowJSON: r.WorkflowJSON, ValidationResult: r.Validation}
			return []BuilderEvent{e}
		}
	}
	return nil
}

func (m *InstanceToBuilder) finish(p *instanceai.RunFinish) BuilderEvent {
	m.finished = true
	ok := p.Status == instanceai.RunCompleted
	if ok {
		e := m.event(m.names.finished, "")
		e.Success = &ok
		return e
	}
	e := m.event(m.names.failed, "")
	e.Success = &ok
	e.Error = m.lastErr
	if e.Error == nil {
		reason := p.Status
		if p.Reason != "" {
			reason += " (" + p.Reason + ")"
		}
		e.Error = failure("The operation did not finish", "The run ended "+reason, "Send the request again.",
			"Retry the request", "run-finish status "+reason)
	}
	e.Message = e.Error.Message
	return e
}

func (m *InstanceToBuilder) event(typ, message string) BuilderEvent {
	e := BuilderEvent{Type: typ, WorkflowID: m.workflowID, ThreadID: m.threadID, RunID: m.runID, Message: message}
	if m.ts > 0 {
		e.Timestamp = time.UnixMilli(m.ts).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	return e
}

// failure is the ErrorDetail of an operation that ended without a step's
// own detail to report.
func failure(title, message, guidance, fix, technical string) *workflow.ErrorDetail {
	return &workflow.ErrorDetail{Category: workflow.CategoryValidation, Severity: workflow.SeverityError, Title: title,
		Message: message, UserGuidance: guidance, FixSuggestions: []string{fix}, TechnicalDetails: technical}
}
