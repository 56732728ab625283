package mapping

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

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
//   - SUBAGENT_STARTED is agent-spawned, its subagentRunId the agent's
//     id: events that name it are that agent's; SUBAGENT_FINISHED and
//     SUBAGENT_ERROR are its agent-completed.
//   - Every other event (state, steps, activity, snapshots, CUSTOM, RAW,
//     and RUN_STARTED and RUN_FINISHED for the record) is an ag-ui event
//     that keeps it as it came, which the AG-UI stream serves back.
//   - RUN_FINISHED and RUN_ERROR end the upstream's run: End returns them,
//     and the agent ends the Threadline run (run-start and run-finish are
//     the registry's), or answers the interrupts and Continues.
//
// An upstream that breaks AG-UI's order (content of a message or call it
// did not start, a second start of one open, anything after the run's
// end) gets an error naming the event; the caller ends the run with it.
type AGUIToInstance struct {
	runID, agentID string
	// text and reasoning are the open messages by id; calls the open tool
	// calls by id, chunked the id of a call streamed in chunks.
	text, reasoning map[string]bool
	calls           map[string]*upstreamCall
	chunked         string
	// upstream names the agent in the ag-ui events; end is the upstream
	// run's terminal event once translated.
	upstream string
	end      agui.Event
	// subs are the upstream's active sub-agents by subagentRunId, with
	// their names; cur is the agent the event being translated is of.
	subs map[string]string
	cur  string
}

// upstreamCall is a tool call whose arguments are streaming.
type upstreamCall struct {
	name string
	args []byte
	// parent is the call's parentMessageId, kept as the response id of
	// its events: InstanceToAGUI names it as the parent again, so calls
	// the upstream put on one message stay on one.
	parent string
}

// NewAGUIToInstance returns a translator whose events belong to run runID
// and agent agentID, and name upstream as their source.
func NewAGUIToInstance(runID, agentID, upstream string) *AGUIToInstance {
	return &AGUIToInstance{runID: runID, agentID: agentID, upstream: upstream, text: map[string]bool{},
		reasoning: map[string]bool{}, calls: map[string]*upstreamCall{}, subs: map[string]string{}}
}

// End returns the upstream run's terminal event (*agui.RunFinished or
// *agui.RunError) once translated, else nil.
func (m *AGUIToInstance) End() agui.Event { return m.end }

// Continue reads the next upstream run of the same Threadline run (after
// an interrupt was answered): messages and calls left open carry on.
func (m *AGUIToInstance) Continue() { m.end = nil }

// PushJSON decodes one upstream event and translates it; an event kept as
// an ag-ui event keeps these bytes (compacted).
func (m *AGUIToInstance) PushJSON(data []byte) ([]instanceai.Event, error) {
	ev, err := agui.DecodeEvent(data)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, err
	}
	return m.push(ev, buf.Bytes())
}

// Push translates one upstream event.
func (m *AGUIToInstance) Push(ev agui.Event) ([]instanceai.Event, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return m.push(ev, data)
}

