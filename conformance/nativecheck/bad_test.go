package nativecheck_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/conformancetest"
	"github.com/threadline/threadline/conformance/nativecheck"
)

func parse(t *testing.T, body string) *conformance.Recording {
	t.Helper()
	rec, err := conformance.ParseRecording(conformancetest.GoodHeader(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// badFiles returns the connection fixtures by rule id.
func badFiles(t *testing.T) map[string]string {
	paths, err := filepath.Glob("testdata/bad/*.sse")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".sse")] = string(raw)
	}
	return out
}

func TestBadFixtures(t *testing.T) {
	files := badFiles(t)
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for rule, body := range files {
		t.Run(rule, func(t *testing.T) {
			conformancetest.AssertOnlyFails(t, rule, nativecheck.CheckConnection(parse(t, body)))
		})
	}
}

// A synthetic finished thread: run r1 says "Hello world" and calls a tool.
// The log holds the block; the live stream had the deltas instead.
func ev(typ, extra, payload string, ts int) string {
	return fmt.Sprintf(`{"type":%q,"runId":"r1","agentId":"orchestrator-r1"%s,"ts":%d,"payload":%s}`, typ, extra, 1700000000000+ts, payload)
}

var (
	evStart  = ev("run-start", "", `{"messageId":"m1"}`, 0)
	evDelta1 = ev("text-delta", `,"responseId":"resp1"`, `{"text":"Hello "}`, 1)
	evDelta2 = ev("text-delta", `,"responseId":"resp1"`, `{"text":"world"}`, 2)
	evBlock  = ev("text-block", `,"responseId":"resp1"`, `{"text":"Hello world"}`, 3)
	evCall   = ev("tool-call", "", `{"toolCallId":"tc1","toolName":"search","args":{"q":"x"}}`, 4)
	evResult = ev("tool-result", "", `{"toolCallId":"tc1","result":{"ok":true}}`, 5)
	evFinish = ev("run-finish", "", `{"status":"completed"}`, 6)
)

// frame is one SSE frame: id 0 means none.
type frame struct {
	id   int
	data string
}

func stream(frames ...frame) string {
	var b strings.Builder
	b.WriteString(": connected\n\n")
	for _, f := range frames {
		if f.id > 0 {
			fmt.Fprintf(&b, "id: %d\n", f.id)
		}
		if f.data == "" {
			b.WriteString("\n") // an id alone
			continue
		}
		for _, name := range []string{"run-sync", "reset"} {
			if strings.HasPrefix(f.data, name+" ") {
				fmt.Fprintf(&b, "event: %s\n", name)
				f.data = strings.TrimPrefix(f.data, name+" ")
			}
		}
		fmt.Fprintf(&b, "data: %s\n\n", f.data)
	}
	return b.String()
}

// replayCase is a set of recordings for CheckReplay, as frames.
type replayCase struct {
	live  []frame
	full  []frame
	after map[int64][]frame
}

func goodReplay() replayCase {
	return replayCase{
		live: []frame{{1, evStart}, {0, evDelta1}, {0, evDelta2}, {3, evCall}, {4, evResult}, {5, evFinish}},
		full: []frame{{1, evStart}, {2, evBlock}, {3, evCall}, {4, evResult}, {5, evFinish}},
		after: map[int64][]frame{
			1: {{2, evBlock}, {3, evCall}, {4, evResult}, {5, evFinish}},
			3: {{4, evResult}, {5, evFinish}},
		},
	}
}

// A stored event the native stream does not show (an upstream AG-UI
// agent's, kept as an extension type) is a frame of its id alone, live
// and in every replay: the ids stay consecutive and the trees the same.
func TestGoodReplayWithIDOnlyFrames(t *testing.T) {
	c := replayCase{
		live: []frame{{1, evStart}, {0, evDelta1}, {0, evDelta2}, {3, ""}, {4, evCall}, {5, evResult}, {6, ""}, {7, evFinish}},
		full: []frame{{1, evStart}, {2, evBlock}, {3, ""}, {4, evCall}, {5, evResult}, {6, ""}, {7, evFinish}},
		after: map[int64][]frame{
			2: {{3, ""}, {4, evCall}, {5, evResult}, {6, ""}, {7, evFinish}},
			3: {{4, evCall}, {5, evResult}, {6, ""}, {7, evFinish}},
		},
	}
	for _, f := range c.check(t) {
		if f.Status == conformance.Fail {
			t.Errorf("%s: %s %s", f.Rule, f.Status, f.Detail)
		}
	}
	for _, rec := range []string{stream(c.live...), stream(c.full...)} {
		for _, f := range nativecheck.CheckConnection(parse(t, rec)) {
			if f.Status == conformance.Fail {
				t.Errorf("%s: %s %s", f.Rule, f.Status, f.Detail)
			}
		}
	}
	// A replay that leaves an id out is still caught.
	c.full = append(c.full[:2], c.full[3:]...)
	caught := false
	for _, f := range c.check(t) {
		caught = caught || (f.Rule == nativecheck.RuleReplayContiguous && f.Status == conformance.Fail)
	}
	if !caught {
		t.Error("a replay without the id-only frame passed the contiguity rule")
	}
}

func (c replayCase) check(t *testing.T) []conformance.Finding {
	t.Helper()
	after := map[int64]*conformance.Recording{}
	for k, v := range c.after {
		after[k] = parse(t, stream(v...))
	}
	return nativecheck.CheckReplay(parse(t, stream(c.live...)), parse(t, stream(c.full...)), after)
}

