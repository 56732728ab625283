package diff

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/threadline/threadline/workflow"
)

// recorded is the recorded streaming agent workflow: webhook → agent with
// a chat model, memory and calculator (4 edges).
func recorded(t *testing.T) *workflow.Workflow {
	t.Helper()
	data, err := os.ReadFile("../../agent/n8n/testdata/real/workflow-streaming.create-body.json")
	if err != nil {
		t.Fatal(err)
	}
	w, err := workflow.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func clone(t *testing.T, w *workflow.Workflow) *workflow.Workflow {
	t.Helper()
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	c, err := workflow.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(w *workflow.Workflow)
		diff    Differences
		summary Summary
		changes ChangesSummary
	}{
		{name: "identical", edit: func(*workflow.Workflow) {}},
		{name: "moved, re-identified and annotated only", edit: func(w *workflow.Workflow) {
			w.Nodes[1].Position = [2]float64{999, -5}
			w.Nodes[1].ID = "another-id"
			w.Nodes[1].Notes = "moved"
		}},
		{name: "parameters reformatted", edit: func(w *workflow.Workflow) {
			w.Nodes[0].Parameters = json.RawMessage(`{ "options": {}, "responseMode": "streaming", "path": "threadline-agent", "httpMethod": "POST" }`)
		}},
		{name: "node added and connected", edit: func(w *workflow.Workflow) {
			w.Nodes = append(w.Nodes, workflow.Node{Name: "Log", Type: "n8n-nodes-base.httpRequest", TypeVersion: 4.2, Parameters: json.RawMessage(`{"url":"https://x"}`)})
			w.Connections["AI Agent"] = map[string][][]workflow.Target{"main": {{{Node: "Log", Type: "main", Index: 0}}}}
		},
			diff:    Differences{NodesChanged: true, ConnectionsChanged: true},
			summary: Summary{NodesAdded: 1, ConnectionsAdded: 1},
			changes: ChangesSummary{NodesAdded: 1, ConnectionsChanged: true}},
		{name: "node removed with its connection", edit: func(w *workflow.Workflow) {
			w.Nodes = w.Nodes[:4]
			delete(w.Connections, "Calculator")
		},
			diff:    Differences{NodesChanged: true, ConnectionsChanged: true},
			summary: Summary{NodesRemoved: 1, ConnectionsRemoved: 1},
			changes: ChangesSummary{ConnectionsChanged: true}},
		{name: "parameter changed", edit: func(w *workflow.Workflow) {
			w.Nodes[0].Parameters = json.RawMessage(`{"httpMethod":"POST","path":"renamed","responseMode":"streaming","options":{}}`)
		},
			diff:    Differences{NodesChanged: true},
			summary: Summary{NodesModified: 1},
			changes: ChangesSummary{ParametersModified: true}},
		{name: "version, credentials and disabled changed", edit: func(w *workflow.Workflow) {
			w.Nodes[1].TypeVersion = 2.2
			w.Nodes[2].Credentials = json.RawMessage(`{"openAiApi":{"id":"other","name":"Other"}}`)
			w.Nodes[3].Disabled = true
		},
			diff:    Differences{NodesChanged: true},
			summary: Summary{NodesModified: 3}},
		{name: "connection moved to another input", edit: func(w *workflow.Workflow) {
			w.Connections["Webhook"]["main"][0][0].Index = 1
		},
			diff:    Differences{ConnectionsChanged: true},
			summary: Summary{ConnectionsAdded: 1, ConnectionsRemoved: 1},
			changes: ChangesSummary{ConnectionsChanged: true}},
		{name: "second target on an output", edit: func(w *workflow.Workflow) {
			w.Connections["Webhook"]["main"][0] = append(w.Connections["Webhook"]["main"][0], workflow.Target{Node: "Calculator", Type: "main"})
		},
			diff:    Differences{ConnectionsChanged: true},
			summary: Summary{ConnectionsAdded: 1},
			changes: ChangesSummary{ConnectionsChanged: true}},
		{name: "settings changed", edit: func(w *workflow.Workflow) { w.Settings = json.RawMessage(`{"executionOrder":"v0"}`) },
			diff: Differences{SettingsChanged: true}},
		{name: "settings reformatted", edit: func(w *workflow.Workflow) { w.Settings = json.RawMessage(` { "executionOrder" : "v1" } `) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := recorded(t)
			b := clone(t, a)
			c.edit(b)
			got := Compare(a, b)
			if got.Differences != c.diff || got.Summary != c.summary {
				t.Errorf("Compare = %+v; want %+v %+v", got, c.diff, c.summary)
			}
			if ch := Changes(a, b); ch != c.changes {
				t.Errorf("Changes = %+v; want %+v", ch, c.changes)
			}
		})
	}
}

func TestCompareWithNothing(t *testing.T) {
	w := recorded(t)
	got := Compare(nil, w)
	want := Comparison{Differences{NodesChanged: true, ConnectionsChanged: true, SettingsChanged: true}, Summary{NodesAdded: 5, ConnectionsAdded: 4}}
	if got != want {
		t.Fatalf("Compare(nil, w) = %+v; want %+v", got, want)
	}
	if back := Compare(w, nil); back.Summary != (Summary{NodesRemoved: 5, ConnectionsRemoved: 4}) {
		t.Fatalf("Compare(w, nil) = %+v", back)
	}
}

func TestEmptySettingsAreNoSettings(t *testing.T) {
	a, b := &workflow.Workflow{}, &workflow.Workflow{Settings: json.RawMessage(`{}`)}
	if Compare(a, b).Differences.SettingsChanged || Compare(b, a).Differences.SettingsChanged {
		t.Fatal("absent settings differ from {}")
	}
}

// The JSON is the seed's.
func TestJSONNames(t *testing.T) {
	keys := func(v any) map[string]any {
		data, _ := json.Marshal(v)
		var m map[string]any
		json.Unmarshal(data, &m)
		return m
	}
	c := keys(Comparison{})
	want := map[string]any{
		"differences": map[string]any{"nodes_changed": false, "connections_changed": false, "settings_changed": false},
		"summary":     map[string]any{"nodes_added": 0.0, "nodes_removed": 0.0, "nodes_modified": 0.0, "connections_added": 0.0, "connections_removed": 0.0},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Comparison JSON %v", c)
	}
	if ch := keys(ChangesSummary{}); !reflect.DeepEqual(ch, map[string]any{"nodes_added": 0.0, "connections_changed": false, "parameters_modified": false}) {
		t.Errorf("ChangesSummary JSON %v", ch)
	}
}
