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

type interopReport struct {
	Client  string `json:"client"`
	Results []struct {
		Name     string           `json:"name"`
		Events   []string         `json:"events"`
		Messages []map[string]any `json:"messages"`
		State    map[string]any   `json:"state"`
		Error    *string          `json:"error"`
		RunError *struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"runError"`
		Warnings []struct {
			Level string `json:"level"`
			Text  string `json:"text"`
		} `json:"warnings"`
	} `json:"results"`
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
		{"name":"error","message":"error"}
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
	if len(rep.Results) != 4 {
		t.Fatalf("report has %d results:\n%s", len(rep.Results), out)
	}
	for _, r := range rep.Results {
		t.Run(r.Name, func(t *testing.T) {
			if r.Error != nil {
				t.Fatalf("runAgent failed: %s", *r.Error)
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
			case "error":
				if last != "RUN_ERROR" || r.RunError == nil || r.RunError.Message == "" {
					t.Fatalf("the client did not surface RUN_ERROR: last %s, runError %+v", last, r.RunError)
				}
			}
		})
	}
}
