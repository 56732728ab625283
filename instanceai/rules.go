package instanceai

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// The rules every producer's events keep, checked at the run's one door
// (Run.Emit) before the writer sees them: what n8n's agent-run reducer, the
// AG-UI mapping and session restore assume of a run's log. An event that
// breaks one would be stored and then dropped or misplaced by every
// client's fold, or keep an AG-UI stream from ever ending.
const (
	// RuleWriterOnly: blocks are the writer's, made from the deltas.
	RuleWriterOnly = "writer_only"
	// RuleRegistryOnly: the run's start and finish are the registry's.
	RuleRegistryOnly = "registry_only"
	// RuleUnknownAgent: an event's agent is the run's orchestrator or an
	// agent spawned in the run.
	RuleUnknownAgent = "unknown_agent"
	// RuleAgentCompleted: an agent that completed says nothing more.
	RuleAgentCompleted = "agent_completed"
	// RuleUnknownParent: a spawned agent's parent is a working agent of the
	// same run.
	RuleUnknownParent = "unknown_parent"
	// RuleAgentSpawned: an agent is spawned once (a repeat with the same
	// parent only refreshes it, as the reducer does), never as the
	// orchestrator.
	RuleAgentSpawned = "agent_spawned"
	// RuleUnknownToolCall: a tool's result or error answers a call of the
	// run that is still open.
	RuleUnknownToolCall = "unknown_tool_call"
	// RuleTooMany: a run holds at most maxRunAgents agents and
	// maxOpenToolCalls open calls, so its bookkeeping stays bounded.
	RuleTooMany = "too_many"
)

// CodeRuleBroken is the error code of an event refused for a rule: the
// run's error event when an agent emitted it, the publish API's answer.
const CodeRuleBroken = "rule_broken"

// Bounds of one run's bookkeeping: far past what agents do (n8n's
// orchestrator spawns a handful of sub-agents), small enough that a
// producer cannot grow an instance's memory through them.
const (
	maxRunAgents     = 4096
	maxOpenToolCalls = 4096
)

// RuleError is an event refused at the door for breaking one of the log's
// rules: nothing of it was queued.
type RuleError struct {
	// Rule is one of the Rule* names.
	Rule string
	// Type is the refused event's type.
	Type EventType
	// Field names the event's field at fault (agentId, payload.parentId,
	// payload.toolCallId, type).
	Field  string
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("%s event refused (%s): %s: %s", e.Type, e.Rule, e.Field, e.Reason)
}

// agentState is what the run knows of one of its agents.
type agentState struct {
	parent, role string
	// order is its place among the run's spawns.
	order int
	// completed is set by the agent's agent-completed.
	completed bool
	// background marks an agent started by Run.Spawn: it outlives the
	// orchestrator's finish and completes itself.
	background bool
}

// liveCall is a tool call of the run without its outcome yet.
type liveCall struct {
	id, agentID, name string
	since             time.Time // zero for calls restored after a restart
}

// runRules holds what a run's door checks events against: its agents and
// its open tool calls. Its methods are called with the run's lock held.
type runRules struct {
	orchestrator string
	agents       map[string]*agentState
	// calls are the open tool calls in the order they opened.
	calls []liveCall
	// lenient is set for a run resumed after a restart whose log could
	// not be read: its agents and calls are unknown, so only the rules
	// that need no history are checked.
	lenient bool
}

func newRunRules(orchestrator string) *runRules {
	return &runRules{orchestrator: orchestrator, agents: map[string]*agentState{}}
}

// working reports whether id names an agent of the run that has not
// completed: the orchestrator or a spawned one.
func (k *runRules) working(id string) bool {
	if id == k.orchestrator {
		return true
	}
	a := k.agents[id]
	return a != nil && !a.completed
}

