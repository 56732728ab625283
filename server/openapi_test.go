package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/threadline/threadline/internal/version"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/openapi"
	"github.com/threadline/threadline/server/servertest"
)

// openAPIDoc is the part of the document the route checks read.
type openAPIDoc struct {
	Info struct {
		Version string `json:"version"`
	} `json:"info"`
	Paths map[string]map[string]struct {
		Security *[]map[string][]string `json:"security"`
	} `json:"paths"`
}

// documentedRoutes lists the document's (method, path) pairs, and the
// public ones (security: []).
func documentedRoutes(t *testing.T, doc openAPIDoc) (all []server.Route, public map[server.Route]bool) {
	t.Helper()
	public = map[server.Route]bool{}
	for path, item := range doc.Paths {
		for method, op := range item {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			rt := server.Route{Method: strings.ToUpper(method), Path: path}
			all = append(all, rt)
			if op.Security != nil && len(*op.Security) == 0 {
				public[rt] = true
			}
		}
	}
	return all, public
}

func fetchOpenAPI(t *testing.T, s *servertest.Server) openAPIDoc {
	t.Helper()
	res, err := http.Get(s.URL + openapi.Path) // no token, whatever the server's
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %q: %s", openapi.Path, res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("GET %s: not JSON: %v", openapi.Path, err)
	}
	return doc
}

// TestOpenAPIRoutes checks that the document names every route the server
// registers and no route it does not, with the builder API on (the memory
// store keeps builder data) and /llm/health both served by the LLM agent's
// probe and answered without one.
func TestOpenAPIRoutes(t *testing.T) {
	probe := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for name, llm := range map[string]http.Handler{"llm-health": probe, "no-llm": nil} {
		t.Run(name, func(t *testing.T) {
			s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{LLMHealth: llm}})
			documented, _ := documentedRoutes(t, fetchOpenAPI(t, s))
			registered := s.App.Routes()
			if !slices.Contains(registered, server.Route{Method: http.MethodPost, Path: "/generate"}) {
				t.Fatalf("the builder API is off: %v", registered)
			}
			for _, rt := range registered {
				if !slices.Contains(documented, rt) {
					t.Errorf("%s %s is served but not in %s", rt.Method, rt.Path, openapi.Path)
				}
			}
			for _, rt := range documented {
				if !slices.Contains(registered, rt) {
					t.Errorf("%s %s is in %s but not served", rt.Method, rt.Path, openapi.Path)
				}
			}
		})
	}
}

// TestOpenAPIServedWithoutAuth checks that the document needs no token when
// tokens are configured, carries the build's version, and says which
// routes are public truly: with tokens on, a request without one is
// refused with 401 by every route the document secures and by none it
// marks public (security: []).
func TestOpenAPIServedWithoutAuth(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-openapi-0123456789=alice"})
	doc := fetchOpenAPI(t, s)
	if doc.Info.Version != version.String() {
		t.Errorf("info.version = %q, want %q", doc.Info.Version, version.String())
	}
	documented, public := documentedRoutes(t, doc)
	vars := regexp.MustCompile(`\{[^}]+\}`)
	for _, rt := range documented {
		req, _ := http.NewRequest(rt.Method, s.URL+vars.ReplaceAllString(rt.Path, "x1"), strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if refused := res.StatusCode == http.StatusUnauthorized; refused == public[rt] {
			t.Errorf("%s %s without a token: %d, but the document says public=%v", rt.Method, rt.Path, res.StatusCode, public[rt])
		}
	}
}

// queryParam is a documented query parameter with the limits the checks
// below try.
type queryParam struct {
	Name   string `json:"name"`
	In     string `json:"in"`
	Ref    string `json:"$ref"`
	Schema struct {
		Minimum *int     `json:"minimum"`
		Maximum *int     `json:"maximum"`
		Enum    []string `json:"enum"`
	} `json:"schema"`
}

// TestOpenAPIQueryLimits checks the documented limits of the GET routes'
// query parameters against the handlers: a value just past a documented
// minimum or maximum, or outside a documented enum, is a 400 naming that
// parameter.
func TestOpenAPIQueryLimits(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []queryParam `json:"parameters"`
		} `json:"paths"`
	}
	body, err := openapi.Document("dev")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	// The path variables become "x1", a thread the caller owns, so the
	// thread routes reach their query checks.
	s.EnsureThread("x1")
	vars := regexp.MustCompile(`\{[^}]+\}`)
	tried := 0
	for path, item := range doc.Paths {
		for _, p := range item["get"].Parameters {
			if p.In != "query" {
				continue
			}
			var bad []string
			if p.Schema.Minimum != nil {
				bad = append(bad, fmt.Sprint(*p.Schema.Minimum-1))
			}
			if p.Schema.Maximum != nil {
				bad = append(bad, fmt.Sprint(*p.Schema.Maximum+1))
			}
			if len(p.Schema.Enum) > 0 {
				bad = append(bad, "not-"+p.Schema.Enum[0])
			}
			for _, v := range bad {
				tried++
				target := vars.ReplaceAllString(path, "x1") + "?" + p.Name + "=" + v
				code, out := s.Do(http.MethodGet, target, "")
				e, _ := out["error"].(map[string]any)
				details, _ := e["details"].(map[string]any)
				if code != http.StatusBadRequest || details["field"] != p.Name {
					t.Errorf("GET %s: %d %v, want 400 naming %s", target, code, out, p.Name)
				}
			}
		}
	}
	if tried == 0 {
		t.Fatal("the document has no query parameter limits to check")
	}
}

