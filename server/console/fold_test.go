package console_test

// The tests in this file check that the console's fold (static/fold.js, run
// under Node by testdata/fold-run.mjs) builds exactly the trees the Go fold
// (instanceai/agenttree) builds: on the reducer's fixtures, on generated
// streams, after a reconnect's run-sync (a state rebuilt from a tree, then
// folded on), and per run as the messages endpoint folds a thread. The Go
// fold is itself checked against n8n's reducer, so the three agree. Without
// node the tests skip, except when CI=true, where they fail.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/instanceai/agenttree/agenttreetest"
)

const (
	foldJS      = "static/fold.js"
	foldRunner  = "testdata/fold-run.mjs"
	fixtureGlob = "../../instanceai/agenttree/testdata/fixtures/*.json"
)

// foldCase is one input of fold-run.mjs.
type foldCase struct {
	Events   []instanceai.Event `json:"events,omitempty"`
	FromTree json.RawMessage    `json:"fromTree,omitempty"`
	Runs     []instanceai.Event `json:"runs,omitempty"`
}

// foldResult is one output of fold-run.mjs, and the Go fold's answer to
// the same case.
type foldResult struct {
	Tree   json.RawMessage `json:"tree,omitempty"`
	Status string          `json:"status,omitempty"`
	Runs   []runResult     `json:"runs,omitempty"`
}

type runResult struct {
	ID     string          `json:"id"`
	Tree   json.RawMessage `json:"tree"`
	Status string          `json:"status"`
}

// namedCase is a case with a name for failure messages.
type namedCase struct {
	name string
	c    foldCase
}

func TestFoldMatchesGoOnFixtures(t *testing.T) {
	var cases []namedCase
	for name, events := range loadFixtures(t) {
		cases = append(cases, namedCase{name, foldCase{Events: events}})
		// A reconnect at every point of the stream: the state the run-sync
		// tree rebuilds must fold the rest as the uninterrupted state does.
		for k := 1; k < len(events); k++ {
			cases = append(cases, namedCase{fmt.Sprintf("%s resynced after %d", name, k), resyncCase(t, events, k)})
		}
		cases = append(cases, namedCase{name + " per run", foldCase{Runs: events}})
	}
	compareFolds(t, cases)
}

func TestFoldMatchesGoOnGeneratedStreams(t *testing.T) {
	const streamsN, eventsN = 300, 40
	rng := rand.New(rand.NewPCG(3, 4))
	var cases []namedCase
	for i := range streamsN {
		events := wireEvents(t, agenttreetest.GenStream(agenttreetest.RandChooser{R: rng}, eventsN))
		name := fmt.Sprintf("stream-%03d", i)
		cases = append(cases,
			namedCase{name, foldCase{Events: events}},
			namedCase{name + " resynced", resyncCase(t, events, 1+rng.IntN(eventsN-1))},
			namedCase{name + " per run", foldCase{Runs: events}})
	}
	compareFolds(t, cases)
}

// TestFoldSurvivesAReconnectMidSegment is the console's reconnect: part of
// a segment arrives live, the connection drops, the new one replays the
// open segment's text as one id-less delta, then a run-sync with the tree
// so far, then the rest live and the closing block. The tree must read the
// segment's text once.
func TestFoldSurvivesAReconnectMidSegment(t *testing.T) {
	const run, agent, resp = "run_1", "orchestrator-run_1", "run_1:seg:1"
	ev := func(ts int64, typ instanceai.EventType, p instanceai.Payload) instanceai.Event {
		return instanceai.Event{Type: typ, RunID: run, AgentID: agent, ResponseID: resp, TS: 1767225600000 + ts, Payload: p}
	}
	before := []instanceai.Event{
		ev(0, instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "m1"}),
		ev(1, instanceai.TypeTextDelta, &instanceai.Text{Text: "Hello, "}),
	}
	replayed := ev(2, instanceai.TypeTextDelta, &instanceai.Text{Text: "Hello, wor"})
	synced := agenttree.New()
	for _, e := range append(before[:1:1], replayed) {
		synced.Apply(e)
	}
	after := []instanceai.Event{
		ev(3, instanceai.TypeTextDelta, &instanceai.Text{Text: "ld"}),
		ev(4, instanceai.TypeTextBlock, &instanceai.Text{Text: "Hello, world"}),
		ev(5, instanceai.TypeRunFinish, &instanceai.RunFinish{Status: instanceai.RunCompleted}),
	}
	tree, err := json.Marshal(synced.Tree())
	if err != nil {
		t.Fatal(err)
	}
	// What the page folds: the first connection, the replayed delta, and
	// from the run-sync on, the rest.
	got := runFold(t, []foldCase{
		{Events: append(append([]instanceai.Event{}, before...), replayed)},
		{Events: after, FromTree: tree},
	})
	var root agenttree.AgentNode
	if err := json.Unmarshal(got[1].Tree, &root); err != nil {
		t.Fatal(err)
	}
	if root.TextContent != "Hello, world" || len(root.Timeline) != 1 || root.Timeline[0].Content != "Hello, world" {
		t.Fatalf("after the reconnect the tree reads %q in %d entries, want \"Hello, world\" once:\n%s",
			root.TextContent, len(root.Timeline), got[1].Tree)
	}
	if got[1].Status != agenttree.StatusCompleted {
		t.Fatalf("status %q, want completed", got[1].Status)
	}
	// Without the run-sync the replayed delta doubles the text: the reason
	// the page replaces its state with the run-sync tree.
	var stale agenttree.AgentNode
	if err := json.Unmarshal(got[0].Tree, &stale); err != nil {
		t.Fatal(err)
	}
	if stale.TextContent != "Hello, Hello, wor" {
		t.Fatalf("the first connection's fold reads %q, want the doubled \"Hello, Hello, wor\"", stale.TextContent)
	}
}

