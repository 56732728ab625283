// Package aguiverify checks AG-UI event sequences against the rules that
// @ag-ui/client@1.0.0's verifyEvents enforces, and tracks the shared state
// that STATE_SNAPSHOT and STATE_DELTA build.
package aguiverify

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/threadline/threadline/agui"
)

type owner struct{ sub string }

// Verifier checks one stream, event by event.
type Verifier struct {
	seenFirst, runActive, finished, errored bool

	text, tools, reasoningSpans, reasoningMsgs map[string]bool
	steps                                      map[string]map[string]bool // by subagentRunId
	activeSubs, doneSubs                       map[string]bool
	msgOwner, toolOwner, reasoningOwner        map[string]owner

	state any
}

// New returns a verifier for a fresh stream.
func New() *Verifier {
	v := &Verifier{}
	v.reset()
	return v
}

func (v *Verifier) reset() {
	v.text, v.tools = map[string]bool{}, map[string]bool{}
	v.reasoningSpans, v.reasoningMsgs = map[string]bool{}, map[string]bool{}
	v.steps = map[string]map[string]bool{}
	v.activeSubs, v.doneSubs = map[string]bool{}, map[string]bool{}
	v.msgOwner, v.toolOwner, v.reasoningOwner = map[string]owner{}, map[string]owner{}, map[string]owner{}
	v.finished, v.errored = false, false
}

func subOf(e agui.Event) string {
	b, _ := json.Marshal(e)
	var s struct {
		SubagentRunID *string `json:"subagentRunId"`
	}
	_ = json.Unmarshal(b, &s)
	if s.SubagentRunID == nil {
		return ""
	}
	return *s.SubagentRunID
}

func checkOwner(kind, id string, owners map[string]owner, sub string) error {
	if o, ok := owners[id]; ok && sub != "" && o.sub != sub {
		return fmt.Errorf("%s %q: subagentRunId %q does not match its opener's %q", kind, id, sub, o.sub)
	}
	return nil
}

// State returns the shared state built so far (nil before any snapshot).
func (v *Verifier) State() any { return v.state }

