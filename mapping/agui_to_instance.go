package mapping

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// AGUIToInstance translates the events of one run of an upstream AG-UI
// agent into Instance AI events of a Threadline run: the reverse of
// InstanceToAGUI, for an agent that speaks AG-UI. It is fed one event at a
// time and returns the events to emit, with no I/O.
//
//   - TEXT_MESSAGE_* and TEXT_MESSAGE_CHUNK of the assistant are
//     text-deltas, and REASONING_MESSAGE_* and REASONING_MESSAGE_CHUNK
//     reasoning-deltas, the message id as response id: the writer
//     coalesces each message into one block.
//   - TOOL_CALL_START is tool-input-start; its TOOL_CALL_ARGS are
//     gathered, and TOOL_CALL_END is tool-call with them (they must make
//     a JSON object; none is {}).
//     TOOL_CALL_CHUNKs are the same call, which ends at the first event
//     that is not one of its chunks. TOOL_CALL_RESULT is tool-result (JSON
//     content as that JSON, other text as a JSON string).
//   - RUN_ERROR is error (the upstream's message and code) then run-finish
//     error; RUN_FINISHED is run-finish completed, or cancelled.
//   - CUSTOM is custom under its own name; every other event (state,
//     steps, activity, snapshots, RAW) is custom named "ag-ui." and its
//     type, with the event as it came as value.
//
// An upstream that breaks AG-UI's order (content of a message or call it
// did not start, a second start of one open, anything after the run's
// end) gets an error naming the event; the caller ends the run with it.
// RUN_FINISHED with an interrupt outcome is ErrInterruptOutcome: approvals
// from upstream interrupts are not translated yet.
type AGUIToInstance struct {
	runID, agentID string
	// text and reasoning are the open messages by id; calls the open tool
	// calls by id, chunked the id of a call streamed in chunks.
	text, reasoning map[string]bool
	calls           map[string]*upstreamCall
	chunked         string
	finished        bool
}

// upstreamCall is a tool call whose arguments are streaming.
type upstreamCall struct {
	name string
	args []byte
}

// ErrInterruptOutcome is returned for a RUN_FINISHED whose outcome is an
// interrupt.
var ErrInterruptOutcome = errors.New("the upstream finished its run on an interrupt, which is not supported yet")

// CustomAGUIPrefix names the custom events that carry an upstream's AG-UI
// events that have no Instance AI counterpart.
const CustomAGUIPrefix = "ag-ui."

// NewAGUIToInstance returns a translator whose events belong to run runID
// and agent agentID.
func NewAGUIToInstance(runID, agentID string) *AGUIToInstance {
	return &AGUIToInstance{runID: runID, agentID: agentID, text: map[string]bool{}, reasoning: map[string]bool{},
		calls: map[string]*upstreamCall{}}
}

// Finished reports whether the upstream's terminal event was translated.
func (m *AGUIToInstance) Finished() bool { return m.finished }

// Push translates one upstream event.
func (m *AGUIToInstance) Push(ev agui.Event) ([]instanceai.Event, error) {
	if m.finished {
		return nil, fmt.Errorf("%s after the run's end", ev.Type())
	}
	var out []instanceai.Event
	if c, ok := ev.(*agui.ToolCallChunk); !ok || (c.ToolCallID != "" && c.ToolCallID != m.chunked) {
		// A call streamed in chunks ends at the first event that does not
		// continue it.
		var err error
		if out, err = m.endChunked(out); err != nil {
			return nil, err
		}
	}
	more, err := m.push(ev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ev.Type(), err)
	}
	out = append(out, more...)
	for i := range out {
		// What the core would refuse (an id n8n's reducer drops, a custom
		// event without a name) is the upstream's fault, told as such.
		if err := out[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s makes a %s that is not valid: %w", ev.Type(), out[i].Type, err)
		}
	}
	return out, nil
}