// TestOpenAPIResponses sends a round of requests through the real server and
// checks each answer against the document: its status is documented for
// the operation, and its JSON body fits the documented schema (required
// fields present, types right), errors included.
func TestOpenAPIResponses(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	body, err := openapi.Document("dev")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatal(err)
	}
	wf := `{"name": "w", "nodes": [], "connections": {}}`
	for _, c := range []struct {
		method, template, path, body string
	}{
		{"POST", "/instance-ai/threads", "/instance-ai/threads", `{"id": "t1", "title": "first"}`},
		{"POST", "/instance-ai/threads", "/instance-ai/threads", `{"id": "t1"}`},
		{"GET", "/instance-ai/threads", "/instance-ai/threads?limit=5", ""},
		{"GET", "/instance-ai/threads", "/instance-ai/threads?limit=0", ""},
		{"PATCH", "/instance-ai/threads/{threadId}", "/instance-ai/threads/t1", `{"title": "renamed"}`},
		{"PATCH", "/instance-ai/threads/{threadId}", "/instance-ai/threads/t1", `{}`},
		{"GET", "/instance-ai/threads/{threadId}/status", "/instance-ai/threads/t1/status", ""},
		{"GET", "/instance-ai/threads/{threadId}/messages", "/instance-ai/threads/t1/messages", ""},
		{"GET", "/instance-ai/threads/{threadId}/messages", "/instance-ai/threads/nobody/messages", ""},
		{"POST", "/instance-ai/chat/{threadId}", "/instance-ai/chat/t2", `{"message": "hello"}`},
		{"POST", "/instance-ai/chat/{threadId}", "/instance-ai/chat/t2", `{"message": " "}`},
		{"POST", "/instance-ai/chat/{threadId}/cancel", "/instance-ai/chat/t2/cancel", ""},
		{"POST", "/instance-ai/confirm/{requestId}", "/instance-ai/confirm/r1", `{"approved": true}`},
		{"DELETE", "/instance-ai/threads/{threadId}", "/instance-ai/threads/t1", ""},
		{"GET", "/health", "/health", ""},
		{"GET", "/status", "/status", ""},
		{"GET", "/llm/health", "/llm/health", ""},
		{"POST", "/validate", "/validate", `{"workflow_json": ` + wf + `}`},
		{"POST", "/validate", "/validate", `{}`},
		{"GET", "/iterations/{workflowId}", "/iterations/w1", ""},
		{"GET", "/feedback/{workflowId}", "/feedback/w1", ""},
		{"POST", "/projects/{name}", "/projects/p1", `{"description": "a project"}`},
		{"POST", "/projects/{name}", "/projects/p1", `{}`},
		{"GET", "/projects/{name}", "/projects/p1", ""},
		{"GET", "/projects/{name}", "/projects/missing", ""},
		{"GET", "/projects", "/projects", ""},
		{"GET", "/projects/stats", "/projects/stats", ""},
		{"PUT", "/projects/{name}/workflows/{filename}", "/projects/p1/workflows/w.json", `{"workflow_data": ` + wf + `}`},
		{"PUT", "/projects/{name}/workflows/{filename}", "/projects/p1/workflows/w.json", `{"workflow_data": ` + wf + `, "create_backup": true}`},
		{"GET", "/projects/{name}/workflows", "/projects/p1/workflows", ""},
		{"GET", "/projects/{name}/workflows/{filename}", "/projects/p1/workflows/w.json", ""},
		{"GET", "/projects/{name}/workflows/{filename}/versions", "/projects/p1/workflows/w.json/versions", ""},
		{"POST", "/projects/{name}/workflows/{filename}/cleanup-versions", "/projects/p1/workflows/w.json/cleanup-versions", `{"keep_versions": 1}`},
		{"DELETE", "/projects/{name}", "/projects/p1", ""},
		{"DELETE", "/projects/{name}", "/projects/p1?confirm=true", ""},
	} {
		code, answer := s.DoValue(c.method, c.path, c.body)
		op := doc.Paths.Find(c.template).GetOperation(c.method)
		if op == nil {
			t.Fatalf("%s %s is not documented", c.method, c.template)
		}
		ref := op.Responses.Status(code)
		if ref == nil {
			t.Errorf("%s %s: %d %v is not a documented status", c.method, c.path, code, answer)
			continue
		}
		media := ref.Value.Content.Get("application/json")
		if media == nil {
			t.Errorf("%s %s: %d has no documented JSON body", c.method, c.path, code)
			continue
		}
		if err := doc.ValidateSchemaJSON(media.Schema.Value, answer); err != nil {
			t.Errorf("%s %s: %d answer does not fit the documented schema: %v", c.method, c.path, code, err)
		}
	}
}
