// Package catalogtest finds n8n's pinned node packages for tests: `npm ci`
// (make node-deps) installs them in workflow/catalog/testdata/n8n-nodes.
package catalogtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// NodeModules returns the node_modules directory holding the pinned
// n8n-nodes-base and @n8n/n8n-nodes-langchain. Without it the test skips,
// except under CI=true, where a silently skipped catalog would hide a
// broken one, so it fails.
func NodeModules(tb testing.TB) string {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "testdata", "n8n-nodes", "node_modules")
	if _, err := os.Stat(filepath.Join(dir, "n8n-nodes-base", "package.json")); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is missing: CI must run npm ci in workflow/catalog/testdata/n8n-nodes", dir)
		}
		tb.Skip("skipping: run `npm ci` in workflow/catalog/testdata/n8n-nodes to test against n8n's catalog")
	}
	return dir
}
