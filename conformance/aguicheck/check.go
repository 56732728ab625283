package aguicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"regexp"
	"sort"
	"strings"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/conformance"
)

// Check judges one /run-agent response: one finding per rule of Rules.
func Check(rec *conformance.Recording) []conformance.Finding {
	return CheckWith(rec, Options{})
}

// CheckContinuation judges a response that continues earlier ones of the
// same thread (a resume answering an interrupt): a TOOL_CALL_RESULT may
// name a call that an earlier response announced.
func CheckContinuation(rec *conformance.Recording, earlier ...*conformance.Recording) []conformance.Finding {
	return CheckWith(rec, Options{Earlier: earlier})
}

// Options tell the checker what it cannot read from the stream itself.
type Options struct {
	// Input is the RunAgentInput the stream answers, when known (its
	// protocolVersion is what the producer is asked to match).
	Input map[string]any
	// Earlier are responses of the same thread that this one continues.
	Earlier []*conformance.Recording
	// History marks a stream that restates a thread's history (a rejoin,
	// a connect): its runs before the last must come compacted.
	History bool
}

// CheckWith judges one response with what opts say about it.
func CheckWith(rec *conformance.Recording, opts Options) []conformance.Finding {
	t := conformance.NewTally(Rules)
	checkHTTP(t, rec)
	c := newChecker(t)
	c.history = opts.History
	if v, ok := opts.Input["protocolVersion"].(string); ok {
		c.inputVersion = v
	}
	for _, prev := range opts.Earlier {
		for _, f := range prev.Data() {
			m, err := decodeObject(f.Data)
			if err != nil {
				continue
			}
			if m["type"] == string(agui.TypeToolCallStart) {
				if id, ok := m["toolCallId"].(string); ok {
					c.announced[id] = true
				}
			}
			c.learnIDs(&event{typ: fmt.Sprint(m["type"]), m: m})
		}
	}
	n := 0
	for _, f := range rec.Data() {
		// Named frames are allowed: HttpAgent reads only the data lines
		// (PROTOCOLS.md §2), so an event name changes nothing for it.
		if f.Data == "" {
			// A frame without data dispatches nothing, in HttpAgent as in
			// EventSource: there is no event to judge.
			continue
		}
		c.frame(n, f.Data)
		n++
	}
	c.finish(n)
	return t.Findings()
}

func checkHTTP(t *conformance.Tally, rec *conformance.Recording) {
	ct := rec.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		t.Fail(HTTPContentType, "no Content-Type header")
	case err != nil || mt != "text/event-stream":
		t.Fail(HTTPContentType, "Content-Type is %q, not text/event-stream", ct)
	default:
		t.Pass(HTTPContentType)
	}
}

// event is one decoded data frame.
type event struct {
	idx int
	typ string
	m   map[string]any
}

func (e *event) str(key string) string {
	s, _ := e.m[key].(string)
	return s
}

func (e *event) String() string { return fmt.Sprintf("event %d (%s)", e.idx, e.typ) }

// checker follows one stream. Its bookkeeping mirrors @ag-ui/client's
// verifyEvents, but every check names its own rule instead of stopping the
// stream at the first error, so one bad event fails exactly the rule it
// breaks and the rest of the stream is still judged.
type checker struct {
	t *conformance.Tally

	seenFirst bool
	runActive bool // some RUN_STARTED was seen
	finished  bool // the current run sent RUN_FINISHED
	errored   bool // the current run sent RUN_ERROR
	sawError  bool
	sawFinish bool
	threadID  string
	runID     string
	haveIDs   bool

	text, tools, spans, reasonMsgs map[string]bool
	steps                          map[string]map[string]bool // by subagentRunId ("" = parent)
	activeSubs, doneSubs           map[string]bool
	msgOwner, toolOwner, rOwner    map[string]string
	// Whether each kind was ever opened, so the closed-before-finish rules
	// pass only when they were exercised.
	usedText, usedTools, usedReason, usedSteps, usedSubs bool

	announced map[string]bool // toolCallIds of every TOOL_CALL_START so far

	state      any
	stateKnown bool
	stateWhy   string

	last *event // the last data frame, nil if it was not a JSON object

	more
}

