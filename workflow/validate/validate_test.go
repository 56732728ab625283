package validate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/threadline/threadline/workflow/catalog"
	"github.com/threadline/threadline/workflow/catalog/catalogtest"
)

var (
	installedOnce sync.Once
	installed     *catalog.Catalog
	installedErr  error
)

// installedCatalog is n8n's catalog from the pinned packages (see
// catalogtest.NodeModules), loaded once for all tests.
func installedCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	dir := catalogtest.NodeModules(t)
	installedOnce.Do(func() { installed, installedErr = catalog.LoadDir(dir) })
	if installedErr != nil {
		t.Fatal(installedErr)
	}
	return installed
}

func realWorkflows(t testing.TB) map[string][]byte {
	files, err := filepath.Glob("../../agent/n8n/testdata/real/workflow-*.create-body.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded workflows: %v", err)
	}
	docs := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.Base(f)] = data
	}
	return docs
}

// checkShape holds every result to the seed's contract: is_valid exactly
// when there are no errors, every detail filled in, counts that add up.
func checkShape(t testing.TB, res Result) {
	t.Helper()
	if res.IsValid != (len(res.Errors) == 0) {
		t.Fatalf("is_valid %v with %d errors", res.IsValid, len(res.Errors))
	}
	if len(res.Warnings) != len(res.WarningDetails) {
		t.Fatalf("%d warnings, %d warning details", len(res.Warnings), len(res.WarningDetails))
	}
	s := res.ValidationSummary
	if s.CriticalIssues != len(res.Errors) || s.WarningsCount != len(res.Warnings) {
		t.Fatalf("summary %+v for %d errors, %d warnings", s, len(res.Errors), len(res.Warnings))
	}
	check := func(d ErrorDetail, severity string) {
		if d.Severity != severity || d.Category != CategoryStructure && d.Category != CategoryValidation ||
			d.Title == "" || d.Message == "" || d.UserGuidance == "" || len(d.FixSuggestions) == 0 ||
			!strings.HasPrefix(d.TechnicalDetails, d.Rule) || d.Rule == "" {
			t.Fatalf("incomplete detail %+v", d)
		}
		for _, f := range d.FixSuggestions {
			if f == "" {
				t.Fatalf("empty fix suggestion in %+v", d)
			}
		}
	}
	for _, d := range res.Errors {
		check(d, SeverityError)
	}
	for i, d := range res.WarningDetails {
		check(d, SeverityWarning)
		if res.Warnings[i] != d.Message {
			t.Fatalf("warning %d %q is not its detail's message %q", i, res.Warnings[i], d.Message)
		}
	}
}

func rules(ds []ErrorDetail) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.Rule)
	}
	return out
}

func TestRealWorkflowsAreValid(t *testing.T) {
	run := func(t *testing.T, opts Options) {
		for name, doc := range realWorkflows(t) {
			res := Validate(doc, opts)
			checkShape(t, res)
			if !res.IsValid || len(res.Warnings) != 0 {
				t.Errorf("%s: errors %+v, warnings %v", name, res.Errors, res.Warnings)
			}
			if res.ValidationSummary.NodesValidated < 4 || res.ValidationSummary.ConnectionsValidated < 3 {
				t.Errorf("%s: summary %+v", name, res.ValidationSummary)
			}
		}
	}
	t.Run("without catalog", func(t *testing.T) { run(t, Options{}) })
	t.Run("with catalog", func(t *testing.T) { run(t, Options{Catalog: installedCatalog(t)}) })
}

// doc is a workflow document being broken by a test case.
type doc map[string]any

// base is the recorded streaming agent workflow (webhook → agent with a
// chat model, memory and calculator tool) with an HTTP Request after the
// agent: valid, without warnings, with or without the catalog.
func base(t testing.TB) doc {
	var d doc
	if err := json.Unmarshal(realWorkflows(t)["workflow-streaming.create-body.json"], &d); err != nil {
		t.Fatal(err)
	}
	d.addNode(map[string]any{"name": "HTTP Request", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
		"position": []any{440, 0}, "parameters": map[string]any{"url": "https://example.com/log"}})
	d.conns()["AI Agent"] = map[string]any{"main": []any{[]any{target("HTTP Request", "main", 0)}}}
	return d
}

func target(node, typ string, index any) map[string]any {
	return map[string]any{"node": node, "type": typ, "index": index}
}

