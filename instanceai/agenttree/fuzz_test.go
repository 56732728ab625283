package agenttree

import (
	"encoding/json"
	"testing"

	"github.com/threadline/threadline/instanceai/agenttree/agenttreetest"
)

// FuzzFold folds random streams over the generator's alphabet: folding must
// never panic, and the tree must marshal to JSON that reads back into an
// AgentNode marshalling to the same bytes (what storing a tree and adopting
// it with StateFromAgentTree relies on).
func FuzzFold(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 2, 5, 9, 10, 1})
	f.Add([]byte("run-start text-delta text-block tool-call run-finish"))
	f.Add([]byte{0, 0, 0, 0, 12, 3, 3, 3, 3, 3, 9, 9, 9, 9, 9, 14, 14, 14, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &agenttreetest.ByteChooser{B: data}
		n := 1 + c.Intn(60)
		events := agenttreetest.GenStream(c, n)
		s := New()
		for _, ev := range events {
			s.Apply(ev)
		}
		tree := s.Tree()
		out, err := json.Marshal(tree)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON: %s", out)
		}
		var back AgentNode
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("unmarshal: %v\n%s", err, out)
		}
		again, err := json.Marshal(&back)
		if err != nil {
			t.Fatalf("marshal again: %v", err)
		}
		if string(again) != string(out) {
			t.Fatalf("the tree does not survive a JSON round trip:\n%s\n%s", out, again)
		}
		switch s.Status {
		case StatusActive, StatusCompleted, StatusCancelled, StatusError:
		default:
			t.Fatalf("state status %q", s.Status)
		}
	})
}
