package copilotkitapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui"
)

// Sub-agent events become CUSTOM under their type; an interrupt becomes a
// CUSTOM on_interrupt before its RUN_FINISHED; the rest passes as it is.
func TestDialect(t *testing.T) {
	rewrite := Dialect()
	in := []agui.Event{
		&agui.RunStarted{ThreadID: "t", RunID: "r"},
		&agui.SubagentStarted{SubagentRunID: "s", Name: "builder"},
		&agui.Verbatim{T: agui.TypeSubagentFinished, Data: json.RawMessage(`{"type":"SUBAGENT_FINISHED","subagentRunId":"u"}`)},
		&agui.Verbatim{T: agui.TypeStateSnapshot, Data: json.RawMessage(`{"type":"STATE_SNAPSHOT","snapshot":{}}`)},
		&agui.RunFinished{ThreadID: "t", RunID: "r", Outcome: &agui.Outcome{Type: agui.OutcomeInterrupt,
			Interrupts: []agui.Interrupt{{ID: "i1", Reason: "confirmation"}, {ID: "i2", Reason: "confirmation"}}}},
	}
	var got []string
	for _, ev := range rewrite(in) {
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(raw))
	}
	want := []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"CUSTOM","name":"SUBAGENT_STARTED","value":{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"builder"}}`,
		`{"type":"CUSTOM","name":"SUBAGENT_FINISHED","value":{"type":"SUBAGENT_FINISHED","subagentRunId":"u"}}`,
		`{"type":"STATE_SNAPSHOT","snapshot":{}}`,
		`{"type":"CUSTOM","name":"on_interrupt","value":{"id":"i1","reason":"confirmation"}}`,
		`{"type":"CUSTOM","name":"on_interrupt","value":{"id":"i2","reason":"confirmation"}}`,
	}
	if len(got) != len(want)+1 || strings.Join(got[:len(want)], "\n") != strings.Join(want, "\n") || !strings.Contains(got[len(want)], `"RUN_FINISHED"`) {
		t.Fatalf("got\n  %s\nwant\n  %s\n  RUN_FINISHED", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
