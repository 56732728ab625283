// Package agui holds the AG-UI 1.0 wire types: the events a server streams,
// the RunAgentInput a client posts, and its decoding and validation.
//
// Every event marshals with its "type" discriminator first, camelCase field
// names, optional fields omitted (never null) and an integer millisecond
// timestamp, which is what @ag-ui/core@1.0.0's schemas accept.
package agui

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// EventType is the discriminator every event carries.
type EventType string

// The event types of AG-UI 1.0.
const (
	TypeTextMessageStart        EventType = "TEXT_MESSAGE_START"
	TypeTextMessageContent      EventType = "TEXT_MESSAGE_CONTENT"
	TypeTextMessageEnd          EventType = "TEXT_MESSAGE_END"
	TypeTextMessageChunk        EventType = "TEXT_MESSAGE_CHUNK"
	TypeToolCallStart           EventType = "TOOL_CALL_START"
	TypeToolCallArgs            EventType = "TOOL_CALL_ARGS"
	TypeToolCallEnd             EventType = "TOOL_CALL_END"
	TypeToolCallChunk           EventType = "TOOL_CALL_CHUNK"
	TypeToolCallResult          EventType = "TOOL_CALL_RESULT"
	TypeStateSnapshot           EventType = "STATE_SNAPSHOT"
	TypeStateDelta              EventType = "STATE_DELTA"
	TypeMessagesSnapshot        EventType = "MESSAGES_SNAPSHOT"
	TypeActivitySnapshot        EventType = "ACTIVITY_SNAPSHOT"
	TypeActivityDelta           EventType = "ACTIVITY_DELTA"
	TypeRaw                     EventType = "RAW"
	TypeCustom                  EventType = "CUSTOM"
	TypeRunStarted              EventType = "RUN_STARTED"
	TypeRunFinished             EventType = "RUN_FINISHED"
	TypeRunError                EventType = "RUN_ERROR"
	TypeStepStarted             EventType = "STEP_STARTED"
	TypeStepFinished            EventType = "STEP_FINISHED"
	TypeReasoningStart          EventType = "REASONING_START"
	TypeReasoningMessageStart   EventType = "REASONING_MESSAGE_START"
	TypeReasoningMessageContent EventType = "REASONING_MESSAGE_CONTENT"
	TypeReasoningMessageEnd     EventType = "REASONING_MESSAGE_END"
	TypeReasoningMessageChunk   EventType = "REASONING_MESSAGE_CHUNK"
	TypeReasoningEnd            EventType = "REASONING_END"
	TypeReasoningEncryptedValue EventType = "REASONING_ENCRYPTED_VALUE"
	TypeSubagentStarted         EventType = "SUBAGENT_STARTED"
	TypeSubagentFinished        EventType = "SUBAGENT_FINISHED"
	TypeSubagentError           EventType = "SUBAGENT_ERROR"
)

// ProtocolVersion is the AG-UI protocol version these types follow.
const ProtocolVersion = "1.0"

// Event is one AG-UI event. Implementations are the pointer types of this
// package (*RunStarted, *TextMessageContent, …).
type Event interface {
	Type() EventType
	// Common returns the fields every event may carry.
	Common() *Base
}

// Base holds the fields every event may carry.
type Base struct {
	// Timestamp is epoch milliseconds; zero is omitted.
	Timestamp int64           `json:"timestamp,omitempty"`
	RawEvent  json.RawMessage `json:"rawEvent,omitempty"`
	Metadata  map[string]any  `json:"metadata,omitempty"`
}

// Common returns b itself.
func (b *Base) Common() *Base { return b }

// Attribution is embedded in the events that may belong to a sub-agent.
type Attribution struct {
	SubagentRunID string `json:"subagentRunId,omitempty"`
}

// Attribute sets the sub-agent an event belongs to ("" for the parent agent).
func (a *Attribution) Attribute(subagentRunID string) { a.SubagentRunID = subagentRunID }

// Attributable is an event that can be attributed to a sub-agent.
type Attributable interface {
	Event
	Attribute(subagentRunID string)
}

