package aguicheck_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	// Encrypted reasoning comes only from an upstream agent that sends it
	// (server/upstream_agent_test.go checks it reaches the stream).
	aguicheck.ReasonEncrypted: "the reference agent sends no encrypted reasoning",
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

// input is the scenario's RunAgentInput; it declares protocol version
// 1.0, as @ag-ui/client 1.0.0's HttpAgent does.
func input(thread string, sc scenario) map[string]any {
	extra := map[string]any{"protocolVersion": "1.0"}
	for k, v := range sc.extra {
		extra[k] = v
	}
	var in map[string]any
	_ = json.Unmarshal([]byte(servertest.RunAgentInput(thread, "run-"+sc.name, sc.message, extra)), &in)
	return in
}

func record(t *testing.T, srv *servertest.Server, thread string, sc scenario) *conformance.Recording {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body, _ := json.Marshal(input(thread, sc))
	res := srv.PostRunAgent(ctx, string(body), "text/event-stream")
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
		for _, f := range aguicheck.CheckWith(rec, aguicheck.Options{Input: input("conf-"+sc.name, sc)}) {
			switch f.Status {
			case conformance.Fail:
				t.Errorf("%s: %s fails: %s\nstream:\n%s", sc.name, f.Rule, f.Detail, rec.Body)
			case conformance.Pass:
				passed[f.Rule] = true
			}
		}
	}
	// A thread of several runs read back whole, as CopilotKit's connect
	// replays it: the runs before the last come compacted.
	thread := "conf-history"
	for _, sc := range []scenario{scenarios[2], scenarios[1], scenarios[0]} {
		record(t, srv, thread, sc)
	}
	rec := connect(t, srv, thread)
	for _, f := range aguicheck.CheckWith(rec, aguicheck.Options{History: true}) {
		switch f.Status {
		case conformance.Fail:
			t.Errorf("connect: %s fails: %s\nstream:\n%s", f.Rule, f.Detail, rec.Body)
		case conformance.Pass:
			passed[f.Rule] = true
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

// connect records the thread read back by CopilotKit's connect.
func connect(t *testing.T, srv *servertest.Server, thread string) *conformance.Recording {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/copilotkit/agent/default/connect",
		strings.NewReader(`{"threadId":"`+thread+`","runId":"c1","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := srv.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("connect: status %d", res.StatusCode)
	}
	rec, err := conformance.Record(ctx, res, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return rec
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
			// A fixture whose second line is ": history" is a stream that
			// restates a thread's history.
			lines := strings.SplitN(string(body), "\n", 3)
			opts := aguicheck.Options{History: len(lines) > 1 && lines[1] == ": history"}
			var hit bool
			for _, f := range aguicheck.CheckWith(rec, opts) {
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

// TestGoodHistoryFixture: a history stream whose earlier run is compacted
// passes the compaction rule; the same stream read as a live one does
// not judge it (a live stream may carry several runs of deltas).
func TestGoodHistoryFixture(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "good", "history.sse"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := conformance.ParseRecording(http.Header{"Content-Type": {"text/event-stream"}}, body)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"protocolVersion": "1.0"}
	status := map[string]conformance.Status{}
	for _, f := range aguicheck.CheckWith(rec, aguicheck.Options{History: true, Input: in}) {
		status[f.Rule] = f.Status
		if f.Status == conformance.Fail {
			t.Errorf("%s fails: %s", f.Rule, f.Detail)
		}
	}
	for _, id := range []string{aguicheck.ReplayCompacted, aguicheck.RunProtocolVersion, aguicheck.RunPendingCalls, aguicheck.ReasonEncrypted} {
		if status[id] != conformance.Pass {
			t.Errorf("%s is %s, want pass", id, status[id])
		}
	}
	for _, f := range aguicheck.Check(rec) {
		if f.Rule == aguicheck.ReplayCompacted && f.Status != conformance.Skip {
			t.Errorf("a live stream: %s is %s, want skip", f.Rule, f.Status)
		}
	}
}

// verdicts checks body (events, one per line) with opts and returns each
// rule's finding.
func verdicts(t *testing.T, opts aguicheck.Options, events ...string) map[string]conformance.Finding {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	rec, err := conformance.ParseRecording(http.Header{"Content-Type": {"text/event-stream"}}, []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]conformance.Finding{}
	for _, f := range aguicheck.CheckWith(rec, opts) {
		out[f.Rule] = f
	}
	return out
}

// TestNoNullInsideProtocolObjects: a null nested in a protocol object (a
// snapshot's message, a tool call, an outcome, an interrupt, the echoed
// input) fails the no-null rule, and only it; inside opaque payloads null
// is data.
func TestNoNullInsideProtocolObjects(t *testing.T) {
	start := `{"type":"RUN_STARTED","threadId":"t","runId":"r"}`
	end := `{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`
	for _, c := range []struct {
		name, event, at string
	}{
		{"snapshot message name", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","content":"x","name":null}]}`, "/messages/0/name"},
		{"snapshot tool calls", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":null}]}`, "/messages/0/toolCalls"},
		{"tool call encryptedValue", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"},"encryptedValue":null}]}]}`, "/messages/0/toolCalls/0/encryptedValue"},
		{"message metadata", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":"x","metadata":null}]}`, "/messages/0/metadata"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := verdicts(t, aguicheck.Options{}, start, c.event, end)
			if f := v[aguicheck.EventNoNull]; f.Status != conformance.Fail || !strings.Contains(f.Detail, c.at) {
				t.Fatalf("no-null: %+v, want a failure at %s", f, c.at)
			}
		})
	}
	for _, c := range []struct{ name, last, at string }{
		{"interrupt expiresAt", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"x","expiresAt":null}]}}`, "/outcome/interrupts/0/expiresAt"},
		{"pendingToolCallIds", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success","pendingToolCallIds":null}}`, "/outcome/pendingToolCallIds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := verdicts(t, aguicheck.Options{}, start, c.last)
			if f := v[aguicheck.EventNoNull]; f.Status != conformance.Fail || !strings.Contains(f.Detail, c.at) {
				t.Fatalf("no-null: %+v, want a failure at %s", f, c.at)
			}
		})
	}
	// A member named like an any-JSON one is a protocol field elsewhere: a
	// context item's value is a string.
	for _, c := range []struct{ name, first, at string }{
		{"input context value", `{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[],"context":[{"description":"d","value":null}]}}`, "/input/context/0/value"},
		{"input message name", `{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"x","name":null}]}}`, "/input/messages/0/name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := verdicts(t, aguicheck.Options{}, c.first, end)
			if f := v[aguicheck.EventNoNull]; f.Status != conformance.Fail || !strings.Contains(f.Detail, c.at) {
				t.Fatalf("no-null: %+v, want a failure at %s", f, c.at)
			}
		})
	}
	// Null where the schema allows any JSON value, and inside opaque
	// payloads, is data.
	v := verdicts(t, aguicheck.Options{},
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[],"state":null}}`,
		`{"type":"STATE_SNAPSHOT","snapshot":null}`,
		`{"type":"STATE_SNAPSHOT","snapshot":{"a":null}}`,
		`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/b","value":null}]}`,
		`{"type":"CUSTOM","name":"n","value":null}`,
		`{"type":"RAW","event":null}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":"x","metadata":{"k":null}}]}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"k":null},"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"x","responseSchema":{"default":null}}]}}`)
	if f := v[aguicheck.EventNoNull]; f.Status != conformance.Pass {
		t.Fatalf("null inside payloads: %+v", f)
	}
}

