package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func echo(_ context.Context, args json.RawMessage) (json.RawMessage, error) { return args, nil }

func TestRegistry(t *testing.T) {
	r, err := NewRegistry(
		Tool{Name: "list_workflows", Execute: echo},
		Tool{Name: "archive-workflow", NeedsApproval: true, Parameters: json.RawMessage(`{"type":"object","required":["id"]}`), Execute: echo},
	)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 2 || r.List()[0].Name != "list_workflows" || r.List()[1].Name != "archive-workflow" {
		t.Fatalf("order: %+v", r.List())
	}
	if tl, ok := r.Get("list_workflows"); !ok || string(tl.Parameters) != `{"type":"object","properties":{}}` {
		t.Fatalf("a tool without parameters gets an empty object schema: %+v", tl)
	}
	if tl, ok := r.Get("archive-workflow"); !ok || !tl.NeedsApproval {
		t.Fatalf("get: %+v", tl)
	}
	if _, ok := r.Get("missing"); ok {
		t.Fatal("an unknown tool was found")
	}
	more, err := r.With(Tool{Name: "frontend", Execute: echo})
	if err != nil || more.Len() != 3 || r.Len() != 2 {
		t.Fatalf("With: %v, %d tools (the original has %d)", err, more.Len(), r.Len())
	}
	var none *Registry
	if _, ok := none.Get("x"); ok || none.Len() != 0 || none.List() != nil {
		t.Fatal("a nil registry is not empty")
	}
	if n, err := none.With(Tool{Name: "x", Execute: echo}); err != nil || n.Len() != 1 {
		t.Fatalf("nil.With: %v", err)
	}
}

func TestRegistryRejects(t *testing.T) {
	for _, c := range []struct {
		tools []Tool
		want  string
	}{
		{[]Tool{{Name: "", Execute: echo}}, "must be 1-64"},
		{[]Tool{{Name: "has space", Execute: echo}}, "must be 1-64"},
		{[]Tool{{Name: strings.Repeat("a", 65), Execute: echo}}, "must be 1-64"},
		{[]Tool{{Name: "a", Execute: echo}, {Name: "a", Execute: echo}}, "registered twice"},
		{[]Tool{{Name: "a"}}, "no Execute"},
		{[]Tool{{Name: "a", Execute: echo, Parameters: json.RawMessage(`[1]`)}}, "JSON Schema object"},
		{[]Tool{{Name: "a", Execute: echo, Parameters: json.RawMessage(`{`)}}, "JSON Schema object"},
		{[]Tool{{Name: "a", Execute: echo, Severity: "critical"}}, "destructive, warning or info"},
	} {
		if _, err := NewRegistry(c.tools...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.tools, err, c.want)
		}
	}
}
