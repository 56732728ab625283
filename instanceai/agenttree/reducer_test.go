package agenttree

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// b builds events for the unit tests: run run_1, orchestrator root, ts
// advancing by one second from 2026-01-01T00:00:00Z.
type b struct {
	events []instanceai.Event
	ts     int64
}

const root1 = "orchestrator-run_1"

func (x *b) add(typ instanceai.EventType, agent, responseID string, p instanceai.Payload) *b {
	if x.ts == 0 {
		x.ts = 1767225600000
	}
	x.ts += 1000
	x.events = append(x.events, instanceai.Event{Type: typ, RunID: "run_1", AgentID: agent, ResponseID: responseID, TS: x.ts, Payload: p})
	return x
}

func (x *b) start(agent string) *b {
	return x.add(instanceai.TypeRunStart, agent, "", &instanceai.RunStart{MessageID: "msg_1"})
}
func (x *b) finish(status, reason string) *b {
	return x.add(instanceai.TypeRunFinish, root1, "", &instanceai.RunFinish{Status: status, Reason: reason})
}
func (x *b) text(typ instanceai.EventType, agent, responseID, text string) *b {
	return x.add(typ, agent, responseID, &instanceai.Text{Text: text})
}
func (x *b) call(agent, id, name string) *b {
	return x.add(instanceai.TypeToolCall, agent, "", &instanceai.ToolCall{ToolCallID: id, ToolName: name, Args: json.RawMessage(`{"q":1}`)})
}

func fold(x *b) (*State, *AgentNode) {
	s := New()
	for _, ev := range x.events {
		s.Apply(ev)
	}
	return s, s.Tree()
}

func TestBlockReplacesOpenSegment(t *testing.T) {
	cases := []struct {
		name        string
		x           *b
		text        string
		timelineLen int
		last        string
	}{
		{"prefix", new(b).start(root1).
			text(instanceai.TypeTextDelta, root1, "r1", "Hel").text(instanceai.TypeTextDelta, root1, "r1", "lo").
			text(instanceai.TypeTextBlock, root1, "r1", "Hello, world."),
			"Hello, world.", 1, "Hello, world."},
		{"suffix after earlier text", new(b).start(root1).
			text(instanceai.TypeTextDelta, root1, "r0", "Intro. ").
			text(instanceai.TypeTextDelta, root1, "r1", "world.").
			text(instanceai.TypeTextBlock, root1, "r1", "Hello, world."),
			"Intro. Hello, world.", 2, "Hello, world."},
		{"no match merges as a delta", new(b).start(root1).
			text(instanceai.TypeTextDelta, root1, "r1", "abc").
			text(instanceai.TypeTextBlock, root1, "r1", "xbcx"),
			"abcxbcx", 1, "abcxbcx"},
		{"other response appends", new(b).start(root1).
			text(instanceai.TypeTextDelta, root1, "r1", "Hi").
			text(instanceai.TypeTextBlock, root1, "r2", "Hi"),
			"HiHi", 2, "Hi"},
		{"id-less block doubles id-less deltas", new(b).start(root1).
			text(instanceai.TypeTextDelta, root1, "", "Hi").
			text(instanceai.TypeTextBlock, root1, "", "Hi"),
			"HiHi", 1, "HiHi"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, tree := fold(c.x)
			if tree.TextContent != c.text {
				t.Errorf("textContent = %q, want %q", tree.TextContent, c.text)
			}
			if len(tree.Timeline) != c.timelineLen {
				t.Fatalf("timeline = %+v, want %d entries", tree.Timeline, c.timelineLen)
			}
			if got := tree.Timeline[len(tree.Timeline)-1].Content; got != c.last {
				t.Errorf("last entry = %q, want %q", got, c.last)
			}
		})
	}
}