func newChecker(t *conformance.Tally) *checker {
	c := &checker{t: t, announced: map[string]bool{},
		stateWhy: "no STATE_DELTA in this stream"}
	c.more = newMore()
	c.reset()
	return c
}

// reset forgets the open items of a finished run, as the client does when a
// new RUN_STARTED follows RUN_FINISHED or RUN_ERROR.
func (c *checker) reset() {
	c.text, c.tools, c.spans, c.reasonMsgs = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	c.steps = map[string]map[string]bool{}
	c.activeSubs, c.doneSubs = map[string]bool{}, map[string]bool{}
	c.msgOwner, c.toolOwner, c.rOwner = map[string]string{}, map[string]string{}, map[string]string{}
	c.finished, c.errored = false, false
}

// decodeObject decodes data as exactly one JSON object, numbers kept as
// written so integer checks see the literal.
func decodeObject(data string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a JSON %s, not an object", jsonKind(v))
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return m, nil
}

func (c *checker) frame(idx int, data string) {
	c.last = nil
	m, err := decodeObject(data)
	if err != nil {
		c.t.Fail(EventJSONObject, "event %d: data is %v: %.80q", idx, err, data)
		return
	}
	c.t.Pass(EventJSONObject)
	typ, ok := m["type"].(string)
	e := &event{idx: idx, typ: typ, m: m}
	c.last = e
	if !ok {
		c.t.Fail(EventKnownType, "event %d: type is %s, not a string", idx, describe(m["type"]))
		return
	}
	if agui.New(agui.EventType(typ)) == nil {
		c.t.Fail(EventKnownType, "event %d: unknown type %q", idx, typ)
		return
	}
	c.t.Pass(EventKnownType)
	c.shape(e)
	c.sequence(e)
	c.after(e)
}

func (c *checker) finish(n int) {
	t := c.t
	if n == 0 {
		t.Fail(RunEndsTerminal, "the stream has no events")
		t.Skip(RunFirst, "no events")
	} else if c.last == nil {
		t.Fail(RunEndsTerminal, "the last data frame (event %d) is not a JSON object", n-1)
	} else if c.last.typ != string(agui.TypeRunFinished) && c.last.typ != string(agui.TypeRunError) {
		t.Fail(RunEndsTerminal, "the stream ends with %s, not RUN_FINISHED or RUN_ERROR", c.last)
	} else {
		t.Pass(RunEndsTerminal)
	}
	if c.sawError {
		t.Pass(RunAfterError)
	} else {
		t.Skip(RunAfterError, "no RUN_ERROR in this stream")
	}
	if c.sawFinish {
		t.Pass(RunAfterFinished)
	} else {
		t.Skip(RunAfterFinished, "no RUN_FINISHED in this stream")
	}
	for _, s := range []struct {
		used  bool
		rules []string
		what  string
	}{
		{c.usedText, []string{TextStartUnique, TextOpenBeforeUse, TextClosed, TextDeltaNonEmpty}, "text messages"},
		{c.usedTools, []string{ToolStartUnique, ToolOpenBeforeUse, ToolClosed}, "tool calls"},
		{c.usedReason, []string{ReasonStartUnique, ReasonOpen, ReasonClosed}, "reasoning"},
		{c.usedSteps, []string{StepStartUnique, StepFinishStarted, StepClosed}, "steps"},
		{c.usedSubs, []string{SubStartUnique, SubParentStarted, SubEndActive, SubClosed, SubAttribution}, "sub-agents"},
	} {
		for _, r := range s.rules {
			if !s.used {
				t.Skip(r, "no %s in this stream", s.what)
			} else {
				t.Skip(r, "%s present but nothing exercised this rule", s.what)
			}
		}
	}
	t.Skip(ToolResultKnown, "no TOOL_CALL_RESULT in this stream")
	t.Skip(StateDeltaApplies, "%s", c.stateWhy)
	t.Skip(StateDeltaShape, "no STATE_DELTA or ACTIVITY_DELTA in this stream")
	t.Skip(EventTimestamp, "no event carries a timestamp")
	t.Skip(EventCustom, "no CUSTOM event in this stream")
	t.Skip(RunFinishedIDs, "no RUN_FINISHED after a RUN_STARTED")
	c.finishMore()
}

