package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/threadline/threadline/workflow"
)

// Validate checks the workflow document doc. It never fails: a document
// that cannot be read is an invalid result that says why.
func Validate(doc []byte, opts Options) Result {
	v := &validator{opts: opts, report: &report{}, byName: map[string]*node{}}
	if v.document(doc) {
		v.triggers()
		v.orphans()
		v.agents()
		v.subNodes()
		if opts.Catalog != nil {
			v.catalog()
		}
	}
	return v.result()
}

type validator struct {
	opts Options
	*report
	nodes  []*node
	byName map[string]*node
	edges  []edge
}

// node is a nodes entry as far as it could be read: typ is "" when the
// type is unusable, version 0 when the typeVersion is, params nil when the
// parameters are.
type node struct {
	index    int
	name     string
	typ      string
	version  float64
	disabled bool
	params   map[string]json.RawMessage
}

func (n *node) label() string {
	if n.name != "" {
		return fmt.Sprintf("node %q", n.name)
	}
	return fmt.Sprintf("node #%d", n.index)
}

// edge is one connection whose both ends exist.
type edge struct {
	from, typ      string
	output         int
	to, targetType string
	targetIndex    int
}

func (e edge) String() string {
	return fmt.Sprintf("%q %s[%d] → %q %s[%d]", e.from, e.typ, e.output, e.to, e.targetType, e.targetIndex)
}

// document checks the JSON and its shape, and reads the nodes and
// connections it can; false when nothing more can be checked.
func (v *validator) document(doc []byte) bool {
	if _, err := workflow.Parse(doc); err != nil {
		var se *workflow.SyntaxError
		if errors.As(err, &se) {
			v.fail(issue{rule: RuleJSONSyntax, category: CategoryValidation,
				title:     "The workflow is not valid JSON",
				message:   fmt.Sprintf("The workflow JSON is malformed at line %d, column %d: %v.", se.Line, se.Column, se.Err),
				guidance:  "Correct the JSON syntax at the position given, or export the workflow from n8n again.",
				technical: fmt.Sprintf("byte offset %d: %v", se.Offset, se.Err),
				fixes: []string{fmt.Sprintf("Look at line %d, column %d for a missing comma, quote or bracket", se.Line, se.Column),
					"Paste the workflow into a JSON linter to find the error"}})
			return false
		}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		v.fail(issue{rule: RuleJSONShape, category: CategoryValidation,
			title:     "The workflow is not a JSON object",
			message:   fmt.Sprintf("The workflow document is %s; n8n expects an object with name, nodes and connections.", kind(doc)),
			guidance:  "Send the workflow object itself, as n8n exports it, not a list or a string holding it.",
			technical: fmt.Sprintf("top-level value %s", excerpt(bytes.TrimSpace(doc))),
			fixes:     []string{`Wrap the workflow as {"name": …, "nodes": […], "connections": {…}}`}})
		return false
	}
	v.name(top["name"])
	nodesOK := v.readNodes(top["nodes"])
	connections, connectionsOK := v.connectionsObject(top["connections"])
	if nodesOK && connectionsOK {
		v.readConnections(connections)
	}
	// Without both lists the graph rules below would report every node.
	return nodesOK && connectionsOK
}

func (v *validator) name(raw json.RawMessage) {
	var name string
	switch {
	case raw == nil:
		v.fail(issue{rule: RuleWorkflowName, category: CategoryStructure,
			title: "The workflow has no name", message: `The workflow has no "name" field.`,
			guidance: "Give the workflow a name; n8n requires one.", technical: `field "name" absent`,
			fixes: []string{`Add "name": "My workflow" at the top level`}})
	case json.Unmarshal(raw, &name) != nil:
		v.fail(issue{rule: RuleWorkflowName, category: CategoryStructure,
			title: "The workflow name is not text", message: fmt.Sprintf(`The workflow "name" is %s; it must be a string.`, kind(raw)),
			guidance: "Set the name to a string.", technical: fmt.Sprintf("name = %s", excerpt(raw)),
			fixes: []string{`Write the name in quotes, e.g. "name": "My workflow"`}})
	case strings.TrimSpace(name) == "":
		v.fail(issue{rule: RuleWorkflowName, category: CategoryStructure,
			title: "The workflow name is empty", message: `The workflow "name" is empty.`,
			guidance: "Give the workflow a descriptive name; n8n requires a non-empty one.", technical: fmt.Sprintf("name = %q", name),
			fixes: []string{"Name the workflow after what it does"}})
	}
}

