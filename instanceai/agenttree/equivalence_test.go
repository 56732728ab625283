// The equivalence tests in this file fold every fixture of testdata/fixtures
// (and a few hundred generated streams) with both this package and n8n's own
// reducer, run under Node by testdata/js/fold.js, and compare the trees. They
// need the pinned packages installed once:
//
//	cd instanceai/agenttree/testdata/js && npm ci
//
// (`make test` does it). Without node_modules there the comparison is
// skipped, except when CI=true, where it fails.
package agenttree

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree/agenttreetest"
)

const (
	referenceDir = "testdata/js"
	fixturesGlob = "testdata/fixtures/*.json"
	minFixtures  = 15
)

// referenceReport is what fold.js --report prints per stream.
type referenceReport struct {
	Tree        json.RawMessage `json:"tree"`
	Status      string          `json:"status"`
	RootAgentID string          `json:"rootAgentId"`
	Threw       []int           `json:"threw"`
}

// goReport is the same report from this package.
func goReport(events []instanceai.Event) (tree json.RawMessage, s *State, threw []int, err error) {
	s = New()
	threw = []int{}
	for i, ev := range events {
		if !s.apply(ev) {
			threw = append(threw, i)
		}
	}
	tree, err = json.Marshal(s.Tree())
	return tree, s, threw, err
}

// nodePath returns the node binary, skipping the test when the reference
// cannot run here, or failing it under CI.
func nodePath(t *testing.T) string {
	t.Helper()
	skip := ""
	node, err := exec.LookPath("node")
	switch {
	case err != nil:
		skip = "node is not installed"
	case !fileExists(filepath.Join(referenceDir, "node_modules", "@n8n", "api-types", "package.json")):
		skip = "the reference reducer is not installed: run `npm ci` in instanceai/agenttree/" + referenceDir
	}
	if skip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the reducer equivalence check cannot run under CI: %s", skip)
		}
		t.Skipf("skipping the reducer equivalence check: %s", skip)
	}
	return node
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// runReference folds each stream (a JSON array of events) with the reference
// reducer.
func runReference(t *testing.T, streams []json.RawMessage) []referenceReport {
	t.Helper()
	node := nodePath(t)
	body, err := json.Marshal(streams)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "fold.js", "--report")
	cmd.Dir = referenceDir
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fold.js failed: %v\n%s", err, stderr.String())
	}
	var reports []referenceReport
	if err := json.Unmarshal(out, &reports); err != nil {
		t.Fatalf("fold.js printed no report: %v", err)
	}
	if len(reports) != len(streams) {
		t.Fatalf("fold.js answered %d of %d streams", len(reports), len(streams))
	}
	return reports
}

type fixture struct {
	name   string
	raw    json.RawMessage
	events []instanceai.Event
}

// loadFixtures reads every fixture and checks that it is a stream this
// package can take in whole: every event decodes, carries ts, and marshals
// back to the same JSON (so the Go event model loses nothing the reference
// would see).
func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	paths, err := filepath.Glob(fixturesGlob)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < minFixtures {
		t.Fatalf("%d fixtures in %s, want at least %d", len(paths), fixturesGlob, minFixtures)
	}
	var out []fixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		var raws []json.RawMessage
		if err := json.Unmarshal(data, &raws); err != nil {
			t.Fatalf("%s: not a JSON array: %v", name, err)
		}
		if len(raws) == 0 {
			t.Fatalf("%s: no events", name)
		}
		f := fixture{name: name, raw: data}
		for i, raw := range raws {
			var ev instanceai.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatalf("%s event %d: %v", name, i, err)
			}
			if ev.TS == 0 {
				t.Fatalf("%s event %d: no ts", name, i)
			}
			back, err := json.Marshal(ev)
			if err != nil {
				t.Fatalf("%s event %d: %v", name, i, err)
			}
			if diff := lossyDiff(back, raw); diff != "" {
				t.Fatalf("%s event %d does not survive the Go event model (go vs fixture):\n%s", name, i, diff)
			}
			f.events = append(f.events, ev)
		}
		out = append(out, f)
	}
	return out
}

// lossyDiff is jsonDiff minus empty arrays the event model decodes but
// omits when it marshals (an empty planItems, for one): the fold sees the
// decoded event, so they do reach it.
func lossyDiff(goJSON, fixtureJSON []byte) string {
	var kept []string
	for _, line := range strings.Split(jsonDiff(goJSON, fixtureJSON), "\n") {
		if line != "" && !strings.HasSuffix(line, ": missing, want []") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

func TestFixturesAreRepresentable(t *testing.T) {
	fixtures := loadFixtures(t)
	types := map[instanceai.EventType]bool{}
	for _, f := range fixtures {
		for _, ev := range f.events {
			types[ev.Type] = true
		}
	}
	// Every event type the reducer reads or deliberately ignores appears in
	// some fixture.
	for _, typ := range instanceai.AllTypes {
		if !types[typ] {
			t.Errorf("no fixture has a %s event", typ)
		}
	}
}

func TestFixturesMatchReference(t *testing.T) {
	fixtures := loadFixtures(t)
	streams := make([]json.RawMessage, len(fixtures))
	for i, f := range fixtures {
		streams[i] = f.raw
	}
	reports := runReference(t, streams)
	for i, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			compareWithReference(t, f.events, reports[i])
		})
	}
}

