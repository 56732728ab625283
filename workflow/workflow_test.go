package workflow

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The workflows recorded from n8n 1.123 parse, with their AI connections.
func TestParseRealWorkflows(t *testing.T) {
	files, err := filepath.Glob("../agent/n8n/testdata/real/workflow-*.create-body.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded workflows: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		w, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if w.Name == "" || len(w.Nodes) == 0 || len(w.Connections) == 0 {
			t.Fatalf("%s: parsed %+v", f, w)
		}
		for src, outs := range w.Connections {
			if w.NodeByName(src) == nil {
				t.Fatalf("%s: connection from unknown node %q", f, src)
			}
			for typ, byIndex := range outs {
				for _, targets := range byIndex {
					for _, tg := range targets {
						if w.NodeByName(tg.Node) == nil || tg.Type != typ {
							t.Fatalf("%s: %s -%s-> %+v", f, src, typ, tg)
						}
					}
				}
			}
		}
	}
}

func TestParseSyntaxErrorPosition(t *testing.T) {
	for _, c := range []struct {
		doc       string
		line, col int
	}{
		{"{\n  \"name\": \"x\",\n  \"nodes\": [,]\n}", 3, 13},
		{`{"name": "x"} trailing`, 1, 15},
		{`{"name": `, 1, 10},
	} {
		_, err := Parse([]byte(c.doc))
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != c.line || se.Column != c.col {
			t.Errorf("Parse(%q) = %v; want a syntax error at %d:%d", c.doc, err, c.line, c.col)
		}
	}
	if _, err := Parse([]byte(`{"nodes": {}}`)); err == nil || errors.As(err, new(*SyntaxError)) {
		t.Errorf("nodes as an object: %v; want a type error, not a syntax error", err)
	}
}
