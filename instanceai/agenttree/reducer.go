// Package agenttree folds Instance AI events into the agent tree the n8n UI
// renders: a port of the agent-run reducer of @n8n/api-types 1.41.0
// (dist/schemas/agent-run-reducer.js). The browser folds the live stream with
// that reducer; the server folds the stored log the same way to answer the
// messages endpoint and to send a run's tree on reconnect. The two must agree
// on the JSON, so this package keeps the reference's state, transitions and
// output, including its oddities, and the tests check it against the
// reference run under Node: json.Marshal of a tree equals JSON.stringify of
// the reference's as a JSON value (object key order may differ).
//
// Where the event model cannot tell an absent field from an empty one (ts 0,
// responseId "", an optional string ""), the port reads it as absent, as
// this server never sends the empty form.
//
// The reference's rules, in short:
//   - run-start resets the tree, unless it already has content: then the new
//     run joins the same root (follow-up runs share one tree).
//   - Deltas append to the agent's text or reasoning and to its timeline,
//     merging into the last timeline entry when type and responseId match.
//   - A block replaces the open segment it closes (same type, same non-empty
//     responseId, and the block starts or ends with the segment's text);
//     any other block appends like a delta.
//   - Events of unknown agents are dropped, except error, which goes to the
//     root. tool-interrupted is a tool-error.
//   - run-finish sets the run status (interrupted counts as cancelled); only
//     cancelled and error settle the tool calls still loading.
//
// A State is not safe for concurrent use.
package agenttree

import (
	"maps"
	"slices"
	"strings"

	"github.com/threadline/threadline/instanceai"
)

// DefaultRootAgentID is the root id of a fresh state (createInitialState's
// default); the first run-start replaces it with the run's orchestrator id.
const DefaultRootAgentID = "agent-001"

// State is the reducer state (n8n's AgentRunState). AgentsByID and
// ToolCallsByID index the nodes and tool calls of the tree by id; after a
// follow-up run joined the tree, the root is indexed under each run's
// orchestrator id too.
type State struct {
	RootAgentID     string                    `json:"rootAgentId"`
	AgentsByID      map[string]*AgentNode     `json:"agentsById"`
	ParentByAgentID map[string]string         `json:"parentByAgentId"`
	ToolCallsByID   map[string]*ToolCallState `json:"toolCallsById"`
	// Status is the run status: active, completed, cancelled or error.
	Status string `json:"status"`
}

// New returns the initial state (createInitialState()).
func New() *State { return NewWithRoot(DefaultRootAgentID) }

// NewWithRoot returns the initial state with the given root agent id
// (createInitialState(rootAgentId)); an unsafe id falls back to the default.
func NewWithRoot(rootAgentID string) *State {
	if !isSafeObjectKey(rootAgentID) {
		rootAgentID = DefaultRootAgentID
	}
	return &State{
		RootAgentID:     rootAgentID,
		AgentsByID:      map[string]*AgentNode{rootAgentID: newNode(rootAgentID, "orchestrator")},
		ParentByAgentID: map[string]string{},
		ToolCallsByID:   map[string]*ToolCallState{},
		Status:          StatusActive,
	}
}

// newNode is the reference's createNode.
func newNode(agentID, role string) *AgentNode {
	return &AgentNode{
		AgentID:   agentID,
		Role:      role,
		Status:    StatusActive,
		ToolCalls: []*ToolCallState{},
		Children:  []*AgentNode{},
		Timeline:  []TimelineEntry{},
	}
}

// Fold folds events into a fresh state and returns the tree.
func Fold(events []instanceai.Event) *AgentNode {
	s := New()
	for _, ev := range events {
		s.Apply(ev)
	}
	return s.Tree()
}

// Reduce applies one event to the state and returns it (reduceEvent: the
// state is updated in place).
func Reduce(s *State, ev instanceai.Event) *State {
	s.Apply(ev)
	return s
}

