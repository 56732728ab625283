package mapping

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui"
	verify "github.com/threadline/threadline/conformance/aguiverify"
	"github.com/threadline/threadline/instanceai"
)

// TestMappingTable has one case per row of DESIGN's instance-ai → AG-UI
// table (plus the background-agent rule and Close). Every complete stream
// must also pass the client verifier's rules.
func TestMappingTable(t *testing.T) {
	sub := "agent_b1"
	for _, tc := range []struct {
		name string
		in   []instanceai.Event
		want []string
	}{
		{
			name: "run-start",
			in:   []instanceai.Event{runStart()},
			want: []string{"RUN_STARTED"},
		},
		{
			name: "text-delta segment closes on a structural event of the same agent",
			in: []instanceai.Event{runStart(), textDelta(orch, "resp1", "Hel"), textDelta(orch, "resp1", "lo"),
				toolCall(orch, "tc1", "search", `{"q":"x"}`), finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"TEXT_MESSAGE_START messageId=resp1", "TEXT_MESSAGE_CONTENT messageId=resp1 delta=Hel", "TEXT_MESSAGE_CONTENT messageId=resp1 delta=lo",
				"TEXT_MESSAGE_END messageId=resp1",
				"TOOL_CALL_START toolCallId=tc1 toolCallName=search parentMessageId=resp1", `TOOL_CALL_ARGS toolCallId=tc1 delta={"q":"x"}`, "TOOL_CALL_END toolCallId=tc1",
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "text-delta segment closes on a responseId change and later segments of a response get new ids",
			in: []instanceai.Event{runStart(), textDelta(orch, "r1", "a"), textDelta(orch, "r2", "b"),
				toolCall(orch, "tc1", "t", `{}`), textDelta(orch, "r2", "c"), finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=a", "TEXT_MESSAGE_END messageId=r1",
				"TEXT_MESSAGE_START messageId=r2", "TEXT_MESSAGE_CONTENT messageId=r2 delta=b", "TEXT_MESSAGE_END messageId=r2",
				"TOOL_CALL_START toolCallId=tc1 toolCallName=t parentMessageId=r2", "TOOL_CALL_ARGS toolCallId=tc1 delta={}", "TOOL_CALL_END toolCallId=tc1",
				"TEXT_MESSAGE_START messageId=r2:2", "TEXT_MESSAGE_CONTENT messageId=r2:2 delta=c", "TEXT_MESSAGE_END messageId=r2:2",
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "a structural event of another agent leaves the segment open",
			in: []instanceai.Event{runStart(), textDelta(orch, "r1", "a"), spawned(sub, orch, "builder"), textDelta(orch, "r1", "b"),
				completed(sub, instanceai.RunCompleted, "ok", ""), finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=a",
				"SUBAGENT_STARTED subagentRunId=agent_b1 name=builder",
				"TEXT_MESSAGE_CONTENT messageId=r1 delta=b",
				"SUBAGENT_FINISHED subagentRunId=agent_b1 result=ok outcome=success",
				"TEXT_MESSAGE_END messageId=r1", "RUN_FINISHED outcome=success"},
		},
		{
			name: "reasoning-delta",
			in: []instanceai.Event{runStart(), reasoningDelta(orch, "r1", "think"), textDelta(orch, "r1", "say"),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"REASONING_START messageId=r1:reasoning", "REASONING_MESSAGE_START messageId=r1:reasoning",
				"REASONING_MESSAGE_CONTENT messageId=r1:reasoning delta=think",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=say",
				"REASONING_MESSAGE_END messageId=r1:reasoning", "REASONING_END messageId=r1:reasoning",
				"TEXT_MESSAGE_END messageId=r1", "RUN_FINISHED outcome=success"},
		},
		{
			name: "text-block and reasoning-block on replay",
			in: []instanceai.Event{runStart(), reasoningBlock(orch, "r1", "thought"), textBlock(orch, "r1", "Hello"),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"REASONING_START messageId=r1:reasoning", "REASONING_MESSAGE_START messageId=r1:reasoning",
				"REASONING_MESSAGE_CONTENT messageId=r1:reasoning delta=thought",
				"REASONING_MESSAGE_END messageId=r1:reasoning", "REASONING_END messageId=r1:reasoning",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=Hello", "TEXT_MESSAGE_END messageId=r1",
				"RUN_FINISHED outcome=success"},
		},
		{
			// The block of an open segment that streamed less than it holds
			// (the deltas were lost on their way to this instance) adds
			// what was lost; one that streamed whole is not sent again.
			name: "a block of a segment that streamed live adds only what its deltas lacked",
			in: []instanceai.Event{runStart(), textDelta(orch, "r1", "Hel"), textBlock(orch, "r1", "Hello"),
				textDelta(orch, "r2", "x"), toolCall(orch, "tc", "t", `{}`), textBlock(orch, "r2", "x"),
				textBlock(orch, "r3", "new"), finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=Hel",
				"TEXT_MESSAGE_CONTENT messageId=r1 delta=lo", "TEXT_MESSAGE_END messageId=r1",
				"TEXT_MESSAGE_START messageId=r2", "TEXT_MESSAGE_CONTENT messageId=r2 delta=x", "TEXT_MESSAGE_END messageId=r2",
				"TOOL_CALL_START toolCallId=tc toolCallName=t parentMessageId=r2", "TOOL_CALL_ARGS toolCallId=tc delta={}", "TOOL_CALL_END toolCallId=tc",
				"TEXT_MESSAGE_START messageId=r3", "TEXT_MESSAGE_CONTENT messageId=r3 delta=new", "TEXT_MESSAGE_END messageId=r3",
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "tool-input-start then tool-call",
			in: []instanceai.Event{runStart(), toolInputStart(orch, "tc1", "search"), toolCall(orch, "tc1", "search", `{"q":1}`),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED", "TOOL_CALL_START toolCallId=tc1 toolCallName=search",
				`TOOL_CALL_ARGS toolCallId=tc1 delta={"q":1}`, "TOOL_CALL_END toolCallId=tc1", "RUN_FINISHED outcome=success"},
		},
		{
			name: "tool-result, tool-error and tool-interrupted",
			in: []instanceai.Event{runStart(),
				toolCall(orch, "a", "t", `{}`), toolResult(orch, "a", `{"rows":2}`),
				toolCall(orch, "b", "t", `{}`), toolError(instanceai.TypeToolError, orch, "b", "boom"),
				toolInputStart(orch, "c", "t"), toolError(instanceai.TypeToolInterrupted, orch, "c", "stopped"),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"TOOL_CALL_START toolCallId=a toolCallName=t", "TOOL_CALL_ARGS toolCallId=a delta={}", "TOOL_CALL_END toolCallId=a",
				`TOOL_CALL_RESULT messageId=result:a toolCallId=a content={"rows":2}`,
				"TOOL_CALL_START toolCallId=b toolCallName=t", "TOOL_CALL_ARGS toolCallId=b delta={}", "TOOL_CALL_END toolCallId=b",
				"TOOL_CALL_RESULT messageId=result:b toolCallId=b content=boom",
				"TOOL_CALL_START toolCallId=c toolCallName=t", "TOOL_CALL_END toolCallId=c",
				"TOOL_CALL_RESULT messageId=result:c toolCallId=c content=stopped",
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "agent-spawned and agent-completed, with the sub-agent's events attributed",
			in: []instanceai.Event{runStart(), spawned(sub, orch, "builder"), textDelta(sub, "s1", "working"),
				toolCall(sub, "tc9", "build", `{}`), spawned("agent_c", sub, "helper"),
				completed("agent_c", instanceai.RunError, "", "crashed"),
				completed(sub, instanceai.RunCompleted, "built", ""),
				spawned("agent_d", orch, "other"), completed("agent_d", instanceai.RunCancelled, "", ""),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				"SUBAGENT_STARTED subagentRunId=agent_b1 name=builder",
				"TEXT_MESSAGE_START subagentRunId=agent_b1 messageId=s1", "TEXT_MESSAGE_CONTENT subagentRunId=agent_b1 messageId=s1 delta=working",
				"TEXT_MESSAGE_END subagentRunId=agent_b1 messageId=s1",
				"TOOL_CALL_START subagentRunId=agent_b1 toolCallId=tc9 toolCallName=build parentMessageId=s1",
				"TOOL_CALL_ARGS subagentRunId=agent_b1 toolCallId=tc9 delta={}", "TOOL_CALL_END subagentRunId=agent_b1 toolCallId=tc9",
				"SUBAGENT_STARTED subagentRunId=agent_c name=helper parentSubagentRunId=agent_b1",
				"SUBAGENT_ERROR subagentRunId=agent_c code=agent_failed message=crashed",
				"SUBAGENT_FINISHED subagentRunId=agent_b1 result=built outcome=success",
				"SUBAGENT_STARTED subagentRunId=agent_d name=other",
				"SUBAGENT_ERROR subagentRunId=agent_d code=cancelled message=cancelled",
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "tasks-update: snapshot first, then deltas",
			in: []instanceai.Event{runStart(),
				tasks(orch, instanceai.Task{ID: "1", Description: "a", Status: instanceai.TaskTodo}),
				tasks(orch, instanceai.Task{ID: "1", Description: "a", Status: instanceai.TaskDone}, instanceai.Task{ID: "2", Description: "b", Status: instanceai.TaskTodo}),
				tasks(orch, instanceai.Task{ID: "1", Description: "a", Status: instanceai.TaskDone}, instanceai.Task{ID: "2", Description: "b", Status: instanceai.TaskTodo}),
				tasks(orch),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				`STATE_SNAPSHOT snapshot={"tasks":[{"id":"1","description":"a","status":"todo"}]}`,
				`STATE_DELTA delta=[{"op":"replace","path":"/tasks/0/status","value":"done"},{"op":"add","path":"/tasks/-","value":{"description":"b","id":"2","status":"todo"}}]`,
				`STATE_DELTA delta=[{"op":"remove","path":"/tasks/0"},{"op":"remove","path":"/tasks/0"}]`,
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "status, thread-title-updated and a non-fatal error become CUSTOM events",
			in: []instanceai.Event{runStart(),
				ev(instanceai.TypeStatus, orch, "", &instanceai.Status{Message: "Thinking"}),
				ev(instanceai.TypeThreadTitleUpdated, orch, "", &instanceai.ThreadTitle{Title: "Sales"}),
				ev(instanceai.TypeError, orch, "", &instanceai.ErrorPayload{Content: "rate limited", StatusCode: 429}),
				finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED",
				`CUSTOM instance-ai.status value={"message":"Thinking"}`,
				`CUSTOM instance-ai.thread-title-updated value={"title":"Sales"}`,
				`CUSTOM instance-ai.error value={"content":"rate limited","statusCode":429}`,
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "confirmation-request closes what is open and interrupts the run",
			in: []instanceai.Event{runStart(), textDelta(orch, "r1", "Let me"), spawned(sub, orch, "builder"),
				toolInputStart(sub, "tc5", "delete"), confirm(sub, "req1", "tc5"), textDelta(orch, "r1", "ignored")},
			want: []string{"RUN_STARTED",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=Let me",
				"SUBAGENT_STARTED subagentRunId=agent_b1 name=builder",
				"TOOL_CALL_START subagentRunId=agent_b1 toolCallId=tc5 toolCallName=delete",
				"TEXT_MESSAGE_END messageId=r1", "TOOL_CALL_END subagentRunId=agent_b1 toolCallId=tc5",
				"SUBAGENT_FINISHED subagentRunId=agent_b1 outcome=suspended interruptIds=[req1]",
				"RUN_FINISHED outcome=interrupt"},
		},
		{
			name: "run-finish completed",
			in:   []instanceai.Event{runStart(), textDelta(orch, "r", "x"), finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED", "TEXT_MESSAGE_START messageId=r", "TEXT_MESSAGE_CONTENT messageId=r delta=x",
				"TEXT_MESSAGE_END messageId=r", "RUN_FINISHED outcome=success"},
		},
		{
			name: "run-finish cancelled",
			in:   []instanceai.Event{runStart(), toolInputStart(orch, "tc", "t"), finish(instanceai.RunCancelled, instanceai.ReasonUserCancelled)},
			want: []string{"RUN_STARTED", "TOOL_CALL_START toolCallId=tc toolCallName=t", "TOOL_CALL_END toolCallId=tc",
				"RUN_FINISHED outcome=cancelled"},
		},
		{
			name: "run-finish error",
			in: []instanceai.Event{runStart(), ev(instanceai.TypeError, orch, "", &instanceai.ErrorPayload{Content: "model unavailable"}),
				finish(instanceai.RunError, "")},
			want: []string{"RUN_STARTED", `CUSTOM instance-ai.error value={"content":"model unavailable"}`,
				"RUN_ERROR code=run_failed message=model unavailable"},
		},
		{
			// The error's own code is the RUN_ERROR's, not only a CUSTOM's.
			name: "run-finish error with a code",
			in: []instanceai.Event{runStart(), ev(instanceai.TypeError, orch, "", &instanceai.ErrorPayload{Content: "no route to the model", Code: "connection_failed"}),
				finish(instanceai.RunError, "")},
			want: []string{"RUN_STARTED", `CUSTOM instance-ai.error value={"content":"no route to the model","code":"connection_failed"}`,
				"RUN_ERROR code=connection_failed message=no route to the model"},
		},
		{
			name: "run-finish interrupted",
			in:   []instanceai.Event{runStart(), reasoningDelta(orch, "r", "x"), finish(instanceai.RunInterrupted, instanceai.ReasonCrashed)},
			want: []string{"RUN_STARTED", "REASONING_START messageId=r:reasoning", "REASONING_MESSAGE_START messageId=r:reasoning",
				"REASONING_MESSAGE_CONTENT messageId=r:reasoning delta=x",
				"REASONING_MESSAGE_END messageId=r:reasoning", "REASONING_END messageId=r:reasoning",
				"RUN_ERROR code=interrupted message=crash_interrupted"},
		},
		{
			name: "the orchestrator's finish is held while background agents work",
			in: []instanceai.Event{runStart(), spawned(sub, orch, "builder"), textDelta(orch, "r1", "Started a builder"),
				textDelta(sub, "s1", "a"), finish(instanceai.RunCompleted, ""), textDelta(sub, "s1", "b"),
				completed(sub, instanceai.RunCompleted, "done", ""), textDelta(orch, "r9", "late")},
			want: []string{"RUN_STARTED",
				"SUBAGENT_STARTED subagentRunId=agent_b1 name=builder",
				"TEXT_MESSAGE_START messageId=r1", "TEXT_MESSAGE_CONTENT messageId=r1 delta=Started a builder",
				"TEXT_MESSAGE_START subagentRunId=agent_b1 messageId=s1", "TEXT_MESSAGE_CONTENT subagentRunId=agent_b1 messageId=s1 delta=a",
				"TEXT_MESSAGE_END messageId=r1", "TEXT_MESSAGE_END subagentRunId=agent_b1 messageId=s1",
				`CUSTOM instance-ai.orchestrator-finished value={"status":"completed"}`,
				"TEXT_MESSAGE_START subagentRunId=agent_b1 messageId=s1:2", "TEXT_MESSAGE_CONTENT subagentRunId=agent_b1 messageId=s1:2 delta=b",
				"TEXT_MESSAGE_END subagentRunId=agent_b1 messageId=s1:2",
				"SUBAGENT_FINISHED subagentRunId=agent_b1 result=done outcome=success",
				"RUN_FINISHED outcome=success"},
		},
		{
			name: "a stream without run-start starts the run lazily",
			in:   []instanceai.Event{toolResult(orch, "tc1", `"ok"`), finish(instanceai.RunCompleted, "")},
			want: []string{"RUN_STARTED", `TOOL_CALL_RESULT messageId=result:tc1 toolCallId=tc1 content=ok`, "RUN_FINISHED outcome=success"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewInstanceToAGUI("thread1", "agui-run1")
			out := feed(m, tc.in...)
			got := summaries(out)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			v := verify.New()
			for i, e := range out {
				if err := v.Check(e); err != nil {
					t.Fatalf("event %d (%s) breaks the client's rules: %v", i, summary(e), err)
				}
			}
		})
	}
}

func TestRunIDsAndTimestamps(t *testing.T) {
	m := NewInstanceToAGUI("thread1", "agui-run1")
	s := runStart()
	s.TS = 1700000000001
	f := finish(instanceai.RunCompleted, "")
	f.TS = 1700000000002
	out := feed(m, s, f)
	if len(out) != 2 {
		t.Fatalf("got %v", summaries(out))
	}
	rs, ok1 := out[0].(*agui.RunStarted)
	rf, ok2 := out[1].(*agui.RunFinished)
	if !ok1 || !ok2 || rs.ThreadID != "thread1" || rs.RunID != "agui-run1" || rf.ThreadID != "thread1" || rf.RunID != "agui-run1" {
		t.Fatalf("ids: %+v %+v", out[0], out[1])
	}
	if rs.Timestamp != 1700000000001 || rf.Timestamp != 1700000000002 {
		t.Fatalf("timestamps %d %d", rs.Timestamp, rf.Timestamp)
	}
	if !m.Finished() || m.Push(textDelta(orch, "x", "y")) != nil {
		t.Fatal("events after the terminal event must be dropped")
	}
}

func TestToolResultMetadata(t *testing.T) {
	m := NewInstanceToAGUI("t", "r")
	out := feed(m, runStart(), toolResult(orch, "a", `1`), toolError(instanceai.TypeToolError, orch, "b", "e"),
		toolError(instanceai.TypeToolInterrupted, orch, "c", "i"))
	var kinds []string
	for _, e := range out {
		if r, ok := e.(*agui.ToolCallResult); ok {
			raw, _ := json.Marshal(r.Metadata[MetadataKey])
			kinds = append(kinds, string(raw))
		}
	}
	want := []string{`{"kind":"result"}`, `{"kind":"error"}`, `{"kind":"interrupted"}`}
	if !slices.Equal(kinds, want) {
		t.Fatalf("got %v, want %v", kinds, want)
	}
}

func TestConfirmationInterrupt(t *testing.T) {
	m := NewInstanceToAGUI("t", "r")
	out := feed(m, runStart(), toolCall(orch, "tc5", "delete", `{}`), confirm(orch, "req1", "tc5"))
	rf, ok := out[len(out)-1].(*agui.RunFinished)
	if !ok || rf.Outcome == nil || rf.Outcome.Type != agui.OutcomeInterrupt || len(rf.Outcome.Interrupts) != 1 {
		t.Fatalf("last event %s", summary(out[len(out)-1]))
	}
	in := rf.Outcome.Interrupts[0]
	if in.ID != "req1" || in.ToolCallID != "tc5" || in.Message != "Delete it?" || in.Reason != InterruptReason || in.Metadata["severity"] != "destructive" {
		t.Fatalf("interrupt %+v", in)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(in.ResponseSchema, &schema); err != nil || schema.Type != "object" ||
		schema.Properties["approved"] == nil || schema.Properties["userInput"] == nil || !slices.Equal(schema.Required, []string{"approved"}) {
		t.Fatalf("responseSchema %s (%v)", in.ResponseSchema, err)
	}
	if !m.Suspended() || !m.Finished() {
		t.Fatal("not suspended")
	}
}

func TestResumeContinuesTheRun(t *testing.T) {
	sub := "agent_b1"
	m := NewInstanceToAGUI("t", "r1")
	first := feed(m, runStart(), spawned(sub, orch, "builder"), toolCall(sub, "tc5", "delete", `{}`), confirm(sub, "req1", "tc5"),
		toolResult(sub, "tc5", `"deleted"`), completed(sub, instanceai.RunCompleted, "ok", ""))
	if err := verify.Stream(first); err != nil {
		t.Fatal(err)
	}
	second := m.Resume("r2")
	second = append(second, feed(m, finish(instanceai.RunCompleted, ""))...)
	want := []string{"RUN_STARTED", "SUBAGENT_STARTED subagentRunId=agent_b1 name=builder",
		`TOOL_CALL_RESULT subagentRunId=agent_b1 messageId=result:tc5 toolCallId=tc5 content=deleted`,
		"SUBAGENT_FINISHED subagentRunId=agent_b1 result=ok outcome=success", "RUN_FINISHED outcome=success"}
	if got := summaries(second); !slices.Equal(got, want) {
		t.Fatalf("got:\n  %s", strings.Join(got, "\n  "))
	}
	if rs := second[0].(*agui.RunStarted); rs.RunID != "r2" {
		t.Fatalf("resumed run id %q", rs.RunID)
	}
	if err := verify.Stream(append(first, second...)); err != nil {
		t.Fatal(err)
	}
}

func TestClose(t *testing.T) {
	t.Run("error", func(t *testing.T) {
		m := NewInstanceToAGUI("t", "r")
		out := feed(m, runStart(), textDelta(orch, "r1", "x"), spawned("a", orch, "b"))
		out = append(out, m.Close(errors.New("upstream gone"))...)
		got := summaries(out[len(out)-3:])
		want := []string{"TEXT_MESSAGE_END messageId=r1", "SUBAGENT_ERROR subagentRunId=a code=abandoned message=the run ended before this agent completed",
			"RUN_ERROR code=stream_error message=upstream gone"}
		if !slices.Equal(got, want) {
			t.Fatalf("got %v", got)
		}
		if err := verify.Stream(out); err != nil {
			t.Fatal(err)
		}
		if m.Close(nil) != nil {
			t.Fatal("second Close emitted events")
		}
	})
	t.Run("evicted", func(t *testing.T) {
		m := NewInstanceToAGUI("t", "r")
		out := feed(m, runStart(), textDelta(orch, "r1", "x"))
		reset := &instanceai.Reset{Reason: instanceai.ReasonEventsEvicted, ThreadID: "t", LastEventID: 3, NextEventID: 9}
		out = append(out, m.Close(fmt.Errorf("feed: %w", reset))...)
		got := summaries(out[len(out)-2:])
		want := []string{"TEXT_MESSAGE_END messageId=r1",
			`RUN_ERROR code=events_evicted message=events 4 to 8 of thread "t" are no longer stored (events_evicted); reload the thread`}
		if !slices.Equal(got, want) {
			t.Fatalf("got %v", got)
		}
		if err := verify.Stream(out); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("held finish", func(t *testing.T) {
		m := NewInstanceToAGUI("t", "r")
		out := feed(m, runStart(), spawned("a", orch, "b"), finish(instanceai.RunCancelled, ""))
		out = append(out, m.Close(nil)...)
		if last := summary(out[len(out)-1]); last != "RUN_FINISHED outcome=cancelled" {
			t.Fatalf("last %s", last)
		}
		if err := verify.Stream(out); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("nothing pushed", func(t *testing.T) {
		out := NewInstanceToAGUI("t", "r").Close(nil)
		if got := summaries(out); !slices.Equal(got, []string{"RUN_STARTED", "RUN_ERROR code=incomplete message=the run ended without run-finish"}) {
			t.Fatalf("got %v", got)
		}
	})
}

func TestPlanItemsInState(t *testing.T) {
	withPlan := func(ids ...string) instanceai.Event {
		p := &instanceai.TasksUpdate{}
		for _, id := range ids {
			p.PlanItems = append(p.PlanItems, instanceai.PlannedTask{ID: id, Title: id, Kind: "build", Spec: "s"})
		}
		return ev(instanceai.TypeTasksUpdate, orch, "", p)
	}
	m := NewInstanceToAGUI("t", "r")
	out := feed(m, runStart(), withPlan(), withPlan("p1"), withPlan("p2"), withPlan(), finish(instanceai.RunCompleted, ""))
	want := []string{"RUN_STARTED", `STATE_SNAPSHOT snapshot={"tasks":[]}`,
		`STATE_DELTA delta=[{"op":"add","path":"/planItems","value":[{"deps":[],"id":"p1","kind":"build","spec":"s","title":"p1"}]}]`,
		`STATE_DELTA delta=[{"op":"replace","path":"/planItems/0/id","value":"p2"},{"op":"replace","path":"/planItems/0/title","value":"p2"}]`,
		`STATE_DELTA delta=[{"op":"remove","path":"/planItems"}]`,
		"RUN_FINISHED outcome=success"}
	if got := summaries(out); !slices.Equal(got, want) {
		t.Fatalf("got:\n  %s", strings.Join(got, "\n  "))
	}
	v := verify.New()
	for _, e := range out {
		if err := v.Check(e); err != nil {
			t.Fatal(err)
		}
	}
	if raw, _ := json.Marshal(v.State()); string(raw) != `{"tasks":[]}` {
		t.Fatalf("final state %s", raw)
	}
}
