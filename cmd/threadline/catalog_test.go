package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// -n8n-catalog takes a file, a URL of a running n8n, or nothing; a path
// that is not there is an error naming it.
func TestLoadCatalog(t *testing.T) {
	ctx := context.Background()
	if c, err := loadCatalog(ctx, ""); c != nil || err != nil {
		t.Fatalf("no catalog: %v, %v", c, err)
	}
	if _, err := loadCatalog(ctx, filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a missing file loaded")
	}
	const nodes = `[{"name":"n8n-nodes-base.webhook","displayName":"Webhook","version":[1,2],"properties":[]}]`
	file := filepath.Join(t.TempDir(), "nodes.json")
	if err := os.WriteFile(file, []byte(nodes), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := loadCatalog(ctx, file); err != nil || c.Len() != 1 {
		t.Fatalf("file: %v, %v", c, err)
	}
	n8n := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/types/nodes.json" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(nodes))
	}))
	defer n8n.Close()
	if c, err := loadCatalog(ctx, n8n.URL); err != nil || c.Len() != 1 {
		t.Fatalf("url: %v, %v", c, err)
	}
}