// Apply folds one event into the state. A zero State starts as New does.
func (s *State) Apply(ev instanceai.Event) { s.apply(ev) }

// Tree returns the root of the agent tree (toAgentTree). It is the state's
// own node, updated by later events, not a copy.
func (s *State) Tree() *AgentNode {
	if root := s.AgentsByID[s.RootAgentID]; root != nil {
		return root
	}
	return newNode(s.RootAgentID, "unknown")
}

// Active reports whether the run is still streaming (the status is active):
// what a chat message's isStreaming shows.
func (s *State) Active() bool { return s.Status == StatusActive }

// FindAgent returns the node of an agent id, or nil (findAgent). The root is
// found under each orchestrator id that joined it.
func (s *State) FindAgent(agentID string) *AgentNode {
	if !isSafeObjectKey(agentID) {
		return nil
	}
	return s.AgentsByID[agentID]
}

// lookupAgent is the reference's ensureAgent: agentsById[id] after the
// unsafe-key guard. inherited is true when the id misses but names an
// Object.prototype member, where the reference gets a function: truthy, but
// with no timeline, toolCalls or children, so most uses of it throw.
func (s *State) lookupAgent(id string) (node *AgentNode, inherited bool) {
	if !isSafeObjectKey(id) {
		return nil, false
	}
	if n, ok := s.AgentsByID[id]; ok {
		return n, false
	}
	return nil, inheritedKeys[id]
}

// lookupToolCall is toolCallsById[id] (callers check the key first), with
// inherited as in lookupAgent: the reference then treats the id as a known
// tool call whose updates land on the inherited function, invisible in the
// tree.
func (s *State) lookupToolCall(id string) (tc *ToolCallState, inherited bool) {
	if tc, ok := s.ToolCallsByID[id]; ok {
		return tc, false
	}
	return nil, inheritedKeys[id]
}

func nodeHasContent(n *AgentNode) bool {
	if n == nil {
		return false
	}
	return n.TextContent != "" || n.Reasoning != "" || len(n.Timeline) > 0 || len(n.ToolCalls) > 0 ||
		len(n.Children) > 0 || len(n.PlanItems) > 0 || n.StatusMessage != "" ||
		(n.Result != nil && *n.Result != "") || n.Error != "" || n.Tasks != nil ||
		n.SetupItemsByWorkflowID != nil
}

func lastEntry(timeline []TimelineEntry) *TimelineEntry {
	if len(timeline) == 0 {
		return nil
	}
	return &timeline[len(timeline)-1]
}

// appendTimeline is appendTimelineText and appendTimelineReasoning: extend
// the last entry when it has the same type and responseId (both absent
// counts as the same), else start a new one.
func appendTimeline(n *AgentNode, typ, text, responseID string) {
	if last := lastEntry(n.Timeline); last != nil && last.Type == typ && last.ResponseID == responseID {
		last.Content += text
		return
	}
	n.Timeline = append(n.Timeline, TimelineEntry{Type: typ, Content: text, ResponseID: responseID})
}

