package mapping_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
)

// nativeSummary is an Instance AI event in a line: its type, response,
// and payload.
func nativeSummary(ev instanceai.Event) string {
	s := string(ev.Type)
	if ev.ResponseID != "" {
		s += " resp=" + ev.ResponseID
	}
	switch p := ev.Payload.(type) {
	case *instanceai.Text:
		s += " " + p.Text
	case *instanceai.ToolInputStart:
		s += " " + p.ToolCallID + " " + p.ToolName
	case *instanceai.ToolCall:
		s += " " + p.ToolCallID + " " + p.ToolName + " " + string(p.Args)
	case *instanceai.ToolResult:
		s += " " + p.ToolCallID + " " + string(p.Result)
	case *instanceai.ErrorPayload:
		s += " " + p.Content + " code=" + p.Code
	case *instanceai.RunFinish:
		s += " " + p.Status
	case *instanceai.Custom:
		s += " " + p.Name + " " + string(p.Value)
	case *instanceai.AGUIEvent:
		s += " " + string(p.Event)
	case *instanceai.AgentSpawned:
		s += " " + p.Role + " parent=" + p.ParentID
	case *instanceai.AgentCompleted:
		s += " " + p.Role + " " + p.Result + p.Error
	}
	if ev.AgentID != "agent" && ev.AgentID != "" {
		s += " @" + ev.AgentID
	}
	return s
}

