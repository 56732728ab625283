package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

func (h *harness) status(thread string) instanceai.ThreadStatus {
	h.t.Helper()
	res, err := h.client.Get(h.srv.URL + "/instance-ai/threads/" + thread + "/status")
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		h.t.Fatalf("status: %d", res.StatusCode)
	}
	var st instanceai.ThreadStatus
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

func isType(t instanceai.EventType) func(frame) bool {
	return func(f frame) bool { return f.ev.Type == t }
}

func texts(frames []frame) string {
	var b strings.Builder
	for _, f := range frames {
		// A frame that arrives during the replay is a block; live, deltas.
		if f.ev.Type == instanceai.TypeTextDelta || f.ev.Type == instanceai.TypeTextBlock {
			b.WriteString(f.ev.Payload.(*instanceai.Text).Text)
		}
	}
	return b.String()
}

func TestApprovalFlow(t *testing.T) {
	forEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, options{})
		cases := []struct {
			name, body  string
			wantResult  string
			wantText    string
			answerField string
		}{
			{"seed approve", `{"approved":true}`, `"archived":true`, "is archived", ""},
			{"n8n approval deny with input", `{"kind":"approval","approved":false,"userInput":"keep it"}`, `"denied":true`, "You said: keep it", ""},
		}
		for i, c := range cases {
			thread := "th" + string(rune('a'+i))
			runID := h.chat(thread, "confirm")
			conn := h.connect(thread, "", false)
			frames := conn.until(wait, isType(instanceai.TypeConfirmRequest))
			req := frames[len(frames)-1].ev.Payload.(*instanceai.ConfirmationRequest)
			if req.Severity != "destructive" || req.ToolCallID == "" || req.Message == "" {
				t.Fatalf("%s: confirmation-request = %+v", c.name, req)
			}
			if st := h.status(thread); !st.HasActiveRun || !st.IsSuspended || st.RunID != runID {
				t.Fatalf("%s: status while suspended = %+v", c.name, st)
			}
			// Bad answers change nothing.
			for _, bad := range []struct{ body, field string }{{`{}`, "approved"}, {`{"kind":"bogus"}`, "kind"},
				{`{"kind":"questions"}`, "answers"}, {`{"approved":"yes"}`, "approved"}} {
				code, out := h.do("POST", "/instance-ai/confirm/"+req.RequestID, bad.body)
				errObj, _ := out["error"].(map[string]any)
				details, _ := errObj["details"].(map[string]any)
				if code != 400 || details["field"] != bad.field {
					t.Fatalf("%s: answer %s: %d %v", c.name, bad.body, code, out)
				}
			}
			code, out := h.do("POST", "/instance-ai/confirm/"+req.RequestID, c.body)
			if code != 200 || out["ok"] != true || out["runId"] != runID {
				t.Fatalf("%s: confirm: %d %v", c.name, code, out)
			}
			rest := conn.until(wait, isRunFinish(runID))
			var result string
			for _, f := range rest {
				if p, ok := f.ev.Payload.(*instanceai.ToolResult); ok && p.ToolCallID == req.ToolCallID {
					result = string(p.Result)
				}
			}
			if !strings.Contains(result, c.wantResult) || !strings.Contains(texts(rest), c.wantText) {
				var seen []string
				for _, f := range rest {
					seen = append(seen, f.ID+":"+string(f.ev.Type))
				}
				t.Fatalf("%s: result %s, text %q; frames %v", c.name, result, texts(rest), seen)
			}
			if code, _ := h.do("POST", "/instance-ai/confirm/"+req.RequestID, c.body); code != http.StatusConflict {
				t.Fatalf("%s: second answer: %d, want 409", c.name, code)
			}
		}
		if code, _ := h.do("POST", "/instance-ai/confirm/cr_unknown", `{"approved":true}`); code != http.StatusNotFound {
			t.Fatalf("unknown request: %d, want 404", code)
		}
	})
}

