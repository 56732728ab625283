package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/server/servertest"
)

// TestReadmeAGUISnippetRuns runs the README's @ag-ui/client example as the
// README says to (saved as agent.mjs, run with node), against a server, so
// the example cannot rot: it must print the run's messages, the reference
// agent's answer to "tools" among them.
func TestReadmeAGUISnippetRuns(t *testing.T) {
	node := nodeWith(t, interopDir, "@ag-ui/client")
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "save this as `agent.mjs`")
	if !ok {
		t.Fatal("the README no longer introduces its agent.mjs example")
	}
	_, after, ok = strings.Cut(after, "```js\n")
	snippet, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatal("no ```js block after the agent.mjs introduction")
	}
	const readmeURL = "http://127.0.0.1:8080/run-agent"
	if !strings.Contains(snippet, readmeURL) {
		t.Fatalf("the snippet does not call %s:\n%s", readmeURL, snippet)
	}
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	// Saved beside the pinned packages, so that its import resolves as it
	// does for a reader who ran npm install in their own folder.
	dir, err := filepath.Abs(interopDir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "readme-agent-"+strings.ReplaceAll(t.Name(), "/", "-")+".mjs")
	if err := os.WriteFile(file, []byte(strings.Replace(snippet, readmeURL, h.URL+"/run-agent", 1)), 0o644); err != nil {
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
