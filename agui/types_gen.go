package agui

// Type methods, marshalling and the decoding registry of every event.

import (
	"encoding/json"
	"fmt"
)

// Type returns TypeTextMessageStart.
func (*TextMessageStart) Type() EventType { return TypeTextMessageStart }

// MarshalJSON writes the event with its type discriminator.
func (e TextMessageStart) MarshalJSON() ([]byte, error) {
	type plain TextMessageStart
	return withType(TypeTextMessageStart, plain(e))
}

// Type returns TypeTextMessageContent.
func (*TextMessageContent) Type() EventType { return TypeTextMessageContent }

// MarshalJSON writes the event with its type discriminator.
func (e TextMessageContent) MarshalJSON() ([]byte, error) {
	type plain TextMessageContent
	return withType(TypeTextMessageContent, plain(e))
}

// Type returns TypeTextMessageEnd.
func (*TextMessageEnd) Type() EventType { return TypeTextMessageEnd }

// MarshalJSON writes the event with its type discriminator.
func (e TextMessageEnd) MarshalJSON() ([]byte, error) {
	type plain TextMessageEnd
	return withType(TypeTextMessageEnd, plain(e))
}

// Type returns TypeTextMessageChunk.
func (*TextMessageChunk) Type() EventType { return TypeTextMessageChunk }

// MarshalJSON writes the event with its type discriminator.
func (e TextMessageChunk) MarshalJSON() ([]byte, error) {
	type plain TextMessageChunk
	return withType(TypeTextMessageChunk, plain(e))
}

// Type returns TypeToolCallStart.
func (*ToolCallStart) Type() EventType { return TypeToolCallStart }

// MarshalJSON writes the event with its type discriminator.
func (e ToolCallStart) MarshalJSON() ([]byte, error) {
	type plain ToolCallStart
	return withType(TypeToolCallStart, plain(e))
}

// Type returns TypeToolCallArgs.
func (*ToolCallArgs) Type() EventType { return TypeToolCallArgs }

// MarshalJSON writes the event with its type discriminator.
func (e ToolCallArgs) MarshalJSON() ([]byte, error) {
	type plain ToolCallArgs
	return withType(TypeToolCallArgs, plain(e))
}

// Type returns TypeToolCallEnd.
func (*ToolCallEnd) Type() EventType { return TypeToolCallEnd }

// MarshalJSON writes the event with its type discriminator.
func (e ToolCallEnd) MarshalJSON() ([]byte, error) {
	type plain ToolCallEnd
	return withType(TypeToolCallEnd, plain(e))
}

// Type returns TypeToolCallChunk.
func (*ToolCallChunk) Type() EventType { return TypeToolCallChunk }

// MarshalJSON writes the event with its type discriminator.
func (e ToolCallChunk) MarshalJSON() ([]byte, error) {
	type plain ToolCallChunk
	return withType(TypeToolCallChunk, plain(e))
}

// Type returns TypeToolCallResult.
func (*ToolCallResult) Type() EventType { return TypeToolCallResult }

// MarshalJSON writes the event with its type discriminator.
func (e ToolCallResult) MarshalJSON() ([]byte, error) {
	type plain ToolCallResult
	return withType(TypeToolCallResult, plain(e))
}

// Type returns TypeStateSnapshot.
func (*StateSnapshot) Type() EventType { return TypeStateSnapshot }

// Type returns TypeStateDelta.
func (*StateDelta) Type() EventType { return TypeStateDelta }

// Type returns TypeMessagesSnapshot.
func (*MessagesSnapshot) Type() EventType { return TypeMessagesSnapshot }

// Type returns TypeActivitySnapshot.
func (*ActivitySnapshot) Type() EventType { return TypeActivitySnapshot }

// Type returns TypeActivityDelta.
func (*ActivityDelta) Type() EventType { return TypeActivityDelta }

// Type returns TypeRaw.
func (*Raw) Type() EventType { return TypeRaw }

// Type returns TypeCustom.
func (*Custom) Type() EventType { return TypeCustom }

// Type returns TypeRunStarted.
func (*RunStarted) Type() EventType { return TypeRunStarted }

// MarshalJSON writes the event with its type discriminator.
func (e RunStarted) MarshalJSON() ([]byte, error) {
	type plain RunStarted
	return withType(TypeRunStarted, plain(e))
}