func TestAGUIToInstance(t *testing.T) {
	cases := []struct {
		name string
		in   []agui.Event
		want []string
		err  string // the error of the last event, when it must fail
	}{
		{name: "text message", in: []agui.Event{
			&agui.RunStarted{ThreadID: "t", RunID: "u1"},
			&agui.TextMessageStart{MessageID: "m1", Role: agui.RoleAssistant},
			&agui.TextMessageContent{MessageID: "m1", Delta: "Hel"},
			&agui.TextMessageContent{MessageID: "m1", Delta: "lo"},
			&agui.TextMessageEnd{MessageID: "m1"},
			&agui.RunFinished{ThreadID: "t", RunID: "u1"},
		}, want: []string{`ag-ui {"type":"RUN_STARTED","threadId":"t","runId":"u1"}`, "text-delta resp=m1 Hel", "text-delta resp=m1 lo",
			`ag-ui {"type":"RUN_FINISHED","threadId":"t","runId":"u1"}`}},
		{name: "text chunks", in: []agui.Event{
			&agui.TextMessageChunk{MessageID: "m1", Delta: "a"},
			&agui.TextMessageChunk{Delta: "b"},
		}, want: []string{"text-delta resp=m1 a", "text-delta resp=m1 b"}},
		{name: "a user message is not the answer", in: []agui.Event{
			&agui.TextMessageStart{MessageID: "u", Role: agui.RoleUser},
		}},
		{name: "reasoning", in: []agui.Event{
			&agui.ReasoningStart{MessageID: "r"},
			&agui.ReasoningMessageStart{MessageID: "r"},
			&agui.ReasoningMessageContent{MessageID: "r", Delta: "think"},
			&agui.ReasoningMessageEnd{MessageID: "r"},
			&agui.ReasoningEnd{MessageID: "r"},
			&agui.ReasoningMessageChunk{MessageID: "r2", Delta: "more"},
		}, want: []string{"reasoning-delta resp=r think", "reasoning-delta resp=r2 more"}},
		{name: "tool call and results", in: []agui.Event{
			&agui.ToolCallStart{ToolCallID: "c1", ToolCallName: "search"},
			&agui.ToolCallArgs{ToolCallID: "c1", Delta: `{"q":`},
			&agui.ToolCallArgs{ToolCallID: "c1", Delta: `"x"}`},
			&agui.ToolCallEnd{ToolCallID: "c1"},
			&agui.ToolCallResult{MessageID: "t1", ToolCallID: "c1", Content: `{"n":1}`},
			&agui.ToolCallStart{ToolCallID: "c2", ToolCallName: "noargs"},
			&agui.ToolCallEnd{ToolCallID: "c2"},
			&agui.ToolCallResult{MessageID: "t2", ToolCallID: "c2", Content: "plain text"},
		}, want: []string{"tool-input-start resp=c1 c1 search", `tool-call resp=c1 c1 search {"q":"x"}`, `tool-result c1 {"n":1}`,
			"tool-input-start resp=c2 c2 noargs", "tool-call resp=c2 c2 noargs ", `tool-result c2 "plain text"`}},
		{name: "tool call in chunks ends at the next event", in: []agui.Event{
			&agui.ToolCallChunk{ToolCallID: "c1", ToolCallName: "f", Delta: `{"a"`},
			&agui.ToolCallChunk{Delta: `:1}`},
			&agui.ToolCallChunk{ToolCallID: "c2", ToolCallName: "g", Delta: `{}`},
			&agui.TextMessageChunk{MessageID: "m", Delta: "done"},
		}, want: []string{"tool-input-start resp=c1 c1 f", `tool-call resp=c1 c1 f {"a":1}`, "tool-input-start resp=c2 c2 g",
			"tool-call resp=c2 c2 g {}", "text-delta resp=m done"}},
		{name: "run error ends the run with nothing to emit", in: []agui.Event{
			&agui.RunError{Message: "upstream model down", Code: "connection_failed"},
		}},
		{name: "custom and events with no counterpart", in: []agui.Event{
			&agui.Custom{Name: "progress", Value: json.RawMessage(`{"p":1}`)},
			&agui.StateSnapshot{Snapshot: json.RawMessage(`{"k":"v"}`)},
			&agui.StepStarted{StepName: "plan"},
			&agui.Raw{Event: json.RawMessage(`{"x":1}`), Source: "lg"},
		}, want: []string{`ag-ui {"type":"CUSTOM","name":"progress","value":{"p":1}}`, `ag-ui {"type":"STATE_SNAPSHOT","snapshot":{"k":"v"}}`,
			`ag-ui {"type":"STEP_STARTED","stepName":"plan"}`, `ag-ui {"type":"RAW","event":{"x":1},"source":"lg"}`}},
		{name: "sub-agents are agents of the run", in: []agui.Event{
			&agui.SubagentStarted{SubagentRunID: "s1", Name: "researcher", Description: "looks things up"},
			&agui.TextMessageStart{MessageID: "sm", Attribution: agui.Attribution{SubagentRunID: "s1"}},
			&agui.TextMessageContent{MessageID: "sm", Delta: "found it", Attribution: agui.Attribution{SubagentRunID: "s1"}},
			&agui.SubagentStarted{SubagentRunID: "s2", Name: "checker", ParentSubagentRunID: "s1"},
			&agui.SubagentError{SubagentRunID: "s2", Message: "no access"},
			&agui.SubagentFinished{SubagentRunID: "s1", Result: json.RawMessage(`"done"`)},
			&agui.TextMessageChunk{MessageID: "m", Delta: "ok"},
		}, want: []string{"agent-spawned researcher parent=agent @s1", "text-delta resp=sm found it @s1",
			"agent-spawned checker parent=s1 @s2", "agent-completed checker no access @s2", "agent-completed researcher done @s1",
			"text-delta resp=m ok"}},
		{name: "a sub-agent left active at the run's end is ended", in: []agui.Event{
			&agui.SubagentStarted{SubagentRunID: "s1", Name: "researcher"},
			&agui.RunFinished{ThreadID: "t", RunID: "u"},
		}, want: []string{"agent-spawned researcher parent=agent @s1",
			"agent-completed researcher the upstream ended its run before this sub-agent finished @s1",
			`ag-ui {"type":"RUN_FINISHED","threadId":"t","runId":"u"}`}},
		{name: "an event of a sub-agent not started", in: []agui.Event{
			&agui.TextMessageStart{MessageID: "sm", Attribution: agui.Attribution{SubagentRunID: "nope"}},
		}, err: `subagentRunId "nope" names no active sub-agent`},
		{name: "after the end", in: []agui.Event{
			&agui.RunFinished{},
			&agui.TextMessageChunk{MessageID: "m", Delta: "late"},
		}, want: []string{`ag-ui {"type":"RUN_FINISHED","threadId":"","runId":""}`}, err: "TEXT_MESSAGE_CHUNK after the run's end"},
		{name: "an interrupt that names none", in: []agui.Event{
			&agui.RunFinished{Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt}},
		}, err: "names no interrupt"},
		{name: "content of a message not started", in: []agui.Event{
			&agui.TextMessageContent{MessageID: "m", Delta: "x"},
		}, err: `TEXT_MESSAGE_CONTENT: text message "m" was not started`},
		{name: "a message started twice", in: []agui.Event{
			&agui.TextMessageStart{MessageID: "m"},
			&agui.TextMessageStart{MessageID: "m"},
		}, err: `text message "m" is open already`},
		{name: "arguments of a call not started", in: []agui.Event{
			&agui.ToolCallArgs{ToolCallID: "c", Delta: "{}"},
		}, err: `tool call "c" was not started`},
		{name: "arguments that are not an object", in: []agui.Event{
			&agui.ToolCallStart{ToolCallID: "c", ToolCallName: "f"},
			&agui.ToolCallArgs{ToolCallID: "c", Delta: `[1]`},
			&agui.ToolCallEnd{ToolCallID: "c"},
		}, want: []string{"tool-input-start resp=c c f"}, err: `the arguments of tool call "c" are not a JSON object`},
		{name: "a custom event without a name", in: []agui.Event{
			&agui.Custom{Value: json.RawMessage(`1`)},
		}, err: "CUSTOM: name is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mapping.NewAGUIToInstance("run", "agent", "up")
			var got []string
			var err error
			for i, ev := range c.in {
				var out []instanceai.Event
				out, err = m.Push(ev)
				if err != nil && i < len(c.in)-1 {
					t.Fatalf("event %d (%s): %v", i, ev.Type(), err)
				}
				for _, n := range out {
					if n.RunID != "run" || n.AgentID == "" {
						t.Fatalf("%s of run %q agent %q", n.Type, n.RunID, n.AgentID)
					}
					if verr := n.Validate(); verr != nil {
						t.Fatalf("%s does not validate: %v", nativeSummary(n), verr)
					}
					got = append(got, nativeSummary(n))
				}
			}
			if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// The upstream run's end is End's to report, and Continue reads the next
// upstream run of the same Threadline run (an answered interrupt).
func TestAGUIToInstanceEnd(t *testing.T) {
	m := mapping.NewAGUIToInstance("r", "a", "up")
	if _, err := m.Push(&agui.ToolCallStart{ToolCallID: "c", ToolCallName: "f"}); err != nil {
		t.Fatal(err)
	}
	interrupt := &agui.RunFinished{Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt, Interrupts: []agui.Interrupt{{ID: "i1", Reason: "approval"}}}}
	if _, err := m.Push(interrupt); err != nil {
		t.Fatal(err)
	}
	end, ok := m.End().(*agui.RunFinished)
	if !ok || end.Outcome.Interrupts[0].ID != "i1" {
		t.Fatalf("End = %#v", m.End())
	}
	m.Continue()
	out, err := m.Push(&agui.ToolCallEnd{ToolCallID: "c"})
	if err != nil || len(out) != 1 || out[0].Type != instanceai.TypeToolCall {
		t.Fatalf("the call open before the interrupt: %v, %v", out, err)
	}
	if _, err := m.Push(&agui.RunError{Message: "boom", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if e, ok := m.End().(*agui.RunError); !ok || e.Message != "boom" {
		t.Fatalf("End = %#v", m.End())
	}
}

// Bytes pushed as JSON are kept as they came, compacted.
func TestAGUIToInstanceKeepsBytes(t *testing.T) {
	m := mapping.NewAGUIToInstance("r", "a", "up")
	out, err := m.PushJSON([]byte(`{ "type": "STATE_DELTA", "delta": [ {"op":"add","path":"/a","value":"\u00e9"} ], "extra": 1 }`))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := out[0].Payload.(*instanceai.AGUIEvent)
	if !ok || string(p.Event) != `{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":"\u00e9"}],"extra":1}` || p.Upstream != "up" {
		t.Fatalf("kept %s", nativeSummary(out[0]))
	}
	if _, err := m.PushJSON([]byte(`{"type":"NOT_A_TYPE"}`)); err == nil {
		t.Fatal("an unknown type was accepted")
	}
}

// A run's events served as AG-UI and translated back are the run's text,
// reasoning, tool calls and results, and its end, message by message.
func TestAGUIRoundTrip(t *testing.T) {
	agent := instanceai.OrchestratorAgentID("run")
	ev := func(typ instanceai.EventType, resp string, p instanceai.Payload) instanceai.Event {
		return instanceai.Event{Type: typ, RunID: "run", AgentID: agent, ResponseID: resp, Payload: p}
	}
	native := []instanceai.Event{
		ev(instanceai.TypeRunStart, "", &instanceai.RunStart{MessageID: "m"}),
		ev(instanceai.TypeReasoningDelta, "x", &instanceai.Text{Text: "Let me see."}),
		ev(instanceai.TypeTextDelta, "y", &instanceai.Text{Text: "Looking "}),
		ev(instanceai.TypeTextDelta, "y", &instanceai.Text{Text: "it up."}),
		ev(instanceai.TypeToolInputStart, "", &instanceai.ToolInputStart{ToolCallID: "c1", ToolName: "workflows"}),
		ev(instanceai.TypeToolCall, "", &instanceai.ToolCall{ToolCallID: "c1", ToolName: "workflows", Args: json.RawMessage(`{"action":"list"}`)}),
		ev(instanceai.TypeToolResult, "", &instanceai.ToolResult{ToolCallID: "c1", Result: json.RawMessage(`{"count":2}`)}),
		ev(instanceai.TypeTextDelta, "z", &instanceai.Text{Text: "You have 2."}),
		ev(instanceai.TypeRunFinish, "", &instanceai.RunFinish{Status: instanceai.RunCompleted}),
	}
	forward := mapping.NewInstanceToAGUI("t", "run")
	back := mapping.NewAGUIToInstance("run", agent, "up")
	var got []string
	for _, n := range native {
		for _, a := range forward.Push(n) {
			// Through the wire: the client reads the JSON.
			data, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			decoded, err := agui.DecodeEvent(data)
			if err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			out, err := back.Push(decoded)
			if err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			for _, o := range out {
				if o.Type == instanceai.TypeAGUI {
					continue // the upstream run's own start and end, kept for the record
				}
				// InstanceToAGUI names a reasoning message after its
				// response and ":reasoning"; coming back, that name is the
				// segment's response id.
				o.ResponseID = strings.TrimSuffix(o.ResponseID, ":reasoning")
				if o.Type == instanceai.TypeToolInputStart || o.Type == instanceai.TypeToolCall {
					// A call's parent message (the text before it) comes
					// back as its response id.
					if o.ResponseID != "y" {
						t.Fatalf("%s has parent %q, want the text before it", o.Type, o.ResponseID)
					}
					o.ResponseID = ""
				}
				got = append(got, nativeSummary(o))
			}
		}
	}
	var want []string
	for _, n := range native[1 : len(native)-1] {
		want = append(want, nativeSummary(n))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("round trip\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if end, ok := back.End().(*agui.RunFinished); !ok || (end.Outcome != nil && end.Outcome.Type != agui.OutcomeSuccess) {
		t.Fatalf("the run's end came back as %#v", back.End())
	}
}

// No upstream stream makes the translator panic, emit an event that does
// not validate, or emit anything after the run's end.
func FuzzAGUIToInstance(f *testing.F) {
	f.Add([]byte(`{"type":"TEXT_MESSAGE_START","messageId":"m"}
{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}
{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","delta":"{\"a\":"}
{"type":"TOOL_CALL_CHUNK","delta":"1}"}
{"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"c","content":"ok"}
{"type":"RUN_FINISHED","threadId":"t","runId":"u"}`))
	f.Add([]byte(`{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}
{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s"}
{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":1}]}
{"type":"SUBAGENT_FINISHED","subagentRunId":"s","result":{"k":1}}
{"type":"RUN_FINISHED","threadId":"t","runId":"u","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r"}]}}`))
	f.Add([]byte(`{"type":"RUN_ERROR","message":"x","code":"y"}
{"type":"CUSTOM","name":"n","value":[1]}`))
	f.Fuzz(func(t *testing.T, stream []byte) {
		m := mapping.NewAGUIToInstance("run", "agent", "up")
		ended := false
		for line := range bytes.SplitSeq(stream, []byte("\n")) {
			out, err := m.PushJSON(line)
			if err != nil {
				continue
			}
			if ended && len(out) > 0 {
				t.Fatalf("events after the end: %v", out)
			}
			for _, n := range out {
				if verr := n.Validate(); verr != nil {
					t.Fatalf("%s: %v", nativeSummary(n), verr)
				}
			}
			ended = m.End() != nil
		}
	})
}

// An upstream's events kept as ag-ui events go out on the AG-UI stream as
// the upstream sent them, except its own run's start and end: the stream's
// run is Threadline's.
func TestAGUIEventsServedBack(t *testing.T) {
	agent := instanceai.OrchestratorAgentID("run")
	kept := func(data string) instanceai.Event {
		return instanceai.Event{Type: instanceai.TypeAGUI, RunID: "run", AgentID: agent, TS: 5,
			Payload: &instanceai.AGUIEvent{Event: json.RawMessage(data), Upstream: "up"}}
	}
	state := `{"type":"STATE_SNAPSHOT","snapshot":{"n":1,"s":"\u00e9"},"timestamp":1}`
	native := []instanceai.Event{
		{Type: instanceai.TypeRunStart, RunID: "run", AgentID: agent, Payload: &instanceai.RunStart{MessageID: "m"}},
		kept(`{"type":"RUN_STARTED","threadId":"ut","runId":"ur"}`),
		kept(state),
		kept(`{"type":"RUN_FINISHED","threadId":"ut","runId":"ur"}`),
		{Type: instanceai.TypeRunFinish, RunID: "run", AgentID: agent, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}},
	}
	forward := mapping.NewInstanceToAGUI("t", "client-run")
	var got []string
	for _, n := range native {
		for _, a := range forward.Push(n) {
			data, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(data))
		}
	}
	if len(got) != 3 || got[1] != state || !strings.Contains(got[0], `"runId":"client-run"`) || !strings.Contains(got[2], `"RUN_FINISHED"`) ||
		!strings.Contains(got[2], `"runId":"client-run"`) {
		t.Fatalf("served\n  %s", strings.Join(got, "\n  "))
	}
}
