package mapping

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui"
)

// nodeDir returns testdata/js when its node_modules and node are available;
// it skips (fails under CI=true) otherwise.
func nodeDir(t *testing.T) (node, dir string) {
	t.Helper()
	dir = filepath.Join("testdata", "js")
	ci := os.Getenv("CI") == "true"
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@ag-ui", "client")); err != nil {
		if ci {
			t.Fatalf("%s/node_modules is missing: CI must run npm ci there", dir)
		}
		t.Skipf("skipping: run `npm ci` in mapping/%s to check mapped streams with @ag-ui/client", dir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		if ci {
			t.Fatal("node is not installed")
		}
		t.Skip("skipping: node is not installed")
	}
	return node, dir
}

func runClientVerifier(t *testing.T, node, dir string, streams [][]agui.Event) (string, error) {
	t.Helper()
	stdout, stderr, err := runNodeOnStreams(t, node, dir, "verify.js", streams)
	return stdout + stderr, err
}

// runNodeOnStreams writes the streams, one JSON array per line, to a file
// and runs the script in dir on it, returning what it printed.
func runNodeOnStreams(t *testing.T, node, dir, script string, streams [][]agui.Event) (stdout, stderr string, err error) {
	t.Helper()
	var b strings.Builder
	for _, s := range streams {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "streams.ndjson")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, path)
	cmd.Dir = dir
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	return string(out), errOut.String(), err
}

// TestMappedStreamsAgainstAGUIClient runs generated streams through the real
// @ag-ui/client verifier and @ag-ui/core schemas.
func TestMappedStreamsAgainstAGUIClient(t *testing.T) {
	node, dir := nodeDir(t)
	var streams [][]agui.Event
	for seed := uint64(0); seed < 400; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		evs, _, _, _, _ := generate(r)
		m := NewInstanceToAGUI("thread", "run-0")
		var out []agui.Event
		runs := 1
		for _, e := range evs {
			out = append(out, m.Push(e)...)
			for m.Suspended() {
				out = append(out, m.Resume(fmt.Sprintf("run-%d", runs))...)
				runs++
			}
		}
		out = append(out, m.Close(nil)...)
		streams = append(streams, out)
	}
	res, err := runClientVerifier(t, node, dir, streams)
	if err != nil {
		t.Fatalf("@ag-ui/client rejected a mapped stream: %v\n%s", err, res)
	}
	if !strings.Contains(res, "ok 400/400") {
		t.Fatalf("unexpected verifier output:\n%s", res)
	}

	// The same harness must reject a stream that breaks the rules.
	bad := [][]agui.Event{{&agui.RunStarted{ThreadID: "t", RunID: "r"}, &agui.TextMessageStart{MessageID: "m"},
		&agui.RunFinished{ThreadID: "t", RunID: "r"}}}
	if res, err := runClientVerifier(t, node, dir, bad); err == nil || !strings.Contains(res, "text messages are still active") {
		t.Fatalf("the client verifier did not reject an open text message at RUN_FINISHED (%v):\n%s", err, res)
	}
}
