package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

func isType(t instanceai.EventType) func(servertest.Frame) bool {
	return func(f servertest.Frame) bool { return f.Decoded.Type == t }
}

func texts(frames []servertest.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		// A frame that arrives during the replay is a block; live, deltas.
		if f.Decoded.Type == instanceai.TypeTextDelta || f.Decoded.Type == instanceai.TypeTextBlock {
			b.WriteString(f.Decoded.Payload.(*instanceai.Text).Text)
		}
	}
	return b.String()
}

func TestApprovalFlow(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
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
			runID := h.Chat(thread, "confirm")
			conn := h.Connect(thread, "", false)
			frames := conn.Until(wait, isType(instanceai.TypeConfirmRequest))
			req := frames[len(frames)-1].Decoded.Payload.(*instanceai.ConfirmationRequest)
			if req.Severity != "destructive" || req.ToolCallID == "" || req.Message == "" {
				t.Fatalf("%s: confirmation-request = %+v", c.name, req)
			}
			if st := h.ThreadStatus(thread); !st.HasActiveRun || !st.IsSuspended || st.RunID != runID {
				t.Fatalf("%s: status while suspended = %+v", c.name, st)
			}
			// Bad answers change nothing.
			for _, bad := range []struct{ body, field string }{{`{}`, "approved"}, {`{"kind":"bogus"}`, "kind"},
				{`{"kind":"questions"}`, "answers"}, {`{"approved":"yes"}`, "approved"}} {
				code, out := h.Do("POST", "/instance-ai/confirm/"+req.RequestID, bad.body)
				errObj, _ := out["error"].(map[string]any)
				details, _ := errObj["details"].(map[string]any)
				if code != 400 || details["field"] != bad.field {
					t.Fatalf("%s: answer %s: %d %v", c.name, bad.body, code, out)
				}
			}
			if out := h.Confirm(req.RequestID, c.body); out["ok"] != true || out["runId"] != runID {
				t.Fatalf("%s: confirm: %v", c.name, out)
			}
			rest := conn.Until(wait, servertest.IsRunFinish(runID))
			var result string
			for _, f := range rest {
				if p, ok := f.Decoded.Payload.(*instanceai.ToolResult); ok && p.ToolCallID == req.ToolCallID {
					result = string(p.Result)
				}
			}
			if !strings.Contains(result, c.wantResult) || !strings.Contains(texts(rest), c.wantText) {
				var seen []string
				for _, f := range rest {
					seen = append(seen, f.ID+":"+string(f.Decoded.Type))
				}
				t.Fatalf("%s: result %s, text %q; frames %v", c.name, result, texts(rest), seen)
			}
			if code, _ := h.Do("POST", "/instance-ai/confirm/"+req.RequestID, c.body); code != http.StatusConflict {
				t.Fatalf("%s: second answer: %d, want 409", c.name, code)
			}
		}
		if code, _ := h.Do("POST", "/instance-ai/confirm/cr_unknown", `{"approved":true}`); code != http.StatusNotFound {
			t.Fatalf("unknown request: %d, want 404", code)
		}
	})
}

func TestCancelWhileSuspended(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		runID := h.Chat("th", "confirm")
		conn := h.Connect("th", "", false)
		frames := conn.Until(wait, isType(instanceai.TypeConfirmRequest))
		req := frames[len(frames)-1].Decoded.Payload.(*instanceai.ConfirmationRequest)
		h.Cancel("th")
		rest := conn.Until(wait, servertest.IsRunFinish(runID))
		fin := rest[len(rest)-1].Decoded.Payload.(*instanceai.RunFinish)
		if fin.Status != instanceai.RunCancelled {
			t.Fatalf("run-finish = %+v", fin)
		}
		settled := false
		for _, f := range rest {
			if p, ok := f.Decoded.Payload.(*instanceai.ToolResult); ok && p.ToolCallID == req.ToolCallID {
				settled = strings.Contains(string(p.Result), "cancelled")
			}
		}
		if !settled {
			t.Fatal("the call awaiting approval was not settled as cancelled")
		}
		if code, _ := h.Do("POST", "/instance-ai/confirm/"+req.RequestID, `{"approved":true}`); code != http.StatusConflict {
			t.Fatalf("answer after cancel: %d, want 409", code)
		}
		if st := h.ThreadStatus("th"); st.HasActiveRun || st.IsSuspended {
			t.Fatalf("status after cancel = %+v", st)
		}
	})
}

func TestBackgroundAgentOutlivesTheOrchestrator(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 40 * time.Millisecond})
		runID := h.Chat("th", "background")
		conn := h.Connect("th", "", false)
		frames := conn.Until(wait, isType(instanceai.TypeAgentSpawned))
		spawned := frames[len(frames)-1]
		sp := spawned.Decoded.Payload.(*instanceai.AgentSpawned)
		if sp.ParentID != instanceai.OrchestratorAgentID(runID) || sp.Role != "eval-setup" || sp.TaskID == "" || len(sp.Tools) == 0 {
			t.Fatalf("agent-spawned = %+v", sp)
		}
		bg := spawned.Decoded.AgentID
		frames = conn.Until(wait, servertest.IsRunFinish(runID))
		st := h.ThreadStatus("th")
		if st.HasActiveRun || len(st.BackgroundTasks) != 1 || st.BackgroundTasks[0].TaskID != sp.TaskID ||
			st.BackgroundTasks[0].AgentID != bg || st.BackgroundTasks[0].Status != "running" {
			t.Fatalf("status after the orchestrator finished = %+v", st)
		}
		// A new message is accepted while only background work runs.
		next := h.Chat("th", "simple")
		rest := conn.Until(wait, servertest.IsType(instanceai.TypeAgentCompleted))
		done := rest[len(rest)-1]
		if p := done.Decoded.Payload.(*instanceai.AgentCompleted); done.Decoded.AgentID != bg || p.Status != instanceai.RunCompleted || p.Result == "" {
			t.Fatalf("agent-completed = %+v %+v", done.Decoded, p)
		}
		calls := 0
		for _, f := range rest {
			if f.Decoded.AgentID == bg && f.Decoded.Type == instanceai.TypeToolCall {
				calls++
				if f.Decoded.RunID != runID {
					t.Fatalf("background tool call on run %s, want %s", f.Decoded.RunID, runID)
				}
			}
		}
		if calls == 0 {
			t.Fatal("the background agent made no tool call after the orchestrator finished")
		}
		conn.Until(wait, servertest.IsRunFinish(next))
		if st := h.ThreadStatus("th"); len(st.BackgroundTasks) != 0 {
			t.Fatalf("status after completion = %+v", st)
		}
	})
}

func TestCancelStopsBackgroundAgent(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{AgentDelay: 80 * time.Millisecond})
	runID := h.Chat("th", "background")
	conn := h.Connect("th", "", false)
	conn.Until(wait, servertest.IsRunFinish(runID))
	h.Cancel("th")
	rest := conn.Until(wait, isType(instanceai.TypeAgentCompleted))
	if p := rest[len(rest)-1].Decoded.Payload.(*instanceai.AgentCompleted); p.Status != instanceai.RunCancelled {
		t.Fatalf("agent-completed = %+v", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(h.ThreadStatus("th").BackgroundTasks) != 0 {
		if ctx.Err() != nil {
			t.Fatal("task still listed after cancel")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
