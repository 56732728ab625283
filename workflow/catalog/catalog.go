// Package catalog is n8n's node catalog: the node type descriptions n8n
// serves at /types/nodes.json and its node packages ship as
// dist/types/nodes.json. It is loaded at run time from a running n8n or
// from installed npm packages; n8n's descriptions are never copied into
// this repository.
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Description is one node type description (INodeTypeDescription), for
// one version or a range of versions of the type.
type Description struct {
	Name           string          `json:"name"`
	DisplayName    string          `json:"displayName"`
	Version        Versions        `json:"version"`
	DefaultVersion float64         `json:"defaultVersion,omitempty"`
	Group          []string        `json:"group,omitempty"`
	Polling        bool            `json:"polling,omitempty"`
	Webhooks       json.RawMessage `json:"webhooks,omitempty"`
	Inputs         json.RawMessage `json:"inputs,omitempty"`
	Outputs        json.RawMessage `json:"outputs,omitempty"`
	UsableAsTool   json.RawMessage `json:"usableAsTool,omitempty"`
	Defaults       json.RawMessage `json:"defaults,omitempty"`
	Properties     []Property      `json:"properties"`
}

// Property is one parameter of a node type.
type Property struct {
	Name           string          `json:"name"`
	DisplayName    string          `json:"displayName"`
	Type           string          `json:"type"`
	Required       bool            `json:"required,omitempty"`
	Default        json.RawMessage `json:"default,omitempty"`
	DisplayOptions *DisplayOptions `json:"displayOptions,omitempty"`
}

// DisplayOptions says when a property is shown: every Show key must match
// one of its values and no Hide key may. Keys are parameter names ("/name"
// for a root parameter, "@version" for the node's typeVersion); values are
// plain JSON values or {"_cnd": {...}} conditions.
type DisplayOptions struct {
	Show map[string][]json.RawMessage `json:"show,omitempty"`
	Hide map[string][]json.RawMessage `json:"hide,omitempty"`
}

// Versions are the typeVersions a description covers: n8n writes a single
// number or an array.
type Versions []float64

// UnmarshalJSON accepts a number or an array of numbers.
func (v *Versions) UnmarshalJSON(data []byte) error {
	var one float64
	if err := json.Unmarshal(data, &one); err == nil {
		*v = Versions{one}
		return nil
	}
	var many []float64
	if err := json.Unmarshal(data, &many); err != nil {
		return fmt.Errorf("version is neither a number nor an array of numbers: %s", data)
	}
	*v = many
	return nil
}

// IsTriggerLike reports whether n8n would accept this node as the one that
// starts an active workflow. n8n's validateWorkflowHasTriggerLikeNode
// (packages/workflow/src/workflow-validation.ts) asks whether the node type
// implements poll, trigger or webhook; a description shows those as
// polling: true, the "trigger" group and a webhooks list. That last one
// includes nodes such as Wait, Form and the send-and-wait operations of
// Slack or Gmail, which n8n counts too.
func (d *Description) IsTriggerLike() bool {
	if d.Polling || slices.Contains(d.Group, "trigger") {
		return true
	}
	var hooks []json.RawMessage
	return json.Unmarshal(d.Webhooks, &hooks) == nil && len(hooks) > 0
}

// OutputTypes returns the connection types of the node's outputs when the
// description lists them plainly, and nil when n8n computes them from the
// parameters (an expression) at run time.
func (d *Description) OutputTypes() []string {
	var raw []json.RawMessage
	if json.Unmarshal(d.Outputs, &raw) != nil {
		return nil
	}
	types := make([]string, 0, len(raw))
	for _, r := range raw {
		var s string
		var obj struct {
			Type string `json:"type"`
		}
		switch {
		case json.Unmarshal(r, &s) == nil:
			types = append(types, s)
		case json.Unmarshal(r, &obj) == nil && obj.Type != "":
			types = append(types, obj.Type)
		default:
			return nil
		}
	}
	return types
}

// Catalog is a set of node type descriptions by full type name
// ("n8n-nodes-base.httpRequest").
type Catalog struct {
	byName map[string][]*Description
	names  []string // sorted, for Nearest
}

// New returns a catalog of descs, whose names must be full type names.
func New(descs []Description) *Catalog {
	c := &Catalog{byName: map[string][]*Description{}}
	c.add(descs)
	return c
}

func (c *Catalog) add(descs []Description) {
	for i := range descs {
		d := &descs[i]
		if _, seen := c.byName[d.Name]; !seen {
			c.names = append(c.names, d.Name)
		}
		c.byName[d.Name] = append(c.byName[d.Name], d)
	}
	sort.Strings(c.names)
}

// Merge adds other's descriptions to c.
func (c *Catalog) Merge(other *Catalog) {
	for _, name := range other.names {
		for _, d := range other.byName[name] {
			c.add([]Description{*d})
		}
	}
}