// Type returns TypeRunFinished.
func (*RunFinished) Type() EventType { return TypeRunFinished }

// MarshalJSON writes the event with its type discriminator.
func (e RunFinished) MarshalJSON() ([]byte, error) {
	type plain RunFinished
	return withType(TypeRunFinished, plain(e))
}

// Type returns TypeRunError.
func (*RunError) Type() EventType { return TypeRunError }

// MarshalJSON writes the event with its type discriminator.
func (e RunError) MarshalJSON() ([]byte, error) {
	type plain RunError
	return withType(TypeRunError, plain(e))
}

// Type returns TypeStepStarted.
func (*StepStarted) Type() EventType { return TypeStepStarted }

// MarshalJSON writes the event with its type discriminator.
func (e StepStarted) MarshalJSON() ([]byte, error) {
	type plain StepStarted
	return withType(TypeStepStarted, plain(e))
}

// Type returns TypeStepFinished.
func (*StepFinished) Type() EventType { return TypeStepFinished }

// MarshalJSON writes the event with its type discriminator.
func (e StepFinished) MarshalJSON() ([]byte, error) {
	type plain StepFinished
	return withType(TypeStepFinished, plain(e))
}

// Type returns TypeReasoningStart.
func (*ReasoningStart) Type() EventType { return TypeReasoningStart }

// MarshalJSON writes the event with its type discriminator.
func (e ReasoningStart) MarshalJSON() ([]byte, error) {
	type plain ReasoningStart
	return withType(TypeReasoningStart, plain(e))
}

// Type returns TypeReasoningMessageStart.
func (*ReasoningMessageStart) Type() EventType { return TypeReasoningMessageStart }

// Type returns TypeReasoningMessageContent.
func (*ReasoningMessageContent) Type() EventType { return TypeReasoningMessageContent }

// MarshalJSON writes the event with its type discriminator.
func (e ReasoningMessageContent) MarshalJSON() ([]byte, error) {
	type plain ReasoningMessageContent
	return withType(TypeReasoningMessageContent, plain(e))
}

// Type returns TypeReasoningMessageEnd.
func (*ReasoningMessageEnd) Type() EventType { return TypeReasoningMessageEnd }

// MarshalJSON writes the event with its type discriminator.
func (e ReasoningMessageEnd) MarshalJSON() ([]byte, error) {
	type plain ReasoningMessageEnd
	return withType(TypeReasoningMessageEnd, plain(e))
}

// Type returns TypeReasoningMessageChunk.
func (*ReasoningMessageChunk) Type() EventType { return TypeReasoningMessageChunk }

// MarshalJSON writes the event with its type discriminator.
func (e ReasoningMessageChunk) MarshalJSON() ([]byte, error) {
	type plain ReasoningMessageChunk
	return withType(TypeReasoningMessageChunk, plain(e))
}

// Type returns TypeReasoningEnd.
func (*ReasoningEnd) Type() EventType { return TypeReasoningEnd }

// MarshalJSON writes the event with its type discriminator.
func (e ReasoningEnd) MarshalJSON() ([]byte, error) {
	type plain ReasoningEnd
	return withType(TypeReasoningEnd, plain(e))
}

// Type returns TypeReasoningEncryptedValue.
func (*ReasoningEncryptedValue) Type() EventType { return TypeReasoningEncryptedValue }

// MarshalJSON writes the event with its type discriminator.
func (e ReasoningEncryptedValue) MarshalJSON() ([]byte, error) {
	type plain ReasoningEncryptedValue
	return withType(TypeReasoningEncryptedValue, plain(e))
}

// Type returns TypeSubagentStarted.
func (*SubagentStarted) Type() EventType { return TypeSubagentStarted }

// MarshalJSON writes the event with its type discriminator.
func (e SubagentStarted) MarshalJSON() ([]byte, error) {
	type plain SubagentStarted
	return withType(TypeSubagentStarted, plain(e))
}

// Type returns TypeSubagentFinished.
func (*SubagentFinished) Type() EventType { return TypeSubagentFinished }

