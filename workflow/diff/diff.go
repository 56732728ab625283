// Package diff compares two versions of an n8n workflow: what the builder's
// compare endpoint reports and an iteration's changes_summary.
package diff

import (
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/threadline/threadline/workflow"
)

// Comparison is the seed's compare result without the two documents, which
// the endpoint adds.
type Comparison struct {
	Differences Differences `json:"differences"`
	Summary     Summary     `json:"summary"`
}

// Differences says what kind of change there is.
type Differences struct {
	NodesChanged       bool `json:"nodes_changed"`
	ConnectionsChanged bool `json:"connections_changed"`
	SettingsChanged    bool `json:"settings_changed"`
}

// Summary counts the changes. Connections are counted as edges: one
// source output (node, type, output index) feeding one target input.
type Summary struct {
	NodesAdded         int `json:"nodes_added"`
	NodesRemoved       int `json:"nodes_removed"`
	NodesModified      int `json:"nodes_modified"`
	ConnectionsAdded   int `json:"connections_added"`
	ConnectionsRemoved int `json:"connections_removed"`
}

// ChangesSummary is the seed's iteration changes_summary.
type ChangesSummary struct {
	NodesAdded         int  `json:"nodes_added"`
	ConnectionsChanged bool `json:"connections_changed"`
	ParametersModified bool `json:"parameters_modified"`
}

// Compare compares version a with version b (nil is an empty workflow).
// Nodes are matched by name, as n8n's connections refer to them; a node is
// modified when its type, typeVersion, parameters, credentials or disabled
// flag differ. Moving a node on the canvas (position), renaming its id or
// editing its notes is not a modification: the workflow runs the same.
// Settings compare as JSON values, an absent settings object equal to {}.
func Compare(a, b *workflow.Workflow) Comparison {
	a, b = orEmpty(a), orEmpty(b)
	var s Summary
	before := nodesByName(a)
	for _, n := range b.Nodes {
		old, ok := before[n.Name]
		switch {
		case !ok:
			s.NodesAdded++
		case modified(old, n):
			s.NodesModified++
		}
	}
	after := nodesByName(b)
	for _, n := range a.Nodes {
		if _, ok := after[n.Name]; !ok {
			s.NodesRemoved++
		}
	}
	edgesA, edgesB := edges(a.Connections), edges(b.Connections)
	for e := range edgesB {
		if !edgesA[e] {
			s.ConnectionsAdded++
		}
	}
	for e := range edgesA {
		if !edgesB[e] {
			s.ConnectionsRemoved++
		}
	}
	return Comparison{
		Differences: Differences{
			NodesChanged:       s.NodesAdded+s.NodesRemoved+s.NodesModified > 0,
			ConnectionsChanged: s.ConnectionsAdded+s.ConnectionsRemoved > 0,
			SettingsChanged:    !sameJSON(a.Settings, b.Settings, "{}"),
		},
		Summary: s,
	}
}

// Changes is the changes_summary of an iteration that turned a into b:
// the nodes it added, whether any connection changed, and whether it
// changed the parameters of a node both versions have.
func Changes(a, b *workflow.Workflow) ChangesSummary {
	a, b = orEmpty(a), orEmpty(b)
	c := Compare(a, b)
	before := nodesByName(a)
	parameters := false
	for _, n := range b.Nodes {
		if old, ok := before[n.Name]; ok && !sameJSON(old.Parameters, n.Parameters, "{}") {
			parameters = true
			break
		}
	}
	return ChangesSummary{
		NodesAdded:         c.Summary.NodesAdded,
		ConnectionsChanged: c.Differences.ConnectionsChanged,
		ParametersModified: parameters,
	}
}

func orEmpty(w *workflow.Workflow) *workflow.Workflow {
	if w == nil {
		return &workflow.Workflow{}
	}
	return w
}

// nodesByName indexes nodes by name; of two nodes with one name (an invalid
// workflow) the first counts.
func nodesByName(w *workflow.Workflow) map[string]workflow.Node {
	m := make(map[string]workflow.Node, len(w.Nodes))
	for _, n := range w.Nodes {
		if _, dup := m[n.Name]; !dup {
			m[n.Name] = n
		}
	}
	return m
}

func modified(a, b workflow.Node) bool {
	return a.Type != b.Type || a.TypeVersion != b.TypeVersion || a.Disabled != b.Disabled ||
		!sameJSON(a.Parameters, b.Parameters, "{}") || !sameJSON(a.Credentials, b.Credentials, "{}")
}

// edge is one connection from an output to an input.
type edge struct {
	source, typ string
	output      int
	target      workflow.Target
}

func edges(c workflow.Connections) map[edge]bool {
	set := map[edge]bool{}
	for source, byType := range c {
		for typ, outputs := range byType {
			for output, targets := range outputs {
				for _, t := range targets {
					set[edge{source, typ, output, t}] = true
				}
			}
		}
	}
	return set
}

// sameJSON compares two JSON values by meaning (key order and spacing do
// not matter); an absent value stands for empty.
func sameJSON(a, b json.RawMessage, empty string) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if decode(a, empty, &va) != nil || decode(b, empty, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func decode(raw json.RawMessage, empty string, v *any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage(empty)
	}
	return json.Unmarshal(raw, v)
}
