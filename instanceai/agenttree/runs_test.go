package agenttree

import (
	"encoding/json"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// TestFoldRuns: two interleaved runs, a title update outside any run and
// an event of a run before its run-start; each run's state is the fold of
// its own events from its run-start, the runs come in run-start order, and
// nothing after the cursor counts.
func TestFoldRuns(t *testing.T) {
	ev := func(typ instanceai.EventType, run string, ts int64, p instanceai.Payload) instanceai.Event {
		return instanceai.Event{Type: typ, RunID: run, AgentID: "orchestrator-" + run, TS: ts, Payload: p}
	}
	start := func(run string, ts int64) instanceai.Event {
		return ev(instanceai.TypeRunStart, run, ts, &instanceai.RunStart{MessageID: "msg_" + run})
	}
	text := func(run, s string) instanceai.Event {
		return ev(instanceai.TypeTextDelta, run, 0, &instanceai.Text{Text: s})
	}
	finish := func(run string) instanceai.Event {
		return ev(instanceai.TypeRunFinish, run, 0, &instanceai.RunFinish{Status: "completed"})
	}
	log := []instanceai.Event{
		{Type: instanceai.TypeThreadTitleUpdated, RunID: "run_title", Payload: &instanceai.ThreadTitle{Title: "t"}},
		text("run_b", "before its start "),
		start("run_a", 100), text("run_a", "A1 "),
		start("run_b", 200), text("run_b", "B1"), text("run_a", "A2"),
		finish("run_a"),
		text("run_b", " after the cursor"),
	}
	rows := make([]instanceai.StoredEvent, len(log))
	for i, e := range log {
		rows[i] = instanceai.StoredEvent{Seq: int64(i + 1), Event: e}
	}
	cursor := int64(len(log) - 1)

	runs := FoldRuns(rows, cursor)
	all := runs.All()
	if len(all) != 2 || all[0].ID != "run_a" || all[1].ID != "run_b" {
		t.Fatalf("runs %+v, want run_a then run_b", all)
	}
	if all[0].StartedAt != 100 || all[1].StartedAt != 200 {
		t.Errorf("started at %d and %d, want the run-starts' 100 and 200", all[0].StartedAt, all[1].StartedAt)
	}
	want := map[string][]instanceai.Event{
		"run_a": {log[2], log[3], log[6], log[7]},
		"run_b": {log[4], log[5]},
	}
	for id, evs := range want {
		r := runs.Get(id)
		if r == nil {
			t.Fatalf("Get(%s) = nil", id)
		}
		got, _ := json.Marshal(r.State.Tree())
		exp, _ := json.Marshal(Fold(evs))
		if string(got) != string(exp) {
			t.Errorf("%s folded to\n%s\nwant\n%s", id, got, exp)
		}
	}
	if runs.Get("run_a").State.Active() || !runs.Get("run_b").State.Active() {
		t.Errorf("run_a active %v, run_b active %v; want only run_b", runs.Get("run_a").State.Active(), runs.Get("run_b").State.Active())
	}
	if text := runs.Get("run_b").State.Tree().TextContent; text != "B1" {
		t.Errorf("run_b text %q, want only what came after its run-start, up to the cursor", text)
	}
	if runs.Get("run_title") != nil || runs.Get("") != nil {
		t.Error("Get found a run that never started")
	}

	var zero Runs
	if zero.Get("run_a") != nil || len(zero.All()) != 0 {
		t.Error("the zero Runs is not empty")
	}
	if got := FoldRuns(rows, 0).All(); len(got) != 0 {
		t.Errorf("nothing up to seq 0, got %d runs", len(got))
	}
}
