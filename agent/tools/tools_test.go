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

// A registry with a source offers the source's tools as they are at each
// read, after the fixed ones; a source tool named as a fixed or earlier
// one, or invalid, is left out; With keeps the source.
func TestRegistryWithSource(t *testing.T) {
	fixed, err := NewRegistry(Tool{Name: "own", Execute: echo})
	if err != nil {
		t.Fatal(err)
	}
	var current []Tool
	r := fixed.WithSource(func() []Tool { return current })
	names := func(r *Registry) string {
		var out []string
		for _, t := range r.List() {
			out = append(out, t.Name)
		}
		return strings.Join(out, " ")
	}
	if names(r) != "own" || r.Len() != 1 {
		t.Fatalf("an empty source: %q", names(r))
	}
	current = []Tool{
		{Name: "srv__a", Execute: echo},
		{Name: "own", Execute: echo},      // a fixed tool's name
		{Name: "srv__a", Execute: echo},   // an earlier one's
		{Name: "bad name", Execute: echo}, // invalid
		{Name: "srv__no_execute"},         // no Execute
		{Name: "srv__b", NeedsApproval: true, Execute: echo},
	}
	if names(r) != "own srv__a srv__b" || r.Len() != 3 {
		t.Fatalf("the source's tools: %q", names(r))
	}
	if b, ok := r.Get("srv__b"); !ok || !b.NeedsApproval || string(b.Parameters) != `{"type":"object","properties":{}}` {
		t.Fatalf("Get srv__b: %+v %v", b, ok)
	}
	if _, ok := r.Get("bad name"); ok {
		t.Fatal("Get found an invalid source tool")
	}
	more, err := r.With(Tool{Name: "later", Execute: echo})
	if err != nil {
		t.Fatal(err)
	}
	current = current[:1]
	if names(more) != "own later srv__a" || names(r) != "own srv__a" {
		t.Fatalf("after the source changed: %q and %q", names(more), names(r))
	}
	if names(fixed) != "own" {
		t.Fatalf("the fixed registry changed: %q", names(fixed))
	}
}
