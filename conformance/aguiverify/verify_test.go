package aguiverify

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/threadline/threadline/agui"
)

func TestRules(t *testing.T) {
	start := &agui.RunStarted{ThreadID: "t", RunID: "r"}
	fin := &agui.RunFinished{ThreadID: "t", RunID: "r"}
	for _, tc := range []struct {
		name string
		evs  []agui.Event
		ok   bool
	}{
		{"minimal", []agui.Event{start, fin}, true},
		{"error first", []agui.Event{&agui.RunError{Message: "x"}}, true},
		{"first not RUN_STARTED", []agui.Event{&agui.Custom{Name: "x"}, fin}, false},
		{"event after RUN_FINISHED", []agui.Event{start, fin, &agui.Custom{Name: "x"}}, false},
		{"late RUN_ERROR", []agui.Event{start, fin, &agui.RunError{Message: "late"}}, true},
		{"after RUN_ERROR", []agui.Event{start, &agui.RunError{Message: "x"}, &agui.Custom{Name: "x"}}, false},
		{"two runs", []agui.Event{start, fin, &agui.RunStarted{ThreadID: "t", RunID: "r2"}, fin}, true},
		{"RUN_STARTED while active", []agui.Event{start, start}, false},
		{"content of unopened", []agui.Event{start, &agui.TextMessageContent{MessageID: "m", Delta: "x"}}, false},
		{"double start", []agui.Event{start, &agui.TextMessageStart{MessageID: "m"}, &agui.TextMessageStart{MessageID: "m"}}, false},
		{"finish with open text", []agui.Event{start, &agui.TextMessageStart{MessageID: "m"}, fin}, false},
		{"finish with open tool", []agui.Event{start, &agui.ToolCallStart{ToolCallID: "c", ToolCallName: "n"}, fin}, false},
		{"args of unopened tool", []agui.Event{start, &agui.ToolCallArgs{ToolCallID: "c"}}, false},
		{"reasoning span open", []agui.Event{start, &agui.ReasoningStart{MessageID: "r"}, fin}, false},
		{"reasoning message open", []agui.Event{start, &agui.ReasoningStart{MessageID: "r"}, &agui.ReasoningMessageStart{MessageID: "r"}, &agui.ReasoningEnd{MessageID: "r"}, fin}, false},
		{"step not started", []agui.Event{start, &agui.StepFinished{StepName: "s"}}, false},
		{"step twice", []agui.Event{start, &agui.StepStarted{StepName: "s"}, &agui.StepStarted{StepName: "s"}}, false},
		{"subagent open", []agui.Event{start, &agui.SubagentStarted{SubagentRunID: "a", Name: "n"}, fin}, false},
		{"subagent unknown", []agui.Event{start, &agui.SubagentFinished{SubagentRunID: "a"}}, false},
		{"subagent reused", []agui.Event{start, &agui.SubagentStarted{SubagentRunID: "a", Name: "n"}, &agui.SubagentError{SubagentRunID: "a", Message: "m"}, &agui.SubagentStarted{SubagentRunID: "a", Name: "n"}}, false},
		{"owner mismatch", []agui.Event{start, &agui.TextMessageStart{MessageID: "m"}, &agui.TextMessageContent{Attribution: agui.Attribution{SubagentRunID: "a"}, MessageID: "m"}}, false},
		{"interrupt without interrupts", []agui.Event{start, &agui.RunFinished{ThreadID: "t", RunID: "r", Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := New()
			var err error
			for _, e := range tc.evs {
				if err = v.Check(e); err != nil {
					break
				}
			}
			if tc.ok && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestApply(t *testing.T) {
	var doc any
	_ = json.Unmarshal([]byte(`{"tasks":[{"id":"a"},{"id":"b"}]}`), &doc)
	for _, op := range []agui.PatchOp{
		{Op: "replace", Path: "/tasks/0", Value: json.RawMessage(`{"id":"A"}`)},
		{Op: "add", Path: "/tasks/-", Value: json.RawMessage(`{"id":"c"}`)},
		{Op: "remove", Path: "/tasks/1"},
		{Op: "add", Path: "/planItems", Value: json.RawMessage(`[]`)},
	} {
		var err error
		if doc, err = Apply(doc, op); err != nil {
			t.Fatal(err)
		}
	}
	var want any
	_ = json.Unmarshal([]byte(`{"tasks":[{"id":"A"},{"id":"c"}],"planItems":[]}`), &want)
	if !reflect.DeepEqual(doc, want) {
		t.Fatalf("got %v", doc)
	}
	if _, err := Apply(doc, agui.PatchOp{Op: "remove", Path: "/tasks/5"}); err == nil {
		t.Fatal("out-of-range remove accepted")
	}
}
