package openapi_test

import (
	"encoding/json"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/threadline/threadline/server/openapi"
)

// TestDocumentIsValidOpenAPI31 loads the document as OpenAPI 3.1 and
// validates it: structure, schemas, $refs and the path parameters each
// template names.
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	body, err := openapi.Document("v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPIMajorMinor() != "3.1" {
		t.Fatalf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if doc.Info.Version != "v1.2.3" {
		t.Errorf("info.version = %q, want the version passed in", doc.Info.Version)
	}
}

// TestValidationCatchesAMissingPathParameter makes sure the validation
// above is the one that refuses a template variable left undocumented, so
// a route's new variable cannot go unnoticed.
func TestValidationCatchesAMissingPathParameter(t *testing.T) {
	body, err := openapi.Document("dev")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	item := raw["paths"].(map[string]any)["/instance-ai/chat/{threadId}"].(map[string]any)
	delete(item["post"].(map[string]any), "parameters")
	broken, _ := json.Marshal(raw)
	doc, err := openapi3.NewLoader().LoadFromData(broken)
	if err == nil {
		err = doc.Validate(t.Context())
	}
	if err == nil {
		t.Fatal("a path template without its parameter passed validation")
	}
}
