package mapping

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// foldStreams are streams written for the fold's edge cases: tool calls
// whose parent is missing or not an assistant message, results inserted
// after earlier results, metadata merged, chunks, state patches (one
// that does not apply), snapshots that keep reasoning, activity.
func foldStreams() [][]agui.Event {
	md := func(k string, v any) agui.Base { return agui.Base{Metadata: map[string]any{k: v}} }
	f := false
	return [][]agui.Event{
		{
			&agui.TextMessageStart{MessageID: "m1", Base: md("a", 1.0)},
			&agui.TextMessageContent{MessageID: "m1", Delta: "Hi ", Base: md("b", "x")},
			&agui.TextMessageContent{MessageID: "m1", Delta: "there"},
			&agui.TextMessageEnd{MessageID: "m1", Base: md("a", 2.0)},
			&agui.ToolCallStart{ToolCallID: "c1", ToolCallName: "f", ParentMessageID: "m1"},
			&agui.ToolCallArgs{ToolCallID: "c1", Delta: `{"q":1}`},
			&agui.ToolCallEnd{ToolCallID: "c1"},
			&agui.ToolCallStart{ToolCallID: "c2", ToolCallName: "g", ParentMessageID: "m1"},
			&agui.ToolCallEnd{ToolCallID: "c2"},
			&agui.TextMessageStart{MessageID: "m2"},
			&agui.TextMessageContent{MessageID: "m2", Delta: "later"},
			&agui.TextMessageEnd{MessageID: "m2"},
			&agui.ToolCallResult{MessageID: "r2", ToolCallID: "c2", Content: "two"},
			&agui.ToolCallResult{MessageID: "r1", ToolCallID: "c1", Content: "one", Base: md("k", true)},
			&agui.ToolCallResult{MessageID: "r9", ToolCallID: "nobody", Content: "orphan"},
		},
		{
			&agui.TextMessageStart{MessageID: "u", Role: agui.RoleUser},
			&agui.TextMessageEnd{MessageID: "u"},
			&agui.ToolCallStart{ToolCallID: "c", ToolCallName: "f", ParentMessageID: "u"},
			&agui.ToolCallStart{ToolCallID: "d", ToolCallName: "g", ParentMessageID: "missing"},
			&agui.ToolCallStart{ToolCallID: "e", ToolCallName: "h"},
			&agui.ToolCallStart{ToolCallID: "e", ToolCallName: "renamed"},
			&agui.TextMessageChunk{MessageID: "ch", Delta: "chun"},
			&agui.TextMessageChunk{MessageID: "ch", Delta: "ked"},
			&agui.TextMessageContent{MessageID: "unknown", Delta: "dropped"},
		},
		{
			&agui.StateSnapshot{Snapshot: json.RawMessage(`{"a":{"b":[1,2]},"s":"é"}`)},
			&agui.StateDelta{Delta: []agui.PatchOp{{Op: "add", Path: "/a/b/-", Value: json.RawMessage(`3`)}, {Op: "remove", Path: "/s"}}},
			&agui.StateDelta{Delta: []agui.PatchOp{{Op: "replace", Path: "/nope/x", Value: json.RawMessage(`1`)}}},
			&agui.ReasoningMessageStart{MessageID: "r"},
			&agui.ReasoningMessageContent{MessageID: "r", Delta: "hmm"},
			&agui.ReasoningMessageEnd{MessageID: "r"},
			&agui.TextMessageStart{MessageID: "gone"},
			&agui.TextMessageEnd{MessageID: "gone"},
			&agui.TextMessageStart{MessageID: "kept"},
			&agui.TextMessageEnd{MessageID: "kept"},
			&agui.MessagesSnapshot{Messages: []agui.Message{
				{ID: "kept", Role: agui.RoleAssistant, Content: agui.TextContent("from the snapshot")},
				{ID: "new", Role: agui.RoleUser, Content: agui.TextContent("added")},
			}},
			&agui.TextMessageContent{MessageID: "kept", Delta: " and more"},
		},
		{
			&agui.StateDelta{Delta: []agui.PatchOp{{Op: "add", Path: "/n", Value: json.RawMessage(`1`)}}},
			&agui.ActivitySnapshot{MessageID: "act", ActivityType: "plan", Content: json.RawMessage(`{"steps":["a"]}`)},
			&agui.ActivityDelta{MessageID: "act", ActivityType: "plan", Patch: []agui.PatchOp{{Op: "add", Path: "/steps/-", Value: json.RawMessage(`"b"`)}}},
			&agui.ActivitySnapshot{MessageID: "act", ActivityType: "plan", Content: json.RawMessage(`{"steps":[]}`), Replace: &f},
			&agui.TextMessageStart{MessageID: "t"},
			&agui.ActivitySnapshot{MessageID: "t", ActivityType: "card", Content: json.RawMessage(`{"x":1}`)},
			&agui.ActivityDelta{MessageID: "missing", ActivityType: "plan", Patch: []agui.PatchOp{{Op: "add", Path: "/a", Value: json.RawMessage(`1`)}}},
		},
	}
}

