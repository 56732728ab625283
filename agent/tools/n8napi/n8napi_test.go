// Tests of the n8n tools against fakeN8N (fake_test.go), an httptest server
// that reproduces n8n's public-API wire format; the n8n source files the
// shapes come from are listed at the top of fake_test.go.

package n8napi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/agent/tools/n8napi"
)

var toolNames = []string{
	"list_workflows", "get_workflow", "create_workflow", "update_workflow",
	"activate_workflow", "deactivate_workflow", "archive_workflow", "list_executions",
}

func toolMap(t testing.TB, cfg n8napi.Config) map[string]tools.Tool {
	t.Helper()
	ts, err := n8napi.Tools(cfg)
	if err != nil {
		t.Fatalf("Tools: %v", err)
	}
	m := map[string]tools.Tool{}
	for _, tl := range ts {
		m[tl.Name] = tl
	}
	return m
}

// setup starts the fake n8n and returns it with the tools pointed at it.
func setup(t *testing.T) (*fakeN8N, map[string]tools.Tool) {
	t.Helper()
	f := newFake(t)
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	return f, toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
}

func run(t *testing.T, tl tools.Tool, args string) (map[string]any, error) {
	t.Helper()
	out, err := tl.Execute(context.Background(), json.RawMessage(args))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: result is not a JSON object: %v\n%s", tl.Name, err, out)
	}
	return m, nil
}

func mustRun(t *testing.T, tl tools.Tool, args string) map[string]any {
	t.Helper()
	m, err := run(t, tl, args)
	if err != nil {
		t.Fatalf("%s(%s): %v", tl.Name, args, err)
	}
	return m
}

func checkRequest(t *testing.T, got recorded, method, path string, query url.Values) {
	t.Helper()
	if got.Method != method || got.Path != path {
		t.Errorf("request = %s %s, want %s %s", got.Method, got.Path, method, path)
	}
	gq, err := url.ParseQuery(got.Query)
	if err != nil {
		t.Fatalf("query %q: %v", got.Query, err)
	}
	if query == nil {
		query = url.Values{}
	}
	if !reflect.DeepEqual(gq, query) {
		t.Errorf("query = %v, want %v", gq, query)
	}
	if k := got.Header.Values("X-N8N-API-KEY"); len(k) != 1 || k[0] != testKey {
		t.Errorf("X-N8N-API-KEY = %q, want the configured key", k)
	}
	if a := got.Header.Get("Accept"); a != "application/json" {
		t.Errorf("Accept = %q", a)
	}
}

func bodyOf(t *testing.T, r recorded) map[string]any {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request body %q: %v", r.Body, err)
	}
	return m
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error %q contains the API key", err)
	}
}