// MarshalJSON writes the event with its type discriminator.
func (e SubagentFinished) MarshalJSON() ([]byte, error) {
	type plain SubagentFinished
	return withType(TypeSubagentFinished, plain(e))
}

// Type returns TypeSubagentError.
func (*SubagentError) Type() EventType { return TypeSubagentError }

// MarshalJSON writes the event with its type discriminator.
func (e SubagentError) MarshalJSON() ([]byte, error) {
	type plain SubagentError
	return withType(TypeSubagentError, plain(e))
}

// AllTypes lists every event type, in @ag-ui/core's order.
var AllTypes = []EventType{
	TypeTextMessageStart,
	TypeTextMessageContent,
	TypeTextMessageEnd,
	TypeTextMessageChunk,
	TypeToolCallStart,
	TypeToolCallArgs,
	TypeToolCallEnd,
	TypeToolCallChunk,
	TypeToolCallResult,
	TypeStateSnapshot,
	TypeStateDelta,
	TypeMessagesSnapshot,
	TypeActivitySnapshot,
	TypeActivityDelta,
	TypeRaw,
	TypeCustom,
	TypeRunStarted,
	TypeRunFinished,
	TypeRunError,
	TypeStepStarted,
	TypeStepFinished,
	TypeReasoningStart,
	TypeReasoningMessageStart,
	TypeReasoningMessageContent,
	TypeReasoningMessageEnd,
	TypeReasoningMessageChunk,
	TypeReasoningEnd,
	TypeReasoningEncryptedValue,
	TypeSubagentStarted,
	TypeSubagentFinished,
	TypeSubagentError,
}

// New returns an empty event of the given type, or nil for an unknown type.
func New(t EventType) Event {
	switch t {
	case TypeTextMessageStart:
		return &TextMessageStart{}
	case TypeTextMessageContent:
		return &TextMessageContent{}
	case TypeTextMessageEnd:
		return &TextMessageEnd{}
	case TypeTextMessageChunk:
		return &TextMessageChunk{}
	case TypeToolCallStart:
		return &ToolCallStart{}
	case TypeToolCallArgs:
		return &ToolCallArgs{}
	case TypeToolCallEnd:
		return &ToolCallEnd{}
	case TypeToolCallChunk:
		return &ToolCallChunk{}
	case TypeToolCallResult:
		return &ToolCallResult{}
	case TypeStateSnapshot:
		return &StateSnapshot{}
	case TypeStateDelta:
		return &StateDelta{}
	case TypeMessagesSnapshot:
		return &MessagesSnapshot{}
	case TypeActivitySnapshot:
		return &ActivitySnapshot{}
	case TypeActivityDelta:
		return &ActivityDelta{}
	case TypeRaw:
		return &Raw{}
	case TypeCustom:
		return &Custom{}
	case TypeRunStarted:
		return &RunStarted{}
	case TypeRunFinished:
		return &RunFinished{}
	case TypeRunError:
		return &RunError{}
	case TypeStepStarted:
		return &StepStarted{}
	case TypeStepFinished:
		return &StepFinished{}
	case TypeReasoningStart:
		return &ReasoningStart{}
	case TypeReasoningMessageStart:
		return &ReasoningMessageStart{}
	case TypeReasoningMessageContent:
		return &ReasoningMessageContent{}
	case TypeReasoningMessageEnd:
		return &ReasoningMessageEnd{}
	case TypeReasoningMessageChunk:
		return &ReasoningMessageChunk{}
	case TypeReasoningEnd:
		return &ReasoningEnd{}
	case TypeReasoningEncryptedValue:
		return &ReasoningEncryptedValue{}
	case TypeSubagentStarted:
		return &SubagentStarted{}
	case TypeSubagentFinished:
		return &SubagentFinished{}
	case TypeSubagentError:
		return &SubagentError{}
	}
	return nil
}

// DecodeEvent decodes one event by its type discriminator. Unknown fields
// are ignored; an unknown type is an error.
func DecodeEvent(data []byte) (Event, error) {
	var head struct {
		Type EventType `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("agui: decode event: %w", err)
	}
	ev := New(head.Type)
	if ev == nil {
		return nil, fmt.Errorf("agui: unknown event type %q", head.Type)
	}
	if err := json.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("agui: decode %s: %w", head.Type, err)
	}
	return ev, nil
}
