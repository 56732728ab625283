package instanceai

import (
	"testing"
	"time"
)

// A run's deltas without a responseId are named after the count of
// events queued before their segment's first: a segment runs until its
// agent's next stored event, the run's finish, or a quiet second; text
// and reasoning, and each agent's, apart; a responseId the producer gave
// is kept.
func TestSegmentNamerNamesSegmentsOnce(t *testing.T) {
	var n segmentNamer
	t0 := time.Unix(1000, 0)
	type step struct {
		name  string
		ev    Event
		after time.Duration // since t0
		want  string        // its responseId ("" for an event that is no delta)
		do    func()        // what the event does to the run's segments, after it
	}
	delta := func(agent string, typ EventType, responseID string) Event {
		return Event{Type: typ, RunID: "run", AgentID: agent, ResponseID: responseID, Payload: &Text{Text: "x"}}
	}
	steps := []step{
		{name: "the first delta opens a segment", ev: delta("o", TypeTextDelta, ""), want: "run:p:0"},
		{name: "the next goes on with it", ev: delta("o", TypeTextDelta, ""), after: 900 * time.Millisecond, want: "run:p:0"},
		{name: "reasoning is another segment", ev: delta("o", TypeReasoningDelta, ""), after: time.Second, want: "run:p:2"},
		{name: "another agent's too", ev: delta("sub", TypeTextDelta, ""), after: time.Second, want: "run:p:3"},
		{name: "a named delta keeps its id", ev: delta("o", TypeTextDelta, "r1"), after: time.Second, want: "r1"},
		{name: "a quiet second begins another", ev: delta("o", TypeTextDelta, ""), after: 2100 * time.Millisecond, want: "run:p:5"},
		{name: "a stored event of the agent ends it", ev: Event{Type: TypeToolCall, RunID: "run", AgentID: "o"},
			after: 2200 * time.Millisecond, do: func() { n.closeAgent("o") }},
		{name: "so its next delta begins another", ev: delta("o", TypeTextDelta, ""), after: 2300 * time.Millisecond, want: "run:p:7"},
		{name: "other agents' segments go on", ev: delta("sub", TypeTextDelta, ""), after: 1900 * time.Millisecond, want: "run:p:3"},
		{name: "the finish ends them all", ev: Event{Type: TypeRunFinish, RunID: "run", AgentID: "o"},
			after: 2400 * time.Millisecond, do: func() { n.closeAll() }},
		{name: "a late background delta begins another", ev: delta("sub", TypeTextDelta, ""), after: 2500 * time.Millisecond, want: "run:p:10"},
	}
	for _, s := range steps {
		ev := s.ev
		n.name(&ev, t0.Add(s.after))
		if ev.ResponseID != s.want && (isDelta(ev.Type) || ev.ResponseID != "") {
			t.Fatalf("%s: responseId %q, want %q", s.name, ev.ResponseID, s.want)
		}
		n.counted()
		if s.do != nil {
			s.do()
		}
	}
}
