package generate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/threadline/threadline/workflow"
)

// reporter is the part of *testing.T checkStructure uses, so its own test
// can catch what it reports.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
}

// recorder is a reporter that only notes a failure; Fatal stops the check
// by panicking with stopCheck.
type recorder struct{ failed bool }

type stopCheck struct{}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; panic(stopCheck{}) }
func (r *recorder) Fatal(...any)          { r.failed = true; panic(stopCheck{}) }

func (r *recorder) run(w *workflow.Workflow) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stopCheck); !ok {
				panic(p)
			}
		}
	}()
	checkStructure(r, w)
}

var uuidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// testTrigger is the test's own notion of a trigger, kept apart from the
// package's so the check does not grade the code with itself.
func testTrigger(typ string) bool {
	switch typ {
	case "n8n-nodes-base.webhook", "n8n-nodes-base.manualTrigger", "n8n-nodes-base.scheduleTrigger",
		"n8n-nodes-base.localFileTrigger", "n8n-nodes-base.emailReadImap", "n8n-nodes-base.formTrigger",
		"@n8n/n8n-nodes-langchain.chatTrigger", "n8n-nodes-base.errorTrigger":
		return true
	}
	return false
}

// checkStructure fails t unless w is a well-formed n8n workflow: a
// trigger first, unique names and UUIDs, parameters that are objects,
// connections between existing nodes of the type they are filed under, no
// input into a trigger, every node reached from a trigger (or feeding a
// reached node as a sub-node), and a JSON form workflow.Parse reads back
// to the same bytes.
func checkStructure(t reporter, w *workflow.Workflow) {
	t.Helper()
	if w == nil || len(w.Nodes) == 0 {
		t.Fatalf("no nodes: %+v", w)
	}
	if w.Name == "" {
		t.Errorf("the workflow has no name")
	}
	if !testTrigger(w.Nodes[0].Type) {
		t.Errorf("first node %q is a %s, not a trigger", w.Nodes[0].Name, w.Nodes[0].Type)
	}
	names, ids := map[string]bool{}, map[string]bool{}
	for _, n := range w.Nodes {
		if names[n.Name] || n.Name == "" {
			t.Errorf("node name %q is empty or repeated", n.Name)
		}
		if ids[n.ID] || !uuidShape.MatchString(n.ID) {
			t.Errorf("node %q: id %q is repeated or not a UUID", n.Name, n.ID)
		}
		names[n.Name], ids[n.ID] = true, true
		var params map[string]any
		if err := json.Unmarshal(n.Parameters, &params); err != nil || params == nil {
			t.Errorf("node %q: parameters %s are not an object", n.Name, n.Parameters)
		}
		if n.TypeVersion <= 0 {
			t.Errorf("node %q: typeVersion %v", n.Name, n.TypeVersion)
		}
	}
	byName := map[string]workflow.Node{}
	for _, n := range w.Nodes {
		byName[n.Name] = n
	}
	for src, outs := range w.Connections {
		if !names[src] {
			t.Errorf("connection from unknown node %q", src)
		}
		for typ, byIndex := range outs {
			for _, targets := range byIndex {
				for _, tg := range targets {
					target, ok := byName[tg.Node]
					switch {
					case !ok:
						t.Errorf("%s -%s-> unknown node %q", src, typ, tg.Node)
					case tg.Type != typ:
						t.Errorf("%s -%s-> %s filed as %s", src, tg.Type, tg.Node, typ)
					case testTrigger(target.Type):
						t.Errorf("%s -%s-> trigger %s", src, typ, tg.Node)
					}
				}
			}
		}
	}
	reached := map[string]bool{}
	var queue []string
	for _, n := range w.Nodes {
		if testTrigger(n.Type) {
			reached[n.Name] = true
			queue = append(queue, n.Name)
		}
	}
	for ; len(queue) > 0; queue = queue[1:] {
		for _, targets := range w.Connections[queue[0]][workflow.Main] {
			for _, tg := range targets {
				if !reached[tg.Node] {
					reached[tg.Node] = true
					queue = append(queue, tg.Node)
				}
			}
		}
	}
	for grew := true; grew; {
		grew = false
		for src, outs := range w.Connections {
			for typ, byIndex := range outs {
				for _, targets := range byIndex {
					for _, tg := range targets {
						if typ != workflow.Main && reached[tg.Node] && !reached[src] {
							reached[src], grew = true, true
						}
					}
				}
			}
		}
	}
	for _, n := range w.Nodes {
		if !reached[n.Name] {
			t.Errorf("node %q is not connected to any trigger", n.Name)
		}
	}
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	back, err := workflow.Parse(data)
	if err != nil {
		t.Fatalf("Parse of the generated document: %v", err)
	}
	again, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Errorf("the document does not read back identically:\n%s\n%s", data, again)
	}
}

