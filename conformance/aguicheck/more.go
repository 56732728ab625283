package aguicheck

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/threadline/threadline/agui"
)

// more is the checker's bookkeeping for the rules of AG-UI 1.0 that
// @ag-ui/client's verifyEvents does not enforce: the protocol version a
// run declares, the pending tool calls a success names, the entity an
// encrypted reasoning value attaches to, and the compaction of a restated
// history.
type more struct {
	history      bool   // the stream restates a thread's history
	inputVersion string // the request's protocolVersion, when known

	// Per run.
	runs      int // RUN_STARTED events so far
	runName   string
	calls     []string        // toolCallIds started in the run, in order
	results   map[string]bool // toolCallIds the run answered
	contents  map[string]int  // TEXT_MESSAGE_CONTENT events by messageId
	args      map[string]int  // TOOL_CALL_ARGS events by toolCallId
	firstDelt *event          // the run's first STATE_DELTA

	// For the whole stream, as the client keeps them across runs.
	messages, toolCalls map[string]bool
	usedEncrypted       bool
}

func newMore() more {
	return more{messages: map[string]bool{}, toolCalls: map[string]bool{}}
}

// versionRE is what @ag-ui/client 1.0.0 can compare (its RUN_STARTED check
// reads /^\d+\.\d+$/; anything else it warns it cannot interpret).
var versionRE = regexp.MustCompile(`^\d+\.\d+$`)

// after applies the rules of more to e, once the sequence rules saw it.
func (c *checker) after(e *event) {
	t := c.t
	switch agui.EventType(e.typ) {
	case agui.TypeRunStarted:
		c.judgeCompaction(false)
		c.runs++
		c.runName = e.str("runId")
		c.calls, c.results = nil, map[string]bool{}
		c.contents, c.args, c.firstDelt = map[string]int{}, map[string]int{}, nil
		c.protocolVersion(e)
	case agui.TypeToolCallStart:
		if id := e.str("toolCallId"); !slices.Contains(c.calls, id) {
			c.calls = append(c.calls, id)
		}
	case agui.TypeToolCallResult:
		if c.results != nil {
			c.results[e.str("toolCallId")] = true
		}
	case agui.TypeTextMessageContent:
		if c.contents != nil {
			c.contents[e.str("messageId")]++
		}
	case agui.TypeToolCallArgs:
		if c.args != nil {
			c.args[e.str("toolCallId")]++
		}
	case agui.TypeStateDelta:
		if c.firstDelt == nil {
			c.firstDelt = e
		}
	case agui.TypeRunFinished:
		c.pendingCalls(e)
	case agui.TypeReasoningEncryptedValue:
		c.usedEncrypted = true
		id, sub := e.str("entityId"), e.str("subtype")
		switch sub {
		case "tool-call":
			t.Expect(ReasonEncrypted, c.toolCalls[id], "%s: no tool call %q is known at this point (started in the stream, in a MESSAGES_SNAPSHOT or in RUN_STARTED.input): the client drops the value", e, id)
		case "message":
			t.Expect(ReasonEncrypted, c.messages[id], "%s: no message %q is known at this point (started in the stream, in a MESSAGES_SNAPSHOT or in RUN_STARTED.input): the client drops the value", e, id)
		}
	}
	c.learnIDs(e)
}

// learnIDs records the messages and tool calls e makes known to a client
// that applies it (@ag-ui/client 1.0.0 defaultApplyEvents).
func (c *checker) learnIDs(e *event) {
	addMessages := func(list any) {
		msgs, _ := list.([]any)
		for _, x := range msgs {
			m, _ := x.(map[string]any)
			if id, ok := m["id"].(string); ok {
				c.messages[id] = true
			}
			calls, _ := m["toolCalls"].([]any)
			for _, y := range calls {
				tc, _ := y.(map[string]any)
				if id, ok := tc["id"].(string); ok {
					c.toolCalls[id] = true
				}
			}
		}
	}
	switch agui.EventType(e.typ) {
	case agui.TypeTextMessageStart, agui.TypeReasoningMessageStart, agui.TypeToolCallResult:
		c.messages[e.str("messageId")] = true
	case agui.TypeToolCallStart:
		c.toolCalls[e.str("toolCallId")] = true
		// The call's assistant message: its parent, else one named after it.
		if p := e.str("parentMessageId"); p != "" {
			c.messages[p] = true
		} else {
			c.messages[e.str("toolCallId")] = true
		}
	case agui.TypeMessagesSnapshot:
		addMessages(e.m["messages"])
	case agui.TypeRunStarted:
		if in, ok := e.m["input"].(map[string]any); ok {
			addMessages(in["messages"])
		}
	}
}