// nodeType is n8n's package.nodeName: an npm package name (scoped or
// not) and the node's name.
var nodeType = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*\.[A-Za-z][A-Za-z0-9_-]*$`)

func (v *validator) readNodes(raw json.RawMessage) bool {
	var entries []json.RawMessage
	if raw == nil || json.Unmarshal(raw, &entries) != nil || entries == nil {
		message := `The workflow has no "nodes" field.`
		if raw != nil {
			message = fmt.Sprintf(`The workflow "nodes" is %s; it must be an array of nodes.`, kind(raw))
		}
		v.fail(issue{rule: RuleWorkflowNodes, category: CategoryStructure,
			title: "The workflow has no node list", message: message,
			guidance: `Put the workflow's nodes in a "nodes" array.`, technical: "nodes = " + describe(raw),
			fixes: []string{`Add "nodes": [ … ] with at least a trigger node`}})
		return false
	}
	for i, entry := range entries {
		v.nodes = append(v.nodes, v.readNode(i, entry))
		v.report.nodes++
	}
	return true
}

func (v *validator) readNode(i int, raw json.RawMessage) *node {
	n := &node{index: i}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || fields == nil {
		v.fail(issue{rule: RuleNodeShape, category: CategoryStructure,
			title: "A node is not an object", message: fmt.Sprintf("Node #%d is %s; every node must be an object.", i, kind(raw)),
			guidance: "Replace the entry with a node object or remove it.", technical: fmt.Sprintf("nodes[%d] = %s", i, excerpt(raw)),
			fixes: []string{`Write the node as {"name", "type", "typeVersion", "position", "parameters"}`}})
		return n
	}
	where := fmt.Sprintf("nodes[%d]", i)
	if err := json.Unmarshal(fields["name"], &n.name); err != nil || strings.TrimSpace(n.name) == "" {
		n.name = ""
		v.fail(issue{rule: RuleNodeName, category: CategoryStructure,
			title: "A node has no name", message: fmt.Sprintf(`Node #%d has no usable "name" (%s); connections refer to nodes by name.`, i, describe(fields["name"])),
			guidance: "Give every node a unique, non-empty name.", technical: where + ".name = " + excerpt(fields["name"]),
			fixes: []string{fmt.Sprintf(`Set "name" of node #%d, e.g. "name": "HTTP Request"`, i)}})
	} else if other, dup := v.byName[n.name]; dup {
		v.fail(issue{rule: RuleNodeNameDuplicate, category: CategoryStructure,
			title: "Two nodes share a name", message: fmt.Sprintf("Nodes #%d and #%d are both named %q; n8n identifies nodes by name.", other.index, i, n.name),
			guidance: "Rename one of them and update the connections that refer to it.", technical: fmt.Sprintf("nodes[%d].name = nodes[%d].name = %q", other.index, i, n.name),
			fixes: []string{fmt.Sprintf("Rename node #%d to %q", i, n.name+" 1")}})
	} else {
		v.byName[n.name] = n
	}
	label := n.label()

	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil || !nodeType.MatchString(typ) {
		message := fmt.Sprintf(`The %s has no "type".`, label)
		if fields["type"] != nil {
			message = fmt.Sprintf(`The %s has type %s, which is not of n8n's form "package.nodeName".`, label, excerpt(fields["type"]))
		}
		v.fail(issue{rule: RuleNodeType, category: CategoryValidation,
			title: "A node type is missing or malformed", message: message,
			guidance: "Set the node's type to its package and name, as n8n exports it.", technical: where + ".type = " + excerpt(fields["type"]),
			fixes: []string{`Use a type such as "n8n-nodes-base.httpRequest" or "@n8n/n8n-nodes-langchain.agent"`}})
	} else {
		n.typ = typ
	}

	var version float64
	if err := json.Unmarshal(fields["typeVersion"], &version); err != nil || version <= 0 {
		v.fail(issue{rule: RuleNodeTypeVersion, category: CategoryValidation,
			title: "A node typeVersion is missing or invalid", message: fmt.Sprintf(`The %s has typeVersion %s; it must be a positive number.`, label, describe(fields["typeVersion"])),
			guidance: "Set typeVersion to a version the node type has (the editor shows it in the node's settings).", technical: where + ".typeVersion = " + excerpt(fields["typeVersion"]),
			fixes: []string{`Set "typeVersion": 1, or the version of the node you copied it from`}})
	} else {
		n.version = version
	}

	var position []float64
	if err := json.Unmarshal(fields["position"], &position); err != nil || len(position) != 2 {
		v.fail(issue{rule: RuleNodePosition, category: CategoryValidation,
			title: "A node position is invalid", message: fmt.Sprintf(`The %s has position %s; it must be [x, y] numbers.`, label, describe(fields["position"])),
			guidance: "Give the node its canvas position as two numbers.", technical: where + ".position = " + excerpt(fields["position"]),
			fixes: []string{`Set "position": [0, 0]`}})
	}

	if err := json.Unmarshal(fields["parameters"], &n.params); err != nil || n.params == nil {
		n.params = nil
		v.fail(issue{rule: RuleNodeParameters, category: CategoryValidation,
			title: "A node's parameters are not an object", message: fmt.Sprintf(`The %s has parameters %s; they must be an object (possibly empty).`, label, describe(fields["parameters"])),
			guidance: "Put the node's settings in a parameters object.", technical: where + ".parameters = " + excerpt(fields["parameters"]),
			fixes: []string{`Set "parameters": {} when the node has none`}})
	}
	_ = json.Unmarshal(fields["disabled"], &n.disabled)
	return n
}