// TestProtocolVersionAnswersTheInput: a producer that declares no version
// to a consumer that declared one fails; one asked nothing may stay
// silent; a declared version must be major.minor.
func TestProtocolVersionAnswersTheInput(t *testing.T) {
	end := `{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`
	silent := `{"type":"RUN_STARTED","threadId":"t","runId":"r"}`
	for _, c := range []struct {
		name  string
		opts  aguicheck.Options
		start string
		want  conformance.Status
	}{
		{"silent to a declared input", aguicheck.Options{Input: map[string]any{"protocolVersion": "1.0"}}, silent, conformance.Fail},
		{"silent to an input echoed with a version", aguicheck.Options{},
			`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[],"protocolVersion":"1.0"}}`, conformance.Fail},
		{"silent to a silent input", aguicheck.Options{}, silent, conformance.Skip},
		{"declared", aguicheck.Options{Input: map[string]any{"protocolVersion": "1.0"}},
			`{"type":"RUN_STARTED","threadId":"t","runId":"r","protocolVersion":"1.0"}`, conformance.Pass},
		{"declared a newer one", aguicheck.Options{}, `{"type":"RUN_STARTED","threadId":"t","runId":"r","protocolVersion":"1.1"}`, conformance.Pass},
		{"semver", aguicheck.Options{}, `{"type":"RUN_STARTED","threadId":"t","runId":"r","protocolVersion":"1.0.0"}`, conformance.Fail},
	} {
		if f := verdicts(t, c.opts, c.start, end)[aguicheck.RunProtocolVersion]; f.Status != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, f.Status, f.Detail, c.want)
		}
	}
}

// TestPendingToolCallsPerRun: the list is judged against the run it ends,
// not calls of an earlier run of the stream; an empty list names none.
func TestPendingToolCallsPerRun(t *testing.T) {
	v := verdicts(t, aguicheck.Options{},
		`{"type":"RUN_STARTED","threadId":"t","runId":"r1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"old","toolCallName":"f"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"old"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r1","outcome":{"type":"success","pendingToolCallIds":[]}}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r2"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"a"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"f"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"b"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r2","outcome":{"type":"success","pendingToolCallIds":["a","b"]}}`)
	if f := v[aguicheck.RunPendingCalls]; f.Status != conformance.Pass {
		t.Fatalf("%+v", f)
	}
	v = verdicts(t, aguicheck.Options{},
		`{"type":"RUN_STARTED","threadId":"t","runId":"r2"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"a"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"f"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"b"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r2","outcome":{"type":"success","pendingToolCallIds":["b","a"]}}`)
	if f := v[aguicheck.RunPendingCalls]; f.Status != conformance.Fail {
		t.Fatalf("out of order: %+v", f)
	}
}