// replayBad builds, for each replay rule, a case that breaks only it.
var replayBad = map[string]func(c *replayCase){
	nativecheck.RuleReplayStoredOnly: func(c *replayCase) {
		c.full = append(c.full, frame{0, `run-sync {"runId":"r1","agentTree":{}}`})
	},
	nativecheck.RuleReplayContiguous: func(c *replayCase) {
		c.full[4].id, c.live[5].id, c.after[1][3].id, c.after[3][1].id = 7, 7, 7, 7
	},
	nativecheck.RuleReplayLiveIDs: func(c *replayCase) {
		// The reducer ignores userId, so only the id check sees it.
		c.live[3].data = strings.Replace(evCall, `"ts"`, `"userId":"u2","ts"`, 1)
	},
	nativecheck.RuleReplayCursor: func(c *replayCase) {
		// A second run-finish leaves the tree as it was.
		c.after[5] = []frame{{5, evFinish}}
	},
	nativecheck.RuleReplaySuffix: func(c *replayCase) {
		c.after[3][0].data = strings.Replace(evResult, `"ts"`, `"userId":"u2","ts"`, 1)
	},
	nativecheck.RuleReplayLiveTree: func(c *replayCase) {
		c.live = append(c.live[:2], c.live[3:]...) // "world" never arrived
	},
	nativecheck.RuleReplayAfterTree: func(c *replayCase) {
		c.after[2] = []frame{{0, evDelta2}, {3, evCall}, {4, evResult}, {5, evFinish}}
	},
}

func TestGoodReplay(t *testing.T) {
	for _, f := range goodReplay().check(t) {
		if f.Status != conformance.Pass {
			t.Errorf("%s: %s %s", f.Rule, f.Status, f.Detail)
		}
	}
}

func TestBadReplays(t *testing.T) {
	for rule, breakIt := range replayBad {
		t.Run(rule, func(t *testing.T) {
			c := goodReplay()
			breakIt(&c)
			conformancetest.AssertOnlyFails(t, rule, c.check(t))
		})
	}
}

func reset(last, next int) frame {
	return frame{next - 1, fmt.Sprintf(`reset {"reason":"events_evicted","threadId":"th","lastEventId":%d,"nextEventId":%d}`, last, next)}
}

// A store that evicted the thread's first events resets the connections
// whose cursor falls before what it keeps: the replays then compare from
// the reset on, and the client's earlier state does not count.
func TestGoodReplayWithResets(t *testing.T) {
	c := goodReplay()
	// Events 1 and 2 are gone: the full replay and the reconnection after 1
	// are reset to 3; the one after 3 is not.
	c.full = append([]frame{reset(0, 3)}, c.full[2:]...)
	c.after[1] = append([]frame{reset(1, 3)}, c.after[1][1:]...)
	findings := c.check(t)
	for _, f := range findings {
		switch {
		case f.Rule == nativecheck.RuleReplayLiveTree:
			if f.Status != conformance.Skip {
				t.Errorf("%s: %s %s, want a skip (the full replay lacks the start)", f.Rule, f.Status, f.Detail)
			}
		case f.Status != conformance.Pass:
			t.Errorf("%s: %s %s", f.Rule, f.Status, f.Detail)
		}
	}
	for _, rec := range []string{stream(c.full...), stream(c.after[1]...)} {
		for _, f := range nativecheck.CheckConnection(parse(t, rec)) {
			if f.Status == conformance.Fail {
				t.Errorf("%s: %s", f.Rule, f.Detail)
			}
		}
	}
	// A reconnection that skipped the gap without a reset is still caught.
	c.after[1] = c.after[1][1:]
	conformancetest.AssertOnlyFails(t, nativecheck.RuleReplaySuffix, c.check(t))
}

// TestEveryRuleHasAFailingCase: each rule is broken by a fixture file or a
// replay case.
func TestEveryRuleHasAFailingCase(t *testing.T) {
	files := badFiles(t)
	for _, r := range nativecheck.Rules {
		_, inFile := files[r.ID]
		_, inGo := replayBad[r.ID]
		if !inFile && !inGo {
			t.Errorf("rule %s has no failing case", r.ID)
		}
		if !strings.HasPrefix(r.ID, "native.") || r.Title == "" || !strings.HasPrefix(r.Source, "PROTOCOLS.md §1") {
			t.Errorf("rule %+v: want a native.* id, a title and a PROTOCOLS.md §1 source", r)
		}
	}
	if _, err := conformance.NewCatalog(nativecheck.Rules); err != nil {
		t.Error(err)
	}
}

// A block after the connection went live that brings text its deltas did
// not (they were lost on the way to the instance) completes the segment:
// the reducer's REPLACE rule takes it. Only a block that repeats what the
// deltas sent breaks the rule.
func TestLiveBlockThatCompletesLostDeltas(t *testing.T) {
	partial := ev("text-delta", `,"responseId":"resp1"`, `{"text":"Hello "}`, 1)
	rec := parse(t, stream(frame{1, evStart}, frame{0, partial}, frame{2, evBlock}, frame{3, evFinish}))
	passed := false
	for _, f := range nativecheck.CheckConnection(rec) {
		if f.Rule == nativecheck.RuleBlocksNotLive {
			if f.Status != conformance.Pass {
				t.Fatalf("a block completing lost deltas: %+v", f)
			}
			passed = true
		}
	}
	if !passed {
		t.Fatal("the rule was not judged")
	}
}