// describe is a field's value for a message: "missing" or its excerpt.
func describe(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	return excerpt(raw)
}

func (v *validator) connectionsObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var connections map[string]json.RawMessage
	if raw == nil || json.Unmarshal(raw, &connections) != nil || connections == nil {
		message := `The workflow has no "connections" field.`
		if raw != nil {
			message = fmt.Sprintf(`The workflow "connections" is %s; it must be an object keyed by source node name.`, kind(raw))
		}
		v.fail(issue{rule: RuleWorkflowConnections, category: CategoryStructure,
			title: "The workflow has no connections object", message: message,
			guidance: `Add "connections": {} (empty when no node is connected yet).`, technical: "connections = " + describe(raw),
			fixes: []string{`Add "connections": {"Trigger": {"main": [[{"node": "Next", "type": "main", "index": 0}]]}}`}})
		return nil, false
	}
	return connections, true
}

func (v *validator) readConnections(connections map[string]json.RawMessage) {
	for _, source := range slices.Sorted(maps.Keys(connections)) {
		if v.byName[source] == nil {
			v.fail(issue{rule: RuleConnectionSource, category: CategoryStructure,
				title: "A connection leaves a node that does not exist", message: fmt.Sprintf("Connections are listed from %q, but no node has that name.", source),
				guidance: "Rename the connection's source to an existing node, or remove it.", technical: fmt.Sprintf("connections[%q]", source),
				fixes: v.nameFixes(source)})
		}
		var byType map[string]json.RawMessage
		if json.Unmarshal(connections[source], &byType) != nil || byType == nil {
			v.shape(fmt.Sprintf("connections[%q]", source), connections[source], "an object keyed by connection type")
			continue
		}
		for _, typ := range slices.Sorted(maps.Keys(byType)) {
			where := fmt.Sprintf("connections[%q][%q]", source, typ)
			if !slices.Contains(workflow.ConnectionTypes, typ) {
				v.unknownType(where, source, typ)
				continue
			}
			var outputs []json.RawMessage
			if json.Unmarshal(byType[typ], &outputs) != nil || outputs == nil {
				v.shape(where, byType[typ], "an array of outputs")
				continue
			}
			for output, raw := range outputs {
				var targets []json.RawMessage
				if json.Unmarshal(raw, &targets) != nil {
					v.shape(fmt.Sprintf("%s[%d]", where, output), raw, "an array of targets (or null)")
					continue
				}
				for i, target := range targets {
					v.readTarget(fmt.Sprintf("%s[%d][%d]", where, output, i), source, typ, output, target)
				}
			}
		}
	}
}