func TestReasoningBlockReplacesReasoningOnly(t *testing.T) {
	x := new(b).start(root1).
		text(instanceai.TypeReasoningDelta, root1, "r1", "Think").
		text(instanceai.TypeReasoningBlock, root1, "r1", "Thinking hard.")
	_, tree := fold(x)
	if tree.Reasoning != "Thinking hard." || tree.TextContent != "" {
		t.Errorf("reasoning %q, text %q", tree.Reasoning, tree.TextContent)
	}
	if want := []TimelineEntry{{Type: EntryReasoning, Content: "Thinking hard.", ResponseID: "r1"}}; !slices.Equal(tree.Timeline, want) {
		t.Errorf("timeline = %+v", tree.Timeline)
	}
}

func TestFollowUpRunJoinsRoot(t *testing.T) {
	const root2 = "orchestrator-run_2"
	x := new(b).start(root1).text(instanceai.TypeTextDelta, root1, "r1", "One.").finish(instanceai.RunCompleted, "").
		start(root2).text(instanceai.TypeTextDelta, root2, "r2", " Two.")
	s, tree := fold(x)
	if s.RootAgentID != root1 || tree.AgentID != root1 {
		t.Errorf("root = %s / %s, want %s", s.RootAgentID, tree.AgentID, root1)
	}
	if s.FindAgent(root2) != tree {
		t.Error("the second run's orchestrator id does not find the root")
	}
	if tree.TextContent != "One. Two." || tree.Status != StatusActive || !s.Active() {
		t.Errorf("text %q, status %s", tree.TextContent, tree.Status)
	}
}

func TestRunStartResetsEmptyTree(t *testing.T) {
	const root2 = "orchestrator-run_2"
	x := new(b).start(root1).finish(instanceai.RunCancelled, instanceai.ReasonUserCancelled).start(root2)
	s, tree := fold(x)
	if s.RootAgentID != root2 || tree.AgentID != root2 || len(s.AgentsByID) != 1 {
		t.Errorf("root %s, agents %v", s.RootAgentID, s.AgentsByID)
	}
	if tree.CancellationReason != "" || tree.Status != StatusActive {
		t.Errorf("the reset root kept %q / %s", tree.CancellationReason, tree.Status)
	}
}

func TestRunFinishSettlesLoadingCalls(t *testing.T) {
	for _, c := range []struct {
		status, reason, state, cancellation string
		settled                             bool
	}{
		{instanceai.RunCompleted, "", StatusCompleted, "", false},
		{instanceai.RunCancelled, instanceai.ReasonUserCancelled, StatusCancelled, CancelUser, true},
		{instanceai.RunInterrupted, instanceai.ReasonCrashed, StatusCancelled, CancelInterrupted, true},
		{instanceai.RunInterrupted, instanceai.ReasonTimeout, StatusCancelled, CancelTimeout, true},
		{instanceai.RunCancelled, "something else", StatusCancelled, "", true},
		{instanceai.RunError, instanceai.ReasonUserCancelled, StatusError, "", true},
	} {
		t.Run(c.status+"/"+c.reason, func(t *testing.T) {
			x := new(b).start(root1).
				add(instanceai.TypeAgentSpawned, "agent-a", "", &instanceai.AgentSpawned{ParentID: root1, Role: "helper"}).
				call(root1, "c1", "search-nodes").call("agent-a", "c2", "build-workflow").
				finish(c.status, c.reason)
			s, tree := fold(x)
			if s.Status != c.state || tree.Status != c.state || tree.CancellationReason != c.cancellation {
				t.Errorf("state %s, root %s, cancellation %q", s.Status, tree.Status, tree.CancellationReason)
			}
			if tree.Children[0].Status != StatusActive {
				t.Errorf("run-finish changed the sub-agent's status to %s", tree.Children[0].Status)
			}
			for _, tc := range []*ToolCallState{tree.ToolCalls[0], tree.Children[0].ToolCalls[0]} {
				if tc.IsLoading == c.settled {
					t.Errorf("%s isLoading = %v", tc.ToolCallID, tc.IsLoading)
				}
				if tc.CompletedAt != "" || tc.Result != nil {
					t.Errorf("%s was given an outcome: %+v", tc.ToolCallID, tc)
				}
			}
		})
	}
}

