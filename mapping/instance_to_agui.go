package mapping

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/wI2L/jsondiff"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// Names of the CUSTOM events InstanceToAGUI emits. Events of instance-ai
// types without an AG-UI counterpart go out as CustomPrefix + their type
// (instance-ai.status, instance-ai.thread-title-updated, instance-ai.error, …).
const (
	CustomPrefix               = "instance-ai."
	CustomOrchestratorFinished = CustomPrefix + "orchestrator-finished"
	CustomAgentCompleted       = CustomPrefix + "agent-completed"
)

// MetadataKey is the metadata key under which mapped events carry
// instance-ai details (the result kind of a TOOL_CALL_RESULT, a spawned
// agent's payload, an interrupt's severity).
const MetadataKey = "instance-ai"

// Result kinds of TOOL_CALL_RESULT, under metadata[MetadataKey].kind.
const (
	ResultKindResult      = "result"
	ResultKindError       = "error"
	ResultKindInterrupted = "interrupted"
)

// RUN_ERROR codes InstanceToAGUI emits.
const (
	CodeRunFailed      = "run_failed"
	CodeInterrupted    = "interrupted"
	CodeIncomplete     = "incomplete"
	CodeStreamError    = "stream_error"
	CodeAgentCancelled = "cancelled"
	CodeAgentFailed    = "agent_failed"
	CodeAgentAbandoned = "abandoned"
	// CodeEventsEvicted ends a run whose events after the client's cursor
	// a bounded store no longer holds (an instance-ai reset frame), and
	// CodeCursorAhead one whose cursor is beyond the thread's log: the
	// AG-UI events for them cannot be produced, so the client must reload.
	CodeEventsEvicted = instanceai.ReasonEventsEvicted
	CodeCursorAhead   = instanceai.ReasonCursorAhead
)

// InterruptReason is the reason of the interrupts a confirmation-request
// becomes.
const InterruptReason = "confirmation"

// ConfirmationResponseSchema is the JSON Schema of the answer to a
// confirmation interrupt (the resume payload): {approved, userInput?}.
var ConfirmationResponseSchema = json.RawMessage(`{"type":"object","properties":{"approved":{"type":"boolean"},"userInput":{"type":"string"}},"required":["approved"]}`)

type segKind int

const (
	kindText segKind = iota
	kindReasoning
)

// segment is an open run of deltas (or one block) being streamed as a
// message.
type segment struct {
	responseID string
	messageID  string
	// sent is how many bytes of text went out as CONTENT.
	sent int
}

type agentState struct {
	id        string
	segs      [2]*segment
	lastText  string // messageId of the agent's latest text message
	openTools []string
	// callGroup is the first of the agent's calls started with no text
	// before them and no result since: the parent of the next ones.
	callGroup string
}

type subagent struct {
	id          string
	name        string
	description string
	parent      string
	metadata    map[string]any
}

type segCount struct {
	agent, responseID string
	kind              segKind
}

// InstanceToAGUI translates one instance-ai run, event by event, into one
// AG-UI run (threadId and runId of the AG-UI request).
//
// It follows the writer's coalescing rules to delimit text and reasoning
// messages, so the live stream (deltas) and the replay stream (blocks) map to
// the same messages; a block whose segment already streamed live on this
// connection is not sent twice. The AG-UI run always ends with exactly one
// RUN_FINISHED or RUN_ERROR: on the orchestrator's run-finish, or, while
// background agents of the run are still working, when the last of them
// completes (the orchestrator's own finish is marked with a CUSTOM
// instance-ai.orchestrator-finished event). A confirmation-request ends the
// AG-UI run with an interrupt; Resume continues the same instance-ai run as
// a new AG-UI run. A tasks-update is the shared state (STATE_SNAPSHOT, then
// STATE_DELTA) and its tasks in progress are active steps (STEP_STARTED /
// STEP_FINISHED, all finished before the run ends or is interrupted); a
// custom event is CUSTOM under its own name. Call Close when the source
// ends to guarantee a terminal event.
type InstanceToAGUI struct {
	threadID, runID string

	started   bool
	finished  bool
	suspended bool               // finished with an interrupt
	pending   []instanceai.Event // events pushed while suspended

	orchestrator string
	agents       map[string]*agentState
	agentOrder   []string

	subs       map[string]*subagent // every sub-agent spawned on this stream
	activeSubs []string             // spawn order
	pausedSubs []string             // suspended by an interrupt, reopened by Resume

	segsDelivered map[segCount]int
	blocksSeen    map[segCount]int
	messageCount  map[string]int
	// textIDs are the text messages' ids; reasoningOf is the id of the
	// latest reasoning message of each responseId (an upstream agent's
	// message id), which an upstream's REASONING_ENCRYPTED_VALUE names.
	textIDs     map[string]bool
	reasoningOf map[string]string

	held *instanceai.RunFinish
	// lastError and lastErrorCode are the run's last error event's text
	// and code, for a failed run's RUN_ERROR.
	lastError, lastErrorCode string

	stateSent bool
	state     json.RawMessage // the shared state as last sent
	// openSteps are the checklist tasks sent as active steps, in the
	// order they started.
	openSteps []string

	clientTools map[string]bool // tools the client executes (ClientTools)
	clientCalls []string        // their calls without a result, in call order

	ts  int64
	out []agui.Event
}