func (d doc) nodes() []any          { return d["nodes"].([]any) }
func (d doc) addNode(n any)         { d["nodes"] = append(d.nodes(), n) }
func (d doc) conns() map[string]any { return d["connections"].(map[string]any) }
func (d doc) node(name string) map[string]any {
	for _, n := range d.nodes() {
		if m := n.(map[string]any); m["name"] == name {
			return m
		}
	}
	panic("no node " + name)
}

// addTarget adds a target to the first main output of the Webhook.
func (d doc) addTarget(t any) {
	outs := d.conns()["Webhook"].(map[string]any)["main"].([]any)
	outs[0] = append(outs[0].([]any), t)
}

func (d doc) removeNode(name string) {
	var kept []any
	for _, n := range d.nodes() {
		if n.(map[string]any)["name"] != name {
			kept = append(kept, n)
		}
	}
	d["nodes"] = kept
	delete(d.conns(), name)
}

var brokenCases = []struct {
	name          string
	raw           string    // the document, when not a broken base
	edit          func(doc) // the breakage of base
	catalog       bool      // the rule needs the catalog
	errors, warns []string  // exact rules hit
	fix           string    // a fix suggestion that must be offered
	message       string    // text the first issue's message must contain
	technical     string    // text the first issue's technical details must contain
}{
	{name: "not JSON", raw: "{\n  \"name\": \"x\",\n  \"nodes\": [,]\n}", errors: []string{RuleJSONSyntax}, message: "line 3, column 13"},
	{name: "truncated", raw: `{"name": "x", "nodes": [`, errors: []string{RuleJSONSyntax}, message: "line 1, column 25"},
	{name: "array document", raw: `[{"name": "x"}]`, errors: []string{RuleJSONShape}, message: "an array"},
	{name: "null document", raw: `null`, errors: []string{RuleJSONShape}},
	{name: "no name", edit: func(d doc) { delete(d, "name") }, errors: []string{RuleWorkflowName}},
	{name: "empty name", edit: func(d doc) { d["name"] = "  " }, errors: []string{RuleWorkflowName}},
	{name: "numeric name", edit: func(d doc) { d["name"] = 7 }, errors: []string{RuleWorkflowName}, message: "a number"},
	{name: "no nodes", edit: func(d doc) { delete(d, "nodes") }, errors: []string{RuleWorkflowNodes}, technical: "nodes = missing"},
	{name: "no connections", edit: func(d doc) { delete(d, "connections") }, errors: []string{RuleWorkflowConnections}, technical: "connections = missing"},
	{name: "nodes object", edit: func(d doc) { d["nodes"] = map[string]any{} }, errors: []string{RuleWorkflowNodes}, message: "an object"},
	{name: "no connections", edit: func(d doc) { delete(d, "connections") }, errors: []string{RuleWorkflowConnections}},
	{name: "connections array", edit: func(d doc) { d["connections"] = []any{} }, errors: []string{RuleWorkflowConnections}},
	{name: "node not object", edit: func(d doc) { d.addNode("oops") }, errors: []string{RuleNodeShape}, message: "Node #6"},
	{name: "node without name", edit: func(d doc) {
		d.addNode(map[string]any{"name": "", "type": "n8n-nodes-base.stickyNote", "typeVersion": 1, "position": []any{0, 0}, "parameters": map[string]any{}})
	}, errors: []string{RuleNodeName}},
	{name: "duplicate name", edit: func(d doc) {
		d.addNode(map[string]any{"name": "Webhook", "type": "n8n-nodes-base.stickyNote", "typeVersion": 1, "position": []any{0, 0}, "parameters": map[string]any{}})
	}, errors: []string{RuleNodeNameDuplicate}, message: `"Webhook"`},
	{name: "no type", edit: func(d doc) { delete(d.node("Calculator"), "type") }, errors: []string{RuleNodeType}, message: `"Calculator"`},
	{name: "malformed type", edit: func(d doc) { d.node("Calculator")["type"] = "calculator" }, errors: []string{RuleNodeType}},
	{name: "zero typeVersion", edit: func(d doc) { d.node("Calculator")["typeVersion"] = 0 }, errors: []string{RuleNodeTypeVersion}},
	{name: "string typeVersion", edit: func(d doc) { d.node("Calculator")["typeVersion"] = "1" }, errors: []string{RuleNodeTypeVersion}},
	{name: "short position", edit: func(d doc) { d.node("Calculator")["position"] = []any{1} }, errors: []string{RuleNodePosition}},
	{name: "text position", edit: func(d doc) { d.node("Calculator")["position"] = []any{"1", 2} }, errors: []string{RuleNodePosition}},
	{name: "no parameters", edit: func(d doc) { delete(d.node("Calculator"), "parameters") }, errors: []string{RuleNodeParameters}},
	{name: "array parameters", edit: func(d doc) { d.node("Calculator")["parameters"] = []any{} }, errors: []string{RuleNodeParameters}},
	{name: "connection from a missing node", edit: func(d doc) {
		d.conns()["Ghost"] = map[string]any{"main": []any{[]any{target("AI Agent", "main", 0)}}}
	}, errors: []string{RuleConnectionSource}, message: `"Ghost"`},
	{name: "connection to a missing node", edit: func(d doc) { d.addTarget(target("Nobody", "main", 0)) }, errors: []string{RuleConnectionTarget}, message: `"Nobody"`},
	{name: "connection to a node differing in case", edit: func(d doc) { d.addTarget(target("ai agent", "main", 0)) },
		errors: []string{RuleConnectionTarget}, fix: `Did you mean "AI Agent"?`},
	{name: "unknown output type", edit: func(d doc) {
		d.conns()["Calculator"].(map[string]any)["ai_magic"] = []any{[]any{target("AI Agent", "ai_magic", 0)}}
	}, errors: []string{RuleConnectionType}, message: `"ai_magic"`},
	{name: "unknown target type", edit: func(d doc) { d.addTarget(target("AI Agent", "bogus", 0)) }, errors: []string{RuleConnectionType}},
	{name: "target type differs", edit: func(d doc) { d.addTarget(target("AI Agent", "ai_tool", 0)) }, errors: []string{RuleConnectionMismatch}},
	{name: "negative index", edit: func(d doc) { d.addTarget(target("AI Agent", "main", -1)) }, errors: []string{RuleConnectionIndex}},
	{name: "fractional index", edit: func(d doc) { d.addTarget(target("AI Agent", "main", 0.5)) }, errors: []string{RuleConnectionIndex}},
	{name: "outputs not an array", edit: func(d doc) { d.conns()["Webhook"].(map[string]any)["ai_tool"] = "nope" }, errors: []string{RuleConnectionShape}},
	{name: "target without index", edit: func(d doc) { d.addTarget(map[string]any{"node": "AI Agent", "type": "main"}) }, errors: []string{RuleConnectionShape},
		message: `.index is missing; it must be a number`},
	{name: "target with a text index", edit: func(d doc) { d.addTarget(map[string]any{"node": "AI Agent", "type": "main", "index": "0"}) },
		errors: []string{RuleConnectionShape}, message: `.index is a string; it must be a number`, technical: `.index = "0"`},
	{name: "target that is a list", edit: func(d doc) { d.addTarget([]any{"AI Agent"}) }, errors: []string{RuleConnectionShape},
		message: `is an array; it must be an object {"node", "type", "index"}`},
	{name: "empty output is fine", edit: func(d doc) {
		outs := d.conns()["Webhook"].(map[string]any)["main"].([]any)
		d.conns()["Webhook"].(map[string]any)["main"] = append(outs, nil, []any{})
	}},
	{name: "no trigger", edit: func(d doc) { d.removeNode("Webhook") }, warns: []string{RuleTriggerNone},
		message: "Workflow cannot be activated because it has no trigger node. At least one trigger, webhook, or polling node is required."},
	{name: "disabled trigger", edit: func(d doc) { d.node("Webhook")["disabled"] = true }, warns: []string{RuleTriggerNone}},
	{name: "manual trigger only", edit: func(d doc) {
		w := d.node("Webhook")
		w["type"], w["typeVersion"], w["parameters"] = "n8n-nodes-base.manualTrigger", 1, map[string]any{}
	}, warns: []string{RuleTriggerManualOnly}},
	{name: "schedule trigger", edit: func(d doc) {
		w := d.node("Webhook")
		w["type"], w["typeVersion"], w["parameters"] = "n8n-nodes-base.scheduleTrigger", 1.2, map[string]any{}
	}},
	{name: "wait node resumes by webhook", edit: func(d doc) {
		w := d.node("Webhook")
		w["type"], w["typeVersion"], w["parameters"] = "n8n-nodes-base.wait", 1.1, map[string]any{}
	}},
	{name: "unconnected node", edit: func(d doc) {
		d.addNode(map[string]any{"name": "Edit Fields", "type": "n8n-nodes-base.set", "typeVersion": 3.4, "position": []any{0, 400}, "parameters": map[string]any{}})
	}, warns: []string{RuleNodeOrphan}, message: `"Edit Fields"`},
	{name: "sticky notes and disabled nodes are not orphans", edit: func(d doc) {
		d.addNode(map[string]any{"name": "Note", "type": "n8n-nodes-base.stickyNote", "typeVersion": 1, "position": []any{0, 400}, "parameters": map[string]any{"content": "hi"}})
		d.addNode(map[string]any{"name": "Parked", "type": "n8n-nodes-base.set", "typeVersion": 3.4, "position": []any{0, 600}, "parameters": map[string]any{}, "disabled": true})
	}},
	{name: "agent without a model", edit: func(d doc) { delete(d.conns(), "OpenAI Chat Model") },
		errors: []string{RuleAgentModel}, warns: []string{RuleNodeOrphan}, message: `"AI Agent"`},
	{name: "memory connected as main", edit: func(d doc) {
		d.conns()["Simple Memory"] = map[string]any{"main": []any{[]any{target("AI Agent", "main", 0)}}}
	}, errors: []string{RuleSubNodeType}, fix: `Change the connection's type to "ai_memory" (both under connections and in the target)`},
	{name: "tool connected as memory", edit: func(d doc) {
		d.conns()["Calculator"] = map[string]any{"ai_memory": []any{[]any{target("AI Agent", "ai_memory", 0)}}}
	}, errors: []string{RuleSubNodeType}},
	{name: "misspelt type", catalog: true, edit: func(d doc) { d.node("HTTP Request")["type"] = "n8n-nodes-base.httpRequst" },
		errors: []string{RuleUnknownType}, fix: `Did you mean "n8n-nodes-base.httpRequest"?`},
	{name: "type in the wrong package", catalog: true, edit: func(d doc) { d.node("Calculator")["type"] = "n8n-nodes-base.toolCalculator" },
		errors: []string{RuleUnknownType}, fix: `Did you mean "@n8n/n8n-nodes-langchain.toolCalculator"?`},
	{name: "unknown version", catalog: true, edit: func(d doc) { d.node("HTTP Request")["typeVersion"] = 4.9 },
		errors: []string{RuleVersion}, message: "4.2"},
	{name: "required parameter missing", catalog: true, edit: func(d doc) { d.node("HTTP Request")["parameters"] = map[string]any{} },
		errors: []string{RuleRequiredParameter}, message: `"URL" (url)`},
	{name: "disabled node may miss parameters", catalog: true, edit: func(d doc) {
		n := d.node("HTTP Request")
		n["parameters"], n["disabled"] = map[string]any{}, true
	}},
}

