package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// TestRunAgentSeedInput posts seed 003's RunAgentInput as its own example
// writes it: snake_case, no thread or run id, id-less messages, context
// values that are not strings.
func TestRunAgentSeedInput(t *testing.T) {
	got := make(chan instanceai.StartRequest, 1)
	agent := instanceai.AgentFunc(func(_ context.Context, run *instanceai.Run) error {
		got <- run.StartRequest
		return nil
	})
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Agent: agent})
	body := `{"forwarded_props":{},"messages":[{"role":"user","content":"Generate a workflow that sends email notifications for new files"}],
		"context":[{"description":"Workflow generation request","value":"email notification workflow"},
			{"description":"limits","value":{"max_nodes":5},"type":"json"},{"description":"retries","value":3},{"description":"none","value":null}],
		"tools":[],"state":null}`
	events := h.runAgentBody(body)
	first, last := events[0], events[len(events)-1]
	thread, run := first.str("threadId"), first.str("runId")
	if first.typ != "RUN_STARTED" || !strings.HasPrefix(thread, "thread_") || !strings.HasPrefix(run, "run_") {
		t.Fatalf("RUN_STARTED %s, want the thread and run ids the server made", first.raw)
	}
	if last.typ != "RUN_FINISHED" || last.str("threadId") != thread || last.str("runId") != run {
		t.Fatalf("last event %s, want RUN_FINISHED of %s/%s", last.raw, thread, run)
	}
	req := <-got
	if req.ThreadID != thread || !strings.HasPrefix(req.Message, "Generate a workflow") {
		t.Fatalf("the agent got thread %q message %q", req.ThreadID, req.Message)
	}
	want := []instanceai.ContextItem{
		{Description: "Workflow generation request", Value: "email notification workflow"},
		{Description: "limits", Value: `{"max_nodes":5}`},
		{Description: "retries", Value: "3"},
		{Description: "none", Value: ""},
	}
	if len(req.Context) != len(want) {
		t.Fatalf("the agent got context %+v", req.Context)
	}
	for i := range want {
		if req.Context[i] != want[i] {
			t.Errorf("context[%d] = %+v, want %+v", i, req.Context[i], want[i])
		}
	}
	if st := h.ThreadStatus(thread); st.HasActiveRun {
		t.Errorf("thread %s still has an active run", thread)
	}

	// Invalid input is still a 400 that names the field.
	status, code, field := h.runAgentRejected(`{"messages":[{"role":"user","content":"hi"}],"context":[{"description":1}]}`)
	if status != http.StatusBadRequest || code != "invalid_field" || field != "context.description" {
		t.Fatalf("bad context: %d %s %s", status, code, field)
	}
	status, _, field = h.runAgentRejected(`{"thread_id":"has space","messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusBadRequest || field != "threadId" {
		t.Fatalf("bad thread_id: %d %s", status, field)
	}
}

func TestHealthVersionStatusConfigAndLLMHealth(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{AgentName: "script"}})
	code, health := h.Do(http.MethodGet, "/health", "")
	if v, _ := health["version"].(string); code != http.StatusOK || v == "" {
		t.Fatalf("/health: %d %v, want a version", code, health)
	}
	code, status := h.Do(http.MethodGet, "/status", "")
	cfg, _ := status["config"].(map[string]any)
	if srv, _ := status["server"].(map[string]any); srv["version"] != health["version"] {
		t.Fatalf("/status server.version %v, /health version %v", srv["version"], health["version"])
	}
	if code != http.StatusOK || cfg["ag_ui_version"] != "1.0" || status["ag_ui_version"] != "1.0" {
		t.Fatalf("/status: %d %v, want ag_ui_version in config and, for older clients, at the top", code, status)
	}
	agents, _ := status["agents"].(map[string]any)
	script, _ := agents["script"].(map[string]any)
	if script["status"] != "ready" || script["active_tasks"] != float64(0) {
		t.Fatalf("/status agents: %v", agents)
	}

	// The reference agent has no LLM: /llm/health says so in the seed's
	// shape rather than 404.
	code, llm := h.Do(http.MethodGet, "/llm/health", "")
	errText, _ := llm["error"].(string)
	if code != http.StatusServiceUnavailable || llm["status"] != "unavailable" || !strings.Contains(errText, "script") ||
		!strings.Contains(errText, "--agent openai") {
		t.Fatalf("/llm/health: %d %v", code, llm)
	}
	for _, key := range []string{"llm_endpoint", "llm_model", "is_local", "timestamp"} {
		if _, ok := llm[key]; !ok {
			t.Errorf("/llm/health lacks %s: %v", key, llm)
		}
	}
	raw, _ := json.Marshal(llm)
	if strings.Contains(string(raw), "null") {
		t.Errorf("/llm/health has nulls: %s", raw)
	}
}

// TestRunAgentOneIDMissing: the id that is sent is kept, the other made.
func TestRunAgentOneIDMissing(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	for _, c := range []struct{ name, body, thread, run string }{
		{"no threadId", `{"runId":"r1","messages":[{"id":"1","role":"user","content":"hi"}]}`, "", "r1"},
		{"no runId", `{"thread_id":"ag-norun","messages":[{"role":"user","content":"hi"}]}`, "ag-norun", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := h.runAgentBody(c.body)
			thread, run := events[0].str("threadId"), events[0].str("runId")
			if (c.thread != "" && thread != c.thread) || (c.thread == "" && !strings.HasPrefix(thread, "thread_")) ||
				(c.run != "" && run != c.run) || (c.run == "" && !strings.HasPrefix(run, "run_")) {
				t.Fatalf("RUN_STARTED %s", events[0].raw)
			}
			if last := events[len(events)-1]; last.typ != "RUN_FINISHED" || last.str("runId") != run {
				t.Fatalf("last event %s", last.raw)
			}
		})
	}
}