// NewInstanceToAGUI returns a translator for the AG-UI run (threadID, runID).
func NewInstanceToAGUI(threadID, runID string) *InstanceToAGUI {
	return &InstanceToAGUI{
		threadID: threadID, runID: runID,
		agents:        map[string]*agentState{},
		subs:          map[string]*subagent{},
		segsDelivered: map[segCount]int{},
		blocksSeen:    map[segCount]int{},
		messageCount:  map[string]int{},
		textIDs:       map[string]bool{},
		reasoningOf:   map[string]string{},
	}
}

// ClientTools names the tools the client executes itself (the frontend
// tools of the AG-UI input). A call to one of them that has no result when
// the run completes stays pending on the client: RUN_FINISHED success lists
// it in outcome.pendingToolCallIds. Without it no call is reported pending.
// It returns m.
func (m *InstanceToAGUI) ClientTools(names ...string) *InstanceToAGUI {
	if m.clientTools == nil {
		m.clientTools = map[string]bool{}
	}
	for _, n := range names {
		m.clientTools[n] = true
	}
	return m
}

// Finished reports whether the AG-UI run has ended (terminal event sent).
func (m *InstanceToAGUI) Finished() bool { return m.finished }

// Suspended reports whether the run ended with an interrupt that Resume can
// continue.
func (m *InstanceToAGUI) Suspended() bool { return m.suspended }

// Push translates one instance-ai event. After the terminal event it returns
// nothing; while suspended by an interrupt it keeps the events for Resume.
func (m *InstanceToAGUI) Push(ev instanceai.Event) []agui.Event {
	if m.suspended {
		m.pending = append(m.pending, ev)
		return nil
	}
	if m.finished {
		return nil
	}
	m.out = nil
	m.push(ev)
	return m.flush()
}

// Resume starts a new AG-UI run (runID) that continues the instance-ai run
// suspended by an interrupt: RUN_STARTED, the suspended sub-agents opened
// again, then whatever was pushed in the meantime.
func (m *InstanceToAGUI) Resume(runID string) []agui.Event {
	if !m.suspended {
		return nil
	}
	m.out = nil
	m.runID = runID
	m.suspended, m.finished = false, false
	m.emit("", &agui.RunStarted{ThreadID: m.threadID, RunID: m.runID, ProtocolVersion: agui.ProtocolVersion})
	for _, id := range m.pausedSubs {
		m.startSub(m.subs[id])
	}
	m.pausedSubs = nil
	pending := m.pending
	m.pending = nil
	for i, ev := range pending {
		if m.suspended {
			m.pending = append(m.pending, pending[i:]...)
			break
		}
		if m.finished {
			break
		}
		m.push(ev)
	}
	return m.flush()
}

