// Package openapi serves the OpenAPI 3.1 document of the server's HTTP
// endpoints, written by hand in openapi.json. The server's tests check it
// against the routes the server registers, so it cannot drift from them.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
)

// Path is where the document is served.
const Path = "/openapi.json"

//go:embed openapi.json
var document []byte

// Document returns the embedded document with info.version set to version:
// the file cannot know the build's version, so it is filled in here.
func Document(version string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(document, &doc); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	info, ok := doc["info"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("openapi.json: no info object")
	}
	info["version"] = version
	return json.MarshalIndent(doc, "", "  ")
}

// Handler serves the document with info.version set to version. The
// embedded file is checked by this package's tests, so a document that does
// not parse is a build that must not ship: Handler panics on it.
func Handler(version string) http.Handler {
	body, err := Document(version)
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}