// Check verifies one event.
func (v *Verifier) Check(e agui.Event) error {
	t := e.Type()
	if v.errored && t != agui.TypeRunStarted {
		return fmt.Errorf("%s after RUN_ERROR", t)
	}
	if v.finished && t != agui.TypeRunError && t != agui.TypeRunStarted {
		return fmt.Errorf("%s after RUN_FINISHED", t)
	}
	if !v.seenFirst {
		v.seenFirst = true
		if t != agui.TypeRunStarted && t != agui.TypeRunError {
			return fmt.Errorf("first event is %s, not RUN_STARTED", t)
		}
	} else if t == agui.TypeRunStarted {
		if v.runActive && !v.finished && !v.errored {
			return fmt.Errorf("RUN_STARTED while a run is active")
		}
		if v.finished || v.errored {
			v.reset()
		}
	}
	if ts := e.Common().Timestamp; ts < 0 {
		return fmt.Errorf("%s: negative timestamp", t)
	}
	sub := subOf(e)
	switch e := e.(type) {
	case *agui.RunStarted:
		v.runActive = true
		if e.ThreadID == "" || e.RunID == "" {
			return fmt.Errorf("RUN_STARTED without threadId or runId")
		}
	case *agui.TextMessageStart:
		if v.text[e.MessageID] {
			return fmt.Errorf("TEXT_MESSAGE_START: %q already in progress", e.MessageID)
		}
		if err := checkOwner("message", e.MessageID, v.msgOwner, sub); err != nil {
			return err
		}
		v.text[e.MessageID] = true
		if _, ok := v.msgOwner[e.MessageID]; !ok {
			v.msgOwner[e.MessageID] = owner{sub}
		}
	case *agui.TextMessageContent:
		if !v.text[e.MessageID] {
			return fmt.Errorf("TEXT_MESSAGE_CONTENT: no active text message %q", e.MessageID)
		}
		return checkOwner("message", e.MessageID, v.msgOwner, sub)
	case *agui.TextMessageEnd:
		if !v.text[e.MessageID] {
			return fmt.Errorf("TEXT_MESSAGE_END: no active text message %q", e.MessageID)
		}
		if err := checkOwner("message", e.MessageID, v.msgOwner, sub); err != nil {
			return err
		}
		delete(v.text, e.MessageID)
	case *agui.ToolCallStart:
		if v.tools[e.ToolCallID] {
			return fmt.Errorf("TOOL_CALL_START: %q already in progress", e.ToolCallID)
		}
		if e.ParentMessageID != "" {
			if o, ok := v.msgOwner[e.ParentMessageID]; ok && sub != "" && o.sub != sub {
				return fmt.Errorf("TOOL_CALL_START %q: subagent %q differs from parent message owner %q", e.ToolCallID, sub, o.sub)
			}
		}
		if err := checkOwner("tool call", e.ToolCallID, v.toolOwner, sub); err != nil {
			return err
		}
		v.tools[e.ToolCallID] = true
		if _, ok := v.toolOwner[e.ToolCallID]; !ok {
			v.toolOwner[e.ToolCallID] = owner{sub}
		}
	case *agui.ToolCallArgs:
		if !v.tools[e.ToolCallID] {
			return fmt.Errorf("TOOL_CALL_ARGS: no active tool call %q", e.ToolCallID)
		}
		return checkOwner("tool call", e.ToolCallID, v.toolOwner, sub)
	case *agui.ToolCallEnd:
		if !v.tools[e.ToolCallID] {
			return fmt.Errorf("TOOL_CALL_END: no active tool call %q", e.ToolCallID)
		}
		if err := checkOwner("tool call", e.ToolCallID, v.toolOwner, sub); err != nil {
			return err
		}
		delete(v.tools, e.ToolCallID)
	case *agui.ToolCallResult:
		v.msgOwner[e.MessageID] = owner{sub}
	case *agui.StepStarted:
		if v.steps[sub] == nil {
			v.steps[sub] = map[string]bool{}
		}
		if v.steps[sub][e.StepName] {
			return fmt.Errorf("STEP_STARTED: step %q already active", e.StepName)
		}
		v.steps[sub][e.StepName] = true
	case *agui.StepFinished:
		if !v.steps[sub][e.StepName] {
			return fmt.Errorf("STEP_FINISHED: step %q not started", e.StepName)
		}
		delete(v.steps[sub], e.StepName)
	case *agui.ReasoningStart:
		return v.openReasoning("REASONING_START", v.reasoningSpans, e.MessageID, sub)
	case *agui.ReasoningMessageStart:
		return v.openReasoning("REASONING_MESSAGE_START", v.reasoningMsgs, e.MessageID, sub)
	case *agui.ReasoningMessageContent:
		return v.useReasoning("REASONING_MESSAGE_CONTENT", v.reasoningMsgs, e.MessageID, sub, false)
	case *agui.ReasoningMessageEnd:
		return v.useReasoning("REASONING_MESSAGE_END", v.reasoningMsgs, e.MessageID, sub, true)
	case *agui.ReasoningEnd:
		return v.useReasoning("REASONING_END", v.reasoningSpans, e.MessageID, sub, true)
	case *agui.SubagentStarted:
		if e.SubagentRunID == "" {
			return fmt.Errorf("SUBAGENT_STARTED without subagentRunId")
		}
		if v.activeSubs[e.SubagentRunID] {
			return fmt.Errorf("SUBAGENT_STARTED: %q already active", e.SubagentRunID)
		}
		if v.doneSubs[e.SubagentRunID] {
			return fmt.Errorf("SUBAGENT_STARTED: %q already finished in this run", e.SubagentRunID)
		}
		if p := e.ParentSubagentRunID; p != "" && !v.activeSubs[p] && !v.doneSubs[p] {
			return fmt.Errorf("SUBAGENT_STARTED: parent %q not started", p)
		}
		v.activeSubs[e.SubagentRunID] = true
	case *agui.SubagentFinished:
		if e.Outcome != nil && e.Outcome.Type != agui.SubagentSuccess && e.Outcome.Type != agui.SubagentSuspended {
			return fmt.Errorf("SUBAGENT_FINISHED: outcome %q", e.Outcome.Type)
		}
		return v.endSub("SUBAGENT_FINISHED", e.SubagentRunID)
	case *agui.SubagentError:
		return v.endSub("SUBAGENT_ERROR", e.SubagentRunID)
	case *agui.StateSnapshot:
		var s any
		if err := json.Unmarshal(e.Snapshot, &s); err != nil {
			return fmt.Errorf("STATE_SNAPSHOT: %w", err)
		}
		v.state = s
	case *agui.StateDelta:
		for _, op := range e.Delta {
			ns, err := Apply(v.state, op)
			if err != nil {
				return fmt.Errorf("STATE_DELTA: %w", err)
			}
			v.state = ns
		}
	case *agui.RunFinished:
		if err := v.openItems(); err != nil {
			return fmt.Errorf("RUN_FINISHED while %w", err)
		}
		if o := e.Outcome; o != nil {
			switch o.Type {
			case agui.OutcomeSuccess, agui.OutcomeCancelled:
			case agui.OutcomeInterrupt:
				if len(o.Interrupts) == 0 {
					return fmt.Errorf("RUN_FINISHED: interrupt outcome without interrupts")
				}
				for _, in := range o.Interrupts {
					if in.ID == "" || in.Reason == "" {
						return fmt.Errorf("RUN_FINISHED: interrupt without id or reason")
					}
				}
			default:
				return fmt.Errorf("RUN_FINISHED: outcome %q", o.Type)
			}
		}
		v.finished = true
	case *agui.RunError:
		v.errored = true
	}
	return nil
}

func (v *Verifier) openReasoning(name string, set map[string]bool, id, sub string) error {
	if set[id] {
		return fmt.Errorf("%s: %q already in progress", name, id)
	}
	if err := checkOwner("reasoning message", id, v.reasoningOwner, sub); err != nil {
		return err
	}
	set[id] = true
	if _, ok := v.reasoningOwner[id]; !ok {
		v.reasoningOwner[id] = owner{sub}
	}
	return nil
}

