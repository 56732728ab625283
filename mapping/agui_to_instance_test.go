package mapping_test

import (
	"bytes"
	"encoding/json"
	"errors"
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
		}, want: []string{"text-delta resp=m1 Hel", "text-delta resp=m1 lo", "run-finish completed"}},
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
		}, want: []string{"tool-input-start c1 search", `tool-call c1 search {"q":"x"}`, `tool-result c1 {"n":1}`,
			"tool-input-start c2 noargs", "tool-call c2 noargs ", `tool-result c2 "plain text"`}},
		{name: "tool call in chunks ends at the next event", in: []agui.Event{
			&agui.ToolCallChunk{ToolCallID: "c1", ToolCallName: "f", Delta: `{"a"`},
			&agui.ToolCallChunk{Delta: `:1}`},
			&agui.ToolCallChunk{ToolCallID: "c2", ToolCallName: "g", Delta: `{}`},
			&agui.TextMessageChunk{MessageID: "m", Delta: "done"},
		}, want: []string{"tool-input-start c1 f", `tool-call c1 f {"a":1}`, "tool-input-start c2 g", "tool-call c2 g {}",
			"text-delta resp=m done"}},
		{name: "run error", in: []agui.Event{
			&agui.RunError{Message: "upstream model down", Code: "connection_failed"},
		}, want: []string{"error upstream model down code=connection_failed", "run-finish error"}},
		{name: "cancelled", in: []agui.Event{
			&agui.RunFinished{Outcome: &agui.Outcome{Type: agui.OutcomeCancelled}},
		}, want: []string{"run-finish cancelled"}},
		{name: "custom and events with no counterpart", in: []agui.Event{
			&agui.Custom{Name: "progress", Value: json.RawMessage(`{"p":1}`)},
			&agui.StateSnapshot{Snapshot: json.RawMessage(`{"k":"v"}`)},
		}, want: []string{`custom progress {"p":1}`, `custom ag-ui.STATE_SNAPSHOT {"type":"STATE_SNAPSHOT","snapshot":{"k":"v"}}`}},
		{name: "after the end", in: []agui.Event{
			&agui.RunFinished{},
			&agui.TextMessageChunk{MessageID: "m", Delta: "late"},
		}, want: []string{"run-finish completed"}, err: "TEXT_MESSAGE_CHUNK after the run's end"},
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
		}, want: []string{"tool-input-start c f"}, err: `the arguments of tool call "c" are not a JSON object`},
		{name: "a custom event without a name", in: []agui.Event{
			&agui.Custom{Value: json.RawMessage(`1`)},
		}, err: "CUSTOM makes a custom that is not valid"},
		{name: "an interrupt", in: []agui.Event{
			&agui.RunFinished{Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt, Interrupts: []agui.Interrupt{{ID: "i1"}}}},
		}, err: "not supported yet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mapping.NewAGUIToInstance("run", "agent")
			var got []string
			var err error
			for i, ev := range c.in {
				var out []instanceai.Event
				out, err = m.Push(ev)
				if err != nil && i < len(c.in)-1 {
					t.Fatalf("event %d (%s): %v", i, ev.Type(), err)
				}
				for _, n := range out {
					if n.RunID != "run" || n.AgentID != "agent" {
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
	if _, err := mapping.NewAGUIToInstance("r", "a").Push(&agui.RunFinished{Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt}}); !errors.Is(err, mapping.ErrInterruptOutcome) {
		t.Fatalf("an interrupt: %v, want ErrInterruptOutcome", err)
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
	back := mapping.NewAGUIToInstance("run", agent)
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
				// InstanceToAGUI names a reasoning message after its
				// response and ":reasoning"; coming back, that name is the
				// segment's response id.
				o.ResponseID = strings.TrimSuffix(o.ResponseID, ":reasoning")
				got = append(got, nativeSummary(o))
			}
		}
	}
	var want []string
	for _, n := range native[1:] {
		want = append(want, nativeSummary(n))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("round trip\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
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
	f.Add([]byte(`{"type":"RUN_ERROR","message":"x","code":"y"}
{"type":"CUSTOM","name":"n","value":[1]}`))
	f.Fuzz(func(t *testing.T, stream []byte) {
		m := mapping.NewAGUIToInstance("run", "agent")
		ended := false
		for line := range bytes.SplitSeq(stream, []byte("\n")) {
			ev, err := agui.DecodeEvent(line)
			if err != nil {
				continue
			}
			out, err := m.Push(ev)
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
				ended = ended || n.Type == instanceai.TypeRunFinish
			}
		}
	})
}
