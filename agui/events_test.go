package agui

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func meta() map[string]any { return map[string]any{"source": "test"} }

// samples holds one fully populated event of every type.
func samples() []Event {
	b := Base{Timestamp: 1700000000123}
	at := Attribution{SubagentRunID: "sub-1"}
	yes := true
	return []Event{
		&TextMessageStart{Base: b, Attribution: at, MessageID: "m1", Role: RoleAssistant, Name: "builder"},
		&TextMessageContent{Base: b, MessageID: "m1", Delta: "Hello"},
		&TextMessageEnd{Base: b, MessageID: "m1"},
		&TextMessageChunk{Base: b, MessageID: "m2", Role: RoleAssistant, Delta: "Hi"},
		&ToolCallStart{Base: b, ToolCallID: "tc1", ToolCallName: "search", ParentMessageID: "m1"},
		&ToolCallArgs{Base: b, ToolCallID: "tc1", Delta: `{"q":"x"}`},
		&ToolCallEnd{Base: b, ToolCallID: "tc1"},
		&ToolCallChunk{Base: b, ToolCallID: "tc2", ToolCallName: "search", Delta: `{}`},
		&ToolCallResult{Base: Base{Timestamp: 1, Metadata: meta()}, MessageID: "r1", ToolCallID: "tc1", Content: `{"ok":true}`, Role: RoleTool},
		&StateSnapshot{Base: b, Snapshot: json.RawMessage(`{"tasks":[]}`)},
		&StateDelta{Base: b, Delta: []PatchOp{{Op: "add", Path: "/tasks/-", Value: json.RawMessage(`{"id":"t1"}`)}, {Op: "remove", Path: "/tasks/0"}, {Op: "move", From: "/a", Path: "/b"}}},
		&MessagesSnapshot{Base: b, Messages: []Message{
			{ID: "u1", Role: RoleUser, Content: TextContent("hi")},
			{ID: "a1", Role: RoleAssistant, Content: TextContent("ok"), ToolCalls: []ToolCall{{ID: "tc1", Type: "function", Function: FunctionCall{Name: "search", Arguments: "{}"}}}},
			{ID: "t1", Role: RoleTool, Content: TextContent("done"), ToolCallID: "tc1"},
			{ID: "r1", Role: RoleReasoning, Content: TextContent("thinking")},
		}},
		&ActivitySnapshot{Base: b, MessageID: "act1", ActivityType: "plan", Content: json.RawMessage(`{"steps":[]}`), Replace: &yes},
		&ActivityDelta{Base: b, MessageID: "act1", ActivityType: "plan", Patch: []PatchOp{{Op: "replace", Path: "/steps", Value: json.RawMessage(`[1]`)}}},
		&Raw{Base: b, Event: json.RawMessage(`{"type":"run-start"}`), Source: "instance-ai"},
		&Custom{Base: b, Name: "instance-ai.status", Value: json.RawMessage(`{"message":"Working"}`)},
		&RunStarted{Base: b, ThreadID: "th1", RunID: "run1", ProtocolVersion: ProtocolVersion, ParentRunID: "run0",
			Input: &RunAgentInput{ThreadID: "th1", RunID: "run1", Messages: []Message{{ID: "u1", Role: RoleUser, Content: TextContent("hi")}}}},
		&RunFinished{Base: b, ThreadID: "th1", RunID: "run1", Result: json.RawMessage(`"done"`),
			Outcome: &Outcome{Type: OutcomeInterrupt, Interrupts: []Interrupt{{ID: "req1", Reason: "confirmation", Message: "Delete?", ToolCallID: "tc1",
				ResponseSchema: json.RawMessage(`{"type":"object"}`), Metadata: map[string]any{"severity": "destructive"}}}},
			Usage: []Usage{{Model: "gpt", InputTokens: 3, OutputTokens: 4, TotalTokens: 7}}},
		&RunError{Base: b, Message: "boom", Code: "interrupted"},
		&StepStarted{Base: b, StepName: "plan"},
		&StepFinished{Base: b, StepName: "plan"},
		&ReasoningStart{Base: b, MessageID: "rs1"},
		&ReasoningMessageStart{Base: b, MessageID: "rs1"},
		&ReasoningMessageContent{Base: b, MessageID: "rs1", Delta: "hmm"},
		&ReasoningMessageEnd{Base: b, MessageID: "rs1"},
		&ReasoningMessageChunk{Base: b, MessageID: "rs2", Delta: "hmm"},
		&ReasoningEnd{Base: b, MessageID: "rs1"},
		&ReasoningEncryptedValue{Base: b, Subtype: "message", EntityID: "rs1", EncryptedValue: "xyz"},
		&SubagentStarted{Base: b, SubagentRunID: "sub-1", Name: "builder", Description: "Builds", ParentToolCallID: "tc1"},
		&SubagentFinished{Base: b, SubagentRunID: "sub-1", Result: json.RawMessage(`"built"`), Outcome: &SubagentOutcome{Type: SubagentSuccess}},
		&SubagentError{Base: b, SubagentRunID: "sub-1", Message: "failed", Code: "error"},
	}
}

