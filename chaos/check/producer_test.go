package check

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/ssestream"
)

func tasksUpdate(run, lastTask string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeTasksUpdate, RunID: run, AgentID: orch(run),
		Payload: &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: []instanceai.Task{
			{ID: run + ":task:0", Description: "first", Status: instanceai.TaskDone},
			{ID: lastTask, Description: "last", Status: instanceai.TaskInProgress},
		}}}}
}

// Every event a producer was answered 200 for is looked for in the log by
// its marker: one that is not there is ack-lost, one that is there twice
// stored-twice; an event acknowledged again by a retry is judged once.
func TestAcked(t *testing.T) {
	var b book
	o := orch("p1")
	b.store(runStart("p1"))
	b.store(toolCall("p1", o, "p1:tc:1"))
	b.store(toolResult("p1", o, "p1:tc:1"))
	b.store(tasksUpdate("p1", "p1:task:2"))
	b.store(toolCall("p1", o, "p1:tc:3"))
	b.store(toolCall("p1", o, "p1:tc:3"))
	b.store(runFinish("p1", instanceai.RunInterrupted, instanceai.ReasonCrashed))
	acked := []Acked{
		{Thread: thread, Run: "p1", Type: instanceai.TypeToolCall, Marker: "p1:tc:1", Seq: 0, Instance: "a"},
		{Thread: thread, Run: "p1", Type: instanceai.TypeToolResult, Marker: "p1:tc:1", Seq: 1, Instance: "a"},
		{Thread: thread, Run: "p1", Type: instanceai.TypeToolResult, Marker: "p1:tc:1", Seq: 1, Instance: "a", Duplicate: true},
		{Thread: thread, Run: "p1", Type: instanceai.TypeTasksUpdate, Marker: "p1:task:2", Seq: 2, Instance: "a"},
		{Thread: thread, Run: "p1", Type: instanceai.TypeToolCall, Marker: "p1:tc:3", Seq: 3, Instance: "a"},
		// Acknowledged as duplicates of a first try the log never got.
		{Thread: thread, Run: "p1", Type: instanceai.TypeToolResult, Marker: "p1:tc:3", Seq: 4, Instance: "a", Duplicate: true},
		{Thread: thread, Run: "p1", Type: instanceai.TypeToolResult, Marker: "p1:tc:3", Seq: 4, Instance: "a", Duplicate: true},
		// A finish answered 200: the log's run-finish is the sweep's.
		{Thread: thread, Run: "p1", Type: instanceai.TypeRunFinish, Marker: instanceai.RunCompleted, Seq: 5, Instance: "a"},
	}
	res := Check(Input{Log: b.log(), Acked: acked})
	expect(t, res, "ack-lost×2 stored-twice×1")
	for _, a := range res.Anomalies {
		switch {
		case a.Kind == AckLost && strings.Contains(a.Detail, "tool-result p1:tc:3"):
			if !strings.Contains(a.Detail, "as a duplicate of an earlier try") || !strings.Contains(a.Detail, "ended interrupted/crash_interrupted at seq 7") {
				t.Fatalf("ack-lost evidence: %s", a)
			}
		case a.Kind == AckLost:
			if !strings.Contains(a.Detail, "run-finish completed") || a.Run != "p1" || a.Thread != thread {
				t.Fatalf("ack-lost evidence: %s", a)
			}
		case a.Kind == StoredTwice:
			if a.Seq != 6 || !strings.Contains(a.Detail, "seqs [5 6]") {
				t.Fatalf("stored-twice evidence: %s", a)
			}
		}
	}
	// With its events all in the log, nothing.
	res = Check(Input{Log: b.log(), Acked: acked[:5]})
	expect(t, res, "stored-twice×1")
	res = Check(Input{Log: b.log(), Acked: acked[:4]})
	expect(t, res, "")
}