func TestBrokenWorkflows(t *testing.T) {
	for _, c := range brokenCases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.raw)
			if c.edit != nil {
				d := base(t)
				c.edit(d)
				var err error
				if data, err = json.Marshal(d); err != nil {
					t.Fatal(err)
				}
			}
			opts := Options{}
			if c.catalog {
				opts.Catalog = installedCatalog(t)
				// Without the catalog the same document passes: the rule is the catalog's.
				if res := Validate(data, Options{}); !res.IsValid {
					t.Fatalf("without the catalog: %+v", res.Errors)
				}
			}
			res := Validate(data, opts)
			checkShape(t, res)
			if got := rules(res.Errors); !slices.Equal(got, append([]string{}, c.errors...)) {
				t.Errorf("errors %v; want %v\n%+v", got, c.errors, res.Errors)
			}
			if got := rules(res.WarningDetails); !slices.Equal(got, append([]string{}, c.warns...)) {
				t.Errorf("warnings %v; want %v\n%v", got, c.warns, res.Warnings)
			}
			first := append(append([]ErrorDetail{}, res.Errors...), res.WarningDetails...)
			if c.message != "" && (len(first) == 0 || !strings.Contains(first[0].Message, c.message)) {
				t.Errorf("message %+v does not contain %q", first, c.message)
			}
			if c.technical != "" && (len(first) == 0 || !strings.Contains(first[0].TechnicalDetails, c.technical)) {
				t.Errorf("technical details %+v do not contain %q", first, c.technical)
			}
			if c.fix != "" && (len(first) == 0 || !slices.Contains(first[0].FixSuggestions, c.fix)) {
				t.Errorf("fixes %+v do not offer %q", first, c.fix)
			}
		})
	}
}