// Close ends the AG-UI run if it has not ended: everything open is closed,
// sub-agents still working end with SUBAGENT_ERROR, and the run ends with
// the held orchestrator finish when there is one (and err is nil), else
// with RUN_ERROR (err's text, or "ended without run-finish").
func (m *InstanceToAGUI) Close(err error) []agui.Event {
	if m.finished {
		return nil
	}
	m.out = nil
	m.ensureStarted()
	m.closeAll()
	for len(m.activeSubs) > 0 {
		id := m.activeSubs[len(m.activeSubs)-1]
		m.endSub(id, &agui.SubagentError{SubagentRunID: id, Message: "the run ended before this agent completed", Code: CodeAgentAbandoned})
	}
	var reset *instanceai.Reset
	switch {
	case errors.As(err, &reset):
		m.emit("", &agui.RunError{Message: reset.Error(), Code: reset.Reason})
		m.finished = true
	case err != nil:
		m.emit("", &agui.RunError{Message: err.Error(), Code: CodeStreamError})
		m.finished = true
	case m.held != nil:
		m.terminal(m.held)
	default:
		m.emit("", &agui.RunError{Message: "the run ended without run-finish", Code: CodeIncomplete})
		m.finished = true
	}
	return m.flush()
}

func (m *InstanceToAGUI) flush() []agui.Event {
	out := m.out
	m.out = nil
	return out
}

func (m *InstanceToAGUI) push(ev instanceai.Event) {
	m.ts = ev.TS
	if ev.Type == instanceai.TypeRunStart {
		if !m.started {
			m.orchestrator = ev.AgentID
			m.ensureStarted()
		}
		return
	}
	m.ensureStarted()
	if m.orchestrator == "" && ev.Type != instanceai.TypeAgentSpawned && m.subs[ev.AgentID] == nil {
		m.orchestrator = ev.AgentID
	}
	switch instanceai.DurabilityOf(ev.Type) {
	case instanceai.Structural:
		if ev.Type == instanceai.TypeRunFinish {
			m.closeSegments(func(*agentState) bool { return true })
		} else {
			m.closeSegments(func(a *agentState) bool { return a.id == ev.AgentID })
		}
	}
	switch p := ev.Payload.(type) {
	case *instanceai.Text:
		switch ev.Type {
		case instanceai.TypeTextDelta:
			m.delta(ev, kindText, p.Text)
		case instanceai.TypeReasoningDelta:
			m.delta(ev, kindReasoning, p.Text)
		case instanceai.TypeTextBlock:
			m.block(ev, kindText, p.Text)
		case instanceai.TypeReasoningBlock:
			m.block(ev, kindReasoning, p.Text)
		}
	case *instanceai.ToolInputStart:
		m.startTool(ev.AgentID, p.ToolCallID, p.ToolName, ev.ResponseID)
	case *instanceai.ToolCall:
		m.toolCall(ev.AgentID, ev.ResponseID, p)
	case *instanceai.ToolResult:
		m.toolResult(ev.AgentID, p.ToolCallID, resultText(p.Result), ResultKindResult)
	case *instanceai.ToolError:
		kind := ResultKindError
		if ev.Type == instanceai.TypeToolInterrupted {
			kind = ResultKindInterrupted
		}
		m.toolResult(ev.AgentID, p.ToolCallID, p.Error, kind)
	case *instanceai.AgentSpawned:
		m.spawned(ev.AgentID, p)
	case *instanceai.AgentCompleted:
		m.completed(ev, p)
	case *instanceai.TasksUpdate:
		m.tasksUpdate(ev.AgentID, p)
	case *instanceai.ConfirmationRequest:
		m.interrupt(ev.AgentID, p)
	case *instanceai.RunFinish:
		m.runFinish(ev.AgentID, p)
	case *instanceai.Custom:
		// The agent's own name and value, as AG-UI's CUSTOM means them.
		m.custom(ev.AgentID, p.Name, p.Value)
	case *instanceai.AGUIEvent:
		// An upstream agent's event, served back as it came; its run's
		// lifecycle is kept for the record and for resuming, this run's
		// own lifecycle is served instead.
		if t := agui.EventType(p.EventType()); !agui.Lifecycle(t) {
			m.ensureStarted()
			data := p.Event
			if t == agui.TypeReasoningEncryptedValue {
				data = m.encryptedEntity(data)
			}
			m.emit(ev.AgentID, &agui.Verbatim{T: t, Data: data})
		}
	default:
		if p, ok := ev.Payload.(*instanceai.ErrorPayload); ok {
			m.lastError, m.lastErrorCode = p.Content, p.Code
		}
		m.custom(ev.AgentID, CustomPrefix+string(ev.Type), ev.Payload)
	}
}

