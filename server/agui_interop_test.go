package server_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// interopDir holds the pinned @ag-ui/client and the script that drives it.
const interopDir = "../conformance/interop"

// interopRun is what the client saw of one runAgent() call.
type interopRun struct {
	Events             []string         `json:"events"`
	Outcome            *string          `json:"outcome"`
	PendingToolCallIDs []string         `json:"pendingToolCallIds"`
	Interrupts         []map[string]any `json:"interrupts"`
	Error              *string          `json:"error"`
	RunError           *struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"runError"`
}

type interopReport struct {
	Client  string `json:"client"`
	Results []struct {
		Name string `json:"name"`
		interopRun
		// FollowUp is the second run of a resume or frontend-tool scenario.
		FollowUp *interopRun      `json:"followUp"`
		Messages []map[string]any `json:"messages"`
		State    map[string]any   `json:"state"`
		Warnings []struct {
			Level string `json:"level"`
			Text  string `json:"text"`
		} `json:"warnings"`
	} `json:"results"`
}

// succeeded fails t unless the run ended with RUN_FINISHED success and no
// error.
func (r *interopRun) succeeded(t *testing.T, what string) {
	t.Helper()
	if r == nil {
		t.Fatalf("%s: no run", what)
	}
	if r.Error != nil {
		t.Fatalf("%s: runAgent failed: %s", what, *r.Error)
	}
	if len(r.Events) == 0 || r.Events[0] != "RUN_STARTED" || r.Events[len(r.Events)-1] != "RUN_FINISHED" ||
		r.RunError != nil || r.Outcome == nil || *r.Outcome != "success" {
		t.Fatalf("%s: events %v, outcome %v, runError %+v", what, r.Events, r.Outcome, r.RunError)
	}
}

// TestAGUIInteropHttpAgent runs the real @ag-ui/client HttpAgent against
// /run-agent for the reference scenarios.
func TestAGUIInteropHttpAgent(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(interopDir, "node_modules", "@ag-ui", "client"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("interop needs node and the pinned packages (npm ci in %s): %v", interopDir, err)
		}
		t.Skipf("skipping the AG-UI client interop test: %v (run `make node-deps`)", err)
	}
	h := start(t, openStore(t, "memory"), options{})
	scenarios := `[
		{"name":"simple","message":"hello interop"},
		{"name":"tools","message":"tools"},
		{"name":"tasks","message":"tasks","state":{"from":"client"}},
		{"name":"error","message":"error"},
		{"name":"confirm-approve","message":"confirm","resume":{"status":"resolved","payload":{"approved":true}}},
		{"name":"confirm-deny","message":"confirm","resume":{"status":"cancelled"}},
		{"name":"frontend-tool","message":"frontend-tool","toolResult":"teal",
			"tools":[{"name":"pickColor","description":"Asks the user for a color","parameters":{"type":"object","properties":{}}}]}
	]`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.js", h.srv.URL+"/run-agent", scenarios)
	cmd.Dir = interopDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node run.js: %v\n%s", err, stderr.String())
	}
	var rep interopReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(rep.Results) != 7 {
		t.Fatalf("report has %d results:\n%s", len(rep.Results), out)
	}
	for _, r := range rep.Results {
		t.Run(r.Name, func(t *testing.T) {
			if r.Error != nil {
				t.Fatalf("runAgent failed: %s", *r.Error)
			}
			if r.FollowUp != nil && r.FollowUp.Error != nil {
				t.Fatalf("second runAgent failed: %s", *r.FollowUp.Error)
			}
			for _, w := range r.Warnings {
				t.Errorf("client console.%s: %s", w.Level, w.Text)
			}
			if len(r.Events) == 0 || r.Events[0] != "RUN_STARTED" {
				t.Fatalf("events %v", r.Events)
			}
			last := r.Events[len(r.Events)-1]
			assistant := func(pred func(m map[string]any) bool) bool {
				for _, m := range r.Messages {
					if m["role"] == "assistant" && pred(m) {
						return true
					}
				}
				return false
			}
			switch r.Name {
			case "simple":
				if last != "RUN_FINISHED" || r.RunError != nil {
					t.Fatalf("last %s, runError %+v", last, r.RunError)
				}
				if !assistant(func(m map[string]any) bool {
					s, _ := m["content"].(string)
					return strings.Contains(s, "hello interop")
				}) {
					t.Fatalf("no assistant message echoing the input: %v", r.Messages)
				}
			case "tools":
				if last != "RUN_FINISHED" || r.RunError != nil {
					t.Fatalf("last %s, runError %+v", last, r.RunError)
				}
				if !assistant(func(m map[string]any) bool { calls, _ := m["toolCalls"].([]any); return len(calls) > 0 }) {
					t.Fatalf("no assistant tool calls: %v", r.Messages)
				}
				tools := 0
				for _, m := range r.Messages {
					if m["role"] == "tool" {
						tools++
					}
				}
				if tools == 0 {
					t.Fatalf("no tool results: %v", r.Messages)
				}
			case "tasks":
				if last != "RUN_FINISHED" || r.RunError != nil {
					t.Fatalf("last %s, runError %+v", last, r.RunError)
				}
				tasks, _ := r.State["tasks"].([]any)
				if len(tasks) == 0 {
					t.Fatalf("state has no tasks: %v", r.State)
				}
			case "confirm-approve", "confirm-deny":
				if last != "RUN_FINISHED" || r.Outcome == nil || *r.Outcome != "interrupt" || len(r.Interrupts) != 1 {
					t.Fatalf("first run: last %s, outcome %v, interrupts %v", last, r.Outcome, r.Interrupts)
				}
				r.FollowUp.succeeded(t, "resumed run")
				want, result := "is archived", `"archived":true`
				if r.Name == "confirm-deny" {
					want, result = "left 'Daily report' as it is", `"denied":true`
				}
				if !assistant(func(m map[string]any) bool { s, _ := m["content"].(string); return strings.Contains(s, want) }) {
					t.Fatalf("no assistant message %q: %v", want, r.Messages)
				}
				callID, _ := r.Interrupts[0]["toolCallId"].(string)
				results := 0
				for _, m := range r.Messages {
					if s, _ := m["content"].(string); m["role"] == "tool" && m["toolCallId"] == callID && strings.Contains(s, result) {
						results++
					}
				}
				if callID == "" || results != 1 {
					t.Fatalf("want one tool message %s for %q: %v", result, callID, r.Messages)
				}
			case "frontend-tool":
				r.succeeded(t, "frontend call run")
				if len(r.PendingToolCallIDs) != 1 {
					t.Fatalf("pendingToolCallIds %v", r.PendingToolCallIDs)
				}
				for _, e := range r.Events {
					if e == "TOOL_CALL_RESULT" {
						t.Fatalf("the frontend call got a server result: %v", r.Events)
					}
				}
				r.FollowUp.succeeded(t, "continuation run")
				if !assistant(func(m map[string]any) bool { s, _ := m["content"].(string); return s == "The browser answered: teal" }) {
					t.Fatalf("no continuation reply quoting the result: %v", r.Messages)
				}
				id := r.PendingToolCallIDs[0]
				calls, results := 0, 0
				for _, m := range r.Messages {
					for _, c := range func() []any { c, _ := m["toolCalls"].([]any); return c }() {
						if c, _ := c.(map[string]any); c["id"] == id {
							calls++
						}
					}
					if m["role"] == "tool" && m["toolCallId"] == id {
						results++
					}
				}
				if calls != 1 || results != 1 {
					t.Fatalf("want one call and one result for %s, got %d and %d: %v", id, calls, results, r.Messages)
				}
			case "error":
				if last != "RUN_ERROR" || r.RunError == nil || r.RunError.Message == "" {
					t.Fatalf("the client did not surface RUN_ERROR: last %s, runError %+v", last, r.RunError)
				}
			}
		})
	}
}