func types(w *workflow.Workflow) []string {
	out := make([]string, len(w.Nodes))
	for i, n := range w.Nodes {
		out[i] = strings.TrimPrefix(strings.TrimPrefix(n.Type, "n8n-nodes-base."), "@n8n/n8n-nodes-langchain.")
	}
	return out
}

// edges lists connections of one type as "source>target" (main adds the
// output index: "If:1>Flag"), sorted.
func edges(w *workflow.Workflow, typ string) []string {
	var out []string
	for src, outs := range w.Connections {
		for i, targets := range outs[typ] {
			for _, tg := range targets {
				if typ == workflow.Main && i > 0 {
					out = append(out, fmt.Sprintf("%s:%d>%s", src, i, tg.Node))
				} else {
					out = append(out, src+">"+tg.Node)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func param(t *testing.T, w *workflow.Workflow, node, key string) any {
	t.Helper()
	n := w.NodeByName(node)
	if n == nil {
		t.Fatalf("no node %q in %v", node, types(w))
	}
	var params map[string]any
	if err := json.Unmarshal(n.Parameters, &params); err != nil {
		t.Fatal(err)
	}
	return params[key]
}

func mustJSON(t *testing.T, w *workflow.Workflow) []byte {
	t.Helper()
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The check itself fails on the defects it is for.
func TestCheckStructureCatchesDefects(t *testing.T) {
	good, err := Generate("When a webhook is called send an email")
	if err != nil {
		t.Fatal(err)
	}
	if r := (&recorder{}); func() bool { r.run(good); return r.failed }() {
		t.Fatal("checkStructure fails the unbroken workflow")
	}
	for name, breakIt := range map[string]func(w *workflow.Workflow){
		"orphan":          func(w *workflow.Workflow) { delete(w.Connections, "Webhook") },
		"dangling target": func(w *workflow.Workflow) { w.Connections["Webhook"]["main"][0][0].Node = "Nowhere" },
		"trigger not first": func(w *workflow.Workflow) {
			w.Nodes[0], w.Nodes[1] = w.Nodes[1], w.Nodes[0]
		},
		"repeated name": func(w *workflow.Workflow) { w.Nodes[1].Name = "Webhook" },
		"bad id":        func(w *workflow.Workflow) { w.Nodes[1].ID = "1" },
	} {
		w, _ := clone(good)
		breakIt(w)
		r := &recorder{}
		r.run(w)
		if !r.failed {
			t.Errorf("%s: checkStructure passed a broken workflow", name)
		}
	}
}

// The workflows n8n itself exported pass the check: it asks nothing of
// generated workflows that real ones lack.
func TestCheckStructureAcceptsRecordedWorkflows(t *testing.T) {
	files, err := filepath.Glob("../../agent/n8n/testdata/real/workflow-*.create-body.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded workflows: %v", err)
	}
	for _, f := range files {
		w := realWorkflow(t, filepath.Base(f))
		t.Run(filepath.Base(f), func(t *testing.T) { checkStructure(t, w) })
	}
}