func (m *InstanceToAGUI) ensureStarted() {
	if m.started {
		return
	}
	m.started = true
	m.emit("", &agui.RunStarted{ThreadID: m.threadID, RunID: m.runID, ProtocolVersion: agui.ProtocolVersion})
}

// emit appends e, stamped with the current event's time and attributed to
// agentID's sub-agent run when agentID is a sub-agent of this stream.
func (m *InstanceToAGUI) emit(agentID string, e agui.Event) {
	if m.ts > 0 {
		e.Common().Timestamp = m.ts
	}
	if a, ok := e.(agui.Attributable); ok && agentID != "" {
		if s := m.subs[agentID]; s != nil {
			a.Attribute(s.id)
		}
	}
	m.out = append(m.out, e)
}

func (m *InstanceToAGUI) agent(id string) *agentState {
	a := m.agents[id]
	if a == nil {
		a = &agentState{id: id}
		m.agents[id] = a
		m.agentOrder = append(m.agentOrder, id)
	}
	return a
}

// encryptedEntity points an upstream's REASONING_ENCRYPTED_VALUE for one
// of its reasoning messages at that message as this stream names it
// (Threadline names a reasoning message after its responseId, suffixed):
// a client attaches the value only to a message it holds. Values for text
// messages and tool calls, whose ids are the upstream's, go as they came.
func (m *InstanceToAGUI) encryptedEntity(data json.RawMessage) json.RawMessage {
	var ev map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers in its metadata kept as written
	if dec.Decode(&ev) != nil || ev["subtype"] != "message" {
		return data
	}
	id, _ := ev["entityId"].(string)
	to, ok := m.reasoningOf[id]
	if !ok || m.textIDs[id] || to == id {
		return data
	}
	ev["entityId"] = to
	out, err := json.Marshal(ev)
	if err != nil {
		return data
	}
	return out
}