// apply is reduceEvent. It returns false where the reference throws part-way
// through the event (a TypeError on an inherited id, a RangeError on a ts out
// of the Date range): the state then holds exactly the changes the reference
// made before throwing, and the rest of the event is dropped.
func (s *State) apply(ev instanceai.Event) bool {
	if s.AgentsByID == nil {
		*s = *New()
	}
	if s.ParentByAgentID == nil {
		s.ParentByAgentID = map[string]string{}
	}
	if s.ToolCallsByID == nil {
		s.ToolCallsByID = map[string]*ToolCallState{}
	}
	// The reference switches on the type and trusts the payload to match;
	// here a payload of the wrong type (or a nil one) drops the event. The
	// event model's decoder never produces either.
	switch ev.Type {
	case instanceai.TypeRunStart:
		return s.runStart(ev) // reads the envelope only
	case instanceai.TypeRunFinish:
		if p, ok := payload[*instanceai.RunFinish](ev); ok {
			s.runFinish(p)
		}
	case instanceai.TypeTextDelta, instanceai.TypeReasoningDelta:
		if p, ok := payload[*instanceai.Text](ev); ok {
			return s.delta(ev.AgentID, entryType(ev.Type), p.Text, ev.ResponseID)
		}
	case instanceai.TypeTextBlock, instanceai.TypeReasoningBlock:
		if p, ok := payload[*instanceai.Text](ev); ok {
			return s.block(ev.AgentID, entryType(ev.Type), p.Text, ev.ResponseID)
		}
	case instanceai.TypeToolInputStart:
		if p, ok := payload[*instanceai.ToolInputStart](ev); ok {
			return s.toolInputStart(ev, p)
		}
	case instanceai.TypeToolCall:
		if p, ok := payload[*instanceai.ToolCall](ev); ok {
			return s.toolCall(ev, p)
		}
	case instanceai.TypeToolResult:
		if p, ok := payload[*instanceai.ToolResult](ev); ok {
			return s.toolResult(ev, p)
		}
	case instanceai.TypeToolError, instanceai.TypeToolInterrupted:
		// tool-interrupted is handled exactly like tool-error: the call ends
		// with the message as its error.
		if p, ok := payload[*instanceai.ToolError](ev); ok {
			return s.toolError(ev, p)
		}
	case instanceai.TypeAgentSpawned:
		if p, ok := payload[*instanceai.AgentSpawned](ev); ok {
			return s.agentSpawned(ev, p)
		}
	case instanceai.TypeAgentCompleted:
		if p, ok := payload[*instanceai.AgentCompleted](ev); ok {
			return s.agentCompleted(ev, p)
		}
	case instanceai.TypeConfirmRequest:
		if p, ok := payload[*instanceai.ConfirmationRequest](ev); ok {
			s.confirmationRequest(p)
		}
	case instanceai.TypeTasksUpdate:
		if p, ok := payload[*instanceai.TasksUpdate](ev); ok {
			// An inherited id gets the tasks on the function: no effect.
			if agent, _ := s.lookupAgent(ev.AgentID); agent != nil {
				tasks := p.Tasks
				agent.Tasks = &tasks
				// The reference tests planItems for truthiness: [] replaces
				// the plan, absent keeps it.
				if p.PlanItems != nil {
					agent.PlanItems = p.PlanItems
				}
			}
		}
	case instanceai.TypeSetupItems:
		if p, ok := payload[*instanceai.SetupItems](ev); ok {
			return s.setupItems(ev, p)
		}
	case instanceai.TypeStatus:
		if p, ok := payload[*instanceai.Status](ev); ok {
			if agent, _ := s.lookupAgent(ev.AgentID); agent != nil {
				agent.StatusMessage = p.Message // "" clears it
			}
		}
	case instanceai.TypeError:
		if p, ok := payload[*instanceai.ErrorPayload](ev); ok {
			return s.errorEvent(ev, p)
		}
	}
	// filesystem-request, thread-title-updated and preferences-applied leave
	// the tree alone, and so does an unknown type.
	return true
}

func payload[T interface {
	comparable
	instanceai.Payload
}](ev instanceai.Event) (T, bool) {
	p, ok := ev.Payload.(T)
	var zero T
	return p, ok && p != zero
}

func entryType(t instanceai.EventType) string {
	if t == instanceai.TypeReasoningDelta || t == instanceai.TypeReasoningBlock {
		return EntryReasoning
	}
	return EntryText
}

func (s *State) toolInputStart(ev instanceai.Event, p *instanceai.ToolInputStart) bool {
	if !isSafeObjectKey(p.ToolCallID) {
		return true
	}
	// A call already known (or an inherited name, which looks known) is not
	// announced again.
	if tc, inherited := s.lookupToolCall(p.ToolCallID); tc != nil || inherited {
		return true
	}
	// Arguments are still streaming: the call starts with {} and the
	// tool-call fills them in.
	return s.addToolCall(ev, p.ToolCallID, p.ToolName, nil)
}