func TestToolsConfig(t *testing.T) {
	bad := []struct {
		name string
		cfg  n8napi.Config
		want string
	}{
		{"empty URL", n8napi.Config{APIKey: "k"}, "BaseURL is empty"},
		{"no scheme", n8napi.Config{BaseURL: "localhost:5678", APIKey: "k"}, "http or https"},
		{"relative", n8napi.Config{BaseURL: "/api/v1", APIKey: "k"}, "http or https"},
		{"ftp", n8napi.Config{BaseURL: "ftp://n8n.example", APIKey: "k"}, "http or https"},
		{"no host", n8napi.Config{BaseURL: "http://", APIKey: "k"}, "no host"},
		{"query", n8napi.Config{BaseURL: "http://n8n.example?x=1", APIKey: "k"}, "query"},
		{"unparsable", n8napi.Config{BaseURL: "http://n8n.example:port:x", APIKey: "k"}, "not a valid URL"},
		{"empty key", n8napi.Config{BaseURL: "http://localhost:5678"}, "APIKey is empty"},
		{"blank key", n8napi.Config{BaseURL: "http://localhost:5678", APIKey: "  "}, "APIKey is empty"},
		{"negative timeout", n8napi.Config{BaseURL: "http://localhost:5678", APIKey: "k", Timeout: -time.Second}, "Timeout"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := n8napi.Tools(tc.cfg)
			if err == nil || ts != nil {
				t.Fatalf("Tools = %d tools, %v; want an error", len(ts), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestBaseURLNormalised: with or without a trailing slash or /api/v1, and
// under a sub-path, requests go to <instance>/api/v1/….
func TestBaseURLNormalised(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		writeJSON(w, 200, map[string]any{"data": []any{}, "nextCursor": nil})
	}))
	defer srv.Close()
	cases := map[string]string{
		srv.URL:                               "/api/v1/workflows",
		srv.URL + "/":                         "/api/v1/workflows",
		srv.URL + "/api/v1":                   "/api/v1/workflows",
		srv.URL + "/api/v1/":                  "/api/v1/workflows",
		" " + srv.URL + "/n8n/ ":              "/n8n/api/v1/workflows",
		srv.URL + "/n8n/api/v1//":             "/n8n/api/v1/workflows",
		strings.ToUpper("HTTP") + srv.URL[4:]: "/api/v1/workflows",
	}
	for base, want := range cases {
		mu.Lock()
		paths = nil
		mu.Unlock()
		m := toolMap(t, n8napi.Config{BaseURL: base, APIKey: testKey})
		mustRun(t, m["list_workflows"], `{}`)
		mu.Lock()
		got := slices.Clone(paths)
		mu.Unlock()
		if len(got) != 1 || got[0] != want {
			t.Errorf("BaseURL %q: paths %q, want %q", base, got, want)
		}
	}
}

func TestSchemas(t *testing.T) {
	ts, err := n8napi.Tools(n8napi.Config{BaseURL: "http://localhost:5678", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range ts {
		names = append(names, tl.Name)
		var s map[string]any
		if err := json.Unmarshal(tl.Parameters, &s); err != nil {
			t.Errorf("%s: parameters are not a JSON object: %v", tl.Name, err)
			continue
		}
		if s["type"] != "object" {
			t.Errorf("%s: schema type = %v, want object", tl.Name, s["type"])
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			t.Errorf("%s: schema has no properties object", tl.Name)
		}
		for name, p := range props {
			pm, ok := p.(map[string]any)
			if !ok || pm["type"] == nil {
				t.Errorf("%s.%s: property schema without a type: %v", tl.Name, name, p)
			}
		}
		if req, ok := s["required"]; ok {
			for _, r := range req.([]any) {
				if _, ok := props[r.(string)]; !ok {
					t.Errorf("%s: required %q is not a property", tl.Name, r)
				}
			}
		}
		if tl.Description == "" || tl.Execute == nil {
			t.Errorf("%s: no description or Execute", tl.Name)
		}
		if got, want := tl.NeedsApproval, tl.Name == "archive_workflow"; got != want || (want && tl.Severity != "destructive") {
			t.Errorf("%s: NeedsApproval = %v, want %v (severity %q)", tl.Name, got, want, tl.Severity)
		}
	}
	if !slices.Equal(names, toolNames) {
		t.Errorf("tools = %q, want %q", names, toolNames)
	}
	if _, err := tools.NewRegistry(ts...); err != nil {
		t.Errorf("NewRegistry: %v", err)
	}
}

// validArgs are arguments each tool accepts; TestRequiredMatchesSchema drops
// each required field in turn.
var validArgs = map[string]string{
	"list_workflows":      `{}`,
	"get_workflow":        `{"id":"` + workflowA + `"}`,
	"create_workflow":     `{"name":"N","nodes":[],"connections":{}}`,
	"update_workflow":     `{"id":"` + workflowA + `","name":"N","nodes":[],"connections":{},"settings":{}}`,
	"activate_workflow":   `{"id":"` + workflowA + `"}`,
	"deactivate_workflow": `{"id":"` + workflowA + `"}`,
	"archive_workflow":    `{"id":"` + workflowA + `"}`,
	"list_executions":     `{}`,
}

// TestRequiredMatchesSchema: the schema's required list is exactly the set
// of fields whose absence Execute reports as "<field>: required".
func TestRequiredMatchesSchema(t *testing.T) {
	f, m := setup(t)
	for _, name := range toolNames {
		tl := m[name]
		mustRun(t, tl, validArgs[name])
		var s struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(tl.Parameters, &s); err != nil {
			t.Fatal(err)
		}
		var full map[string]json.RawMessage
		if err := json.Unmarshal([]byte(validArgs[name]), &full); err != nil {
			t.Fatal(err)
		}
		for field := range s.Properties {
			without := map[string]json.RawMessage{}
			for k, v := range full {
				if k != field {
					without[k] = v
				}
			}
			b, _ := json.Marshal(without)
			before := f.count()
			_, err := tl.Execute(context.Background(), b)
			required := slices.Contains(s.Required, field)
			switch {
			case required && (err == nil || !strings.Contains(err.Error(), field+": required")):
				t.Errorf("%s without %s: err = %v, want %q", name, field, err, field+": required")
			case required && f.count() != before:
				t.Errorf("%s without %s: a request was sent", name, field)
			case !required && err != nil:
				t.Errorf("%s without optional %s: %v", name, field, err)
			}
		}
	}
}

func TestListWorkflows(t *testing.T) {
	f, m := setup(t)
	res := mustRun(t, m["list_workflows"], `{"active":true,"name":"Billing","tags":"production,ops","limit":1,"unknownField":42}`)
	checkRequest(t, f.last(), "GET", "/api/v1/workflows", url.Values{
		"active": {"true"}, "name": {"Billing"}, "tags": {"production,ops"}, "limit": {"1"}, "excludePinnedData": {"true"},
	})
	data := res["data"].([]any)
	if len(data) != 1 {
		t.Fatalf("data = %v", data)
	}
	wf := data[0].(map[string]any)
	if got, want := keys(wf), []string{"active", "createdAt", "id", "isArchived", "name", "tags", "updatedAt"}; !slices.Equal(got, want) {
		t.Errorf("summary keys = %q, want %q (nodes and the rest trimmed)", got, want)
	}
	if wf["id"] != workflowA || wf["name"] != "Billing sync" || wf["active"] != true {
		t.Errorf("summary = %v", wf)
	}
	if tags := wf["tags"].([]any); len(tags) != 1 || !reflect.DeepEqual(tags[0], map[string]any{"id": "tag1", "name": "production"}) {
		t.Errorf("tags = %v", tags)
	}
	if res["nextCursor"] != nil {
		t.Errorf("nextCursor = %v, want null (one match)", res["nextCursor"])
	}

	// Pagination: the cursor n8n returns is passed back verbatim.
	page1 := mustRun(t, m["list_workflows"], `{"limit":1}`)
	cur, ok := page1["nextCursor"].(string)
	if !ok || cur == "" {
		t.Fatalf("page 1 nextCursor = %v", page1["nextCursor"])
	}
	args, _ := json.Marshal(map[string]any{"cursor": cur, "active": nil})
	page2 := mustRun(t, m["list_workflows"], string(args))
	checkRequest(t, f.last(), "GET", "/api/v1/workflows", url.Values{"cursor": {cur}, "excludePinnedData": {"true"}})
	if d := page2["data"].([]any); len(d) != 1 || d[0].(map[string]any)["id"] != workflowB {
		t.Errorf("page 2 = %v", d)
	}
	if page2["nextCursor"] != nil {
		t.Errorf("page 2 nextCursor = %v, want null", page2["nextCursor"])
	}
	if _, ok := page2["nextCursor"]; !ok {
		t.Error("nextCursor missing from the result; it must be present (null) on the last page")
	}

	// No arguments at all is valid.
	for _, a := range []string{``, `null`, `{}`} {
		if _, err := m["list_workflows"].Execute(context.Background(), json.RawMessage(a)); err != nil {
			t.Errorf("args %q: %v", a, err)
		}
	}
}

func TestGetWorkflow(t *testing.T) {
	f, m := setup(t)
	res := mustRun(t, m["get_workflow"], `{"id":"`+workflowA+`"}`)
	checkRequest(t, f.last(), "GET", "/api/v1/workflows/"+workflowA, url.Values{"excludePinnedData": {"true"}})
	if res["id"] != workflowA || res["nodes"] == nil || res["settings"] == nil {
		t.Errorf("result = %v", res)
	}
	if _, ok := res["pinData"]; ok {
		t.Error("pinData returned; it should be excluded")
	}
	if len(f.last().Body) != 0 {
		t.Errorf("GET sent a body: %q", f.last().Body)
	}
}

func TestCreateWorkflow(t *testing.T) {
	f, m := setup(t)
	args := `{
		"name": "Daily report",
		"nodes": [{"name":"Schedule","type":"n8n-nodes-base.scheduleTrigger","typeVersion":1.2,"position":[0,0],"parameters":{}}],
		"connections": {"Schedule": {"main": [[{"node":"Set","type":"main","index":0}]]}},
		"settings": {"executionOrder":"v1"},
		"id": "ShouldNotBeSent1", "active": true, "tags": [{"id":"x"}], "versionId": "v9"
	}`
	res := mustRun(t, m["create_workflow"], args)
	r := f.last()
	checkRequest(t, r, "POST", "/api/v1/workflows", nil)
	body := bodyOf(t, r)
	if got, want := keys(body), []string{"connections", "name", "nodes", "settings"}; !slices.Equal(got, want) {
		t.Errorf("body keys = %q, want %q (readOnly fields must not be sent)", got, want)
	}
	if body["name"] != "Daily report" || !reflect.DeepEqual(body["settings"], map[string]any{"executionOrder": "v1"}) {
		t.Errorf("body = %v", body)
	}
	if nodes := body["nodes"].([]any); len(nodes) != 1 || nodes[0].(map[string]any)["typeVersion"] != 1.2 {
		t.Errorf("nodes = %v", nodes)
	}
	if id, _ := res["id"].(string); !strings.HasPrefix(id, "NewWorkflow") || res["active"] != false {
		t.Errorf("result = %v", res)
	}

	// settings omitted: sent as {} because n8n requires the key.
	mustRun(t, m["create_workflow"], `{"name":"N","nodes":[],"connections":{}}`)
	if body := bodyOf(t, f.last()); !reflect.DeepEqual(body["settings"], map[string]any{}) {
		t.Errorf("settings = %v, want {}", body["settings"])
	}
}

func TestUpdateWorkflow(t *testing.T) {
	f, m := setup(t)
	args := `{"id":"` + workflowB + `","name":"Lead intake v2","nodes":[{"name":"Webhook","type":"n8n-nodes-base.webhook","typeVersion":2,"position":[0,0],"parameters":{}}],"connections":{},"settings":{"timezone":"Europe/Berlin"},"active":true}`
	res := mustRun(t, m["update_workflow"], args)
	r := f.last()
	checkRequest(t, r, "PUT", "/api/v1/workflows/"+workflowB, nil)
	body := bodyOf(t, r)
	if got, want := keys(body), []string{"connections", "name", "nodes", "settings"}; !slices.Equal(got, want) {
		t.Errorf("body keys = %q, want %q", got, want)
	}
	if res["name"] != "Lead intake v2" || res["updatedAt"] != laterStamp {
		t.Errorf("result = %v", res)
	}
}

func TestActions(t *testing.T) {
	f, m := setup(t)
	res := mustRun(t, m["activate_workflow"], `{"id":"`+workflowB+`"}`)
	r := f.last()
	checkRequest(t, r, "POST", "/api/v1/workflows/"+workflowB+"/activate", nil)
	if body := bodyOf(t, r); len(body) != 0 {
		t.Errorf("activate body = %v, want {}", body)
	}
	if res["active"] != true {
		t.Errorf("activate result = %v", res)
	}

	res = mustRun(t, m["deactivate_workflow"], `{"id":"`+workflowA+`"}`)
	checkRequest(t, f.last(), "POST", "/api/v1/workflows/"+workflowA+"/deactivate", nil)
	if res["active"] != false {
		t.Errorf("deactivate result = %v", res)
	}

	res = mustRun(t, m["archive_workflow"], `{"id":"`+workflowA+`"}`)
	r = f.last()
	checkRequest(t, r, "POST", "/api/v1/workflows/"+workflowA+"/archive", nil)
	if len(r.Body) != 0 {
		t.Errorf("archive sent a body: %q", r.Body)
	}
	if res["isArchived"] != true || res["active"] != false {
		t.Errorf("archive result = %v", res)
	}
	f.mu.Lock()
	_, kept := f.workflows[workflowA]
	f.mu.Unlock()
	if !kept {
		t.Error("the archived workflow is gone")
	}
}

// TestArchiveOnOldN8N: a release without the public archive endpoint (1.123)
// answers 405; the tool says so and sends nothing else (no DELETE).
func TestArchiveOnOldN8N(t *testing.T) {
	f := newFake(t)
	f.noArchive = true
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	_, err := m["archive_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"`+workflowA+`"}`))
	wantErr(t, err, "405", "POST method not allowed", "no archive endpoint in its public API", "archive the workflow in the n8n UI")
	if n := f.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestListExecutions(t *testing.T) {
	f, m := setup(t)
	// The cursor is n8n's {"lastId":"1003","limit":100}, passed on verbatim.
	res := mustRun(t, m["list_executions"], `{"workflowId":"`+workflowA+`","status":"error","limit":250,"cursor":"eyJsYXN0SWQiOiIxMDAzIiwibGltaXQiOjEwMH0="}`)
	checkRequest(t, f.last(), "GET", "/api/v1/executions", url.Values{
		"workflowId": {workflowA}, "status": {"error"}, "limit": {"250"}, "cursor": {"eyJsYXN0SWQiOiIxMDAzIiwibGltaXQiOjEwMH0="},
	})
	data := res["data"].([]any)
	if len(data) != 1 || data[0].(map[string]any)["id"] != "1002" {
		t.Errorf("data = %v", data)
	}
	if _, ok := res["nextCursor"]; !ok {
		t.Error("nextCursor missing")
	}

	res = mustRun(t, m["list_executions"], `{}`)
	checkRequest(t, f.last(), "GET", "/api/v1/executions", nil)
	if len(res["data"].([]any)) != 3 {
		t.Errorf("data = %v", res["data"])
	}
}

func TestArgValidation(t *testing.T) {
	f, m := setup(t)
	cases := []struct {
		tool, args, want string
	}{
		{"get_workflow", `{}`, "id: required"},
		{"get_workflow", `{"id":null}`, "id: required"},
		{"get_workflow", `{"id":""}`, "id: must not be empty"},
		{"get_workflow", `{"id":42}`, "id: must be a string"},
		{"get_workflow", `{"id":"../workflows"}`, "id: "},
		{"get_workflow", `{"id":"a/b"}`, "is not a workflow id"},
		{"get_workflow", `[]`, "arguments must be a JSON object"},
		{"get_workflow", `"x"`, "arguments must be a JSON object"},
		{"get_workflow", `{"id":`, "not valid JSON"},
		{"activate_workflow", `{"id":true}`, "id: must be a string"},
		{"deactivate_workflow", `{}`, "id: required"},
		{"archive_workflow", `{"id":" x"}`, "is not a workflow id"},
		{"list_workflows", `{"limit":0}`, "limit: must be an integer from 1 to 250"},
		{"list_workflows", `{"limit":251}`, "limit: must be an integer from 1 to 250"},
		{"list_workflows", `{"limit":2.5}`, "limit: must be an integer"},
		{"list_workflows", `{"limit":"10"}`, "limit: must be an integer"},
		{"list_workflows", `{"active":"yes"}`, "active: must be true or false"},
		{"list_workflows", `{"name":5}`, "name: must be a string"},
		{"list_workflows", `{"tags":""}`, "tags: must not be empty"},
		{"list_workflows", `{"cursor":""}`, "cursor: must not be empty"},
		{"create_workflow", `{"nodes":[],"connections":{}}`, "name: required"},
		{"create_workflow", `{"name":"","nodes":[],"connections":{}}`, "name: must not be empty"},
		{"create_workflow", `{"name":"N","connections":{}}`, "nodes: required"},
		{"create_workflow", `{"name":"N","nodes":{},"connections":{}}`, "nodes: must be an array of objects"},
		{"create_workflow", `{"name":"N","nodes":[{},3],"connections":{}}`, "nodes[1]: must be an object"},
		{"create_workflow", `{"name":"N","nodes":[]}`, "connections: required"},
		{"create_workflow", `{"name":"N","nodes":[],"connections":[]}`, "connections: must be a JSON object"},
		{"create_workflow", `{"name":"N","nodes":[],"connections":{},"settings":"v1"}`, "settings: must be a JSON object"},
		{"update_workflow", `{"name":"N","nodes":[],"connections":{},"settings":{}}`, "id: required"},
		{"update_workflow", `{"id":"` + workflowA + `","name":"N","nodes":[],"connections":{}}`, "settings: required"},
		{"list_executions", `{"status":"running"}`, "status: must be one of"},
		{"list_executions", `{"status":1}`, "status: must be one of"},
		{"list_executions", `{"workflowId":""}`, "workflowId: must not be empty"},
		{"list_executions", `{"limit":-1}`, "limit: must be an integer from 1 to 250"},
	}
	for _, tc := range cases {
		before := f.count()
		_, err := m[tc.tool].Execute(context.Background(), json.RawMessage(tc.args))
		if err == nil {
			t.Errorf("%s(%s): no error, want %q", tc.tool, tc.args, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), tc.tool+": ") {
			t.Errorf("%s(%s): error %q, want it to contain %q", tc.tool, tc.args, err, tc.want)
		}
		if f.count() != before {
			t.Errorf("%s(%s): invalid arguments reached n8n", tc.tool, tc.args)
		}
	}
}

func TestUpstreamErrors(t *testing.T) {
	f := newFake(t)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()

	t.Run("401 wrong key", func(t *testing.T) {
		m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: "wrong-key-value"})
		_, err := m["list_workflows"].Execute(context.Background(), nil)
		wantErr(t, err, "401", "unauthorized", "check the n8n API key")
		if strings.Contains(err.Error(), "wrong-key-value") {
			t.Errorf("error %q contains the API key", err)
		}
		var se *n8napi.StatusError
		if !errors.As(err, &se) || se.StatusCode != 401 || se.Message != "unauthorized" {
			t.Errorf("StatusError = %+v", se)
		}
	})
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	t.Run("404 get", func(t *testing.T) {
		_, err := m["get_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"`+missingID+`"}`))
		wantErr(t, err, "404", "Not Found", missingID, "does not exist")
	})
	t.Run("404 archive", func(t *testing.T) {
		_, err := m["archive_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"`+missingID+`"}`))
		wantErr(t, err, "404", "Workflow Not Found", "does not exist")
	})
	t.Run("404 update", func(t *testing.T) {
		_, err := m["update_workflow"].Execute(context.Background(), json.RawMessage(validArgs["update_workflow"][:7]+missingID+validArgs["update_workflow"][7+len(workflowA):]))
		wantErr(t, err, "404", "PUT", "does not exist")
	})
	t.Run("400 from n8n", func(t *testing.T) {
		_, err := m["create_workflow"].Execute(context.Background(), json.RawMessage(`{"name":"N","nodes":[],"connections":{},"settings":{"bogus":1}}`))
		wantErr(t, err, "400", "request/body/settings must NOT have additional properties", "correct the arguments")
	})
	t.Run("500 with the key echoed", func(t *testing.T) {
		srv500 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			message(w, 500, "database is locked while handling key "+r.Header.Get("X-N8N-API-KEY"))
		}))
		defer srv500.Close()
		m := toolMap(t, n8napi.Config{BaseURL: srv500.URL, APIKey: testKey})
		_, err := m["list_executions"].Execute(context.Background(), nil)
		wantErr(t, err, "500", "database is locked", "check the n8n logs", "[redacted]")
	})
	t.Run("502 from a proxy", func(t *testing.T) {
		srv502 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = w.Write([]byte("<html>\n<body>Bad Gateway</body>\n</html>"))
		}))
		defer srv502.Close()
		m := toolMap(t, n8napi.Config{BaseURL: srv502.URL, APIKey: testKey})
		_, err := m["get_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"x"}`))
		wantErr(t, err, "502", "<html> <body>Bad Gateway</body> </html>")
	})
}

func TestNonJSONSuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><title>n8n</title>"))
	}))
	defer srv.Close()
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	_, err := m["get_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"x"}`))
	wantErr(t, err, "not with JSON", "text/html")
	_, err = m["list_workflows"].Execute(context.Background(), nil)
	wantErr(t, err, "not with JSON")
}