func TestToolLifecycle(t *testing.T) {
	x := new(b).start(root1).
		add(instanceai.TypeToolInputStart, root1, "r1", &instanceai.ToolInputStart{ToolCallID: "c1", ToolName: "build-workflow"}).
		add(instanceai.TypeToolCall, root1, "", &instanceai.ToolCall{ToolCallID: "c1", ToolName: "ignored", Args: json.RawMessage(`{"n":3}`)}).
		add(instanceai.TypeToolResult, root1, "", &instanceai.ToolResult{ToolCallID: "c1"}).
		call(root1, "c2", "task-control").
		add(instanceai.TypeToolInterrupted, root1, "", &instanceai.ToolError{ToolCallID: "c2", Error: ""})
	_, tree := fold(x)
	got, err := json.Marshal(tree.ToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"toolCallId":"c1","toolName":"build-workflow","args":{"n":3},"isLoading":false,"renderHint":"builder",` +
		`"startedAt":"2026-01-01T00:00:02.000Z","result":null,"completedAt":"2026-01-01T00:00:04.000Z"},` +
		`{"toolCallId":"c2","toolName":"task-control","args":{"q":1},"isLoading":false,"renderHint":"tasks",` +
		`"startedAt":"2026-01-01T00:00:05.000Z","error":"","completedAt":"2026-01-01T00:00:06.000Z"}]`
	if string(got) != want {
		t.Errorf("tool calls:\n got %s\nwant %s", got, want)
	}
	if want := []TimelineEntry{{Type: EntryToolCall, ToolCallID: "c1", ResponseID: "r1"}, {Type: EntryToolCall, ToolCallID: "c2"}}; !slices.Equal(tree.Timeline, want) {
		t.Errorf("timeline = %+v", tree.Timeline)
	}
}

func TestUnknownAgentsDroppedButErrorsReachRoot(t *testing.T) {
	x := new(b).start(root1).
		text(instanceai.TypeTextDelta, "ghost", "r1", "lost").
		call("ghost", "c1", "search-nodes").
		add(instanceai.TypeAgentSpawned, "child", "", &instanceai.AgentSpawned{ParentID: "ghost", Role: "orphan"}).
		add(instanceai.TypeError, "ghost", "", &instanceai.ErrorPayload{Content: "Boom"}).
		add(instanceai.TypeError, "ghost", "", &instanceai.ErrorPayload{Content: "No credits", Code: instanceai.ErrorCodeQuotaExhausted})
	s, tree := fold(x)
	if tree.TextContent != "\n\n*Error: Boom*" || len(tree.ToolCalls) != 0 || len(tree.Children) != 0 {
		t.Errorf("tree = %+v", tree)
	}
	if len(s.AgentsByID) != 1 || len(s.ToolCallsByID) != 0 {
		t.Errorf("unknown agents left state behind: %v %v", s.AgentsByID, s.ToolCallsByID)
	}
}

func TestUnsafeAndInheritedIDs(t *testing.T) {
	x := new(b).start(root1).
		call(root1, "__proto__", "x").
		call(root1, "toString", "x").
		call(root1, "c1", "x").
		add(instanceai.TypeAgentSpawned, "constructor", "", &instanceai.AgentSpawned{ParentID: root1, Role: "evil"}).
		add(instanceai.TypeAgentSpawned, "valueOf", "", &instanceai.AgentSpawned{ParentID: root1, Role: "inherited"}).
		add(instanceai.TypeError, "toString", "", &instanceai.ErrorPayload{Content: "lost"})
	s, tree := fold(x)
	if len(tree.ToolCalls) != 1 || tree.ToolCalls[0].ToolCallID != "c1" {
		t.Errorf("tool calls = %+v", tree.ToolCalls)
	}
	if len(tree.Children) != 0 || tree.TextContent != "" {
		t.Errorf("children %d, text %q", len(tree.Children), tree.TextContent)
	}
	// The reference throws on the error of an inherited agent id.
	if s.apply(instanceai.Event{Type: instanceai.TypeError, AgentID: "toString", TS: 1, Payload: &instanceai.ErrorPayload{Content: "x"}}) {
		t.Error("apply reported success where the reference throws")
	}
}

func TestAgentCompletedStatus(t *testing.T) {
	for _, c := range []struct {
		p    instanceai.AgentCompleted
		want string
	}{
		{instanceai.AgentCompleted{Result: "ok"}, StatusCompleted},
		{instanceai.AgentCompleted{Result: "", Error: "broke"}, StatusError},
		{instanceai.AgentCompleted{Result: "ok", Error: "broke", Status: instanceai.RunCompleted}, StatusCompleted},
		{instanceai.AgentCompleted{Result: "stop", Status: instanceai.RunCancelled}, StatusCancelled},
	} {
		p := c.p
		x := new(b).start(root1).
			add(instanceai.TypeAgentSpawned, "agent-a", "", &instanceai.AgentSpawned{ParentID: root1, Role: "helper"}).
			call("agent-a", "c1", "x").
			add(instanceai.TypeAgentCompleted, "agent-a", "", &p)
		_, tree := fold(x)
		a := tree.Children[0]
		if a.Status != c.want || a.Result == nil || *a.Result != p.Result || a.Error != p.Error || a.ToolCalls[0].IsLoading {
			t.Errorf("%+v: status %s, result %v, error %q, loading %v", p, a.Status, a.Result, a.Error, a.ToolCalls[0].IsLoading)
		}
	}
}

func TestSpawnedNodeJSON(t *testing.T) {
	x := new(b).start(root1).
		text(instanceai.TypeTextDelta, root1, "r1", "Delegating.").
		add(instanceai.TypeAgentSpawned, "agent-a", "", &instanceai.AgentSpawned{ParentID: root1, Role: "helper"}).
		add(instanceai.TypeAgentCompleted, "agent-a", "", &instanceai.AgentCompleted{Role: "helper"})
	_, tree := fold(x)
	got, err := json.Marshal(tree.Children[0])
	if err != nil {
		t.Fatal(err)
	}
	// tools and result are present although empty; the child entry in the
	// parent inherits the parent's last responseId.
	want := `{"agentId":"agent-a","role":"helper","status":"completed","textContent":"","reasoning":"",` +
		`"toolCalls":[],"children":[],"timeline":[],"tools":[],"result":""}`
	if string(got) != want {
		t.Errorf("child:\n got %s\nwant %s", got, want)
	}
	if e := tree.Timeline[1]; e != (TimelineEntry{Type: EntryChild, AgentID: "agent-a", ResponseID: "r1"}) {
		t.Errorf("child entry = %+v", e)
	}
}

func TestISOString(t *testing.T) {
	for ms, want := range map[int64]string{
		0:                      "1970-01-01T00:00:00.000Z",
		-1:                     "1969-12-31T23:59:59.999Z",
		1767225600123:          "2026-01-01T00:00:00.123Z",
		-62198755200000:        "-000001-01-01T00:00:00.000Z",
		-62167219200000:        "0000-01-01T00:00:00.000Z",
		253402300800000:        "+010000-01-01T00:00:00.000Z",
		8_640_000_000_000_000:  "+275760-09-13T00:00:00.000Z",
		-8_640_000_000_000_000: "-271821-04-20T00:00:00.000Z",
	} {
		if got := isoString(ms); got != want {
			t.Errorf("isoString(%d) = %s, want %s", ms, got, want)
		}
	}
	if _, ok := eventTimestamp(instanceai.Event{TS: 8_640_000_000_000_001}); ok {
		t.Error("a ts beyond the Date range renders")
	}
	if at, ok := eventTimestamp(instanceai.Event{}); !ok || !strings.HasSuffix(at, "Z") {
		t.Errorf("no ts: %q, %v", at, ok)
	}
}

// TestStateFromAgentTreeContinues folds half a stream, stores the tree as
// JSON, adopts it again and folds the rest: the result is the tree of the
// whole stream.
func TestStateFromAgentTreeContinues(t *testing.T) {
	x := new(b).start(root1).
		text(instanceai.TypeReasoningDelta, root1, "r1", "Plan.").
		call(root1, "c1", "build-workflow").
		add(instanceai.TypeAgentSpawned, "agent-a", "", &instanceai.AgentSpawned{ParentID: root1, Role: "helper", Tools: []string{"x"}}).
		call("agent-a", "c2", "x").
		add(instanceai.TypeConfirmRequest, root1, "", &instanceai.ConfirmationRequest{RequestID: "q1", ToolCallID: "c1",
			ToolName: "build-workflow", Severity: instanceai.SeverityInfo, Message: "OK?"}).
		text(instanceai.TypeTextDelta, root1, "r2", "Work").
		// second half
		text(instanceai.TypeTextBlock, root1, "r2", "Working.").
		add(instanceai.TypeToolResult, "agent-a", "", &instanceai.ToolResult{ToolCallID: "c2", Result: json.RawMessage(`[1]`)}).
		finish(instanceai.RunCancelled, instanceai.ReasonTimeout)
	whole, err := json.Marshal(Fold(x.events))
	if err != nil {
		t.Fatal(err)
	}
	half := New()
	for _, ev := range x.events[:7] {
		half.Apply(ev)
	}
	stored, err := json.Marshal(half.Tree())
	if err != nil {
		t.Fatal(err)
	}
	var tree AgentNode
	if err := json.Unmarshal(stored, &tree); err != nil {
		t.Fatal(err)
	}
	s := StateFromAgentTree(&tree)
	if s == nil {
		t.Fatal("the stored tree was not adopted")
	}
	for _, ev := range x.events[7:] {
		s.Apply(ev)
	}
	got, err := json.Marshal(s.Tree())
	if err != nil {
		t.Fatal(err)
	}
	if diff := jsonDiff(got, whole); diff != "" {
		t.Errorf("continued fold differs from the whole fold:\n%s", diff)
	}
	if StateFromAgentTree(&AgentNode{AgentID: "__proto__"}) != nil {
		t.Error("an unsafe root id was adopted")
	}
}

func TestNormalizeLegacyReasoningTimeline(t *testing.T) {
	child := &AgentNode{AgentID: "a", Reasoning: "old", Timeline: []TimelineEntry{{Type: EntryText, Content: "hi"}}}
	tree := &AgentNode{AgentID: "root", Reasoning: "kept", Children: []*AgentNode{child},
		Timeline: []TimelineEntry{{Type: EntryReasoning, Content: "kept"}}}
	NormalizeAgentTree(tree)
	if len(tree.Timeline) != 1 {
		t.Errorf("a node with a reasoning entry changed: %+v", tree.Timeline)
	}
	if want := []TimelineEntry{{Type: EntryReasoning, Content: "old"}, {Type: EntryText, Content: "hi"}}; !slices.Equal(child.Timeline, want) {
		t.Errorf("legacy node timeline = %+v", child.Timeline)
	}
}

func TestTreeOfFreshState(t *testing.T) {
	got, err := json.Marshal(New().Tree())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"agentId":"agent-001","role":"orchestrator","status":"active","textContent":"","reasoning":"","toolCalls":[],"children":[],"timeline":[]}`
	if string(got) != want {
		t.Errorf("got %s", got)
	}
}

func TestZeroStateStartsFresh(t *testing.T) {
	var s State
	s.Apply(instanceai.Event{Type: instanceai.TypeToolCall, AgentID: DefaultRootAgentID, TS: 1767225600000,
		Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "x"}})
	if tree := s.Tree(); tree.AgentID != DefaultRootAgentID || len(tree.ToolCalls) != 1 {
		t.Errorf("tree = %+v", tree)
	}
}