func (v *validator) readTarget(where, source, typ string, output int, raw json.RawMessage) {
	v.report.edges++
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || fields == nil {
		v.shape(where, raw, `an object {"node", "type", "index"}`)
		return
	}
	var t struct {
		Node  *string
		Type  *string
		Index *float64
	}
	// Each field on its own, so that the one of the wrong kind is named.
	for _, f := range []struct {
		name, want string
		dst        any
	}{{"node", "a string (the target node's name)", &t.Node}, {"type", "a string (the connection type)", &t.Type}, {"index", "a number (the input's index)", &t.Index}} {
		value, ok := fields[f.name]
		if !ok || json.Unmarshal(value, f.dst) != nil || string(value) == "null" {
			v.shape(where+"."+f.name, value, f.want)
			return
		}
	}
	ok := true
	if v.byName[*t.Node] == nil {
		ok = false
		v.fail(issue{rule: RuleConnectionTarget, category: CategoryStructure,
			title: "A connection goes to a node that does not exist", message: fmt.Sprintf("%q connects its %s output %d to %q, but no node has that name.", source, typ, output, *t.Node),
			guidance: "Point the connection at an existing node, or remove it.", technical: fmt.Sprintf("%s.node = %q", where, *t.Node),
			fixes: v.nameFixes(*t.Node)})
	}
	switch {
	case !slices.Contains(workflow.ConnectionTypes, *t.Type):
		ok = false
		v.unknownType(where+".type", source, *t.Type)
	case *t.Type != typ:
		ok = false
		v.fail(issue{rule: RuleConnectionMismatch, category: CategoryStructure,
			title: "A connection changes type", message: fmt.Sprintf("%q connects its %s output %d to the %s input of %q; an output feeds inputs of its own type.", source, typ, output, *t.Type, *t.Node),
			guidance: "Make the target's type equal to the output's type.", technical: fmt.Sprintf("%s.type = %q under %q", where, *t.Type, typ),
			fixes: []string{fmt.Sprintf("Set the target's type to %q", typ), fmt.Sprintf("Or list the connection under %q", *t.Type)}})
	}
	if *t.Index < 0 || *t.Index != math.Trunc(*t.Index) || *t.Index > math.MaxInt32 {
		ok = false
		v.fail(issue{rule: RuleConnectionIndex, category: CategoryStructure,
			title: "A connection's input index is invalid", message: fmt.Sprintf("%q connects to input %v of %q; input indexes are whole numbers from 0.", source, *t.Index, *t.Node),
			guidance: "Use the input's position, counting from 0.", technical: fmt.Sprintf("%s.index = %v", where, *t.Index),
			fixes: []string{"Set the index to 0 for a node's first input"}})
	}
	if ok && v.byName[source] != nil {
		v.edges = append(v.edges, edge{from: source, typ: typ, output: output, to: *t.Node, targetType: *t.Type, targetIndex: int(*t.Index)})
	}
}

func (v *validator) shape(where string, raw json.RawMessage, want string) {
	v.fail(issue{rule: RuleConnectionShape, category: CategoryStructure,
		title: "A connection entry has the wrong shape", message: fmt.Sprintf("%s is %s; it must be %s.", where, kindOrMissing(raw), want),
		guidance: "Write connections as n8n exports them: source name → connection type → outputs → targets.", technical: where + " = " + describe(raw),
		fixes: []string{`Use {"Source": {"main": [[{"node": "Target", "type": "main", "index": 0}]]}}`}})
}

func (v *validator) unknownType(where, source, typ string) {
	v.fail(issue{rule: RuleConnectionType, category: CategoryStructure,
		title: "A connection has an unknown type", message: fmt.Sprintf("A connection from %q has type %q, which n8n does not know.", source, typ),
		guidance: "Use one of n8n's connection types: " + strings.Join(workflow.ConnectionTypes, ", ") + ".", technical: fmt.Sprintf("%s = %q", where, typ),
		fixes: []string{`Use "main" between ordinary nodes`, `Use the sub-node's own type (e.g. "ai_languageModel") into an AI node`}})
}

// nameFixes suggests the node names closest to a missing one.
func (v *validator) nameFixes(missing string) []string {
	fixes := []string{fmt.Sprintf("Add a node named %q", missing)}
	for _, n := range v.nodes {
		if n.name != "" && strings.EqualFold(strings.TrimSpace(n.name), strings.TrimSpace(missing)) {
			fixes = append([]string{fmt.Sprintf("Did you mean %q?", n.name)}, fixes...)
		}
	}
	return append(fixes, "Remove the connection")
}