func (c *checker) sequence(e *event) {
	t := c.t
	typ := agui.EventType(e.typ)
	sub := e.str("subagentRunId")

	if c.errored && typ != agui.TypeRunStarted {
		t.Fail(RunAfterError, "%s after RUN_ERROR", e)
	}
	if c.finished && typ != agui.TypeRunError && typ != agui.TypeRunStarted {
		t.Fail(RunAfterFinished, "%s after RUN_FINISHED", e)
	}
	if !c.seenFirst {
		c.seenFirst = true
		t.Expect(RunFirst, typ == agui.TypeRunStarted || typ == agui.TypeRunError, "the first event is %s, not RUN_STARTED", e)
	}

	switch typ {
	case agui.TypeRunStarted:
		t.Expect(RunNoNested, !c.runActive || c.finished || c.errored, "%s while run %q is active", e, c.runID)
		if c.finished || c.errored {
			c.reset()
		}
		c.runActive = true
		c.threadID, c.runID, c.haveIDs = e.str("threadId"), e.str("runId"), true
		t.Expect(RunStartedIDs, c.threadID != "" && c.runID != "", "%s: threadId %q, runId %q", e, c.threadID, c.runID)
		if in, ok := e.m["input"].(map[string]any); ok {
			if s, ok := in["state"]; ok && s != nil {
				c.setState(s)
			}
		}
	case agui.TypeRunFinished:
		c.sawFinish = true
		c.checkClosed(e)
		if c.haveIDs {
			if th, run := e.str("threadId"), e.str("runId"); th != c.threadID || run != c.runID {
				t.Fail(RunFinishedIDs, "%s has threadId %q, runId %q; RUN_STARTED had %q, %q", e, th, run, c.threadID, c.runID)
			} else {
				t.Pass(RunFinishedIDs)
			}
		}
		c.finished = true
	case agui.TypeRunError:
		c.sawError = true
		c.errored = true

	case agui.TypeTextMessageStart:
		c.usedText = true
		id := e.str("messageId")
		t.Expect(TextStartUnique, !c.text[id], "%s: message %q is already open", e, id)
		c.owned(e, "message", id, c.msgOwner, sub)
		c.text[id] = true
	case agui.TypeTextMessageContent, agui.TypeTextMessageEnd:
		c.usedText = true
		id := e.str("messageId")
		t.Expect(TextOpenBeforeUse, c.text[id], "%s: no open text message %q", e, id)
		c.owned(e, "message", id, c.msgOwner, sub)
		if typ == agui.TypeTextMessageEnd {
			delete(c.text, id)
		}

	case agui.TypeToolCallStart:
		c.usedTools = true
		id := e.str("toolCallId")
		c.announced[id] = true
		t.Expect(ToolStartUnique, !c.tools[id], "%s: tool call %q is already open", e, id)
		if p := e.str("parentMessageId"); p != "" && sub != "" {
			if o, ok := c.msgOwner[p]; ok && o != sub {
				t.Fail(SubAttribution, "%s: subagentRunId %q differs from parent message %q's %q", e, sub, p, o)
			}
		}
		c.owned(e, "tool call", id, c.toolOwner, sub)
		c.tools[id] = true
	case agui.TypeToolCallArgs, agui.TypeToolCallEnd:
		c.usedTools = true
		id := e.str("toolCallId")
		t.Expect(ToolOpenBeforeUse, c.tools[id], "%s: no open tool call %q", e, id)
		c.owned(e, "tool call", id, c.toolOwner, sub)
		if typ == agui.TypeToolCallEnd {
			delete(c.tools, id)
		}
	case agui.TypeToolCallResult:
		id := e.str("toolCallId")
		t.Expect(ToolResultKnown, c.announced[id], "%s: toolCallId %q was not announced by a TOOL_CALL_START of this stream (or of the run it continues)", e, id)
		if mid := e.str("messageId"); mid != "" {
			c.msgOwner[mid] = sub
		}

	case agui.TypeReasoningStart, agui.TypeReasoningMessageStart:
		c.usedReason = true
		set := c.spans
		if typ == agui.TypeReasoningMessageStart {
			set = c.reasonMsgs
		}
		id := e.str("messageId")
		t.Expect(ReasonStartUnique, !set[id], "%s: %q is already open", e, id)
		c.owned(e, "reasoning message", id, c.rOwner, sub)
		set[id] = true
	case agui.TypeReasoningMessageContent, agui.TypeReasoningMessageEnd, agui.TypeReasoningEnd:
		c.usedReason = true
		set := c.reasonMsgs
		if typ == agui.TypeReasoningEnd {
			set = c.spans
		}
		id := e.str("messageId")
		t.Expect(ReasonOpen, set[id], "%s: %q is not open", e, id)
		c.owned(e, "reasoning message", id, c.rOwner, sub)
		if typ != agui.TypeReasoningMessageContent {
			delete(set, id)
		}

	case agui.TypeStepStarted:
		c.usedSteps = true
		name := e.str("stepName")
		if c.steps[sub] == nil {
			c.steps[sub] = map[string]bool{}
		}
		t.Expect(StepStartUnique, !c.steps[sub][name], "%s: step %q is already active", e, name)
		c.steps[sub][name] = true
	case agui.TypeStepFinished:
		c.usedSteps = true
		name := e.str("stepName")
		t.Expect(StepFinishStarted, c.steps[sub][name], "%s: step %q is not active%s", e, name, forSub(sub))
		delete(c.steps[sub], name)

	case agui.TypeSubagentStarted:
		c.usedSubs = true
		id := e.str("subagentRunId")
		switch {
		case c.activeSubs[id]:
			t.Fail(SubStartUnique, "%s: sub-agent %q is already active", e, id)
		case c.doneSubs[id]:
			t.Fail(SubStartUnique, "%s: sub-agent %q already finished in this run", e, id)
		default:
			t.Pass(SubStartUnique)
		}
		if p := e.str("parentSubagentRunId"); p != "" {
			t.Expect(SubParentStarted, c.activeSubs[p] || c.doneSubs[p], "%s: parent sub-agent %q was not started in this run", e, p)
		}
		c.activeSubs[id] = true
	case agui.TypeSubagentFinished, agui.TypeSubagentError:
		c.usedSubs = true
		id := e.str("subagentRunId")
		t.Expect(SubEndActive, c.activeSubs[id], "%s: no active sub-agent %q", e, id)
		delete(c.activeSubs, id)
		c.doneSubs[id] = true

	case agui.TypeStateSnapshot:
		if s, ok := e.m["snapshot"]; ok {
			c.setState(s)
		}
	case agui.TypeStateDelta:
		c.applyDelta(e)
	}
}

