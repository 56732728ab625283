package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/workflow/catalog/catalogtest"
)

func loadInstalled(t *testing.T) *Catalog {
	t.Helper()
	c, err := LoadDir(catalogtest.NodeModules(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadInstalledPackages(t *testing.T) {
	dir := catalogtest.NodeModules(t)
	all := loadInstalled(t)
	base, err := LoadPackages(filepath.Join(dir, "n8n-nodes-base"))
	if err != nil {
		t.Fatal(err)
	}
	langchain, err := LoadFile(filepath.Join(dir, "@n8n", "n8n-nodes-langchain", "dist", "types", "nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	if base.Len() < 400 || langchain.Len() < 100 || all.Len() != base.Len()+langchain.Len() {
		t.Fatalf("loaded %d types (base %d, langchain %d)", all.Len(), base.Len(), langchain.Len())
	}
	for _, name := range all.Names() {
		if !strings.HasPrefix(name, "n8n-nodes-base.") && !strings.HasPrefix(name, "@n8n/n8n-nodes-langchain.") {
			t.Fatalf("type %q has no package", name)
		}
	}
	for _, c := range []struct {
		typ     string
		version float64
	}{
		{"n8n-nodes-base.httpRequest", 4.2},
		{"n8n-nodes-base.httpRequest", 1},
		{"n8n-nodes-base.webhook", 2.1},
		{"@n8n/n8n-nodes-langchain.agent", 3},
		{"@n8n/n8n-nodes-langchain.lmChatOpenAi", 1.3},
		{"@n8n/n8n-nodes-langchain.memoryBufferWindow", 1.3},
		{"@n8n/n8n-nodes-langchain.toolCalculator", 1},
	} {
		d, ok := all.LookupVersion(c.typ, c.version)
		if !ok || d.Name != c.typ || d.DisplayName == "" || len(d.Properties) == 0 && c.typ != "@n8n/n8n-nodes-langchain.toolCalculator" {
			t.Errorf("LookupVersion(%s, %v) = %+v, %v", c.typ, c.version, d, ok)
		}
		if !slices.Contains(all.Versions(c.typ), c.version) {
			t.Errorf("Versions(%s) = %v; want %v among them", c.typ, all.Versions(c.typ), c.version)
		}
	}
	if _, ok := all.LookupVersion("n8n-nodes-base.httpRequest", 99); ok {
		t.Error("httpRequest has no version 99")
	}
	if _, ok := all.Lookup("n8n-nodes-base.httpRequst"); ok {
		t.Error("a misspelt type was found")
	}
	newest, _ := all.Lookup("n8n-nodes-base.httpRequest")
	if vs := all.Versions("n8n-nodes-base.httpRequest"); !slices.Contains(newest.Version, vs[len(vs)-1]) {
		t.Errorf("Lookup returned versions %v, not the newest of %v", newest.Version, vs)
	}
}

// n8n derives "<node>Tool" from every usableAsTool node; a running n8n
// lists them, the packages do not.
func TestToolVariants(t *testing.T) {
	c := loadInstalled(t)
	d, ok := c.Lookup("n8n-nodes-base.slackTool")
	if !ok || !slices.Equal(d.OutputTypes(), []string{"ai_tool"}) || d.IsTriggerLike() {
		t.Fatalf("slackTool = %+v, %v", d, ok)
	}
	if _, ok := c.Lookup("n8n-nodes-base.webhookTool"); ok {
		t.Error("webhook is not usable as a tool, yet webhookTool was found")
	}
}

func TestNearest(t *testing.T) {
	c := loadInstalled(t)
	if got := c.Nearest("n8n-nodes-base.httpRequst"); len(got) == 0 || got[0] != "n8n-nodes-base.httpRequest" {
		t.Errorf("Nearest(httpRequst) = %v", got)
	}
	if got := c.Nearest("n8n-nodes-base.agent"); !slices.Contains(got, "@n8n/n8n-nodes-langchain.agent") {
		t.Errorf("Nearest(n8n-nodes-base.agent) = %v; want the langchain agent by its short name", got)
	}
	if got := c.Nearest("n8n-nodes-base.zzzzzzzzzzzzzzzz"); len(got) != 0 {
		t.Errorf("Nearest(nonsense) = %v; want nothing", got)
	}
}

func TestTriggerLike(t *testing.T) {
	c := loadInstalled(t)
	for typ, want := range map[string]bool{
		"n8n-nodes-base.webhook":                  true,
		"n8n-nodes-base.scheduleTrigger":          true,
		"n8n-nodes-base.manualTrigger":            true,
		"n8n-nodes-base.rssFeedReadTrigger":       true, // a poller
		"n8n-nodes-base.wait":                     true, // resumes by webhook
		"@n8n/n8n-nodes-langchain.chatTrigger":    true,
		"n8n-nodes-base.httpRequest":              false,
		"n8n-nodes-base.set":                      false,
		"@n8n/n8n-nodes-langchain.lmChatOpenAi":   false,
		"@n8n/n8n-nodes-langchain.toolCalculator": false,
	} {
		d, ok := c.Lookup(typ)
		if !ok || d.IsTriggerLike() != want {
			t.Errorf("%s: IsTriggerLike = %v (found %v); want %v", typ, ok && d.IsTriggerLike(), ok, want)
		}
	}
}

func TestMissingRequired(t *testing.T) {
	c := loadInstalled(t)
	names := func(ps []Property) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	params := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	v42, _ := c.LookupVersion("n8n-nodes-base.httpRequest", 4.2)
	if got := names(v42.MissingRequired(params(`{}`), 4.2)); !slices.Equal(got, []string{"url"}) {
		t.Errorf("httpRequest 4.2 without parameters misses %v; want [url]", got)
	}
	if got := v42.MissingRequired(params(`{"url": "https://example.com"}`), 4.2); len(got) != 0 {
		t.Errorf("httpRequest 4.2 with a url misses %v", names(got))
	}
	if got := names(v42.MissingRequired(params(`{"url": "  "}`), 4.2)); !slices.Equal(got, []string{"url"}) {
		t.Errorf("a blank url is not flagged: %v", got)
	}
	// Version 1's dataPropertyName is required, but shown only for
	// responseFormat "string" or "file", and has a default.
	v1, _ := c.LookupVersion("n8n-nodes-base.httpRequest", 1)
	if got := names(v1.MissingRequired(params(`{"url": "x", "responseFormat": "string", "dataPropertyName": ""}`), 1)); !slices.Equal(got, []string{"dataPropertyName"}) {
		t.Errorf("empty dataPropertyName shown by responseFormat=string: missing %v", got)
	}
	if got := v1.MissingRequired(params(`{"url": "x", "responseFormat": "json", "dataPropertyName": ""}`), 1); len(got) != 0 {
		t.Errorf("dataPropertyName is hidden for responseFormat=json, yet missing %v", names(got))
	}
}

func TestVersionsNumberOrArray(t *testing.T) {
	var d []Description
	if err := json.Unmarshal([]byte(`[{"name":"a","version":2},{"name":"b","version":[1,1.1]}]`), &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d[0].Version, Versions{2}) || !slices.Equal(d[1].Version, Versions{1, 1.1}) {
		t.Fatalf("versions %v %v", d[0].Version, d[1].Version)
	}
	if err := json.Unmarshal([]byte(`[{"name":"a","version":"2"}]`), &d); err == nil {
		t.Fatal("a string version was accepted")
	}
}

func TestDecodeAddsPackage(t *testing.T) {
	c, err := Decode(strings.NewReader(`[{"name":"foo","version":1,"properties":[]},{"name":"other-pkg.bar","version":1,"properties":[]}]`), "my-pkg")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Names(), []string{"my-pkg.foo", "other-pkg.bar"}) {
		t.Fatalf("names %v", c.Names())
	}
	if _, err := Decode(strings.NewReader(`{"name":"foo"}`), ""); err == nil {
		t.Fatal("an object was accepted as nodes.json")
	}
}

func TestFetch(t *testing.T) {
	body := `[{"name":"n8n-nodes-base.set","displayName":"Edit Fields","version":[3,3.4],"properties":[]}]`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/types/nodes.json" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()
	c, err := Fetch(context.Background(), srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := c.LookupVersion("n8n-nodes-base.set", 3.4); !ok || d.DisplayName != "Edit Fields" {
		t.Fatalf("fetched %+v, %v", d, ok)
	}
	if _, err := Fetch(context.Background(), srv.URL+"/nothing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Fetch of a missing catalog: %v", err)
	}
}