// TestGeneratedStreamsMatchReference compares a few hundred random streams
// over a small alphabet of ids and texts, where collisions (and so the
// REPLACE, join and settle rules) are frequent.
func TestGeneratedStreamsMatchReference(t *testing.T) {
	const streamsN, eventsN = 400, 40
	nodePath(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var (
		streams []json.RawMessage
		decoded [][]instanceai.Event
	)
	for range streamsN {
		events := agenttreetest.GenStream(agenttreetest.RandChooser{R: rng}, eventsN)
		raw, err := json.Marshal(events)
		if err != nil {
			t.Fatal(err)
		}
		// Fold what was marshalled, as the server folds stored events.
		var back []instanceai.Event
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, raw)
		decoded = append(decoded, back)
	}
	reports := runReference(t, streams)
	var failed []int
	for i := range streams {
		ok := t.Run(fmt.Sprintf("stream-%03d", i), func(t *testing.T) {
			compareWithReference(t, decoded[i], reports[i])
		})
		if !ok {
			if failed = append(failed, i); len(failed) == 3 {
				break
			}
		}
	}
	if len(failed) > 0 {
		t.Fatalf("streams %v differ; the first one's input:\n%s", failed, streams[failed[0]])
	}
}

func compareWithReference(t *testing.T, events []instanceai.Event, ref referenceReport) {
	t.Helper()
	tree, s, threw, err := goReport(events)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if diff := jsonDiff(tree, ref.Tree); diff != "" {
		t.Errorf("tree differs from the reference (go vs js):\n%s\ngo: %s\njs: %s", diff, tree, ref.Tree)
	}
	if s.Status != ref.Status {
		t.Errorf("status = %q, reference %q", s.Status, ref.Status)
	}
	if s.RootAgentID != ref.RootAgentID {
		t.Errorf("rootAgentId = %q, reference %q", s.RootAgentID, ref.RootAgentID)
	}
	if !slices.Equal(threw, ref.Threw) {
		t.Errorf("events where the reference throws: go %v, reference %v", threw, ref.Threw)
	}
}

// TestFoldJSPlainMode checks fold.js's plain mode (events in, tree out), the
// one to use by hand.
func TestFoldJSPlainMode(t *testing.T) {
	node := nodePath(t)
	fixtures := loadFixtures(t)
	f := fixtures[0]
	cmd := exec.Command(node, "fold.js")
	cmd.Dir = referenceDir
	cmd.Stdin = bytes.NewReader(f.raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fold.js: %v\n%s", err, stderr.String())
	}
	tree, err := json.Marshal(Fold(f.events))
	if err != nil {
		t.Fatal(err)
	}
	if diff := jsonDiff(tree, out); diff != "" {
		t.Errorf("%s: tree differs (go vs js):\n%s", f.name, diff)
	}
}

// TestFoldJSRejectsBadFixtures checks that fold.js refuses events the Go
// model could not hold, so a fixture cannot pass by accident.
func TestFoldJSRejectsBadFixtures(t *testing.T) {
	node := nodePath(t)
	for name, stream := range map[string]string{
		"no ts":         `[{"type":"status","runId":"r","agentId":"a","payload":{"message":"x"}}]`,
		"unknown field": `[{"type":"status","runId":"r","agentId":"a","ts":1,"payload":{"message":"x","extra":1}}]`,
		"invalid":       `[{"type":"run-finish","runId":"r","agentId":"a","ts":1,"payload":{"status":"done"}}]`,
	} {
		cmd := exec.Command(node, "fold.js")
		cmd.Dir = referenceDir
		cmd.Stdin = strings.NewReader(stream)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil {
			t.Errorf("%s: fold.js accepted %s", name, stream)
		} else if !strings.Contains(stderr.String(), "event 0") {
			t.Errorf("%s: fold.js's message does not name the event: %q", name, stderr.String())
		}
	}
}

// jsonDiff compares two JSON documents as values (as JSON.parse sees them:
// numbers are float64, key order does not matter) and lists where they
// differ, one path per line; "" means equal.
func jsonDiff(a, b []byte) string {
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		return "left side is not JSON: " + err.Error()
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		return "right side is not JSON: " + err.Error()
	}
	var lines []string
	diffValues("$", va, vb, &lines)
	const maxLines = 30
	if len(lines) > maxLines {
		lines = append(lines[:maxLines], fmt.Sprintf("... and %d more", len(lines)-maxLines))
	}
	return strings.Join(lines, "\n")
}

func diffValues(path string, a, b any, out *[]string) {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			va, inA := x[k]
			vb, inB := y[k]
			p := path + "." + k
			switch {
			case !inA:
				*out = append(*out, fmt.Sprintf("  %s: missing, want %s", p, short(vb)))
			case !inB:
				*out = append(*out, fmt.Sprintf("  %s: %s, want it absent", p, short(va)))
			default:
				diffValues(p, va, vb, out)
			}
		}
		return
	case []any:
		y, ok := b.([]any)
		if !ok {
			break
		}
		for i := range min(len(x), len(y)) {
			diffValues(fmt.Sprintf("%s[%d]", path, i), x[i], y[i], out)
		}
		if len(x) != len(y) {
			*out = append(*out, fmt.Sprintf("  %s: %d elements, want %d", path, len(x), len(y)))
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("  %s: %s, want %s", path, short(a), short(b)))
	}
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}