// An oversized producer's run ends once, in error with
// segment_too_large, after one error event of that code, its text cut at
// exactly the bound; a publish producer is told so once. Anything else is
// bound-not-kept; a stored event over the bound on one event is
// event-too-large, whichever run it belongs to.
func TestOversized(t *testing.T) {
	bounds := Bounds{MaxEventBytes: 4096, MaxSegmentBytes: 1000}
	tooLargeErr := func(run string) instanceai.Event {
		return instanceai.Event{Type: instanceai.TypeError, RunID: run, AgentID: orch(run),
			Payload: &instanceai.ErrorPayload{Content: "past the bound", Code: instanceai.CodeSegmentTooLarge}}
	}
	kept := func(run string, text ...string) *book {
		var b book
		b.store(runStart(run))
		for i, s := range text {
			b.store(textOf(instanceai.TypeTextBlock, run, orch(run), run+":huge"+strings.Repeat(":2", i), s))
		}
		b.store(tooLargeErr(run))
		b.store(runFinish(run, instanceai.RunError, instanceai.CodeSegmentTooLarge))
		return &b
	}
	answered := map[string]int{"200": 1, tooLarge: 1, "409 run_finished": 3}
	for _, tc := range []struct {
		name    string
		b       *book
		answers map[string]int
		want    string
		detail  string
	}{
		{"kept", kept("r1", strings.Repeat("x", 1000)), answered, "", ""},
		{"kept, in two blocks after a silence", kept("r1", strings.Repeat("x", 600), strings.Repeat("x", 400)), nil, "", ""},
		{"kept, escaped", kept("r1", strings.Repeat("x", 984)+"\n\n<>"), nil, "", ""},
		{"cut short", kept("r1", strings.Repeat("x", 999)), nil, "bound-not-kept×1", "hold 999 bytes"},
		{"past the bound", kept("r1", strings.Repeat("x", 1001)), nil, "bound-not-kept×1", "hold 1001 bytes"},
		{"told twice", kept("r1", strings.Repeat("x", 1000)), map[string]int{"200": 1, tooLarge: 2}, "bound-not-kept×1", "want exactly one 413"},
		{"never told", kept("r1", strings.Repeat("x", 1000)), map[string]int{"200": 3}, "bound-not-kept×1", "want exactly one 413"},
		{"another ending", func() *book {
			var b book
			b.store(runStart("r1"))
			b.store(textOf(instanceai.TypeTextBlock, "r1", orch("r1"), "r1:huge", strings.Repeat("x", 1000)))
			b.store(runFinish("r1", instanceai.RunInterrupted, instanceai.ReasonCrashed))
			return &b
		}(), nil, "bound-not-kept×1", "want error/segment_too_large"},
		{"no error event", func() *book {
			var b book
			b.store(runStart("r1"))
			b.store(textOf(instanceai.TypeTextBlock, "r1", orch("r1"), "r1:huge", strings.Repeat("x", 1000)))
			b.store(runFinish("r1", instanceai.RunError, instanceai.CodeSegmentTooLarge))
			return &b
		}(), nil, "bound-not-kept×1", "0 error events"},
		{"two endings", func() *book {
			b := kept("r1", strings.Repeat("x", 1000))
			b.store(runFinish("r1", instanceai.RunError, instanceai.CodeSegmentTooLarge))
			return b
		}(), nil, "double-finish×1 bound-not-kept×1", "2 run-finishes"},
		{"an event too large", func() *book {
			b := kept("r1", strings.Repeat("x", 1000))
			b.store(runStart("r2"))
			b.store(toolCall("r2", orch("r2"), "r2:tc:1"))
			b.rows[len(b.rows)-1].Data = strings.Repeat(" ", 4097)
			b.store(runFinish("r2", instanceai.RunCompleted, ""))
			return b
		}(), nil, "event-too-large×1", "a stored tool-call of 4097 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(Input{Log: tc.b.log(), Bounds: bounds,
				Oversized: []Oversized{{Thread: thread, Run: "r1", Source: "publish", Instance: "a", Answers: tc.answers}}})
			expect(t, res, tc.want)
			if tc.detail != "" && !strings.Contains(res.Anomalies[len(res.Anomalies)-1].Detail, tc.detail) {
				t.Fatalf("evidence %q, want it to say %q", res.Anomalies[len(res.Anomalies)-1], tc.detail)
			}
		})
	}
	// The run is looked for where it was: none in the log at all.
	var empty book
	res := Check(Input{Log: empty.log(), Bounds: bounds, Oversized: []Oversized{{Thread: thread, Run: "r9", Source: "upstream", Instance: "a"}}})
	expect(t, res, "bound-not-kept×1")
}

// An instance's peak over the bound is memory-over-bound; no bound, no
// judgement.
func TestMemory(t *testing.T) {
	var b book
	mem := []Memory{
		{Instance: "#1", Phase: "an upstream streamed a lot", Owner: true, Peak: 120e6},
		{Instance: "#2", Phase: "an upstream streamed a lot", Peak: 301e6},
	}
	res := Check(Input{Log: b.log(), Memory: mem, MaxRSS: 300e6})
	expect(t, res, "memory-over-bound×1")
	if a := res.Anomalies[0]; !strings.Contains(a.Detail, "#2 peaked at 301 MB") || !strings.Contains(a.Detail, "another instance's run") {
		t.Fatalf("memory evidence: %s", a)
	}
	expect(t, Check(Input{Log: b.log(), Memory: mem}), "")
}

// A native stream writes a stored extension event (an upstream's ag-ui
// event) as a frame of its id alone: the client's cursor moves past it
// and no id is missed; an id alone for an event a native client is shown
// is an id-mismatch.
func TestIDAlone(t *testing.T) {
	var b book
	start := b.store(runStart("r1"))
	up := b.store(instanceai.Event{Type: instanceai.TypeAGUI, RunID: "r1", AgentID: orch("r1"),
		Payload: &instanceai.AGUIEvent{Event: json.RawMessage(`{"type":"RUN_STARTED"}`), Upstream: "u"}})
	call := b.store(toolCall("r1", orch("r1"), "r1:tc:1"))
	fin := b.store(runFinish("r1", instanceai.RunCompleted, ""))
	alone := func(r Row) ssestream.Frame { return ssestream.Frame{ID: withID(r).ID, HasID: true} }

	good := NewClient(thread, "good")
	good.Connect("a", epoch)
	feed(good, withID(start), alone(up), withID(call), withID(fin))
	bad := NewClient(thread, "bad")
	bad.Connect("a", epoch)
	feed(bad, withID(start), alone(up), alone(call), withID(fin))
	res := Check(Input{Log: b.log(), Clients: []*Client{good, bad}})
	expect(t, res, "id-mismatch×1")
	if a := res.Anomalies[0]; a.Client != "bad" || a.Seq != call.Seq || !strings.Contains(a.Detail, "sent id 3 alone") {
		t.Fatalf("id-mismatch evidence: %s", a)
	}
	if good.Cursor() != fin.Seq {
		t.Fatalf("cursor %d after the run, want %d", good.Cursor(), fin.Seq)
	}
}