func TestSamplesCoverEveryType(t *testing.T) {
	seen := map[EventType]bool{}
	for _, e := range samples() {
		seen[e.Type()] = true
	}
	for _, typ := range AllTypes {
		if !seen[typ] {
			t.Errorf("no sample of %s", typ)
		}
	}
}

func TestGolden(t *testing.T) {
	for _, ev := range samples() {
		t.Run(string(ev.Type()), func(t *testing.T) {
			got, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", string(ev.Type())+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("wire output differs from %s\n got: %s\nwant: %s", path, got, want)
			}
			if !bytes.HasPrefix(got, []byte(`{"type":"`+string(ev.Type())+`"`)) {
				t.Errorf("type is not the first member: %s", got)
			}
			if bytes.Contains(got, []byte("null")) && ev.Type() != TypeCustom {
				t.Errorf("null on the wire: %s", got)
			}
			back, err := DecodeEvent(got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalize(t, back), normalize(t, ev)) {
				t.Errorf("round trip changed the event:\n got %#v\nwant %#v", back, ev)
			}
		})
	}
}

func normalize(t *testing.T, e Event) any {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestZeroEventsOmitOptionalFields(t *testing.T) {
	for _, typ := range AllTypes {
		b, err := json.Marshal(New(typ))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		s := string(b)
		for _, opt := range []string{"timestamp", "rawEvent", "metadata", "null"} {
			if strings.Contains(s, opt) && !(opt == "null" && (typ == TypeCustom || typ == TypeRaw)) {
				t.Errorf("%s: zero value writes %s: %s", typ, opt, s)
			}
		}
	}
}

func TestDecodeEventRejectsUnknownType(t *testing.T) {
	if _, err := DecodeEvent([]byte(`{"type":"THINKING_START"}`)); err == nil {
		t.Fatal("THINKING_START decoded; it is not an AG-UI 1.0 event")
	}
}

// TestGoldenAgainstAGUICore parses every golden file with @ag-ui/core's
// EventSchemas (testdata/js/check.js). CI runs npm ci in testdata/js; locally
// the test skips when node_modules is missing.
func TestGoldenAgainstAGUICore(t *testing.T) {
	dir := filepath.Join("testdata", "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@ag-ui", "core")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s/node_modules is missing: CI must run npm ci there", dir)
		}
		t.Skipf("skipping: run `npm ci` in agui/%s to check goldens against @ag-ui/core", dir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed")
		}
		t.Skip("skipping: node is not installed")
	}
	cmd := exec.Command(node, "check.js", "..")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("@ag-ui/core rejected a golden: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ok ") {
		t.Fatalf("checker printed no result:\n%s", out)
	}
	t.Logf("%s", out)
}