// withType marshals v (which must marshal to a JSON object) with the type
// discriminator as its first member.
func withType(t EventType, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("agui: %s does not marshal to an object", t)
	}
	var buf bytes.Buffer
	buf.Grow(len(body) + len(t) + 12)
	buf.WriteString(`{"type":"`)
	buf.WriteString(string(t))
	buf.WriteByte('"')
	if len(body) > 2 {
		buf.WriteByte(',')
	}
	buf.Write(body[1:])
	return buf.Bytes(), nil
}

// RunStarted opens a run.
type RunStarted struct {
	Base
	ThreadID        string         `json:"threadId"`
	RunID           string         `json:"runId"`
	ProtocolVersion string         `json:"protocolVersion,omitempty"`
	ParentRunID     string         `json:"parentRunId,omitempty"`
	Input           *RunAgentInput `json:"input,omitempty"`
}

// Outcome types of RUN_FINISHED.
const (
	OutcomeSuccess   = "success"
	OutcomeInterrupt = "interrupt"
	OutcomeCancelled = "cancelled"
)

// Outcome says how a run finished. Type selects the variant; an absent
// outcome means success.
type Outcome struct {
	Type               string      `json:"type"`
	PendingToolCallIDs []string    `json:"pendingToolCallIds,omitempty"` // success
	Interrupts         []Interrupt `json:"interrupts,omitempty"`         // interrupt: at least one
}

