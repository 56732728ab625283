package aguicheck_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/aguicheck"
	"github.com/threadline/threadline/server/servertest"
)

// unexercisable lists the rules the reference agent's streams cannot pass,
// with why; every other rule must pass on at least one scenario, so a rule
// that silently never runs is noticed.
var unexercisable = map[string]string{
	// Its background agents are all children of the main agent, so no
	// SUBAGENT_STARTED carries a parentSubagentRunId.
	aguicheck.SubParentStarted: "the reference agent never nests sub-agents",
}

type scenario struct {
	name    string
	message string
	extra   map[string]any
}

var scenarios = []scenario{
	{"simple", "simple hi", nil},
	{"tools", "tools", nil},
	{"tasks", "tasks", nil},
	{"error", "error", nil},
	{"confirm", "confirm", nil},
	{"background", "background", nil},
	{"frontend-tool", "frontend-tool", map[string]any{"tools": []any{map[string]any{
		"name": "pickColor", "description": "Asks the user for a color",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}}},
	{"long", "long 50", nil},
}

func record(t *testing.T, srv *servertest.Server, thread string, sc scenario) *conformance.Recording {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := srv.PostRunAgent(ctx, servertest.RunAgentInput(thread, "run-"+sc.name, sc.message, sc.extra), "text/event-stream")
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", sc.name, res.StatusCode)
	}
	rec, err := conformance.Record(ctx, res, nil)
	if err != nil {
		t.Fatalf("%s: record: %v", sc.name, err)
	}
	return rec
}

// TestReferenceServerConforms runs every scenario of the reference agent
// through the real server and requires each rule to pass or be skipped.
func TestReferenceServerConforms(t *testing.T) {
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	passed := map[string]bool{}
	for _, sc := range scenarios {
		rec := record(t, srv, "conf-"+sc.name, sc)
		for _, f := range aguicheck.Check(rec) {
			switch f.Status {
			case conformance.Fail:
				t.Errorf("%s: %s fails: %s\nstream:\n%s", sc.name, f.Rule, f.Detail, rec.Body)
			case conformance.Pass:
				passed[f.Rule] = true
			}
		}
	}
	for _, r := range aguicheck.Rules {
		why, excused := unexercisable[r.ID]
		switch {
		case passed[r.ID] && excused:
			t.Errorf("%s passes on the reference server: drop it from unexercisable", r.ID)
		case !passed[r.ID] && !excused:
			t.Errorf("%s never passes on the reference server's scenarios", r.ID)
		case excused && why == "":
			t.Errorf("%s is excused without a reason", r.ID)
		}
	}
}

// TestBadFixtures checks that each fixture under testdata/bad fails the rule
// it is named after, and only that rule.
func TestBadFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "bad", "*.sse"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, r := range aguicheck.Rules {
		known[r.ID] = true
	}
	covered := map[string]bool{}
	for _, p := range paths {
		id := strings.TrimSuffix(filepath.Base(p), ".sse")
		t.Run(id, func(t *testing.T) {
			if !known[id] {
				t.Fatalf("fixture %s names no rule of aguicheck.Rules", p)
			}
			covered[id] = true
			body, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(body), "\n")
			if !strings.HasPrefix(first, ": breaks "+id+": ") {
				t.Errorf("first line %q should be \": breaks %s: <why>\"", first, id)
			}
			header := http.Header{"Content-Type": {"text/event-stream"}}
			if raw, err := os.ReadFile(strings.TrimSuffix(p, ".sse") + ".headers"); err == nil {
				mh, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(raw, '\n')))).ReadMIMEHeader()
				if err != nil {
					t.Fatalf("headers: %v", err)
				}
				header = http.Header(mh)
			}
			rec, err := conformance.ParseRecording(header, body)
			if err != nil {
				t.Fatal(err)
			}
			var hit bool
			for _, f := range aguicheck.Check(rec) {
				if f.Status != conformance.Fail {
					continue
				}
				if f.Rule == id {
					hit = true
					t.Logf("%s: %s", id, f.Detail)
				} else {
					t.Errorf("also fails %s: %s", f.Rule, f.Detail)
				}
			}
			if !hit {
				t.Errorf("does not fail %s", id)
			}
		})
	}
	for _, r := range aguicheck.Rules {
		if !covered[r.ID] {
			t.Errorf("rule %s has no fixture testdata/bad/%s.sse", r.ID, r.ID)
		}
	}
}

// TestRules checks the rule list itself: unique, well-formed ids with a
// title and a source, accepted by the catalog.
func TestRules(t *testing.T) {
	if _, err := conformance.NewCatalog(aguicheck.Rules); err != nil {
		t.Fatal(err)
	}
	for _, r := range aguicheck.Rules {
		if !strings.HasPrefix(r.ID, "agui.") || strings.Count(r.ID, ".") != 2 {
			t.Errorf("id %q is not agui.<area>.<name>", r.ID)
		}
		if strings.Contains(r.Title, "\n") {
			t.Errorf("%s: title spans lines", r.ID)
		}
	}
}

// TestGoodFixture checks a hand-written valid stream that reaches what the
// reference agent never sends, including the rules it cannot exercise.
func TestGoodFixture(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "good", "full.sse"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := conformance.ParseRecording(http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, body)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]conformance.Status{}
	for _, f := range aguicheck.Check(rec) {
		status[f.Rule] = f.Status
		if f.Status == conformance.Fail {
			t.Errorf("%s fails: %s", f.Rule, f.Detail)
		}
	}
	for id := range unexercisable {
		if status[id] != conformance.Pass {
			t.Errorf("%s is %s on the fixture, want pass", id, status[id])
		}
	}
	for _, id := range []string{aguicheck.StateDeltaApplies, aguicheck.StateDeltaShape, aguicheck.RunAfterFinished, aguicheck.RunNoNested} {
		if status[id] != conformance.Pass {
			t.Errorf("%s is %s on the fixture, want pass", id, status[id])
		}
	}
}

// A server under test that sends doubling "copy" operations does not make
// the checker build a document without bound: the state is left unjudged.
func TestCopyBombLeavesTheStateUnjudged(t *testing.T) {
	var ops []string
	for i := range 40 {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"","path":"/c%d"}`, i))
	}
	body := `data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}

data: {"type":"STATE_SNAPSHOT","snapshot":{"a":"` + strings.Repeat("x", 1024) + `"}}

data: {"type":"STATE_DELTA","delta":[` + strings.Join(ops, ",") + `]}

data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}

`
	rec, err := conformance.ParseRecording(http.Header{"Content-Type": {"text/event-stream"}}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range aguicheck.Check(rec) {
		if f.Rule == aguicheck.StateDeltaApplies && f.Status == conformance.Fail {
			t.Fatalf("%s: %s", f.Rule, f.Detail)
		}
	}
}