// Every case of the table finds the same with the catalog loaded: the
// catalog adds no issue to documents whose types and parameters are right.
func TestBrokenWorkflowsWithCatalog(t *testing.T) {
	c := installedCatalog(t)
	for _, bc := range brokenCases {
		if bc.catalog || bc.edit == nil {
			continue
		}
		d := base(t)
		bc.edit(d)
		data, _ := json.Marshal(d)
		res := Validate(data, Options{Catalog: c})
		checkShape(t, res)
		if !slices.Equal(rules(res.Errors), append([]string{}, bc.errors...)) || !slices.Equal(rules(res.WarningDetails), append([]string{}, bc.warns...)) {
			t.Errorf("%s with the catalog: errors %v, warnings %v; want %v, %v", bc.name, rules(res.Errors), rules(res.WarningDetails), bc.errors, bc.warns)
		}
	}
}

// The name-based trigger rule used without a catalog agrees with n8n's
// descriptions for every node type the pinned packages ship.
func TestTriggerHeuristicMatchesCatalog(t *testing.T) {
	c := installedCatalog(t)
	for _, name := range c.Names() {
		like := false
		for _, v := range c.Versions(name) {
			d, _ := c.LookupVersion(name, v)
			like = like || d.IsTriggerLike()
		}
		if like != triggerLikeByName(name) {
			t.Errorf("%s: trigger-like %v in the catalog, %v by name", name, like, !like)
		}
	}
}