// The fold holds what @ag-ui/client's own defaultApplyEvents holds after
// the same events: the edge cases above, and the AG-UI streams of 400
// generated runs.
func TestAGUIFoldMatchesTheClient(t *testing.T) {
	node, dir := nodeDir(t)
	streams := foldStreams()
	for seed := uint64(0); seed < 400; seed++ {
		r := rand.New(rand.NewPCG(seed, 17))
		evs, _, _, _, _ := generate(r)
		m := NewInstanceToAGUI("thread", "run-0")
		var out []agui.Event
		for i, e := range evs {
			out = append(out, m.Push(e)...)
			for m.Suspended() {
				out = append(out, m.Resume(fmt.Sprintf("run-%d", i))...)
			}
		}
		streams = append(streams, append(out, m.Close(nil)...))
	}
	out, stderr, err := runNodeOnStreams(t, node, dir, "fold.js", streams)
	if err != nil {
		t.Fatalf("node fold.js: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(streams) {
		t.Fatalf("fold.js answered %d streams of %d", len(lines), len(streams))
	}
	for i, s := range streams {
		f := NewAGUIFold()
		for _, ev := range s {
			// Through the wire, as a client reads the events.
			raw, _ := json.Marshal(ev)
			decoded, err := agui.DecodeEvent(raw)
			if err != nil {
				t.Fatal(err)
			}
			f.Apply(decoded)
		}
		state := f.State()
		if state == nil {
			state = json.RawMessage("{}")
		}
		gotRaw, _ := json.Marshal(map[string]any{"messages": f.Messages(), "state": state})
		var got, want any
		if err := json.Unmarshal(gotRaw, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(lines[i]), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("stream %d: the fold holds\n%s\nthe client\n%s", i, gotRaw, lines[i])
		}
	}
}

// Calls a model makes together (started before any result, with no text
// before them) are one assistant message; a call after a result starts
// another; an upstream's own parent (the events' response id) wins.
func TestToolCallsShareTheirMessage(t *testing.T) {
	ev := func(typ instanceai.EventType, resp string, p instanceai.Payload) instanceai.Event {
		return instanceai.Event{Type: typ, RunID: "r", AgentID: "a", ResponseID: resp, Payload: p}
	}
	start := func(id, resp string) instanceai.Event {
		return ev(instanceai.TypeToolInputStart, resp, &instanceai.ToolInputStart{ToolCallID: id, ToolName: "f"})
	}
	result := func(id string) instanceai.Event {
		return ev(instanceai.TypeToolResult, "", &instanceai.ToolResult{ToolCallID: id, Result: json.RawMessage(`1`)})
	}
	m := NewInstanceToAGUI("t", "r")
	fold := NewAGUIFold()
	for _, e := range []instanceai.Event{
		ev(instanceai.TypeRunStart, "", &instanceai.RunStart{MessageID: "u"}),
		start("c1", ""), start("c2", ""), result("c1"), result("c2"),
		start("c3", ""), result("c3"),
		start("c4", "parent"), start("c5", "parent"), result("c4"), result("c5"),
	} {
		for _, out := range m.Push(e) {
			fold.Apply(out)
		}
	}
	var got []string
	for _, msg := range fold.Messages() {
		s := msg.Role + ":" + msg.ID
		for _, c := range msg.ToolCalls {
			s += " " + c.ID
		}
		got = append(got, s)
	}
	want := []string{"assistant:c1 c1 c2", "tool:result:c1", "tool:result:c2", "assistant:c3 c3", "tool:result:c3",
		"assistant:parent c4 c5", "tool:result:c4", "tool:result:c5"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("messages\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// No stream of events makes the fold panic or hold what does not encode.
func FuzzAGUIFold(f *testing.F) {
	for _, s := range foldStreams() {
		var b strings.Builder
		for _, ev := range s {
			raw, _ := json.Marshal(ev)
			b.Write(raw)
			b.WriteByte('\n')
		}
		f.Add(b.String())
	}
	f.Fuzz(func(t *testing.T, stream string) {
		fold := NewAGUIFold()
		for line := range strings.SplitSeq(stream, "\n") {
			ev, err := agui.DecodeEvent([]byte(line))
			if err != nil {
				continue
			}
			fold.Apply(ev)
		}
		if _, err := json.Marshal(fold.Messages()); err != nil {
			t.Fatalf("messages do not encode: %v", err)
		}
		if st := fold.State(); st != nil && !json.Valid(st) {
			t.Fatalf("state %q is not JSON", st)
		}
	})
}

// A patch whose copies would grow the state past MaxPatchedBytes (an
// upstream's doubling "copy" ops) leaves it as it was, at once.
func TestAGUIFoldRefusesACopyBomb(t *testing.T) {
	fold := NewAGUIFold()
	fold.Apply(&agui.StateSnapshot{Snapshot: json.RawMessage(`{"a":"` + strings.Repeat("x", 1024) + `"}`)})
	before := string(fold.State())
	ops := []agui.PatchOp{{Op: "add", Path: "/b", Value: json.RawMessage(`[]`)}}
	for i := range 40 {
		ops = append(ops, agui.PatchOp{Op: "copy", From: "", Path: fmt.Sprintf("/c%d", i)})
	}
	fold.Apply(&agui.StateDelta{Delta: ops})
	if string(fold.State()) != before {
		t.Fatalf("the state grew to %d bytes", len(fold.State()))
	}
	fold.Apply(&agui.StateDelta{Delta: []agui.PatchOp{{Op: "add", Path: "/ok", Value: json.RawMessage(`1`)}}})
	if !strings.Contains(string(fold.State()), `"ok":1`) {
		t.Fatalf("a small patch after it was refused: %s", fold.State())
	}
}