func TestCancelWhileSuspended(t *testing.T) {
	forEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, options{})
		runID := h.chat("th", "confirm")
		conn := h.connect("th", "", false)
		frames := conn.until(wait, isType(instanceai.TypeConfirmRequest))
		req := frames[len(frames)-1].ev.Payload.(*instanceai.ConfirmationRequest)
		if code, _ := h.do("POST", "/instance-ai/chat/th/cancel", ""); code != 200 {
			t.Fatalf("cancel: %d", code)
		}
		rest := conn.until(wait, isRunFinish(runID))
		fin := rest[len(rest)-1].ev.Payload.(*instanceai.RunFinish)
		if fin.Status != instanceai.RunCancelled {
			t.Fatalf("run-finish = %+v", fin)
		}
		settled := false
		for _, f := range rest {
			if p, ok := f.ev.Payload.(*instanceai.ToolResult); ok && p.ToolCallID == req.ToolCallID {
				settled = strings.Contains(string(p.Result), "cancelled")
			}
		}
		if !settled {
			t.Fatal("the call awaiting approval was not settled as cancelled")
		}
		if code, _ := h.do("POST", "/instance-ai/confirm/"+req.RequestID, `{"approved":true}`); code != http.StatusConflict {
			t.Fatalf("answer after cancel: %d, want 409", code)
		}
		if st := h.status("th"); st.HasActiveRun || st.IsSuspended {
			t.Fatalf("status after cancel = %+v", st)
		}
	})
}

func TestBackgroundAgentOutlivesTheOrchestrator(t *testing.T) {
	forEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, options{delay: 40 * time.Millisecond})
		runID := h.chat("th", "background")
		conn := h.connect("th", "", false)
		frames := conn.until(wait, isType(instanceai.TypeAgentSpawned))
		spawned := frames[len(frames)-1]
		sp := spawned.ev.Payload.(*instanceai.AgentSpawned)
		if sp.ParentID != instanceai.OrchestratorAgentID(runID) || sp.Role != "eval-setup" || sp.TaskID == "" || len(sp.Tools) == 0 {
			t.Fatalf("agent-spawned = %+v", sp)
		}
		bg := spawned.ev.AgentID
		frames = conn.until(wait, isRunFinish(runID))
		st := h.status("th")
		if st.HasActiveRun || len(st.BackgroundTasks) != 1 || st.BackgroundTasks[0].TaskID != sp.TaskID ||
			st.BackgroundTasks[0].AgentID != bg || st.BackgroundTasks[0].Status != "running" {
			t.Fatalf("status after the orchestrator finished = %+v", st)
		}
		// A new message is accepted while only background work runs.
		next := h.chat("th", "simple")
		rest := conn.until(wait, func(f frame) bool { return f.ev.Type == instanceai.TypeAgentCompleted })
		done := rest[len(rest)-1]
		if p := done.ev.Payload.(*instanceai.AgentCompleted); done.ev.AgentID != bg || p.Status != instanceai.RunCompleted || p.Result == "" {
			t.Fatalf("agent-completed = %+v %+v", done.ev, p)
		}
		calls := 0
		for _, f := range rest {
			if f.ev.AgentID == bg && f.ev.Type == instanceai.TypeToolCall {
				calls++
				if f.ev.RunID != runID {
					t.Fatalf("background tool call on run %s, want %s", f.ev.RunID, runID)
				}
			}
		}
		if calls == 0 {
			t.Fatal("the background agent made no tool call after the orchestrator finished")
		}
		conn.until(wait, isRunFinish(next))
		if st := h.status("th"); len(st.BackgroundTasks) != 0 {
			t.Fatalf("status after completion = %+v", st)
		}
	})
}

func TestCancelStopsBackgroundAgent(t *testing.T) {
	h := start(t, openStore(t, "memory"), options{delay: 80 * time.Millisecond})
	runID := h.chat("th", "background")
	conn := h.connect("th", "", false)
	conn.until(wait, isRunFinish(runID))
	if code, _ := h.do("POST", "/instance-ai/chat/th/cancel", ""); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	rest := conn.until(wait, isType(instanceai.TypeAgentCompleted))
	if p := rest[len(rest)-1].ev.Payload.(*instanceai.AgentCompleted); p.Status != instanceai.RunCancelled {
		t.Fatalf("agent-completed = %+v", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(h.status("th").BackgroundTasks) != 0 {
		if ctx.Err() != nil {
			t.Fatal("task still listed after cancel")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