func (v *Verifier) useReasoning(name string, set map[string]bool, id, sub string, end bool) error {
	if !set[id] {
		return fmt.Errorf("%s: %q is not active", name, id)
	}
	if err := checkOwner("reasoning message", id, v.reasoningOwner, sub); err != nil {
		return err
	}
	if end {
		delete(set, id)
	}
	return nil
}

func (v *Verifier) endSub(name, id string) error {
	if id == "" {
		return fmt.Errorf("%s without subagentRunId", name)
	}
	if !v.activeSubs[id] {
		return fmt.Errorf("%s: no active subagent %q", name, id)
	}
	delete(v.activeSubs, id)
	v.doneSubs[id] = true
	return nil
}

func (v *Verifier) openItems() error {
	for sub, steps := range v.steps {
		if len(steps) > 0 {
			return fmt.Errorf("steps are active (subagent %q)", sub)
		}
	}
	for what, set := range map[string]map[string]bool{"text messages": v.text, "reasoning messages": v.reasoningMsgs,
		"reasoning spans": v.reasoningSpans, "tool calls": v.tools, "subagents": v.activeSubs} {
		if len(set) > 0 {
			return fmt.Errorf("%s are active: %v", what, keys(set))
		}
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Stream verifies a whole stream and that it ends with exactly one terminal
// event per run (RUN_FINISHED or RUN_ERROR) as its last event.
func Stream(events []agui.Event) error {
	v := New()
	for i, e := range events {
		if err := v.Check(e); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	if len(events) == 0 {
		return fmt.Errorf("empty stream")
	}
	if !IsTerminal(events[len(events)-1]) {
		return fmt.Errorf("stream ends with %s, not a terminal event", events[len(events)-1].Type())
	}
	return nil
}

// IsTerminal reports whether e ends a run.
func IsTerminal(e agui.Event) bool {
	t := e.Type()
	return t == agui.TypeRunFinished || t == agui.TypeRunError
}

// Apply applies one add, remove or replace JSON Patch operation to doc (a
// value decoded by encoding/json) and returns the new document.
func Apply(doc any, op agui.PatchOp) (any, error) {
	if op.Path == "" {
		if op.Op == "remove" {
			return nil, nil
		}
		var v any
		err := json.Unmarshal(op.Value, &v)
		return v, err
	}
	if !strings.HasPrefix(op.Path, "/") {
		return nil, fmt.Errorf("path %q", op.Path)
	}
	parts := strings.Split(op.Path[1:], "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	var val any
	if op.Op != "remove" {
		if err := json.Unmarshal(op.Value, &val); err != nil {
			return nil, fmt.Errorf("%s %s: value: %w", op.Op, op.Path, err)
		}
	}
	return apply(doc, parts, op.Op, val)
}

func apply(doc any, parts []string, op string, val any) (any, error) {
	key := parts[0]
	last := len(parts) == 1
	switch d := doc.(type) {
	case map[string]any:
		if last {
			_, exists := d[key]
			switch op {
			case "add":
				d[key] = val
			case "replace":
				if !exists {
					return nil, fmt.Errorf("replace: no member %q", key)
				}
				d[key] = val
			case "remove":
				if !exists {
					return nil, fmt.Errorf("remove: no member %q", key)
				}
				delete(d, key)
			default:
				return nil, fmt.Errorf("unsupported op %q", op)
			}
			return d, nil
		}
		child, ok := d[key]
		if !ok {
			return nil, fmt.Errorf("no member %q", key)
		}
		nc, err := apply(child, parts[1:], op, val)
		if err != nil {
			return nil, err
		}
		d[key] = nc
		return d, nil
	case []any:
		idx := len(d)
		if key != "-" {
			n, err := strconv.Atoi(key)
			if err != nil || n < 0 || n > len(d) {
				return nil, fmt.Errorf("index %q out of range (len %d)", key, len(d))
			}
			idx = n
		} else if !(last && op == "add") {
			return nil, fmt.Errorf("'-' only appends")
		}
		if last {
			switch op {
			case "add":
				d = append(d, nil)
				copy(d[idx+1:], d[idx:])
				d[idx] = val
			case "replace", "remove":
				if idx >= len(d) {
					return nil, fmt.Errorf("%s: index %d out of range", op, idx)
				}
				if op == "replace" {
					d[idx] = val
				} else {
					d = append(d[:idx], d[idx+1:]...)
				}
			default:
				return nil, fmt.Errorf("unsupported op %q", op)
			}
			return d, nil
		}
		if idx >= len(d) {
			return nil, fmt.Errorf("index %d out of range", idx)
		}
		nc, err := apply(d[idx], parts[1:], op, val)
		if err != nil {
			return nil, err
		}
		d[idx] = nc
		return d, nil
	}
	return nil, fmt.Errorf("cannot descend into %T at %q", doc, key)
}