// resyncCase is the fold of events[k:] into the state rebuilt from the tree
// of events[:k], the tree as JSON like a run-sync frame carries it.
func resyncCase(t *testing.T, events []instanceai.Event, k int) foldCase {
	t.Helper()
	s := agenttree.New()
	for _, ev := range events[:k] {
		s.Apply(ev)
	}
	tree, err := json.Marshal(s.Tree())
	if err != nil {
		t.Fatal(err)
	}
	return foldCase{Events: events[k:], FromTree: tree}
}

// goFold answers a case with the Go fold.
func goFold(t *testing.T, c foldCase) foldResult {
	t.Helper()
	marshal := func(v any) json.RawMessage {
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if c.Runs != nil {
		var rs agenttree.Runs
		for _, ev := range c.Runs {
			rs.Apply(ev)
		}
		out := foldResult{Runs: []runResult{}}
		for _, r := range rs.All() {
			out.Runs = append(out.Runs, runResult{ID: r.ID, Tree: marshal(r.State.Tree()), Status: r.State.Status})
		}
		return out
	}
	s := agenttree.New()
	if c.FromTree != nil {
		var tree agenttree.AgentNode
		if err := json.Unmarshal(c.FromTree, &tree); err != nil {
			t.Fatal(err)
		}
		if s = agenttree.StateFromAgentTree(&tree); s == nil {
			t.Fatalf("StateFromAgentTree refused %s", c.FromTree)
		}
	}
	for _, ev := range c.Events {
		s.Apply(ev)
	}
	return foldResult{Tree: marshal(s.Tree()), Status: s.Status}
}

// compareFolds folds every case both ways and reports the first few that
// differ.
func compareFolds(t *testing.T, cases []namedCase) {
	t.Helper()
	input := make([]foldCase, len(cases))
	for i, c := range cases {
		input[i] = c.c
	}
	got := runFold(t, input)
	failed := 0
	for i, c := range cases {
		want := goFold(t, c.c)
		if diff := resultDiff(t, want, got[i]); diff != "" {
			in, _ := json.Marshal(c.c)
			t.Errorf("%s: fold.js differs from the Go fold: %s\ninput: %s", c.name, diff, in)
			if failed++; failed == 3 {
				t.FailNow()
			}
		}
	}
}

// resultDiff compares two results as JSON values (key order aside).
func resultDiff(t *testing.T, want, got foldResult) string {
	t.Helper()
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var wv, gv any
	if err := json.Unmarshal(w, &wv); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(g, &gv); err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(wv, gv) {
		return ""
	}
	return fmt.Sprintf("\n go: %s\n js: %s", w, g)
}

// runFold runs fold-run.mjs on the cases.
func runFold(t *testing.T, cases []foldCase) []foldResult {
	t.Helper()
	node := nodePath(t)
	body, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, foldRunner, foldJS)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", foldRunner, err, stderr.String())
	}
	var results []foldResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("%s printed no results: %v", foldRunner, err)
	}
	if len(results) != len(cases) {
		t.Fatalf("%s answered %d of %d cases", foldRunner, len(results), len(cases))
	}
	return results
}

// nodePath returns the node binary; without it the test skips, or fails
// under CI.
func nodePath(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed: the console fold cannot be checked")
		}
		t.Skip("node is not installed")
	}
	return node
}

// loadFixtures reads the reducer's fixtures as the wire carries them: each
// event decoded and marshalled again by the Go event model.
func loadFixtures(t *testing.T) map[string][]instanceai.Event {
	t.Helper()
	paths, err := filepath.Glob(fixtureGlob)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no fixtures at %s", fixtureGlob)
	}
	out := map[string][]instanceai.Event{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var events []instanceai.Event
		if err := json.Unmarshal(data, &events); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = wireEvents(t, events)
	}
	return out
}

// wireEvents is events after a JSON round trip, as a stream delivers them.
func wireEvents(t *testing.T, events []instanceai.Event) []instanceai.Event {
	t.Helper()
	raw, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	var back []instanceai.Event
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	return back
}
