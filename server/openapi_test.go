package server_test

import (
	"context"
	"encoding/json"
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

// routePattern matches a mux path variable with its pattern.
var routePattern = regexp.MustCompile(`\{([^:}]+):[^}]*\}`)

// documentedRoutes returns the (method, path) pairs the API document
// describes.
func documentedRoutes(t *testing.T, doc *openapi3.T) []server.Route {
	t.Helper()
	var out []server.Route
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, server.Route{Method: method, Path: path})
		}
	}
	return out
}

func loadDocument(t *testing.T) *openapi3.T {
	t.Helper()
	data, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		t.Fatalf("the API document does not load: %v", err)
	}
	return doc
}

// TestOpenAPIDocumentsEveryRoute checks the API document both ways against
// the routes the server registers (with the builder API on, as every
// shipped store has it): every route is documented, every documented
// operation is served; and that the document is valid OpenAPI 3.1, which
// includes that every path parameter of a template is declared.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := loadDocument(t)
	if !doc.IsOpenAPI31OrLater() || !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the API document is not valid OpenAPI 3.1: %v", err)
	}
	h := start(t, servertest.OpenStore(t, "sqlite:"+t.TempDir()+"/t.db"), servertest.Options{})
	var served []server.Route
	for _, r := range h.App.Routes() {
		// mux templates may carry a pattern ({file:.+}); OpenAPI's do not.
		r.Path = routePattern.ReplaceAllString(r.Path, "{$1}")
		served = append(served, r)
	}
	if len(served) < 30 {
		t.Fatalf("only %d routes registered: the walk misses some", len(served))
	}
	documented := documentedRoutes(t, doc)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s %s is served but not in the API document", r.Method, r.Path)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s %s is in the API document but not served", r.Method, r.Path)
		}
	}
	// Every operation documents its error shape and at least one success.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			var success bool
			for code := range op.Responses.Map() {
				success = success || strings.HasPrefix(code, "2")
			}
			if !success {
				t.Errorf("%s %s documents no success response", method, path)
			}
		}
	}
}

// TestOpenAPIIsServedWithoutAToken fetches /openapi.json from a server that
// requires tokens: it is public, JSON, and names the running version.
func TestOpenAPIIsServedWithoutAToken(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-openapi-0123456789=alice"})
	res, err := h.Client.Get(h.URL + openapi.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s: %d %s", openapi.Path, res.StatusCode, res.Header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Version string `json:"version"`
		} `json:"info"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.OpenAPI != "3.1.0" || doc.Info.Version != version.String() {
		t.Fatalf("served %+v, %v; want openapi 3.1.0 at version %s", doc, err, version.String())
	}
	// The API itself still wants the token.
	if status, _ := h.Do(http.MethodGet, "/instance-ai/threads", ""); status != http.StatusUnauthorized {
		t.Fatalf("threads without a token: %d", status)
	}
}