func (s *State) toolCall(ev instanceai.Event, p *instanceai.ToolCall) bool {
	if !isSafeObjectKey(p.ToolCallID) {
		return true
	}
	announced, inherited := s.lookupToolCall(p.ToolCallID)
	if inherited {
		return true // the arguments land on the function
	}
	if announced != nil {
		// Announced by tool-input-start: only the arguments change; name,
		// owner and startedAt stay those of the announcement.
		announced.Args = p.Args
		return true
	}
	return s.addToolCall(ev, p.ToolCallID, p.ToolName, p.Args)
}

func (s *State) toolResult(ev instanceai.Event, p *instanceai.ToolResult) bool {
	if !isSafeObjectKey(p.ToolCallID) {
		return true
	}
	tc, inherited := s.lookupToolCall(p.ToolCallID)
	if inherited {
		_, ok := eventTimestamp(ev) // the update lands on the function
		return ok
	}
	if tc == nil {
		return true // a result for an unknown call is dropped
	}
	// The event model's nil result is null on the wire.
	tc.Result = p.Result
	if tc.Result == nil {
		tc.Result = []byte("null")
	}
	tc.IsLoading = false
	at, ok := eventTimestamp(ev)
	if !ok {
		return false
	}
	tc.CompletedAt = at
	return true
}

func (s *State) toolError(ev instanceai.Event, p *instanceai.ToolError) bool {
	if !isSafeObjectKey(p.ToolCallID) {
		return true
	}
	tc, inherited := s.lookupToolCall(p.ToolCallID)
	if inherited {
		_, ok := eventTimestamp(ev)
		return ok
	}
	if tc == nil {
		return true
	}
	msg := p.Error
	tc.Error = &msg
	tc.IsLoading = false
	at, ok := eventTimestamp(ev)
	if !ok {
		return false
	}
	tc.CompletedAt = at
	return true
}

func (s *State) agentCompleted(ev instanceai.Event, p *instanceai.AgentCompleted) bool {
	agent, inherited := s.lookupAgent(ev.AgentID)
	if inherited {
		return false // iterating the function's toolCalls throws
	}
	if agent == nil {
		return true
	}
	status := p.Status
	if status == "" {
		status = StatusCompleted
		if p.Error != "" {
			status = StatusError
		}
	}
	agent.Status = status
	result := p.Result
	agent.Result = &result
	agent.Error = p.Error // an absent error clears an earlier one
	// Only the agent's own calls settle; its children's stay as they are.
	for _, tc := range agent.ToolCalls {
		tc.IsLoading = false
	}
	return true
}

func (s *State) confirmationRequest(p *instanceai.ConfirmationRequest) {
	if !isSafeObjectKey(p.ToolCallID) {
		return
	}
	// A request for an unknown call is dropped; a second request replaces
	// the first.
	if tc, _ := s.lookupToolCall(p.ToolCallID); tc != nil {
		c := Confirmation{ConfirmationRequest: *p}
		c.ToolCallID, c.ToolName, c.Args = "", "", nil
		tc.Confirmation = &c
	}
}

func (s *State) errorEvent(ev instanceai.Event, p *instanceai.ErrorPayload) bool {
	if isKnownErrorCode(p.Code) {
		return true
	}
	text := "\n\n*Error: " + p.Content + "*"
	agent, inherited := s.lookupAgent(ev.AgentID)
	if inherited {
		return false // the function is truthy, so no fallback to the root
	}
	if agent == nil {
		// Unlike every other event, an error of an unknown agent is not
		// lost: it goes to the root.
		agent = s.AgentsByID[s.RootAgentID]
	}
	if agent != nil {
		agent.TextContent += text
		appendTimeline(agent, EntryText, text, ev.ResponseID)
	}
	return true
}

