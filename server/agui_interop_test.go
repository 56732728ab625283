package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
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

// interopRejoin is what the client's own SSE parser, verifier and event
// folding made of the rejoin stream.
type interopRejoin struct {
	Events   []string         `json:"events"`
	Error    *string          `json:"error"`
	Messages []map[string]any `json:"messages"`
	RunError *struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"runError"`
}

type interopReport struct {
	Client  string `json:"client"`
	Results []struct {
		Name     string `json:"name"`
		ThreadID string `json:"threadId"`
		interopRun
		// Aborted says whether the client called abortRun().
		Aborted *bool `json:"aborted"`
		// Rejoin is the rejoin stream read after the run.
		Rejoin *interopRejoin `json:"rejoin"`
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

// interopNode returns the node binary for the @ag-ui/client interop tests.
func interopNode(t *testing.T) string {
	t.Helper()
	return nodeWith(t, interopDir, filepath.Join("@ag-ui", "client"))
}

// nodeWith returns the node binary, skipping the test (failing it on CI)
// when node or the pinned package pkg in dir is missing.
func nodeWith(t *testing.T, dir, pkg string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", pkg))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs node and the pinned packages (npm ci in %s): %v", dir, err)
		}
		t.Skipf("skipping: %v (run `make node-deps`)", err)
	}
	return node
}

// runInterop runs run.js against url and decodes its report, which must
// hold want results.
func runInterop(t *testing.T, node, url, scenarios string, want int) interopReport {
	t.Helper()
	out := runJS(t, node, url, scenarios)
	var rep interopReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(rep.Results) != want {
		t.Fatalf("report has %d results, want %d:\n%s", len(rep.Results), want, out)
	}
	return rep
}

// runJS runs run.js against url and returns its report.
func runJS(t *testing.T, node, url, scenarios string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.js", url, scenarios)
	cmd.Dir = interopDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node run.js: %v\n%s", err, stderr.String())
	}
	return out
}

// TestAGUIInteropHttpAgent runs the real @ag-ui/client HttpAgent against
// /run-agent for the reference scenarios.
func TestAGUIInteropHttpAgent(t *testing.T) {
	node := interopNode(t)
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
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
	rep := runInterop(t, node, h.URL+"/run-agent", scenarios, 7)
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

// waitLogEnd polls the thread's native log until its last event is a
// run-finish and returns it.
func waitLogEnd(t *testing.T, store instanceai.Store, thread string, timeout time.Duration) *instanceai.RunFinish {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rows := servertest.StoredEvents(t, store, thread)
		if n := len(rows); n > 0 {
			if fin, ok := rows[n-1].Event.Payload.(*instanceai.RunFinish); ok {
				return fin
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log of %s does not end with a run-finish within %v (%d events)", thread, timeout, len(rows))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// longText is the whole text of the reference agent's `long n` scenario.
func longText(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "chunk %d. ", i)
	}
	return b.String()
}

// lastAssistantText is the content of the last assistant message with text.
func lastAssistantText(messages []map[string]any) string {
	text := ""
	for _, m := range messages {
		if s, _ := m["content"].(string); m["role"] == "assistant" && s != "" {
			text = s
		}
	}
	return text
}

// TestAGUIInteropLiveRuns drives the real client through runs that take
// time: a background agent, an abort, and a rejoin after an abort.
func TestAGUIInteropLiveRuns(t *testing.T) {
	node := interopNode(t)
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
	const rejoinDeltas = 500
	scenarios := fmt.Sprintf(`[
		{"name":"background","message":"background"},
		{"name":"cancel-by-abort","message":"long %d","abortAfter":"TEXT_MESSAGE_CONTENT"},
		{"name":"rejoin","message":"long %d","abortAfter":"TEXT_MESSAGE_CONTENT",
			"forwardedProps":{"onDisconnect":"continue"},"rejoin":true}
	]`, script.MaxLong, rejoinDeltas)
	rep := runInterop(t, node, h.URL+"/run-agent", scenarios, 3)
	for _, r := range rep.Results {
		t.Run(r.Name, func(t *testing.T) {
			for _, w := range r.Warnings {
				t.Errorf("client console.%s: %s", w.Level, w.Text)
			}
			if r.Error != nil {
				t.Fatalf("runAgent failed: %s", *r.Error)
			}
			if len(r.Events) == 0 || r.Events[0] != "RUN_STARTED" {
				t.Fatalf("events %v", r.Events)
			}
			switch r.Name {
			case "background":
				r.succeeded(t, "background run")
				started, finished := countOf(r.Events, "SUBAGENT_STARTED"), countOf(r.Events, "SUBAGENT_FINISHED")
				if started != 1 || finished != 1 {
					t.Fatalf("want one sub-agent started and finished, got %d and %d: %v", started, finished, r.Events)
				}
				if got, want := lastAssistantText(r.Messages), "Evaluation setup has started in the background."; got != want {
					t.Fatalf("assistant text %q, want %q: %v", got, want, r.Messages)
				}
				// The background agent's last tool result reached the
				// client: the run stayed open until the agent finished.
				found := false
				for _, m := range r.Messages {
					if s, _ := m["content"].(string); m["role"] == "tool" && strings.Contains(s, `"nodes":5`) {
						found = true
					}
				}
				if !found {
					t.Fatalf("no result of the background agent's last call: %v", r.Messages)
				}
				// The orchestrator's run-finish comes before the background
				// agent's last events in the native log.
				if fin := waitRunFinish(t, store, r.ThreadID, 10*time.Second); fin.Status != instanceai.RunCompleted {
					t.Fatalf("run-finish %+v, want completed", fin)
				}
			case "cancel-by-abort", "rejoin":
				if r.Aborted == nil || !*r.Aborted {
					t.Fatalf("the client never aborted: %v", r.Events)
				}
				// An aborted HttpAgent run ends, without throwing, on the
				// RUN_ERROR{code:"abort"} the client makes up itself.
				if last := r.Events[len(r.Events)-1]; last != "RUN_ERROR" || r.RunError == nil || r.RunError.Code != "abort" {
					t.Fatalf("abort ended with %s, runError %+v", last, r.RunError)
				}
				if countOf(r.Events, "RUN_FINISHED") != 0 {
					t.Fatalf("RUN_FINISHED after the abort: %v", r.Events)
				}
				if r.Name == "cancel-by-abort" {
					fin := waitLogEnd(t, store, r.ThreadID, 10*time.Second)
					if fin.Status != instanceai.RunCancelled || fin.Reason != instanceai.ReasonUserCancelled {
						t.Fatalf("run-finish %+v, want cancelled user_cancelled", fin)
					}
					return
				}
				j := r.Rejoin
				if j == nil {
					t.Fatal("no rejoin report")
				}
				if j.Error != nil {
					t.Fatalf("rejoin stream rejected by the client: %s (events %v)", *j.Error, j.Events)
				}
				if len(j.Events) == 0 || j.Events[0] != "RUN_STARTED" || j.Events[len(j.Events)-1] != "RUN_FINISHED" || j.RunError != nil {
					t.Fatalf("rejoin events %v, runError %+v", j.Events, j.RunError)
				}
				// The live tail streams text; a run already over would come
				// back as a MESSAGES_SNAPSHOT alone.
				if countOf(j.Events, "MESSAGES_SNAPSHOT") != 1 || countOf(j.Events, "TEXT_MESSAGE_CONTENT") == 0 {
					t.Fatalf("the rejoin did not catch the run under way: %v", j.Events)
				}
				if got, want := lastAssistantText(j.Messages), longText(rejoinDeltas); got != want {
					t.Fatalf("rejoined assistant text has %d bytes, want the whole run's %d:\n%q", len(got), len(want), got)
				}
				if fin := waitLogEnd(t, store, r.ThreadID, 10*time.Second); fin.Status != instanceai.RunCompleted {
					t.Fatalf("run-finish %+v, want completed", fin)
				}
			}
		})
	}
}

func countOf(events []string, typ string) int {
	n := 0
	for _, e := range events {
		if e == typ {
			n++
		}
	}
	return n
}
