// Package instanceai is the domain core of Threadline: n8n's Instance AI event
// model, the per-thread ordered writer that makes events durable, the hub that
// fans them out live and replays them after a cursor, and the run registry.
package instanceai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// EventType names an Instance AI event, exactly as n8n's schema spells it.
type EventType string

// Every event type of n8n's instanceAiEventSchema (@n8n/api-types 1.41.0).
const (
	TypeRunStart           EventType = "run-start"
	TypeRunFinish          EventType = "run-finish"
	TypeTextDelta          EventType = "text-delta"
	TypeReasoningDelta     EventType = "reasoning-delta"
	TypeTextBlock          EventType = "text-block"
	TypeReasoningBlock     EventType = "reasoning-block"
	TypeToolInputStart     EventType = "tool-input-start"
	TypeToolCall           EventType = "tool-call"
	TypeToolResult         EventType = "tool-result"
	TypeToolError          EventType = "tool-error"
	TypeToolInterrupted    EventType = "tool-interrupted"
	TypeAgentSpawned       EventType = "agent-spawned"
	TypeAgentCompleted     EventType = "agent-completed"
	TypeConfirmRequest     EventType = "confirmation-request"
	TypeTasksUpdate        EventType = "tasks-update"
	TypeStatus             EventType = "status"
	TypeThreadTitleUpdated EventType = "thread-title-updated"
	TypeError              EventType = "error"
	TypeFilesystemRequest  EventType = "filesystem-request"
	TypeSetupItems         EventType = "setup-items"
	TypePreferencesApplied EventType = "preferences-applied"
)

// AllTypes lists every event type of the schema: the protocol reference's
// order, then the two types the reference does not list.
var AllTypes = []EventType{
	TypeRunStart, TypeRunFinish, TypeTextDelta, TypeReasoningDelta, TypeTextBlock,
	TypeReasoningBlock, TypeToolInputStart, TypeToolCall, TypeToolResult, TypeToolError,
	TypeToolInterrupted, TypeAgentSpawned, TypeAgentCompleted, TypeConfirmRequest,
	TypeTasksUpdate, TypeStatus, TypeThreadTitleUpdated, TypeError, TypeFilesystemRequest,
	TypeSetupItems, TypePreferencesApplied,
}

// Event is the envelope every Instance AI event travels in.
type Event struct {
	Type       EventType `json:"type"`
	RunID      string    `json:"runId"`
	AgentID    string    `json:"agentId"`
	UserID     string    `json:"userId,omitempty"`
	ResponseID string    `json:"responseId,omitempty"`
	// TS is epoch milliseconds, stamped when the event is handed to the writer.
	TS      int64   `json:"ts,omitempty"`
	Payload Payload `json:"payload"`
}

// Payload is the type-specific body of an event. Each payload type knows the
// event types it may travel under, so a mismatched pairing is caught early.
//
// Payloads marshal to exactly the shape of n8n's schema: optional fields are
// omitted when unset (never null) and required arrays and objects are always
// present, as [] or {} when the Go value is nil.
type Payload interface {
	validate(t EventType) error
}

// OrchestratorAgentID is the conventional agent id of a run's root agent.
func OrchestratorAgentID(runID string) string { return "orchestrator-" + runID }

// newPayload returns an empty payload value for the given type, or nil for an
// unknown type.
func newPayload(t EventType) Payload {
	switch t {
	case TypeRunStart:
		return &RunStart{}
	case TypeRunFinish:
		return &RunFinish{}
	case TypeTextDelta, TypeReasoningDelta, TypeTextBlock, TypeReasoningBlock:
		return &Text{}
	case TypeToolInputStart:
		return &ToolInputStart{}
	case TypeToolCall:
		return &ToolCall{}
	case TypeToolResult:
		return &ToolResult{}
	case TypeToolError, TypeToolInterrupted:
		return &ToolError{}
	case TypeAgentSpawned:
		return &AgentSpawned{}
	case TypeAgentCompleted:
		return &AgentCompleted{}
	case TypeConfirmRequest:
		return &ConfirmationRequest{}
	case TypeTasksUpdate:
		return &TasksUpdate{}
	case TypeStatus:
		return &Status{}
	case TypeThreadTitleUpdated:
		return &ThreadTitle{}
	case TypeError:
		return &ErrorPayload{}
	case TypeFilesystemRequest:
		return &FilesystemRequest{}
	case TypeSetupItems:
		return &SetupItems{}
	case TypePreferencesApplied:
		return &PreferencesApplied{}
	case TypeCustom:
		return &Custom{}
	case TypeAGUI:
		return &AGUIEvent{}
	}
	return nil
}

// UnmarshalJSON decodes the envelope and then the payload into the struct
// its type calls for, so that stored rows come back as typed events.
func (e *Event) UnmarshalJSON(data []byte) error {
	var env struct {
		Type       EventType       `json:"type"`
		RunID      string          `json:"runId"`
		AgentID    string          `json:"agentId"`
		UserID     string          `json:"userId"`
		ResponseID string          `json:"responseId"`
		TS         int64           `json:"ts"`
		Payload    json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return err
	}
	p := newPayload(env.Type)
	if p == nil {
		return &ValidationError{Field: "type", Reason: fmt.Sprintf("unknown event type %q", env.Type)}
	}
	if len(env.Payload) == 0 || bytes.Equal(env.Payload, []byte("null")) {
		return &ValidationError{Field: "payload", Reason: "is required"}
	}
	if err := json.Unmarshal(env.Payload, p); err != nil {
		return &ValidationError{Field: "payload", Reason: err.Error()}
	}
	*e = Event{Type: env.Type, RunID: env.RunID, AgentID: env.AgentID, UserID: env.UserID,
		ResponseID: env.ResponseID, TS: env.TS, Payload: p}
	return nil
}

// emptyObject is what a nil required JSON-object field marshals to.
var emptyObject = json.RawMessage(`{}`)

func objectOrEmpty(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return emptyObject
	}
	return raw
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