func (s *State) runStart(ev instanceai.Event) bool {
	rootID := ev.AgentID
	if !isSafeObjectKey(rootID) {
		return true
	}
	root := s.AgentsByID[s.RootAgentID]
	if len(s.AgentsByID) > 1 || nodeHasContent(root) {
		// A follow-up run: it joins the existing root, which is also indexed
		// under the new orchestrator id so the new run's events land on it.
		// The root keeps its first agentId, its result and error, and tool
		// calls of earlier runs stay indexed.
		s.Status = StatusActive
		if root != nil {
			root.Status = StatusActive
			if rootID != s.RootAgentID {
				s.AgentsByID[rootID] = root
			}
		}
		return true
	}
	s.RootAgentID = rootID
	s.AgentsByID = map[string]*AgentNode{rootID: newNode(rootID, "orchestrator")}
	s.ParentByAgentID = map[string]string{}
	s.ToolCallsByID = map[string]*ToolCallState{}
	s.Status = StatusActive
	return true
}

func (s *State) runFinish(p *instanceai.RunFinish) {
	// run-finish is not checked against the run or agent: whichever run it
	// belongs to, it sets the root's status.
	switch p.Status {
	case instanceai.RunCompleted:
		s.Status = StatusCompleted
	case instanceai.RunCancelled, instanceai.RunInterrupted:
		s.Status = StatusCancelled
	default:
		s.Status = StatusError
	}
	if root := s.AgentsByID[s.RootAgentID]; root != nil {
		root.Status = s.Status
		if s.Status == StatusCancelled {
			// Set (or cleared, for an unknown reason) on each cancellation;
			// a later completed run leaves it as it is.
			root.CancellationReason = categorizeCancellation(p.Reason)
		}
	}
	if s.Status == StatusCancelled || s.Status == StatusError {
		// Tool calls of every agent and every earlier run; a completed run
		// leaves loading calls loading.
		for _, tc := range s.ToolCallsByID {
			tc.IsLoading = false
		}
	}
}

func (s *State) delta(agentID, typ, text, responseID string) bool {
	agent, inherited := s.lookupAgent(agentID)
	if inherited {
		return false // appending to the function's timeline throws
	}
	if agent != nil {
		if typ == EntryText {
			agent.TextContent += text
		} else {
			agent.Reasoning += text
		}
		appendTimeline(agent, typ, text, responseID)
	}
	return true
}

// block folds a text-block or reasoning-block: the coalesced form of the
// deltas of one segment, seen by replay instead of (or, after a reconnect,
// as well as) the deltas.
func (s *State) block(agentID, typ, text, responseID string) bool {
	agent, inherited := s.lookupAgent(agentID)
	if inherited {
		return false
	}
	if agent == nil {
		return true
	}
	content := &agent.TextContent
	if typ == EntryReasoning {
		content = &agent.Reasoning
	}
	last := lastEntry(agent.Timeline)
	// The block closes the open segment when the last entry is that segment
	// (same type and the same responseId, which must be set) and the block
	// extends it at either end: a client that saw part of the segment live
	// sees a prefix, one that joined mid-segment a suffix.
	open := last != nil && last.Type == typ && responseID != "" && last.ResponseID == responseID &&
		(strings.HasPrefix(text, last.Content) || strings.HasSuffix(text, last.Content))
	if open && strings.HasSuffix(*content, last.Content) {
		// REPLACE: the segment's text, at the end of the agent's text, gives
		// way to the block's.
		*content = (*content)[:len(*content)-len(last.Content)] + text
		last.Content = text
		return true
	}
	// Otherwise the block appends like a delta, and still merges into a last
	// entry of the same type and responseId (an id-less block after id-less
	// deltas doubles their text).
	*content += text
	appendTimeline(agent, typ, text, responseID)
	return true
}