// The name-based sub-node rule agrees with every description that lists
// its outputs plainly.
func TestSubNodeHeuristicMatchesCatalog(t *testing.T) {
	c := installedCatalog(t)
	for _, name := range c.Names() {
		byName := subNodeOutputByName(name)
		for _, v := range c.Versions(name) {
			d, _ := c.LookupVersion(name, v)
			out := d.OutputTypes()
			if out == nil {
				continue // computed at run time
			}
			want := ""
			if len(out) == 1 && out[0] != "main" {
				want = out[0]
			}
			if strings.HasSuffix(name, "Load") && want == "ai_vectorStore" {
				continue // vector stores' outputs depend on their mode; not guessed by name
			}
			if want != byName {
				t.Errorf("%s v%v: outputs %v in the catalog, sub-node output %q by name", name, v, out, byName)
			}
		}
	}
}

func FuzzValidate(f *testing.F) {
	for _, d := range realWorkflows(f) {
		f.Add(d)
	}
	for _, c := range brokenCases {
		if c.raw != "" {
			f.Add([]byte(c.raw))
		}
	}
	f.Add([]byte(`{"name":"x","nodes":[{"name":"a","type":"a.b","typeVersion":1,"position":[0,0],"parameters":{}}],"connections":{"a":{"main":[[{"node":"a","type":"main","index":1e300}]]}}}`))
	f.Add([]byte(`{"name":"x","nodes":[null,1,"s",[]],"connections":{"":{"":null}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkShape(t, Validate(data, Options{}))
	})
}

// Every rule has a case in the table that hits it.
func TestEveryRuleHasACase(t *testing.T) {
	hit := map[string]bool{}
	for _, c := range brokenCases {
		for _, r := range append(append([]string{}, c.errors...), c.warns...) {
			hit[r] = true
		}
	}
	for _, r := range []string{RuleJSONSyntax, RuleJSONShape, RuleWorkflowName, RuleWorkflowNodes, RuleWorkflowConnections,
		RuleNodeShape, RuleNodeName, RuleNodeNameDuplicate, RuleNodeType, RuleNodeTypeVersion, RuleNodePosition,
		RuleNodeParameters, RuleNodeOrphan, RuleConnectionShape, RuleConnectionSource, RuleConnectionTarget,
		RuleConnectionType, RuleConnectionMismatch, RuleConnectionIndex, RuleTriggerNone, RuleTriggerManualOnly,
		RuleAgentModel, RuleSubNodeType, RuleUnknownType, RuleVersion, RuleRequiredParameter} {
		if !hit[r] {
			t.Errorf("rule %s has no case", r)
		}
	}
}
