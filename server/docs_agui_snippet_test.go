package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/server/servertest"
)

// TestDocsAGUISnippetRuns runs the @ag-ui/client example of docs/agui.md
// as the guide says to (saved as agent.mjs, run with node), against a
// server, so the example cannot rot: it must print the run's messages, the reference
// agent's answer to "tools" among them.
func TestDocsAGUISnippetRuns(t *testing.T) {
	node := nodeWith(t, interopDir, "@ag-ui/client")
	doc, err := os.ReadFile("../docs/agui.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "save this as `agent.mjs`")
	if !ok {
		t.Fatal("docs/agui.md no longer introduces its agent.mjs example")
	}
	_, after, ok = strings.Cut(after, "```js\n")
	snippet, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatal("no ```js block after the agent.mjs introduction")
	}
	const docURL = "http://127.0.0.1:8080/run-agent"
	if !strings.Contains(snippet, docURL) {
		t.Fatalf("the snippet does not call %s:\n%s", docURL, snippet)
	}
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	// Saved beside the pinned packages, so that its import resolves as it
	// does for a reader who ran npm install in their own folder.
	dir, err := filepath.Abs(interopDir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "doc-agent-"+strings.ReplaceAll(t.Name(), "/", "-")+".mjs")
	if err := os.WriteFile(file, []byte(strings.Replace(snippet, docURL, h.URL+"/run-agent", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(file) })
	out, err := exec.Command(node, file).CombinedOutput()
	if err != nil {
		t.Fatalf("node agent.mjs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "role: 'assistant'") || !strings.Contains(string(out), "toolCalls") {
		t.Fatalf("the snippet printed no assistant message with tool calls:\n%s", out)
	}
}