// addToolCall is the tool-call creation shared by tool-input-start and
// tool-call: a loading call under the event's agent, and a timeline entry.
func (s *State) addToolCall(ev instanceai.Event, id, name string, args []byte) bool {
	agent, inherited := s.lookupAgent(ev.AgentID)
	if agent == nil && !inherited {
		return true
	}
	startedAt, ok := eventTimestamp(ev)
	if !ok {
		return false
	}
	if args == nil {
		args = []byte("{}")
	}
	tc := &ToolCallState{ToolCallID: id, ToolName: name, Args: args, IsLoading: true,
		RenderHint: renderHint(name), StartedAt: startedAt}
	s.ToolCallsByID[id] = tc
	if inherited {
		// The reference indexes the call and then throws pushing it onto the
		// function's toolCalls: the id is taken but the call is in no node.
		return false
	}
	agent.ToolCalls = append(agent.ToolCalls, tc)
	agent.Timeline = append(agent.Timeline, TimelineEntry{Type: EntryToolCall, ToolCallID: id, ResponseID: ev.ResponseID})
	return true
}

func (s *State) agentSpawned(ev instanceai.Event, p *instanceai.AgentSpawned) bool {
	if !isSafeObjectKey(ev.AgentID) || !isSafeObjectKey(p.ParentID) {
		return true
	}
	existing, inherited := s.lookupAgent(ev.AgentID)
	if inherited {
		return true // the update lands on the function
	}
	if existing != nil {
		// A repeated spawn only refreshes the target resource, and only when
		// it names the same resource id (both absent counts as the same); an
		// absent name keeps the known one.
		in := p.TargetResource
		known := existing.TargetResource
		knownID := ""
		if known != nil {
			knownID = known.ID
		}
		if in != nil && in.ID == knownID {
			merged := *in
			if merged.Name == "" && known != nil {
				merged.Name = known.Name
			}
			existing.TargetResource = &merged
		}
		return true
	}
	parent, parentInherited := s.lookupAgent(p.ParentID)
	if parent == nil && !parentInherited {
		return true // unknown parent: the spawn is dropped
	}
	child := newNode(ev.AgentID, p.Role)
	child.Tools = p.Tools
	if child.Tools == nil {
		child.Tools = []string{}
	}
	child.TaskID, child.Kind, child.Title, child.Subtitle, child.Goal = p.TaskID, p.Kind, p.Title, p.Subtitle, p.Goal
	if p.TargetResource != nil {
		tr := *p.TargetResource
		child.TargetResource = &tr
	}
	s.AgentsByID[ev.AgentID] = child
	s.ParentByAgentID[ev.AgentID] = p.ParentID
	if parentInherited {
		return false // registered, then pushing onto the function's children throws
	}
	parent.Children = append(parent.Children, child)
	// The child entry belongs to the event's response, or else to the
	// response of the parent's last timeline entry.
	responseID := ev.ResponseID
	if responseID == "" {
		if last := lastEntry(parent.Timeline); last != nil {
			responseID = last.ResponseID
		}
	}
	parent.Timeline = append(parent.Timeline, TimelineEntry{Type: EntryChild, AgentID: ev.AgentID, ResponseID: responseID})
	return true
}

func (s *State) setupItems(ev instanceai.Event, p *instanceai.SetupItems) bool {
	// Setup items always belong to the root, whichever agent announced them.
	root, _ := s.lookupAgent(s.RootAgentID)
	if root == nil || !isSafeObjectKey(p.WorkflowID) {
		return true
	}
	announcer := ev.AgentID
	if a, _ := s.lookupAgent(ev.AgentID); a != nil {
		announcer = a.AgentID // a joined run's orchestrator id names the root
	}
	at, ok := eventTimestamp(ev)
	if !ok {
		return false
	}
	root.LatestSetupAnnouncement = &SetupAnnouncement{WorkflowID: p.WorkflowID, AgentID: announcer, Timestamp: at}
	// A new map, as the reference spreads the old object into a new one.
	byWorkflow := maps.Clone(root.SetupItemsByWorkflowID)
	if byWorkflow == nil {
		byWorkflow = map[string][]instanceai.SetupItem{}
	}
	items := p.Items
	if items == nil {
		items = []instanceai.SetupItem{}
	}
	byWorkflow[p.WorkflowID] = items
	root.SetupItemsByWorkflowID = byWorkflow
	return true
}