// protocolVersion judges RUN_STARTED's protocolVersion: when present, a
// major.minor version the client can compare; when the run's input declared
// one, present (each side declares its own version: a producer that stays
// silent to a consumer that declared one reads as one from before versions).
func (c *checker) protocolVersion(e *event) {
	t := c.t
	declared := c.inputVersion
	if in, ok := e.m["input"].(map[string]any); ok {
		if v, ok := in["protocolVersion"].(string); ok && declared == "" {
			declared = v
		}
	}
	v, present := e.m["protocolVersion"]
	switch s, isStr := v.(string); {
	case present && !isStr:
		return // a null or a non-string: the no-null and required-fields rules' business
	case present:
		t.Expect(RunProtocolVersion, versionRE.MatchString(s),
			"%s: protocolVersion %q is not a major.minor version such as %q (the client cannot interpret it)", e, s, agui.ProtocolVersion)
	case declared != "":
		t.Fail(RunProtocolVersion, "%s declares no protocolVersion; the run's input declared %q", e, declared)
	}
}

// pendingCalls judges a success outcome's pendingToolCallIds: absent or
// empty names none (the client derives the list); otherwise it is the list
// of the run's tool calls that got no TOOL_CALL_RESULT in the run, in the
// order they started.
func (c *checker) pendingCalls(e *event) {
	out, _ := e.m["outcome"].(map[string]any)
	if out == nil || out["type"] != "success" {
		return
	}
	list, ok := out["pendingToolCallIds"].([]any)
	if !ok || len(list) == 0 {
		return
	}
	var got []string
	for _, x := range list {
		s, _ := x.(string)
		got = append(got, s)
	}
	var want []string
	for _, id := range c.calls {
		if !c.results[id] {
			want = append(want, id)
		}
	}
	c.t.Expect(RunPendingCalls, slices.Equal(got, want),
		"%s: pendingToolCallIds %q, but the run's tool calls left without a TOOL_CALL_RESULT are %q", e, got, want)
}

// judgeCompaction judges the run that just ended in a history stream: a
// run before the stream's last restates what happened, compacted.
func (c *checker) judgeCompaction(last bool) {
	if !c.history || c.runs == 0 || last {
		return
	}
	var bad []string
	for _, id := range sortedCounts(c.contents) {
		bad = append(bad, fmt.Sprintf("message %q in %d TEXT_MESSAGE_CONTENT events", id, c.contents[id]))
	}
	for _, id := range sortedCounts(c.args) {
		bad = append(bad, fmt.Sprintf("tool call %q in %d TOOL_CALL_ARGS events", id, c.args[id]))
	}
	if c.firstDelt != nil {
		bad = append(bad, fmt.Sprintf("its state as STATE_DELTA (%s) instead of one STATE_SNAPSHOT", c.firstDelt))
	}
	c.t.Expect(ReplayCompacted, len(bad) == 0, "restated run %q (not the stream's last) carries %s", c.runName, strings.Join(bad, "; "))
}

// sortedCounts are the keys whose count is above one, sorted.
func sortedCounts(m map[string]int) []string {
	var out []string
	for k, n := range m {
		if n > 1 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func (c *checker) finishMore() {
	t := c.t
	c.judgeCompaction(true)
	switch {
	case !c.history:
		t.Skip(ReplayCompacted, "not a stream that restates history")
	case c.runs < 2:
		t.Skip(ReplayCompacted, "a history stream of %d run(s): nothing before its last run", c.runs)
	}
	t.Skip(RunProtocolVersion, "neither RUN_STARTED nor the run's input declares a protocolVersion")
	t.Skip(RunPendingCalls, "no success outcome names pendingToolCallIds")
	if c.usedEncrypted {
		t.Skip(ReasonEncrypted, "no REASONING_ENCRYPTED_VALUE of a known subtype")
	} else {
		t.Skip(ReasonEncrypted, "no REASONING_ENCRYPTED_VALUE in this stream")
	}
}