// check reports the rule ev breaks, or nil. It changes nothing.
func (k *runRules) check(ev *Event) error {
	refuse := func(rule, field, format string, args ...any) error {
		return &RuleError{Rule: rule, Type: ev.Type, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch ev.Type {
	case TypeTextBlock, TypeReasoningBlock:
		return refuse(RuleWriterOnly, "type", "blocks are written by Threadline from the run's deltas; send %s events instead",
			deltaOf(ev.Type))
	case TypeRunStart, TypeRunFinish:
		return refuse(RuleRegistryOnly, "type", "the run's start and finish are Threadline's")
	}
	if k.lenient {
		return nil
	}
	if ev.Type == TypeAgentSpawned {
		return k.checkSpawn(ev, refuse)
	}
	if ev.AgentID != k.orchestrator {
		a := k.agents[ev.AgentID]
		switch {
		case a == nil:
			return refuse(RuleUnknownAgent, "agentId", "%q is neither the run's orchestrator (%s) nor an agent spawned in the run",
				ev.AgentID, k.orchestrator)
		case a.completed:
			return refuse(RuleAgentCompleted, "agentId", "agent %q has completed", ev.AgentID)
		}
	} else if ev.Type == TypeAgentCompleted {
		return refuse(RuleAgentCompleted, "agentId", "the orchestrator completes with the run's finish, not with agent-completed")
	}
	switch p := ev.Payload.(type) {
	case *ToolResult:
		return k.checkOutcome(p.ToolCallID, refuse)
	case *ToolError:
		return k.checkOutcome(p.ToolCallID, refuse)
	case *ToolInputStart:
		return k.checkOpen(p.ToolCallID, refuse)
	case *ToolCall:
		return k.checkOpen(p.ToolCallID, refuse)
	}
	return nil
}

type refuser func(rule, field, format string, args ...any) error

func (k *runRules) checkSpawn(ev *Event, refuse refuser) error {
	p, _ := ev.Payload.(*AgentSpawned)
	if p == nil {
		return nil
	}
	if ev.AgentID == k.orchestrator {
		return refuse(RuleAgentSpawned, "agentId", "%q is the run's orchestrator", ev.AgentID)
	}
	parent := p.ParentID
	if parent == "" {
		parent = k.orchestrator
	}
	if a := k.agents[ev.AgentID]; a != nil {
		switch {
		case a.completed:
			return refuse(RuleAgentCompleted, "agentId", "agent %q has completed", ev.AgentID)
		case a.parent != parent:
			return refuse(RuleAgentSpawned, "payload.parentId", "agent %q was spawned under %q, not %q", ev.AgentID, a.parent, parent)
		}
		return nil // a repeat refreshes the agent's target resource
	}
	if !k.working(parent) {
		return refuse(RuleUnknownParent, "payload.parentId", "%q is no working agent of this run", parent)
	}
	if len(k.agents) >= maxRunAgents {
		return refuse(RuleTooMany, "agentId", "a run spawns at most %d agents", maxRunAgents)
	}
	return nil
}

func (k *runRules) checkOutcome(callID string, refuse refuser) error {
	if k.call(callID) < 0 {
		return refuse(RuleUnknownToolCall, "payload.toolCallId", "%q is no open tool call of this run", callID)
	}
	return nil
}

func (k *runRules) checkOpen(callID string, refuse refuser) error {
	if k.call(callID) < 0 && len(k.calls) >= maxOpenToolCalls {
		return refuse(RuleTooMany, "payload.toolCallId", "a run holds at most %d open tool calls", maxOpenToolCalls)
	}
	return nil
}

// call is the index of the open call id, or -1.
func (k *runRules) call(id string) int {
	return slices.IndexFunc(k.calls, func(c liveCall) bool { return c.id == id })
}

// apply records what an event the door let through changes: agents
// spawned and completed, calls opened and answered. It returns the call
// an outcome closed (ok false when it closed none).
func (k *runRules) apply(ev *Event, background bool) (closed liveCall, ok bool) {
	switch p := ev.Payload.(type) {
	case *AgentSpawned:
		if k.agents[ev.AgentID] == nil {
			parent := p.ParentID
			if parent == "" {
				parent = k.orchestrator
			}
			k.agents[ev.AgentID] = &agentState{parent: parent, role: p.Role, order: len(k.agents), background: background}
		}
	case *AgentCompleted:
		if a := k.agents[ev.AgentID]; a != nil {
			a.completed = true
		}
	case *ToolInputStart:
		k.open(p.ToolCallID, ev.AgentID, p.ToolName, time.Now())
	case *ToolCall:
		k.open(p.ToolCallID, ev.AgentID, p.ToolName, time.Now())
	case *ToolResult:
		return k.close(p.ToolCallID)
	case *ToolError:
		return k.close(p.ToolCallID)
	}
	return liveCall{}, false
}

func (k *runRules) open(id, agentID, name string, since time.Time) {
	if k.call(id) < 0 {
		k.calls = append(k.calls, liveCall{id: id, agentID: agentID, name: name, since: since})
	}
}

func (k *runRules) close(id string) (liveCall, bool) {
	i := k.call(id)
	if i < 0 {
		return liveCall{}, false
	}
	c := k.calls[i]
	k.calls = slices.Delete(k.calls, i, i+1)
	return c, true
}

// unfinished lists, for the run's finish, the agents it must complete:
// every spawned agent still working but the background ones (which
// complete themselves) and what they spawned, children before parents.
func (k *runRules) unfinished() []string {
	var out []string
	var visit func(id string)
	seen := map[string]bool{}
	visit = func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		for child, a := range k.agents {
			if a.parent == id && !a.completed && !a.background {
				visit(child)
			}
		}
		if id != k.orchestrator {
			out = append(out, id)
		}
	}
	visit(k.orchestrator)
	return childrenFirst(out, k.agents)
}

// spawnedWorking lists every spawned agent that has not completed,
// children first: what a settlement of the run from its log completes,
// whatever the log holds (one written before the door checked parents
// may hold an agent whose parent is no agent of the run).
func (k *runRules) spawnedWorking() []string {
	var out []string
	for id, a := range k.agents {
		if !a.completed {
			out = append(out, id)
		}
	}
	return childrenFirst(out, k.agents)
}

// descendants lists the working agents below id, children before
// parents.
func (k *runRules) descendants(id string) []string {
	var out []string
	var visit func(p string)
	visit = func(p string) {
		for child, a := range k.agents {
			if a.parent == p && !a.completed {
				visit(child)
				out = append(out, child)
			}
		}
	}
	visit(id)
	return childrenFirst(out, k.agents)
}

// childrenFirst orders agent ids by depth, deepest first, then in the
// order they were spawned: every child before its parent, in an order
// that does not depend on map iteration.
func childrenFirst(ids []string, agents map[string]*agentState) []string {
	depth := func(id string) int {
		d := 0
		for a := agents[id]; a != nil && d <= len(agents); a = agents[a.parent] {
			d++
		}
		return d
	}
	slices.SortFunc(ids, func(a, b string) int {
		if da, db := depth(a), depth(b); da != db {
			return db - da
		}
		return agents[a].order - agents[b].order
	})
	return ids
}

// restore rebuilds the rules from a run's events in the log, for a run
// that goes on in a new process.
func (k *runRules) restore(events []StoredEvent) {
	for i := range events {
		ev := &events[i].Event
		switch ev.Type {
		case TypeAgentSpawned, TypeAgentCompleted, TypeToolInputStart, TypeToolCall, TypeToolResult, TypeToolError, TypeToolInterrupted:
			k.apply(ev, false)
		}
	}
	// Restored calls have no start time of this process's.
	for i := range k.calls {
		k.calls[i].since = time.Time{}
	}
}

func deltaOf(block EventType) EventType {
	if block == TypeReasoningBlock {
		return TypeReasoningDelta
	}
	return TypeTextDelta
}

// cancelledResult is the result an open tool call of a cancelled run or
// agent gets.
var cancelledResult, _ = json.Marshal(map[string]string{
	"status": "cancelled", "message": "The run was cancelled before this tool finished.",
})