// Decode reads a nodes.json array. A name without a package ("httpRequest",
// as the npm packages write them) gets pkg as its package when pkg is set.
func Decode(r io.Reader, pkg string) (*Catalog, error) {
	var descs []Description
	if err := json.NewDecoder(r).Decode(&descs); err != nil {
		return nil, fmt.Errorf("nodes.json: %w", err)
	}
	for i := range descs {
		if descs[i].Name == "" {
			return nil, fmt.Errorf("nodes.json: description %d has no name", i)
		}
		if pkg != "" && !strings.Contains(descs[i].Name, ".") {
			descs[i].Name = pkg + "." + descs[i].Name
		}
	}
	return New(descs), nil
}

// LoadFile reads a nodes.json file. When its names carry no package (a
// package's dist/types/nodes.json), the package is the name in the
// package.json of the package the file belongs to (found walking up from
// the file).
func LoadFile(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := Decode(f, owningPackage(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// owningPackage is the name in the nearest package.json above path, or "".
func owningPackage(path string) string {
	dir := filepath.Dir(path)
	for range 4 {
		if name, err := packageName(dir); err == nil {
			return name
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

func packageName(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", err
	}
	var p struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(data, &p); err != nil || p.Name == "" {
		return "", fmt.Errorf("%s/package.json has no name", dir)
	}
	return p.Name, nil
}

// nodesFile is where an n8n node package ships its descriptions.
const nodesFile = "dist/types/nodes.json"

// LoadPackages reads the descriptions of installed node packages, each
// given by its directory (node_modules/n8n-nodes-base, say).
func LoadPackages(dirs ...string) (*Catalog, error) {
	c := New(nil)
	for _, dir := range dirs {
		name, err := packageName(dir)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(filepath.Join(dir, nodesFile))
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", name, err)
		}
		pc, err := Decode(f, name)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", name, err)
		}
		c.Merge(pc)
	}
	return c, nil
}

// LoadDir reads every node package installed in a node_modules directory:
// those (scoped or not) that ship dist/types/nodes.json.
func LoadDir(nodeModules string) (*Catalog, error) {
	var dirs []string
	for _, pattern := range []string{"*", "@*/*"} {
		matches, err := filepath.Glob(filepath.Join(nodeModules, pattern, filepath.FromSlash(nodesFile)))
		if err != nil {
			return nil, err
		}
		for _, m := range matches {
			dirs = append(dirs, filepath.Dir(filepath.Dir(filepath.Dir(m))))
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s: no node package with %s", nodeModules, nodesFile)
	}
	return LoadPackages(dirs...)
}

// Len is the number of node types.
func (c *Catalog) Len() int { return len(c.names) }

// Names lists the node types, sorted.
func (c *Catalog) Names() []string { return slices.Clone(c.names) }

// Lookup returns the description of typ's newest version.
func (c *Catalog) Lookup(typ string) (*Description, bool) {
	descs := c.descriptions(typ)
	if len(descs) == 0 {
		return nil, false
	}
	best, bestVersion := descs[0], -1.0
	for _, d := range descs {
		for _, v := range d.Version {
			if v > bestVersion {
				best, bestVersion = d, v
			}
		}
	}
	return best, true
}

// LookupVersion returns the description of typ at typeVersion version.
func (c *Catalog) LookupVersion(typ string, version float64) (*Description, bool) {
	for _, d := range c.descriptions(typ) {
		if slices.Contains(d.Version, version) {
			return d, true
		}
	}
	return nil, false
}

// Versions lists typ's known typeVersions, ascending.
func (c *Catalog) Versions(typ string) []float64 {
	var vs []float64
	for _, d := range c.descriptions(typ) {
		vs = append(vs, d.Version...)
	}
	slices.Sort(vs)
	return slices.Compact(vs)
}

// toolSuffix marks the AI tool n8n derives at load time from every node
// that is usableAsTool ("n8n-nodes-base.slack" → "n8n-nodes-base.slackTool").
// The packages' nodes.json do not list these; a running n8n's does.
const toolSuffix = "Tool"

func (c *Catalog) descriptions(typ string) []*Description {
	if descs := c.byName[typ]; len(descs) > 0 {
		return descs
	}
	base, ok := strings.CutSuffix(typ, toolSuffix)
	if !ok {
		return nil
	}
	var tools []*Description
	for _, d := range c.byName[base] {
		if len(d.UsableAsTool) == 0 || string(d.UsableAsTool) == "false" {
			continue
		}
		tool := *d
		tool.Name = typ
		tool.DisplayName = d.DisplayName + " Tool"
		tool.Inputs = json.RawMessage(`[]`)
		tool.Outputs = json.RawMessage(`["ai_tool"]`)
		tool.Group, tool.Polling, tool.Webhooks = nil, false, nil
		tools = append(tools, &tool)
	}
	return tools
}

// ErrNotFound is Fetch's error for an n8n without /types/nodes.json.
var ErrNotFound = errors.New("catalog: /types/nodes.json not found")