// Interrupt is a question the run stopped on; the next run on the thread
// answers it in RunAgentInput.Resume.
type Interrupt struct {
	SubagentRunID  string          `json:"subagentRunId,omitempty"`
	ID             string          `json:"id"`
	Reason         string          `json:"reason"`
	Message        string          `json:"message,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	ResponseSchema json.RawMessage `json:"responseSchema,omitempty"` // a JSON Schema object
	ExpiresAt      string          `json:"expiresAt,omitempty"`
	Metadata       map[string]any  `json:"metadata,omitempty"`
}

// Usage is the token usage of one model. Zero counts are omitted.
type Usage struct {
	Provider              string `json:"provider,omitempty"`
	Model                 string `json:"model,omitempty"`
	InputTokens           int64  `json:"inputTokens,omitempty"`
	OutputTokens          int64  `json:"outputTokens,omitempty"`
	TotalTokens           int64  `json:"totalTokens,omitempty"`
	ReasoningTokens       int64  `json:"reasoningTokens,omitempty"`
	CachedInputTokens     int64  `json:"cachedInputTokens,omitempty"`
	CacheWriteInputTokens int64  `json:"cacheWriteInputTokens,omitempty"`
}

// RunFinished ends a run.
type RunFinished struct {
	Base
	ThreadID string          `json:"threadId"`
	RunID    string          `json:"runId"`
	Result   json.RawMessage `json:"result,omitempty"`
	Outcome  *Outcome        `json:"outcome,omitempty"`
	Usage    []Usage         `json:"usage,omitempty"`
}

// RunError ends a run with a failure.
type RunError struct {
	Base
	Message string  `json:"message"`
	Code    string  `json:"code,omitempty"`
	Usage   []Usage `json:"usage,omitempty"`
}

// StepStarted opens a named step.
type StepStarted struct {
	Base
	Attribution
	StepName string `json:"stepName"`
}

// StepFinished closes a named step.
type StepFinished struct {
	Base
	Attribution
	StepName string `json:"stepName"`
}

// Text message roles.
const (
	RoleDeveloper = "developer"
	RoleSystem    = "system"
	RoleAssistant = "assistant"
	RoleUser      = "user"
	RoleTool      = "tool"
	RoleActivity  = "activity"
	RoleReasoning = "reasoning"
)

// TextMessageStart opens a streamed text message.
type TextMessageStart struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
	Role      string `json:"role,omitempty"` // assistant when omitted
	Name      string `json:"name,omitempty"`
}

// TextMessageContent appends to an open text message.
type TextMessageContent struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
	Delta     string `json:"delta"`
}

// TextMessageEnd closes a text message.
type TextMessageEnd struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
}

// TextMessageChunk is the convenience form the client expands into
// START/CONTENT/END.
type TextMessageChunk struct {
	Base
	Attribution
	MessageID string `json:"messageId,omitempty"`
	Role      string `json:"role,omitempty"`
	Delta     string `json:"delta,omitempty"`
	Name      string `json:"name,omitempty"`
}

// ToolCallStart opens a tool call.
type ToolCallStart struct {
	Base
	Attribution
	ToolCallID      string `json:"toolCallId"`
	ToolCallName    string `json:"toolCallName"`
	ParentMessageID string `json:"parentMessageId,omitempty"`
}

// ToolCallArgs appends a fragment of the JSON arguments.
type ToolCallArgs struct {
	Base
	Attribution
	ToolCallID string `json:"toolCallId"`
	Delta      string `json:"delta"`
}

// ToolCallEnd closes a tool call's arguments.
type ToolCallEnd struct {
	Base
	Attribution
	ToolCallID string `json:"toolCallId"`
}

// ToolCallChunk is the convenience form the client expands into
// START/ARGS/END.
type ToolCallChunk struct {
	Base
	Attribution
	ToolCallID      string `json:"toolCallId,omitempty"`
	ToolCallName    string `json:"toolCallName,omitempty"`
	ParentMessageID string `json:"parentMessageId,omitempty"`
	Delta           string `json:"delta,omitempty"`
}

// ToolCallResult is a tool's result, carried as a tool message.
type ToolCallResult struct {
	Base
	Attribution
	MessageID  string `json:"messageId"`
	ToolCallID string `json:"toolCallId"`
	Content    string `json:"content"`
	Role       string `json:"role,omitempty"` // "tool" when set
}

// StateSnapshot replaces the shared state.
type StateSnapshot struct {
	Base
	Attribution
	Snapshot json.RawMessage `json:"snapshot"`
}

// MarshalJSON writes a nil snapshot as {}: the field is required.
func (e StateSnapshot) MarshalJSON() ([]byte, error) {
	type plain StateSnapshot
	if e.Snapshot == nil {
		e.Snapshot = json.RawMessage(`{}`)
	}
	return withType(TypeStateSnapshot, plain(e))
}

// PatchOp is one RFC 6902 JSON Patch operation.
type PatchOp struct {
	Op    string          `json:"op"` // add, remove, replace, move, copy, test
	From  string          `json:"from,omitempty"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// StateDelta patches the shared state.
type StateDelta struct {
	Base
	Attribution
	Delta []PatchOp `json:"delta"`
}

// MarshalJSON writes a nil delta as [].
func (e StateDelta) MarshalJSON() ([]byte, error) {
	type plain StateDelta
	if e.Delta == nil {
		e.Delta = []PatchOp{}
	}
	return withType(TypeStateDelta, plain(e))
}

// MessagesSnapshot replaces the conversation.
type MessagesSnapshot struct {
	Base
	Messages []Message `json:"messages"`
}

// MarshalJSON writes nil messages as [].
func (e MessagesSnapshot) MarshalJSON() ([]byte, error) {
	type plain MessagesSnapshot
	if e.Messages == nil {
		e.Messages = []Message{}
	}
	return withType(TypeMessagesSnapshot, plain(e))
}

// ActivitySnapshot sets an activity message's content (a JSON object).
type ActivitySnapshot struct {
	Base
	Attribution
	MessageID    string          `json:"messageId"`
	ActivityType string          `json:"activityType"`
	Content      json.RawMessage `json:"content"`
	Replace      *bool           `json:"replace,omitempty"`
}

// MarshalJSON writes a nil content as {}.
func (e ActivitySnapshot) MarshalJSON() ([]byte, error) {
	type plain ActivitySnapshot
	if e.Content == nil {
		e.Content = json.RawMessage(`{}`)
	}
	return withType(TypeActivitySnapshot, plain(e))
}

// ActivityDelta patches an activity message's content.
type ActivityDelta struct {
	Base
	Attribution
	MessageID    string    `json:"messageId"`
	ActivityType string    `json:"activityType"`
	Patch        []PatchOp `json:"patch"`
}

// MarshalJSON writes a nil patch as [].
func (e ActivityDelta) MarshalJSON() ([]byte, error) {
	type plain ActivityDelta
	if e.Patch == nil {
		e.Patch = []PatchOp{}
	}
	return withType(TypeActivityDelta, plain(e))
}

// Raw passes through an event of another system.
type Raw struct {
	Base
	Attribution
	Event  json.RawMessage `json:"event"`
	Source string          `json:"source,omitempty"`
}

// MarshalJSON writes a nil event as null: the field must be present.
func (e Raw) MarshalJSON() ([]byte, error) {
	type plain Raw
	if e.Event == nil {
		e.Event = json.RawMessage(`null`)
	}
	return withType(TypeRaw, plain(e))
}

// Custom is an application-defined event. Value must be present; nil
// marshals as null.
type Custom struct {
	Base
	Attribution
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// MarshalJSON writes a nil value as null.
func (e Custom) MarshalJSON() ([]byte, error) {
	type plain Custom
	if e.Value == nil {
		e.Value = json.RawMessage(`null`)
	}
	return withType(TypeCustom, plain(e))
}

// ReasoningStart opens a reasoning span.
type ReasoningStart struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
}

// ReasoningMessageStart opens a reasoning message inside a span.
type ReasoningMessageStart struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
	Role      string `json:"role"` // always "reasoning"
}