// owned checks that an event of an item carries its opener's sub-agent, and
// records the opener on first sight.
func (c *checker) owned(e *event, kind, id string, owners map[string]string, sub string) {
	o, ok := owners[id]
	if !ok {
		owners[id] = sub
		return
	}
	if sub == "" {
		return
	}
	if o != sub {
		c.t.Fail(SubAttribution, "%s: %s %q carries subagentRunId %q, its opener %q", e, kind, id, sub, o)
		return
	}
	c.t.Pass(SubAttribution)
}

// checkClosed judges, at RUN_FINISHED, that nothing of the run is open.
func (c *checker) checkClosed(e *event) {
	t := c.t
	closed := func(rule string, used bool, what string, sets ...map[string]bool) {
		var open []string
		for _, s := range sets {
			for k := range s {
				open = append(open, k)
			}
		}
		sort.Strings(open)
		switch {
		case len(open) > 0:
			t.Fail(rule, "%s while %s are open: %q", e, what, open)
		case used:
			t.Pass(rule)
		}
	}
	closed(TextClosed, c.usedText, "text messages", c.text)
	closed(ToolClosed, c.usedTools, "tool calls", c.tools)
	closed(ReasonClosed, c.usedReason, "reasoning messages or spans", c.reasonMsgs, c.spans)
	var steps []map[string]bool
	for _, s := range c.steps {
		steps = append(steps, s)
	}
	closed(StepClosed, c.usedSteps, "steps", steps...)
	closed(SubClosed, c.usedSubs, "sub-agents", c.activeSubs)
}

func forSub(sub string) string {
	if sub == "" {
		return ""
	}
	return fmt.Sprintf(" for sub-agent %q", sub)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func describe(v any) string {
	if v == nil {
		return "missing or null"
	}
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		b = append(b[:37], "..."...)
	}
	return fmt.Sprintf("a %s (%s)", jsonKind(v), bytes.TrimSpace(b))
}

var pointerRE = regexp.MustCompile(`^(/([^/~]|~[01])*)*$`)