// NormalizeLegacyReasoningTimeline gives a node folded before reasoning had
// timeline entries its reasoning as a first entry
// (normalizeLegacyReasoningTimeline).
func NormalizeLegacyReasoningTimeline(n *AgentNode) {
	if n.Reasoning == "" || slices.ContainsFunc(n.Timeline, func(e TimelineEntry) bool { return e.Type == EntryReasoning }) {
		return
	}
	n.Timeline = slices.Insert(n.Timeline, 0, TimelineEntry{Type: EntryReasoning, Content: n.Reasoning})
}

// NormalizeAgentTree applies NormalizeLegacyReasoningTimeline to every node of
// a tree (normalizeAgentTree).
func NormalizeAgentTree(tree *AgentNode) {
	NormalizeLegacyReasoningTimeline(tree)
	for _, child := range tree.Children {
		if child != nil {
			NormalizeAgentTree(child)
		}
	}
}

// StateFromAgentTree rebuilds a state from a stored tree so that folding can
// continue from it (stateFromAgentTree). The state adopts the tree's nodes:
// it prunes nil and unsafe-id children, tool calls and timeline entries in
// place and normalizes legacy reasoning. It returns nil when the root's id is
// unsafe.
func StateFromAgentTree(tree *AgentNode) *State {
	if tree == nil || !isSafeObjectKey(tree.AgentID) {
		return nil
	}
	s := &State{
		RootAgentID:     tree.AgentID,
		AgentsByID:      map[string]*AgentNode{},
		ParentByAgentID: map[string]string{},
		ToolCallsByID:   map[string]*ToolCallState{},
		Status:          tree.Status,
	}
	s.adopt(tree, "")
	return s
}

func (s *State) adopt(n *AgentNode, parentID string) {
	if !isSafeObjectKey(n.AgentID) {
		return
	}
	s.AgentsByID[n.AgentID] = n
	if parentID != "" && isSafeObjectKey(parentID) {
		s.ParentByAgentID[n.AgentID] = parentID
	}
	n.Children = slices.DeleteFunc(slices.Clone(n.Children), func(c *AgentNode) bool {
		return c == nil || !isSafeObjectKey(c.AgentID)
	})
	n.ToolCalls = slices.DeleteFunc(slices.Clone(n.ToolCalls), func(tc *ToolCallState) bool {
		return tc == nil || !isSafeObjectKey(tc.ToolCallID)
	})
	n.Timeline = slices.DeleteFunc(slices.Clone(n.Timeline), func(e TimelineEntry) bool {
		switch e.Type {
		case EntryChild:
			return !isSafeObjectKey(e.AgentID)
		case EntryToolCall:
			return !isSafeObjectKey(e.ToolCallID)
		}
		return false
	})
	// The reference replaces anything that is not an array with [].
	if n.Children == nil {
		n.Children = []*AgentNode{}
	}
	if n.ToolCalls == nil {
		n.ToolCalls = []*ToolCallState{}
	}
	if n.Timeline == nil {
		n.Timeline = []TimelineEntry{}
	}
	for _, tc := range n.ToolCalls {
		s.ToolCallsByID[tc.ToolCallID] = tc
	}
	NormalizeLegacyReasoningTimeline(n)
	for _, c := range n.Children {
		s.adopt(c, n.AgentID)
	}
}