func (m *AGUIToInstance) push(ev agui.Event) ([]instanceai.Event, error) {
	switch e := ev.(type) {
	case *agui.RunStarted:
		return nil, nil // the Threadline run has started already
	case *agui.TextMessageStart:
		if e.Role != "" && e.Role != agui.RoleAssistant {
			return nil, nil // not the agent's answer
		}
		return nil, m.open(m.text, e.MessageID, "text message")
	case *agui.TextMessageContent:
		return m.delta(m.text, instanceai.TypeTextDelta, e.MessageID, e.Delta, "text message")
	case *agui.TextMessageEnd:
		return nil, m.close(m.text, e.MessageID, "text message")
	case *agui.TextMessageChunk:
		if e.Role != "" && e.Role != agui.RoleAssistant {
			return nil, nil
		}
		return m.chunk(m.text, instanceai.TypeTextDelta, e.MessageID, e.Delta, "text message")
	case *agui.ReasoningStart, *agui.ReasoningEnd:
		return nil, nil // a span: its messages carry the text
	case *agui.ReasoningMessageStart:
		return nil, m.open(m.reasoning, e.MessageID, "reasoning message")
	case *agui.ReasoningMessageContent:
		return m.delta(m.reasoning, instanceai.TypeReasoningDelta, e.MessageID, e.Delta, "reasoning message")
	case *agui.ReasoningMessageEnd:
		return nil, m.close(m.reasoning, e.MessageID, "reasoning message")
	case *agui.ReasoningMessageChunk:
		return m.chunk(m.reasoning, instanceai.TypeReasoningDelta, e.MessageID, e.Delta, "reasoning message")
	case *agui.ToolCallStart:
		return m.startCall(e.ToolCallID, e.ToolCallName)
	case *agui.ToolCallArgs:
		c := m.calls[e.ToolCallID]
		if c == nil {
			return nil, fmt.Errorf("tool call %q was not started", e.ToolCallID)
		}
		c.args = append(c.args, e.Delta...)
		return nil, nil
	case *agui.ToolCallEnd:
		return m.endCall(e.ToolCallID)
	case *agui.ToolCallChunk:
		return m.callChunk(e)
	case *agui.ToolCallResult:
		if e.ToolCallID == "" {
			return nil, errors.New("toolCallId is empty")
		}
		return m.emit(instanceai.TypeToolResult, "", &instanceai.ToolResult{ToolCallID: e.ToolCallID, Result: jsonOrString(e.Content)}), nil
	case *agui.RunError:
		m.finished = true
		return append(m.emit(instanceai.TypeError, "", &instanceai.ErrorPayload{Content: e.Message, Code: e.Code}),
			m.emit(instanceai.TypeRunFinish, "", &instanceai.RunFinish{Status: instanceai.RunError})...), nil
	case *agui.RunFinished:
		status := instanceai.RunCompleted
		if e.Outcome != nil {
			switch e.Outcome.Type {
			case agui.OutcomeInterrupt:
				return nil, ErrInterruptOutcome
			case agui.OutcomeCancelled:
				status = instanceai.RunCancelled
			}
		}
		m.finished = true
		return m.emit(instanceai.TypeRunFinish, "", &instanceai.RunFinish{Status: status}), nil
	case *agui.Custom:
		return m.emit(instanceai.TypeCustom, "", &instanceai.Custom{Name: e.Name, Value: orNull(e.Value)}), nil
	default:
		data, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		return m.emit(instanceai.TypeCustom, "", &instanceai.Custom{Name: CustomAGUIPrefix + string(ev.Type()), Value: data}), nil
	}
}

// emit is one event of the run, of the response responseID when set.
func (m *AGUIToInstance) emit(typ instanceai.EventType, responseID string, p instanceai.Payload) []instanceai.Event {
	return []instanceai.Event{{Type: typ, RunID: m.runID, AgentID: m.agentID, ResponseID: responseID, Payload: p}}
}