func (m *InstanceToAGUI) custom(agentID, name string, value any) {
	raw, err := json.Marshal(value)
	if err != nil {
		raw, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	m.emit(agentID, &agui.Custom{Name: name, Value: raw})
}

// newMessageID derives a message id from a segment's responseId: the
// responseId itself for the first text message, suffixed for reasoning and
// for later messages of the same response.
func (m *InstanceToAGUI) newMessageID(agentID string, kind segKind, responseID string) string {
	base := responseID
	if base == "" {
		base = agentID + ":seg"
	}
	if kind == kindReasoning {
		base += ":reasoning"
	}
	n := m.messageCount[base]
	m.messageCount[base] = n + 1
	if n == 0 && responseID != "" {
		return base
	}
	return base + ":" + strconv.Itoa(n+1)
}

func (m *InstanceToAGUI) openSegment(a *agentState, kind segKind, responseID string) *segment {
	s := &segment{responseID: responseID, messageID: m.newMessageID(a.id, kind, responseID)}
	a.segs[kind] = s
	m.segsDelivered[segCount{a.id, responseID, kind}]++
	if kind == kindText {
		a.lastText = s.messageID
		m.textIDs[s.messageID] = true
		m.emit(a.id, &agui.TextMessageStart{MessageID: s.messageID, Role: agui.RoleAssistant})
	} else {
		if responseID != "" {
			m.reasoningOf[responseID] = s.messageID
		}
		m.emit(a.id, &agui.ReasoningStart{MessageID: s.messageID})
		m.emit(a.id, &agui.ReasoningMessageStart{MessageID: s.messageID, Role: agui.RoleReasoning})
	}
	return s
}

func (m *InstanceToAGUI) content(a *agentState, kind segKind, s *segment, text string) {
	if text == "" {
		return
	}
	s.sent += len(text)
	if kind == kindText {
		m.emit(a.id, &agui.TextMessageContent{MessageID: s.messageID, Delta: text})
	} else {
		m.emit(a.id, &agui.ReasoningMessageContent{MessageID: s.messageID, Delta: text})
	}
}

func (m *InstanceToAGUI) closeSegment(a *agentState, kind segKind) {
	s := a.segs[kind]
	if s == nil {
		return
	}
	a.segs[kind] = nil
	if kind == kindText {
		m.emit(a.id, &agui.TextMessageEnd{MessageID: s.messageID})
	} else {
		m.emit(a.id, &agui.ReasoningMessageEnd{MessageID: s.messageID})
		m.emit(a.id, &agui.ReasoningEnd{MessageID: s.messageID})
	}
}

// closeSegments closes the open segments of the matching agents, agents in
// order of appearance, reasoning before text (the writer's order).
func (m *InstanceToAGUI) closeSegments(match func(*agentState) bool) {
	for _, id := range m.agentOrder {
		a := m.agents[id]
		if match(a) {
			m.closeSegment(a, kindReasoning)
			m.closeSegment(a, kindText)
		}
	}
}

func (m *InstanceToAGUI) delta(ev instanceai.Event, kind segKind, text string) {
	a := m.agent(ev.AgentID)
	s := a.segs[kind]
	if s != nil && s.responseID != ev.ResponseID {
		m.closeSegment(a, kind)
		s = nil
	}
	if s == nil {
		s = m.openSegment(a, kind, ev.ResponseID)
	}
	m.content(a, kind, s, text)
}

// block maps a coalesced block. The block of a segment that streamed live
// on this connection (the open one, or one already closed) only closes it;
// when the open one streamed less than the block holds (its deltas were
// lost on their way to this instance, which then sends the block), the
// rest of the block's text goes out before it closes.
func (m *InstanceToAGUI) block(ev instanceai.Event, kind segKind, text string) {
	a := m.agent(ev.AgentID)
	key := segCount{a.id, ev.ResponseID, kind}
	if s := a.segs[kind]; s != nil {
		if s.responseID == ev.ResponseID && s.sent < len(text) {
			m.content(a, kind, s, text[s.sent:])
		}
		m.closeSegment(a, kind)
		if s.responseID == ev.ResponseID {
			m.blocksSeen[key]++
			return
		}
	}
	if m.blocksSeen[key] < m.segsDelivered[key] {
		m.blocksSeen[key]++
		return
	}
	m.blocksSeen[key]++
	s := m.openSegment(a, kind, ev.ResponseID)
	m.content(a, kind, s, text)
	m.closeSegment(a, kind)
}

func (m *InstanceToAGUI) isOpenTool(a *agentState, id string) bool {
	for _, t := range a.openTools {
		if t == id {
			return true
		}
	}
	return false
}

// startTool opens a tool call on its parent message: the one its events
// name (their responseId: an upstream AG-UI agent's parentMessageId), else
// the agent's latest text, else the first call of the calls that started
// since the last result, so that calls made together stay one assistant
// message (as a model's parallel calls are) where the client would
// otherwise make a message of each.
func (m *InstanceToAGUI) startTool(agentID, toolCallID, name, parent string) {
	a := m.agent(agentID)
	if m.isOpenTool(a, toolCallID) {
		return
	}
	a.openTools = append(a.openTools, toolCallID)
	if m.clientTools[name] && !slices.Contains(m.clientCalls, toolCallID) {
		m.clientCalls = append(m.clientCalls, toolCallID)
	}
	if parent == "" {
		parent = a.lastText
	}
	if parent == "" {
		parent = a.callGroup
		if parent == "" {
			// The first call names the message the client makes for it
			// (its own id, as with no parent at all).
			a.callGroup = toolCallID
		}
	}
	m.emit(agentID, &agui.ToolCallStart{ToolCallID: toolCallID, ToolCallName: name, ParentMessageID: parent})
}

func (m *InstanceToAGUI) endTool(a *agentState, toolCallID string) {
	for i, t := range a.openTools {
		if t == toolCallID {
			a.openTools = append(a.openTools[:i], a.openTools[i+1:]...)
			m.emit(a.id, &agui.ToolCallEnd{ToolCallID: toolCallID})
			return
		}
	}
}

func (m *InstanceToAGUI) toolCall(agentID, parent string, p *instanceai.ToolCall) {
	m.startTool(agentID, p.ToolCallID, p.ToolName, parent)
	args := string(p.Args)
	if args == "" {
		args = "{}"
	}
	m.emit(agentID, &agui.ToolCallArgs{ToolCallID: p.ToolCallID, Delta: args})
	m.endTool(m.agent(agentID), p.ToolCallID)
}

func (m *InstanceToAGUI) toolResult(agentID, toolCallID, content, kind string) {
	a := m.agent(agentID)
	a.callGroup = ""
	m.endTool(a, toolCallID)
	m.clientCalls = slices.DeleteFunc(m.clientCalls, func(id string) bool { return id == toolCallID })
	m.emit(agentID, &agui.ToolCallResult{
		Base:       agui.Base{Metadata: map[string]any{MetadataKey: map[string]string{"kind": kind}}},
		MessageID:  "result:" + toolCallID,
		ToolCallID: toolCallID,
		Content:    content,
		Role:       agui.RoleTool,
	})
}

func (m *InstanceToAGUI) spawned(agentID string, p *instanceai.AgentSpawned) {
	if m.subs[agentID] != nil {
		return
	}
	raw, _ := json.Marshal(p)
	name := p.Role
	if name == "" {
		name = "agent"
	}
	desc := p.Title
	if desc == "" {
		desc = p.Goal
	}
	s := &subagent{id: agentID, name: name, description: desc,
		metadata: map[string]any{MetadataKey: json.RawMessage(raw)}}
	if m.subs[p.ParentID] != nil {
		s.parent = p.ParentID
	}
	m.subs[agentID] = s
	m.startSub(s)
}

func (m *InstanceToAGUI) startSub(s *subagent) {
	m.activeSubs = append(m.activeSubs, s.id)
	m.emit("", &agui.SubagentStarted{Base: agui.Base{Metadata: s.metadata}, SubagentRunID: s.id,
		Name: s.name, Description: s.description, ParentSubagentRunID: s.parent})
}

func (m *InstanceToAGUI) isActive(id string) bool {
	for _, s := range m.activeSubs {
		if s == id {
			return true
		}
	}
	return false
}

// endSub closes what the sub-agent has open, then emits its end event.
func (m *InstanceToAGUI) endSub(id string, end agui.Event) {
	if a := m.agents[id]; a != nil {
		m.closeAgent(a)
	}
	for i, s := range m.activeSubs {
		if s == id {
			m.activeSubs = append(m.activeSubs[:i], m.activeSubs[i+1:]...)
			break
		}
	}
	m.emit("", end)
}

func (m *InstanceToAGUI) completed(ev instanceai.Event, p *instanceai.AgentCompleted) {
	if !m.isActive(ev.AgentID) {
		m.custom(ev.AgentID, CustomAgentCompleted, p)
		return
	}
	id := ev.AgentID
	switch {
	case p.Status == instanceai.RunCancelled:
		msg := p.Error
		if msg == "" {
			msg = "cancelled"
		}
		m.endSub(id, &agui.SubagentError{SubagentRunID: id, Message: msg, Code: CodeAgentCancelled})
	case p.Status == instanceai.RunError || p.Error != "":
		msg := p.Error
		if msg == "" {
			msg = p.Result
		}
		if msg == "" {
			msg = "the agent failed"
		}
		m.endSub(id, &agui.SubagentError{SubagentRunID: id, Message: msg, Code: CodeAgentFailed})
	default:
		result, _ := json.Marshal(p.Result)
		m.endSub(id, &agui.SubagentFinished{SubagentRunID: id, Result: result,
			Outcome: &agui.SubagentOutcome{Type: agui.SubagentSuccess}})
	}
	if m.held != nil && len(m.activeSubs) == 0 {
		m.terminal(m.held)
	}
}

func (m *InstanceToAGUI) tasksUpdate(agentID string, p *instanceai.TasksUpdate) {
	m.steps(p.Tasks.Tasks)
	next := stateDoc(p)
	if m.stateSent {
		if ops, err := statePatch(m.state, next); err == nil {
			m.state = next
			if len(ops) > 0 {
				m.emit(agentID, &agui.StateDelta{Delta: ops})
			}
			return
		}
		// A state the differ cannot compare is sent whole again.
	}
	m.stateSent, m.state = true, next
	m.emit(agentID, &agui.StateSnapshot{Snapshot: next})
}

// stateDoc is the shared state: {tasks: [...], planItems?: [...]}.
func stateDoc(p *instanceai.TasksUpdate) json.RawMessage {
	doc := map[string]any{"tasks": p.Tasks.Tasks}
	if p.Tasks.Tasks == nil {
		doc["tasks"] = []any{}
	}
	if len(p.PlanItems) > 0 {
		doc["planItems"] = p.PlanItems
	}
	raw, _ := json.Marshal(doc)
	return raw
}

// statePatch is the RFC 6902 patch that turns the state document prev into
// next.
func statePatch(prev, next json.RawMessage) ([]agui.PatchOp, error) {
	patch, err := jsondiff.CompareJSON(prev, next)
	if err != nil || len(patch) == 0 {
		return nil, err
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	var ops []agui.PatchOp
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

// closeAgent closes an agent's open segments and tool calls.
func (m *InstanceToAGUI) closeAgent(a *agentState) {
	m.closeSegment(a, kindReasoning)
	m.closeSegment(a, kindText)
	for len(a.openTools) > 0 {
		m.endTool(a, a.openTools[0])
	}
}

func (m *InstanceToAGUI) closeAll() {
	for _, id := range m.agentOrder {
		m.closeAgent(m.agents[id])
	}
	m.steps(nil)
}

// steps makes the checklist's tasks AG-UI steps: a task in progress is an
// active step (STEP_STARTED when it becomes one), and a step whose task is
// anything else, or gone, is finished. The rule is on state, not on
// transitions, so a stream that starts mid-run (a rejoin, a resumed run)
// opens the steps in progress at its first checklist; closeAll finishes
// every step, since a run may not end with one active.
func (m *InstanceToAGUI) steps(tasks []instanceai.Task) {
	active := map[string]bool{}
	for _, t := range tasks {
		if t.Status == instanceai.TaskInProgress {
			active[t.ID] = true
		}
	}
	kept := m.openSteps[:0]
	for _, id := range m.openSteps {
		if active[id] {
			kept = append(kept, id)
			continue
		}
		m.emit("", &agui.StepFinished{StepName: id})
	}
	m.openSteps = kept
	for _, t := range tasks {
		if active[t.ID] && !slices.Contains(m.openSteps, t.ID) {
			m.openSteps = append(m.openSteps, t.ID)
			m.emit("", &agui.StepStarted{StepName: t.ID})
		}
	}
}

func (m *InstanceToAGUI) interrupt(agentID string, p *instanceai.ConfirmationRequest) {
	m.closeAll()
	in := agui.Interrupt{
		ID: p.RequestID, Reason: InterruptReason, Message: p.Message, ToolCallID: p.ToolCallID,
		ResponseSchema: ConfirmationResponseSchema,
		Metadata:       map[string]any{"severity": p.Severity, "toolName": p.ToolName},
	}
	if p.InputType != "" {
		in.Metadata["inputType"] = p.InputType
	}
	in.ExpiresAt = InterruptExpiry(p.Args)
	if s := m.subs[agentID]; s != nil && m.isActive(agentID) {
		in.SubagentRunID = s.id
	}
	// Sub-agents still working are suspended, innermost first, and reopened
	// by Resume.
	m.pausedSubs = append([]string(nil), m.activeSubs...)
	for len(m.activeSubs) > 0 {
		id := m.activeSubs[len(m.activeSubs)-1]
		out := &agui.SubagentOutcome{Type: agui.SubagentSuspended}
		if id == agentID {
			out.InterruptIDs = []string{p.RequestID}
		}
		m.endSub(id, &agui.SubagentFinished{SubagentRunID: id, Outcome: out})
	}
	m.emit("", &agui.RunFinished{ThreadID: m.threadID, RunID: m.runID,
		Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt, Interrupts: []agui.Interrupt{in}}})
	m.finished, m.suspended = true, true
}

// InterruptExpiry is the expiresAt of the AG-UI interrupt a confirmation
// stands for, "" when it has none: an upstream agent's interrupt travels in
// the confirmation's args as {interrupt: {…, expiresAt}} (agent/upstream).
func InterruptExpiry(args json.RawMessage) string {
	var a struct {
		Interrupt struct {
			ExpiresAt string `json:"expiresAt"`
		} `json:"interrupt"`
	}
	if len(args) == 0 || json.Unmarshal(args, &a) != nil {
		return ""
	}
	return a.Interrupt.ExpiresAt
}

// InterruptExpired reports whether an interrupt's expiresAt has passed at
// now, as @ag-ui/client 1.0.0's isInterruptExpired judges it: a value that
// is not a time never expires.
func InterruptExpired(expiresAt string, now time.Time) bool {
	if expiresAt == "" {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, expiresAt)
	return err == nil && !t.After(now)
}

// ConfirmationExpiry is the expiresAt of the interrupt a stored
// confirmation stands for ("" for none), read from its request's args.
func ConfirmationExpiry(c *instanceai.Confirmation) string {
	var req struct {
		Args json.RawMessage `json:"args"`
	}
	if c == nil || json.Unmarshal(c.Request, &req) != nil {
		return ""
	}
	return InterruptExpiry(req.Args)
}

func (m *InstanceToAGUI) runFinish(agentID string, p *instanceai.RunFinish) {
	if len(m.activeSubs) > 0 {
		if a := m.agents[agentID]; a != nil {
			m.closeAgent(a)
		}
		held := *p
		m.held = &held
		m.custom(agentID, CustomOrchestratorFinished, p)
		return
	}
	m.terminal(p)
}

// terminal closes everything and ends the AG-UI run as the run-finish says.
func (m *InstanceToAGUI) terminal(p *instanceai.RunFinish) {
	m.closeAll()
	meta := map[string]any{}
	if p.Reason != "" {
		meta[MetadataKey] = map[string]string{"reason": p.Reason}
	}
	base := agui.Base{}
	if len(meta) > 0 {
		base.Metadata = meta
	}
	usage := aguiUsage(p.Usage)
	switch p.Status {
	case instanceai.RunCompleted:
		out := &agui.Outcome{Type: agui.OutcomeSuccess}
		if len(m.clientCalls) > 0 {
			out.PendingToolCallIDs = slices.Clone(m.clientCalls)
		}
		m.emit("", &agui.RunFinished{Base: base, ThreadID: m.threadID, RunID: m.runID, Outcome: out, Usage: usage})
	case instanceai.RunCancelled:
		m.emit("", &agui.RunFinished{Base: base, ThreadID: m.threadID, RunID: m.runID, Outcome: &agui.Outcome{Type: agui.OutcomeCancelled}, Usage: usage})
	case instanceai.RunInterrupted:
		m.emit("", &agui.RunError{Base: base, Message: firstNonEmpty(p.Reason, "the run was interrupted"), Code: CodeInterrupted, Usage: usage})
	default:
		// The error's own code (the provider's connection_failed,
		// unauthorized, timeout…) when the run reported one, so that a
		// client tells the failures apart without reading CUSTOM events.
		m.emit("", &agui.RunError{Base: base, Message: firstNonEmpty(p.Reason, m.lastError, fmt.Sprintf("the run failed (status %q)", p.Status)),
			Code: firstNonEmpty(m.lastErrorCode, CodeRunFailed), Usage: usage})
	}
	m.held = nil
	m.finished = true
}

// aguiUsage is a run-finish's token usage as AG-UI reports it.
func aguiUsage(in []instanceai.TokenUsage) []agui.Usage {
	if len(in) == 0 {
		return nil
	}
	out := make([]agui.Usage, len(in))
	for i, u := range in {
		out[i] = agui.Usage{Provider: u.Provider, Model: u.Model,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
	}
	return out
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// resultText is a tool result as TOOL_CALL_RESULT content, which is text:
// a JSON string as its text (a client tool's answer, an upstream's plain
// text result), anything else as its JSON.
func resultText(result json.RawMessage) string {
	if len(result) == 0 {
		return "null"
	}
	var s string
	if json.Unmarshal(result, &s) == nil {
		return s
	}
	return string(result)
}