func TestUnexpectedListShape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []any{1, 2})
	}))
	defer srv.Close()
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	_, err := m["list_workflows"].Execute(context.Background(), nil)
	wantErr(t, err, "not a workflow list")
}

func TestRedirectNotFollowed(t *testing.T) {
	var hits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		writeJSON(w, 200, map[string]any{})
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer srv.Close()
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	_, err := m["activate_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"x"}`))
	wantErr(t, err, "301", "redirected to", "set BaseURL")
	if hits.Load() != 0 {
		t.Error("the redirect was followed, sending the API key to another host")
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := toolMap(t, n8napi.Config{BaseURL: "http://" + addr, APIKey: testKey})
	_, err = m["list_workflows"].Execute(context.Background(), nil)
	wantErr(t, err, "connection refused", "is n8n running", "http://"+addr)
}

// blocking is a server whose handler waits until the request's context ends
// (the client went away) and signals each arrival.
func blocking(t *testing.T) (*httptest.Server, <-chan struct{}) {
	arrived := make(chan struct{}, 8)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv, arrived
}

func TestCancelAbortsPromptly(t *testing.T) {
	srv, arrived := blocking(t)
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	for _, name := range []string{"get_workflow", "create_workflow", "list_executions"} {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := m[name].Execute(ctx, json.RawMessage(validArgs[name]))
			errc <- err
		}()
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the request never reached the server", name)
		}
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: error %v, want context.Canceled", name, err)
			}
			wantErr(t, err, name+": ", "aborted")
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Execute did not return within 5s of cancel", name)
		}
	}
}

