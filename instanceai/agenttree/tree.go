package agenttree

import (
	"encoding/json"

	"github.com/threadline/threadline/instanceai"
)

// Agent and run statuses. A node's status is one of the four; so is the
// state's run status (run-finish's "interrupted" folds into cancelled).
const (
	StatusActive    = "active"
	StatusCompleted = "completed"
	StatusCancelled = "cancelled"
	StatusError     = "error"
)

// Cancellation reasons of a cancelled root (InstanceAiCancellationReason).
const (
	CancelUser        = "user"
	CancelTimeout     = "timeout"
	CancelShutdown    = "shutdown"
	CancelInterrupted = "interrupted"
)

// Timeline entry types.
const (
	EntryText      = "text"
	EntryReasoning = "reasoning"
	EntryToolCall  = "tool-call"
	EntryChild     = "child"
)

// AgentNode is one agent of the tree (n8n's InstanceAiAgentNode). The root is
// the orchestrator; Children are the agents it spawned, recursively.
//
// It marshals to exactly the object the reference reducer builds: optional
// fields the reducer never set are omitted, fields it set are present even
// when empty (a spawned agent's tools [], a tool-result's null result, an
// agent-completed's empty result). Field order follows the order in which the
// reducer usually creates the keys; consumers must not rely on it.
type AgentNode struct {
	AgentID     string           `json:"agentId"`
	Role        string           `json:"role"`
	Status      string           `json:"status"`
	TextContent string           `json:"textContent"`
	Reasoning   string           `json:"reasoning"`
	ToolCalls   []*ToolCallState `json:"toolCalls"`
	Children    []*AgentNode     `json:"children"`
	Timeline    []TimelineEntry  `json:"timeline"`

	// Set on spawned agents only; Tools is [] rather than absent there.
	Tools          []string                   `json:"tools,omitzero"`
	TaskID         string                     `json:"taskId,omitempty"`
	Kind           string                     `json:"kind,omitempty"`
	Title          string                     `json:"title,omitempty"`
	Subtitle       string                     `json:"subtitle,omitempty"`
	Goal           string                     `json:"goal,omitempty"`
	TargetResource *instanceai.TargetResource `json:"targetResource,omitempty"`

	StatusMessage string               `json:"statusMessage,omitempty"`
	Tasks         *instanceai.TaskList `json:"tasks,omitempty"`
	// PlanItems is present once a tasks-update carried planItems, even [].
	PlanItems               []instanceai.PlannedTask          `json:"planItems,omitzero"`
	LatestSetupAnnouncement *SetupAnnouncement                `json:"latestSetupAnnouncement,omitempty"`
	SetupItemsByWorkflowID  map[string][]instanceai.SetupItem `json:"setupItemsByWorkflowId,omitempty"`

	// Result is set by agent-completed, whose result is required: an empty
	// result is present as "".
	Result *string `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
	// ErrorDetails is never set by the reducer; it survives StateFromAgentTree.
	ErrorDetails       *ErrorDetails `json:"errorDetails,omitempty"`
	CancellationReason string        `json:"cancellationReason,omitempty"`
}

// MarshalJSON writes toolCalls, children and timeline as [] when nil, as the
// reference's nodes always carry the three arrays.
func (n AgentNode) MarshalJSON() ([]byte, error) {
	type plain AgentNode
	p := plain(n)
	if p.ToolCalls == nil {
		p.ToolCalls = []*ToolCallState{}
	}
	if p.Children == nil {
		p.Children = []*AgentNode{}
	}
	if p.Timeline == nil {
		p.Timeline = []TimelineEntry{}
	}
	return json.Marshal(p)
}

// SetupAnnouncement is the root's record of the latest setup-items event.
type SetupAnnouncement struct {
	WorkflowID string `json:"workflowId"`
	AgentID    string `json:"agentId"`
	Timestamp  string `json:"timestamp"`
}

// ErrorDetails are the structured details of an agent's error.
type ErrorDetails struct {
	StatusCode       *int   `json:"statusCode,omitempty"`
	Code             string `json:"code,omitempty"`
	Provider         string `json:"provider,omitempty"`
	TechnicalDetails string `json:"technicalDetails,omitempty"`
}

// ToolCallState is one tool call of an agent (n8n's InstanceAiToolCallState).
type ToolCallState struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	// Args is a JSON object; nil marshals as {}.
	Args       json.RawMessage `json:"args"`
	IsLoading  bool            `json:"isLoading"`
	RenderHint string          `json:"renderHint,omitempty"`
	StartedAt  string          `json:"startedAt,omitempty"`
	// Confirmation is the pending confirmation-request of this call.
	Confirmation *Confirmation `json:"confirmation,omitempty"`
	// Result is the tool-result's value, present (possibly null) once one
	// arrived, absent (nil) before.
	Result json.RawMessage `json:"result,omitzero"`
	// Error is the tool-error or tool-interrupted message; its error is
	// required, so an empty message is present as "".
	Error       *string `json:"error,omitempty"`
	CompletedAt string  `json:"completedAt,omitempty"`
	// ConfirmationStatus is never set by the reducer; it survives
	// StateFromAgentTree.
	ConfirmationStatus string `json:"confirmationStatus,omitempty"`
}

// MarshalJSON writes args as {} when unset.
func (tc ToolCallState) MarshalJSON() ([]byte, error) {
	type plain ToolCallState
	p := plain(tc)
	if p.Args == nil {
		p.Args = json.RawMessage(`{}`)
	}
	return json.Marshal(p)
}

// Confirmation is a tool call's confirmation-request payload without
// toolCallId, toolName and args (those are the tool call's own), plus the
// expired flag a UI may set (n8n's InstanceAiConfirmation).
type Confirmation struct {
	instanceai.ConfirmationRequest
	Expired *bool `json:"expired,omitempty"`
}

// MarshalJSON writes the request's fields minus toolCallId, toolName and
// args, as the reference's object rest spread does.
func (c Confirmation) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(c.ConfirmationRequest)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	delete(fields, "toolCallId")
	delete(fields, "toolName")
	delete(fields, "args")
	if c.Expired != nil {
		fields["expired"], _ = json.Marshal(*c.Expired)
	}
	return json.Marshal(fields)
}

// TimelineEntry is one step of an agent's timeline, in the order things
// happened: a run of text or reasoning (Content), a tool call (ToolCallID) or
// a spawned child (AgentID). ResponseID is the model response it belongs to,
// when known.
type TimelineEntry struct {
	Type       string `json:"type"`
	Content    string `json:"content,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
	AgentID    string `json:"agentId,omitempty"`
	ResponseID string `json:"responseId,omitempty"`
}

// MarshalJSON writes the fields of the entry's type, required ones even when
// empty.
func (e TimelineEntry) MarshalJSON() ([]byte, error) {
	switch e.Type {
	case EntryText, EntryReasoning:
		return json.Marshal(struct {
			Type       string `json:"type"`
			Content    string `json:"content"`
			ResponseID string `json:"responseId,omitempty"`
		}{e.Type, e.Content, e.ResponseID})
	case EntryToolCall:
		return json.Marshal(struct {
			Type       string `json:"type"`
			ToolCallID string `json:"toolCallId"`
			ResponseID string `json:"responseId,omitempty"`
		}{e.Type, e.ToolCallID, e.ResponseID})
	case EntryChild:
		return json.Marshal(struct {
			Type       string `json:"type"`
			AgentID    string `json:"agentId"`
			ResponseID string `json:"responseId,omitempty"`
		}{e.Type, e.AgentID, e.ResponseID})
	}
	type plain TimelineEntry
	return json.Marshal(plain(e))
}