// MarshalJSON always writes role "reasoning".
func (e ReasoningMessageStart) MarshalJSON() ([]byte, error) {
	type plain ReasoningMessageStart
	e.Role = RoleReasoning
	return withType(TypeReasoningMessageStart, plain(e))
}

// ReasoningMessageContent appends to a reasoning message.
type ReasoningMessageContent struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
	Delta     string `json:"delta"`
}

// ReasoningMessageEnd closes a reasoning message.
type ReasoningMessageEnd struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
}

// ReasoningMessageChunk is the convenience form of reasoning messages.
type ReasoningMessageChunk struct {
	Base
	Attribution
	MessageID string `json:"messageId,omitempty"`
	Delta     string `json:"delta,omitempty"`
}

// ReasoningEnd closes a reasoning span.
type ReasoningEnd struct {
	Base
	Attribution
	MessageID string `json:"messageId"`
}

// ReasoningEncryptedValue attaches an encrypted reasoning value to a tool
// call or message (Subtype "tool-call" or "message").
type ReasoningEncryptedValue struct {
	Base
	Attribution
	Subtype        string `json:"subtype"`
	EntityID       string `json:"entityId"`
	EncryptedValue string `json:"encryptedValue"`
}

// SubagentStarted opens one sub-agent invocation.
type SubagentStarted struct {
	Base
	SubagentRunID       string `json:"subagentRunId"`
	Name                string `json:"name"`
	Description         string `json:"description,omitempty"`
	ParentSubagentRunID string `json:"parentSubagentRunId,omitempty"`
	ParentToolCallID    string `json:"parentToolCallId,omitempty"`
	ParentMessageID     string `json:"parentMessageId,omitempty"`
}

// Sub-agent outcome types.
const (
	SubagentSuccess   = "success"
	SubagentSuspended = "suspended"
)

// SubagentOutcome says how a sub-agent finished.
type SubagentOutcome struct {
	Type         string   `json:"type"`
	InterruptIDs []string `json:"interruptIds,omitempty"` // suspended
}

// SubagentFinished closes a sub-agent invocation.
type SubagentFinished struct {
	Base
	SubagentRunID string           `json:"subagentRunId"`
	Result        json.RawMessage  `json:"result,omitempty"`
	Outcome       *SubagentOutcome `json:"outcome,omitempty"`
}

// SubagentError closes a sub-agent invocation with a failure.
type SubagentError struct {
	Base
	SubagentRunID string `json:"subagentRunId"`
	Message       string `json:"message"`
	Code          string `json:"code,omitempty"`
}

// Verbatim is an event kept as the JSON another AG-UI agent sent, written
// back as those bytes: an upstream's event Threadline stores without
// translating it. Its Base is not written.
type Verbatim struct {
	Base
	T    EventType
	Data json.RawMessage
}

// Type returns the event's own type.
func (e *Verbatim) Type() EventType { return e.T }

// MarshalJSON returns the event as it came.
func (e Verbatim) MarshalJSON() ([]byte, error) { return e.Data, nil }

// Lifecycle reports whether t is one of the events that open and close a
// run.
func Lifecycle(t EventType) bool {
	return t == TypeRunStarted || t == TypeRunFinished || t == TypeRunError
}
