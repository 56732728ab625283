package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/server/servertest"
)

// The publish examples of docs/publish-api.md (curl, Python, Node) run as
// a reader runs them, against a server, and each streams its run into the
// thread.
func TestDocsPublishExamplesRun(t *testing.T) {
	doc, err := os.ReadFile("../docs/publish-api.md")
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(doc), "# Publish from your own worker")
	if !ok {
		t.Fatal("docs/publish-api.md does not open with its publish title")
	}
	block := func(lang string) string {
		t.Helper()
		_, after, ok := strings.Cut(section, "```"+lang+"\n")
		code, _, closed := strings.Cut(after, "```")
		if !ok || !closed {
			t.Fatalf("no ```%s example in the publish section", lang)
		}
		return code
	}
	const token = "worker-secret-0123456789"
	for _, ex := range []struct {
		lang, file string
		run        func(file string) *exec.Cmd
	}{
		{"sh", "publish.sh", func(f string) *exec.Cmd { return exec.Command("bash", "-eu", f) }},
		{"python", "publish.py", func(f string) *exec.Cmd { return exec.Command("python3", f) }},
		{"js", "publish.mjs", func(f string) *exec.Cmd { return exec.Command("node", f) }},
	} {
		t.Run(ex.lang, func(t *testing.T) {
			for _, tool := range []string{"curl", "python3", "node"} {
				if _, err := exec.LookPath(tool); err != nil && os.Getenv("CI") != "true" {
					t.Skipf("%s is not installed", tool)
				}
			}
			store := servertest.OpenStore(t, "memory")
			h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice", PublishTokens: token + "=alice"})
			file := filepath.Join(t.TempDir(), ex.file)
			if err := os.WriteFile(file, []byte(block(ex.lang)), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := ex.run(file)
			cmd.Env = append(os.Environ(), "THREADLINE="+h.URL, "TOKEN="+token)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", ex.file, err, out)
			}
			fin := waitRunFinish(t, store, "report-42", 10*time.Second)
			var events []instanceai.Event
			for _, r := range servertest.StoredEvents(t, store, "report-42") {
				events = append(events, r.Event)
			}
			if got := agenttree.Fold(events).TextContent; fin.Status != instanceai.RunCompleted || got != "Revenue grew 12% this quarter." {
				t.Fatalf("the run ended %+v with the text %q", fin, got)
			}
		})
	}
}