func TestTimeout(t *testing.T) {
	srv, _ := blocking(t)
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey, Timeout: 50 * time.Millisecond})
	errc := make(chan error, 1)
	go func() {
		_, err := m["list_workflows"].Execute(context.Background(), nil)
		errc <- err
	}()
	select {
	case err := <-errc:
		wantErr(t, err, "did not answer", "50ms")
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a timeout of the request is not the caller's cancellation: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the per-request timeout did not end the call")
	}
}

func TestOversizeBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","pad":"`))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for n := 0; n <= n8napi.MaxResponseBytes; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}`))
	}))
	defer srv.Close()
	m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
	_, err := m["get_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"x"}`))
	wantErr(t, err, "larger than 8 MiB")

	// Exactly at the bound is fine.
	exact := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prefix, suffix := `{"pad":"`, `"}`
		_, _ = w.Write([]byte(prefix + strings.Repeat("a", n8napi.MaxResponseBytes-len(prefix)-len(suffix)) + suffix))
	}))
	defer exact.Close()
	m = toolMap(t, n8napi.Config{BaseURL: exact.URL, APIKey: testKey})
	out, err := m["get_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"x"}`))
	if err != nil || len(out) != n8napi.MaxResponseBytes {
		t.Errorf("a body of exactly the bound: %d bytes, %v", len(out), err)
	}
}

// TestCustomHTTPClient: a caller's client is used as given.
func TestCustomHTTPClient(t *testing.T) {
	var saw *http.Request
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		saw = r
		return jsonResponse(200, `{"id":"x"}`), nil
	})}
	m := toolMap(t, n8napi.Config{BaseURL: "https://n8n.example.com", APIKey: testKey, HTTPClient: hc})
	mustRun(t, m["get_workflow"], `{"id":"x"}`)
	if saw == nil || saw.URL.String() != "https://n8n.example.com/api/v1/workflows/x?excludePinnedData=true" {
		t.Errorf("request = %v", saw)
	}
}

// TestBaseURLPasswordNotShown: credentials in BaseURL (a proxy's basic auth)
// are used for requests but never shown in an error.
func TestBaseURLPasswordNotShown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := toolMap(t, n8napi.Config{BaseURL: "http://proxyuser:pr0xy-pass@" + addr, APIKey: testKey})
	_, err = m["get_workflow"].Execute(context.Background(), json.RawMessage(`{"id":"x"}`))
	wantErr(t, err, "connection refused", "proxyuser")
	if strings.Contains(err.Error(), "pr0xy-pass") {
		t.Errorf("error %q shows the BaseURL password", err)
	}
}