func (m *AGUIToInstance) open(open map[string]bool, id, what string) error {
	switch {
	case id == "":
		return errors.New("messageId is empty")
	case open[id]:
		return fmt.Errorf("%s %q is open already", what, id)
	}
	open[id] = true
	return nil
}

func (m *AGUIToInstance) close(open map[string]bool, id, what string) error {
	if !open[id] {
		return fmt.Errorf("%s %q was not started", what, id)
	}
	delete(open, id)
	return nil
}

func (m *AGUIToInstance) delta(open map[string]bool, typ instanceai.EventType, id, text, what string) ([]instanceai.Event, error) {
	if !open[id] {
		return nil, fmt.Errorf("%s %q was not started", what, id)
	}
	if text == "" {
		return nil, nil
	}
	return m.emit(typ, id, &instanceai.Text{Text: text}), nil
}

// chunk is a message streamed in chunks: its first chunk names it, and a
// later chunk without an id continues the one open.
func (m *AGUIToInstance) chunk(open map[string]bool, typ instanceai.EventType, id, text, what string) ([]instanceai.Event, error) {
	if id == "" {
		if len(open) != 1 {
			return nil, fmt.Errorf("a %s chunk without messageId continues no single open message", what)
		}
		for only := range open {
			id = only
		}
	}
	open[id] = true
	if text == "" {
		return nil, nil
	}
	return m.emit(typ, id, &instanceai.Text{Text: text}), nil
}

func (m *AGUIToInstance) startCall(id, name string) ([]instanceai.Event, error) {
	switch {
	case id == "":
		return nil, errors.New("toolCallId is empty")
	case name == "":
		return nil, fmt.Errorf("tool call %q has no toolCallName", id)
	case m.calls[id] != nil:
		return nil, fmt.Errorf("tool call %q is open already", id)
	}
	m.calls[id] = &upstreamCall{name: name}
	return m.emit(instanceai.TypeToolInputStart, "", &instanceai.ToolInputStart{ToolCallID: id, ToolName: name}), nil
}

func (m *AGUIToInstance) endCall(id string) ([]instanceai.Event, error) {
	c := m.calls[id]
	if c == nil {
		return nil, fmt.Errorf("tool call %q was not started", id)
	}
	delete(m.calls, id)
	var args json.RawMessage
	if len(bytes.TrimSpace(c.args)) > 0 {
		args = c.args
		if !json.Valid(args) || bytes.TrimSpace(args)[0] != '{' {
			return nil, fmt.Errorf("the arguments of tool call %q are not a JSON object", id)
		}
	}
	return m.emit(instanceai.TypeToolCall, "", &instanceai.ToolCall{ToolCallID: id, ToolName: c.name, Args: args}), nil
}

// callChunk starts the chunked call its first chunk names, and gathers
// the arguments of the one under way.
func (m *AGUIToInstance) callChunk(e *agui.ToolCallChunk) ([]instanceai.Event, error) {
	var out []instanceai.Event
	if m.chunked == "" {
		if e.ToolCallID == "" {
			return nil, errors.New("the first chunk of a tool call has no toolCallId")
		}
		var err error
		if out, err = m.startCall(e.ToolCallID, e.ToolCallName); err != nil {
			return nil, err
		}
		m.chunked = e.ToolCallID
	}
	c := m.calls[m.chunked]
	c.args = append(c.args, e.Delta...)
	return out, nil
}

// endChunked ends the call streamed in chunks, if one is under way.
func (m *AGUIToInstance) endChunked(out []instanceai.Event) ([]instanceai.Event, error) {
	if m.chunked == "" {
		return out, nil
	}
	id := m.chunked
	m.chunked = ""
	end, err := m.endCall(id)
	return append(out, end...), err
}

// jsonOrString is text as JSON when it is JSON, else as a JSON string.
func jsonOrString(text string) json.RawMessage {
	if json.Valid([]byte(text)) {
		return json.RawMessage(text)
	}
	quoted, _ := json.Marshal(text) // a string always marshals
	return quoted
}

// orNull is a JSON value, null when there is none.
func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}
