package agenttree

import (
	"encoding/json"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// TestClientFold: a run begins at its run-start; on a new connection the
// first delta of a held segment replaces its open text, later ones extend
// it; a run-sync replaces the run's state, a reset drops every run.
func TestClientFold(t *testing.T) {
	ev := func(typ instanceai.EventType, p instanceai.Payload) instanceai.Event {
		return instanceai.Event{Type: typ, RunID: "r1", AgentID: "orchestrator", ResponseID: "resp", Payload: p}
	}
	delta := func(s string) instanceai.Event { return ev(instanceai.TypeTextDelta, &instanceai.Text{Text: s}) }
	var c Client
	if _, ok := c.Event(delta("before its start")); ok || c.Run("r1") != nil {
		t.Fatal("a delta of a run whose start the client never saw was folded")
	}
	c.Event(ev(instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "m"}))
	c.Event(delta("Hel"))
	if g, ok := c.Event(delta("lo")); !ok || g.Held != 5 || g.Replaced {
		t.Fatalf("a second delta: %+v, %v", g, ok)
	}
	c.Connect()
	if g, ok := c.Event(delta("Hello, wo")); !ok || g.Held != 9 || !g.Replaced {
		t.Fatalf("the snapshot delta on a new connection: %+v, %v", g, ok)
	}
	c.Event(delta("rld"))
	if got := c.Run("r1").Tree().TextContent; got != "Hello, world" {
		t.Fatalf("text %q after the reconnection", got)
	}

	tree, err := json.Marshal(RunSync{RunID: "r1", Status: StatusCompleted, AgentTree: Fold([]instanceai.Event{
		ev(instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "m"}), delta("synced"),
	})})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := DecodeRunSync(tree)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RunSync(rs); err != nil {
		t.Fatal(err)
	}
	if st := c.Run("r1"); st.Tree().TextContent != "synced" || st.Status != StatusCompleted {
		t.Fatalf("after the run-sync: %q, %s", st.Tree().TextContent, st.Status)
	}
	if _, err := DecodeRunSync([]byte(`{"runId":"r1"}`)); err == nil {
		t.Fatal("a run-sync without a tree decoded")
	}
	c.Reset()
	if len(c.Runs()) != 0 {
		t.Fatalf("%d runs held after a reset", len(c.Runs()))
	}
}