func (m *AGUIToInstance) push(ev agui.Event, data []byte) ([]instanceai.Event, error) {
	if m.end != nil {
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
	// An event a sub-agent's subagentRunId names is that agent's.
	m.cur = m.agentID
	if sub := attribution(data); sub != "" {
		if _, ok := m.subs[sub]; !ok && ev.Type() != agui.TypeSubagentStarted {
			return nil, fmt.Errorf("%s: subagentRunId %q names no active sub-agent", ev.Type(), sub)
		}
		m.cur = sub
	}
	more, err := m.translate(ev, data)
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

func (m *AGUIToInstance) translate(ev agui.Event, data []byte) ([]instanceai.Event, error) {
	switch e := ev.(type) {
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
		return m.startCall(e.ToolCallID, e.ToolCallName, e.ParentMessageID)
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
	case *agui.SubagentStarted:
		return m.subagentStarted(e)
	case *agui.SubagentFinished:
		result := string(e.Result)
		var text string
		if json.Unmarshal(e.Result, &text) == nil {
			result = text
		}
		return m.subagentEnded(e.SubagentRunID, &instanceai.AgentCompleted{Result: result})
	case *agui.SubagentError:
		return m.subagentEnded(e.SubagentRunID, &instanceai.AgentCompleted{Error: orText(e.Message, "the sub-agent failed"), Status: instanceai.RunError})
	case *agui.Custom:
		if e.Name == "" {
			return nil, errors.New("name is empty")
		}
		return m.kept(data), nil
	case *agui.RunError:
		m.end = e
		return m.abandonSubs(), nil // the registry ends the run with its error
	case *agui.RunFinished:
		m.end = e
		if e.Outcome != nil && e.Outcome.Type == agui.OutcomeInterrupt && len(e.Outcome.Interrupts) == 0 {
			return nil, errors.New("an interrupt outcome names no interrupt")
		}
		return append(m.abandonSubs(), m.kept(data)...), nil
	default:
		return m.kept(data), nil
	}
}

// subagentStarted is the agent-spawned of an upstream's sub-agent, named
// by its subagentRunId: its events are that agent's from then on.
func (m *AGUIToInstance) subagentStarted(e *agui.SubagentStarted) ([]instanceai.Event, error) {
	switch {
	case e.SubagentRunID == "":
		return nil, errors.New("subagentRunId is empty")
	case e.Name == "":
		return nil, fmt.Errorf("sub-agent %q has no name", e.SubagentRunID)
	}
	if _, open := m.subs[e.SubagentRunID]; open {
		return nil, fmt.Errorf("sub-agent %q is active already", e.SubagentRunID)
	}
	parent := m.agentID
	if e.ParentSubagentRunID != "" {
		if _, ok := m.subs[e.ParentSubagentRunID]; !ok {
			return nil, fmt.Errorf("parentSubagentRunId %q names no active sub-agent", e.ParentSubagentRunID)
		}
		parent = e.ParentSubagentRunID
	}
	m.subs[e.SubagentRunID] = e.Name
	return m.emit(instanceai.TypeAgentSpawned, "", &instanceai.AgentSpawned{ParentID: parent, Role: e.Name, Title: e.Description}), nil
}

// subagentEnded is the agent-completed of an upstream's sub-agent.
func (m *AGUIToInstance) subagentEnded(id string, p *instanceai.AgentCompleted) ([]instanceai.Event, error) {
	name, open := m.subs[id]
	if !open {
		return nil, fmt.Errorf("sub-agent %q is not active", id)
	}
	delete(m.subs, id)
	p.Role = name
	return m.emit(instanceai.TypeAgentCompleted, "", p), nil
}

// abandonSubs ends the sub-agents still active when the upstream's run
// ends (AG-UI forbids it; an agent that did not end is not waited for).
func (m *AGUIToInstance) abandonSubs() []instanceai.Event {
	ids := slices.Sorted(maps.Keys(m.subs))
	var out []instanceai.Event
	for _, id := range ids {
		m.cur = id
		ended, _ := m.subagentEnded(id, &instanceai.AgentCompleted{Error: "the upstream ended its run before this sub-agent finished",
			Status: instanceai.RunError})
		out = append(out, ended...)
	}
	m.cur = m.agentID
	return out
}

// attribution is the subagentRunId of an event's JSON, "" for none.
func attribution(data []byte) string {
	var a struct {
		SubagentRunID string `json:"subagentRunId"`
	}
	_ = json.Unmarshal(data, &a) // the event decoded already
	return a.SubagentRunID
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// kept is the ag-ui event that keeps an upstream event as it came.
func (m *AGUIToInstance) kept(data []byte) []instanceai.Event {
	return m.emit(instanceai.TypeAGUI, "", &instanceai.AGUIEvent{Event: data, Upstream: m.upstream})
}

// emit is one event of the run, of the response responseID when set.
func (m *AGUIToInstance) emit(typ instanceai.EventType, responseID string, p instanceai.Payload) []instanceai.Event {
	return []instanceai.Event{{Type: typ, RunID: m.runID, AgentID: m.cur, ResponseID: responseID, Payload: p}}
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

func (m *AGUIToInstance) startCall(id, name, parent string) ([]instanceai.Event, error) {
	switch {
	case id == "":
		return nil, errors.New("toolCallId is empty")
	case name == "":
		return nil, fmt.Errorf("tool call %q has no toolCallName", id)
	case m.calls[id] != nil:
		return nil, fmt.Errorf("tool call %q is open already", id)
	}
	if parent == "" {
		// No parent: the client makes the call a message of its own,
		// named after it; naming it so keeps it one.
		parent = id
	}
	m.calls[id] = &upstreamCall{name: name, parent: parent}
	return m.emit(instanceai.TypeToolInputStart, parent, &instanceai.ToolInputStart{ToolCallID: id, ToolName: name}), nil
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
	return m.emit(instanceai.TypeToolCall, c.parent, &instanceai.ToolCall{ToolCallID: id, ToolName: c.name, Args: args}), nil
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
		if out, err = m.startCall(e.ToolCallID, e.ToolCallName, e.ParentMessageID); err != nil {
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
