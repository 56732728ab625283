package generate

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/threadline/threadline/workflow"
)

// Grid spacing between nodes, as n8n's canvas lays out a chain.
const (
	stepX = 220.0
	stepY = 200.0
)

// graph edits one workflow: it adds nodes under unique names with IDs
// derived from a seed, and rewires connections. It owns its workflow, a
// copy of whatever the caller passed.
type graph struct {
	w    *workflow.Workflow
	seed string
}

// clone deep-copies a workflow through its JSON form, so edits never reach
// the caller's value.
func clone(w *workflow.Workflow) (*workflow.Workflow, error) {
	data, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	var c workflow.Workflow
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	if c.Connections == nil {
		c.Connections = workflow.Connections{}
	}
	return &c, nil
}

// uuid derives a version-5-shaped UUID from key: the same key always
// gives the same ID, so generated workflows are reproducible.
func uuid(key string) string {
	h := sha1.Sum([]byte(key))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// uniqueName returns name, or name with the lowest numeric suffix not yet
// taken ("Send Email1"), as n8n names a copy.
func (g *graph) uniqueName(name string) string {
	if g.w.NodeByName(name) == nil {
		return name
	}
	for i := 1; ; i++ {
		if c := name + strconv.Itoa(i); g.w.NodeByName(c) == nil {
			return c
		}
	}
}

// add appends a node at pos and returns its final name.
func (g *graph) add(name, typ string, version float64, pos [2]float64, params any) string {
	name = g.uniqueName(name)
	raw, err := json.Marshal(params)
	if err != nil {
		panic(fmt.Sprintf("generate: parameters of %s: %v", name, err)) // built from literals only
	}
	id := uuid(g.seed + "\x00node\x00" + name)
	for g.hasID(id) {
		id = uuid(id)
	}
	g.w.Nodes = append(g.w.Nodes, workflow.Node{ID: id, Name: name, Type: typ, TypeVersion: version, Position: pos, Parameters: raw})
	return name
}

func (g *graph) hasID(id string) bool {
	for _, n := range g.w.Nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

// connect links output index out of from to the first input of to.
func (g *graph) connect(from string, out int, to, typ string) {
	outs := g.w.Connections[from]
	if outs == nil {
		outs = map[string][][]workflow.Target{}
		g.w.Connections[from] = outs
	}
	byIndex := outs[typ]
	for len(byIndex) <= out {
		byIndex = append(byIndex, []workflow.Target{})
	}
	byIndex[out] = append(byIndex[out], workflow.Target{Node: to, Type: typ, Index: 0})
	outs[typ] = byIndex
}

// mainTargets returns the nodes output out of name feeds.
func (g *graph) mainTargets(name string, out int) []workflow.Target {
	byIndex := g.w.Connections[name][workflow.Main]
	if out >= len(byIndex) {
		return nil
	}
	return byIndex[out]
}

// takeMainTargets detaches and returns what output out of name feeds.
func (g *graph) takeMainTargets(name string, out int) []workflow.Target {
	targets := g.mainTargets(name, out)
	if targets != nil {
		g.w.Connections[name][workflow.Main][out] = []workflow.Target{}
	}
	return targets
}

// retarget makes every main connection into from go into to instead.
func (g *graph) retarget(from, to string) {
	for src, outs := range g.w.Connections {
		if src == to {
			continue
		}
		for i, targets := range outs[workflow.Main] {
			for j := range targets {
				if targets[j].Node == from {
					outs[workflow.Main][i][j].Node = to
				}
			}
		}
	}
}

func (g *graph) node(name string) *workflow.Node { return g.w.NodeByName(name) }

// isTrigger reports whether a node type starts executions (it has no main
// input): n8n's "…Trigger" nodes and the few named otherwise.
func isTrigger(typ string) bool {
	switch typ {
	case typeWebhook, typeIMAP, "n8n-nodes-base.cron", "n8n-nodes-base.interval", "n8n-nodes-base.start":
		return true
	}
	return strings.HasSuffix(strings.ToLower(typ), "trigger")
}

// firstTrigger is the node the main chain starts from: the first trigger
// that is not the Error Trigger, else any trigger.
func (g *graph) firstTrigger() string {
	fallback := ""
	for _, n := range g.w.Nodes {
		if isTrigger(n.Type) {
			if n.Type != typeErrorTrigger {
				return n.Name
			}
			if fallback == "" {
				fallback = n.Name
			}
		}
	}
	return fallback
}

// chain returns the main chain from the first trigger, following each
// node's first output to its first target: the path "after the last
// node" extends.
func (g *graph) chain() []string {
	start := g.firstTrigger()
	if start == "" {
		return nil
	}
	seen := map[string]bool{}
	var path []string
	for cur := start; cur != "" && !seen[cur] && g.node(cur) != nil; {
		seen[cur] = true
		path = append(path, cur)
		next := ""
		if t := g.mainTargets(cur, 0); len(t) > 0 {
			next = t[0].Node
		}
		cur = next
	}
	return path
}

// reachable is every node a trigger reaches by main connections, with the
// sub-nodes (models, memories, tools) that feed a reached node.
func (g *graph) reachable() map[string]bool {
	seen := map[string]bool{}
	var queue []string
	for _, n := range g.w.Nodes {
		if isTrigger(n.Type) {
			seen[n.Name] = true
			queue = append(queue, n.Name)
		}
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, targets := range g.w.Connections[cur][workflow.Main] {
			for _, t := range targets {
				if !seen[t.Node] && g.node(t.Node) != nil {
					seen[t.Node] = true
					queue = append(queue, t.Node)
				}
			}
		}
	}
	for grew := true; grew; {
		grew = false
		for src, outs := range g.w.Connections {
			if seen[src] {
				continue
			}
			for typ, byIndex := range outs {
				if typ == workflow.Main {
					continue
				}
				for _, targets := range byIndex {
					for _, t := range targets {
						if seen[t.Node] && !seen[src] && g.node(src) != nil {
							seen[src], grew = true, true
						}
					}
				}
			}
		}
	}
	return seen
}

// downstream is every node reachable from the given ones by main
// connections, plus their sub-nodes: what moves right when a step is
// inserted before them.
func (g *graph) downstream(from []string) map[string]bool {
	seen := map[string]bool{}
	queue := append([]string(nil), from...)
	for _, n := range from {
		seen[n] = true
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, targets := range g.w.Connections[cur][workflow.Main] {
			for _, t := range targets {
				if !seen[t.Node] {
					seen[t.Node] = true
					queue = append(queue, t.Node)
				}
			}
		}
	}
	for src, outs := range g.w.Connections {
		for typ, byIndex := range outs {
			if typ == workflow.Main {
				continue
			}
			for _, targets := range byIndex {
				for _, t := range targets {
					if seen[t.Node] {
						seen[src] = true
					}
				}
			}
		}
	}
	return seen
}

// shift moves the named nodes right by dx.
func (g *graph) shift(names map[string]bool, dx float64) {
	for i := range g.w.Nodes {
		if names[g.w.Nodes[i].Name] {
			g.w.Nodes[i].Position[0] += dx
		}
	}
}

// delete removes nodes and every connection from or to them.
func (g *graph) delete(names map[string]bool) {
	kept := g.w.Nodes[:0]
	for _, n := range g.w.Nodes {
		if !names[n.Name] {
			kept = append(kept, n)
		}
	}
	g.w.Nodes = kept
	for src, outs := range g.w.Connections {
		if names[src] {
			delete(g.w.Connections, src)
			continue
		}
		for typ, byIndex := range outs {
			for i, targets := range byIndex {
				keptTargets := []workflow.Target{}
				for _, t := range targets {
					if !names[t.Node] {
						keptTargets = append(keptTargets, t)
					}
				}
				byIndex[i] = keptTargets
			}
			outs[typ] = byIndex
		}
	}
}

// bottom is the lowest y any node sits at, for placing a separate branch
// under the rest.
func (g *graph) bottom() float64 {
	y := 0.0
	for _, n := range g.w.Nodes {
		y = max(y, n.Position[1])
	}
	return y
}
