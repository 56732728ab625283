// Package openapi serves the OpenAPI 3.1 document of every HTTP endpoint at
// /openapi.json. The document is written by hand (openapi.json); the tests
// check it against the routes the server registers, both ways, and against
// the OpenAPI 3.1 schema, so it cannot drift from the code unnoticed.
package openapi

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/threadline/threadline/internal/version"
)

//go:embed openapi.json
var document []byte

// Path is where the document is served.
const Path = "/openapi.json"

// Document returns the document as served: info.version is the running
// build's version.
func Document() ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(document, &doc); err != nil {
		return nil, err
	}
	if info, ok := doc["info"].(map[string]any); ok {
		info["version"] = version.String()
	}
	return json.MarshalIndent(doc, "", "  ")
}

// Handler serves the document. It needs no token: it describes the API,
// not anyone's data.
func Handler() http.Handler {
	var once sync.Once
	var body []byte
	var err error
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { body, err = Document() })
		if err != nil {
			http.Error(w, `{"error":{"code":"internal_error","message":"the API document does not parse"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	})
}
