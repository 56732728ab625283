package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// runAgentBody posts a RunAgentInput and reads its whole AG-UI stream,
// checking the framing and the verifier's rules.
func (h *harness) runAgentBody(body string) []aguiEvent {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadlineFor(body))
	defer cancel()
	res := h.PostRunAgent(ctx, body, "text/event-stream")
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatalf("read stream: %v", err)
	}
	if res.StatusCode != http.StatusOK {
		h.t.Fatalf("run-agent: %d %s", res.StatusCode, raw)
	}
	events, err := parseAGUIStream(raw)
	if err != nil {
		h.t.Fatalf("%v\nstream:\n%s", err, raw)
	}
	if err := verifyAGUI(events); err != nil {
		h.t.Fatalf("stream breaks the AG-UI rules: %v\nstream:\n%s", err, raw)
	}
	return events
}

// deadlineFor bounds a /run-agent request in tests: 20 s, or 3 minutes
// for a body of megabytes (files at n8n's limits), which the race detector
// on a busy machine takes tens of seconds to decode and check. These are
// tests of sizes and answers, not of speed.
func deadlineFor(body string) time.Duration {
	if len(body) > 1<<20 {
		return 3 * time.Minute
	}
	return 20 * time.Second
}

// runAgentRejected posts a RunAgentInput that must be refused before any
// stream byte and returns the status, error code and field.
func (h *harness) runAgentRejected(body string) (status int, code, field string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadlineFor(body))
	defer cancel()
	res := h.PostRunAgent(ctx, body, "text/event-stream")
	code, field = readJSONError(h.t, res)
	return res.StatusCode, code, field
}

// runAgentRefused posts a RunAgentInput that breaks the interrupt
// contract: the answer is a stream of one RUN_ERROR, whose code and field
// (in its metadata) are returned.
func (h *harness) runAgentRefused(body string) (code, field string) {
	h.t.Helper()
	events := h.runAgentBody(body)
	if len(events) != 1 || events[0].typ != "RUN_ERROR" {
		h.t.Fatalf("want a stream of one RUN_ERROR, got %+v", events)
	}
	e := events[0]
	meta, _ := e.body["metadata"].(map[string]any)
	detail, _ := meta["instance-ai"].(map[string]any)
	field, _ = detail["field"].(string)
	if !strings.HasPrefix(e.str("message"), field+": ") {
		h.t.Fatalf("message %q does not name the field %q", e.str("message"), field)
	}
	return e.str("code"), field
}

func inputJSON(in map[string]any) string {
	b, _ := json.Marshal(in)
	return string(b)
}

func textOf(events []aguiEvent) string {
	var b strings.Builder
	for _, e := range events {
		if e.typ == "TEXT_MESSAGE_CONTENT" {
			b.WriteString(e.str("delta"))
		}
	}
	return b.String()
}

func outcomeOf(t *testing.T, events []aguiEvent) map[string]any {
	t.Helper()
	last := events[len(events)-1]
	outcome, _ := last.body["outcome"].(map[string]any)
	if last.typ != "RUN_FINISHED" || outcome == nil {
		t.Fatalf("last event %s; types %v", last.raw, types(events))
	}
	return outcome
}

// interruptOf runs `confirm` on thread and returns its interrupt.
func interruptOf(t *testing.T, h *harness, thread string) map[string]any {
	t.Helper()
	evs := h.runAgent(thread, "run-ask", "confirm", nil)
	outcome := outcomeOf(t, evs)
	ins, _ := outcome["interrupts"].([]any)
	if outcome["type"] != "interrupt" || len(ins) != 1 {
		t.Fatalf("outcome %v", outcome)
	}
	in, _ := ins[0].(map[string]any)
	if id, _ := in["id"].(string); id == "" {
		t.Fatalf("interrupt without id: %v", in)
	}
	return in
}

// nativeRuns returns the run ids of the thread's run-start events.
func nativeRuns(t *testing.T, store instanceai.Store, thread string) []string {
	t.Helper()
	var ids []string
	for _, r := range servertest.StoredEvents(t, store, thread) {
		if r.Event.Type == instanceai.TypeRunStart {
			ids = append(ids, r.Event.RunID)
		}
	}
	return ids
}

func TestRunAgentResume(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		user := []any{map[string]any{"id": "u1", "role": "user", "content": "confirm"}}
		resumeBody := func(thread, runID string, resume []any) string {
			return inputJSON(map[string]any{"threadId": thread, "runId": runID, "messages": user, "resume": resume})
		}

		t.Run("approve", func(t *testing.T) {
			thread := "ag-resume-approve"
			in := interruptOf(t, h, thread)
			evs := h.runAgentBody(resumeBody(thread, "run-approve", []any{map[string]any{
				"interruptId": in["id"], "status": "resolved", "payload": map[string]any{"approved": true}}}))
			if evs[0].typ != "RUN_STARTED" || evs[0].str("runId") != "run-approve" || evs[0].str("threadId") != thread {
				t.Fatalf("first event %s", evs[0].raw)
			}
			if o := outcomeOf(t, evs); o["type"] != "success" || evs[len(evs)-1].str("runId") != "run-approve" {
				t.Fatalf("last event %s", evs[len(evs)-1].raw)
			}
			var result aguiEvent
			for _, e := range evs {
				if e.typ == "TOOL_CALL_RESULT" {
					result = e
				}
			}
			if result.str("toolCallId") != in["toolCallId"] || !strings.Contains(result.str("content"), `"archived":true`) {
				t.Fatalf("tool result %q for interrupt %v; types %v", result.raw, in, types(evs))
			}
			if got := textOf(evs); !strings.Contains(got, "is archived") || strings.Contains(got, "I can archive") {
				t.Fatalf("resumed text %q", got)
			}
			if st := h.ThreadStatus(thread); st.HasActiveRun || st.IsSuspended {
				t.Fatalf("status after the resumed run: %+v", st)
			}
			if runs := nativeRuns(t, store, thread); len(runs) != 1 {
				t.Fatalf("native runs %v: the resume must continue the same instance-ai run", runs)
			}
			if f := waitRunFinish(t, store, thread, 5*time.Second); f.Status != instanceai.RunCompleted {
				t.Fatalf("native run-finish %+v", f)
			}
		})

		t.Run("cancelled denies", func(t *testing.T) {
			thread := "ag-resume-cancel"
			in := interruptOf(t, h, thread)
			evs := h.runAgentBody(resumeBody(thread, "run-deny", []any{map[string]any{"interruptId": in["id"], "status": "cancelled"}}))
			if o := outcomeOf(t, evs); o["type"] != "success" {
				t.Fatalf("outcome %v", o)
			}
			if got := textOf(evs); !strings.Contains(got, "left 'Daily report' as it is") {
				t.Fatalf("denied text %q", got)
			}
			var content string
			for _, e := range evs {
				if e.typ == "TOOL_CALL_RESULT" {
					content = e.str("content")
				}
			}
			if !strings.Contains(content, `"denied":true`) {
				t.Fatalf("tool result %q", content)
			}
			c, err := store.GetConfirmation(context.Background(), in["id"].(string))
			if err != nil || c.Status != instanceai.ConfirmationDenied {
				t.Fatalf("stored confirmation %+v %v", c, err)
			}
		})

		t.Run("resolved with approved false and user input", func(t *testing.T) {
			thread := "ag-resume-deny-input"
			in := interruptOf(t, h, thread)
			evs := h.runAgentBody(resumeBody(thread, "run-deny2", []any{map[string]any{"interruptId": in["id"], "status": "resolved",
				"payload": map[string]any{"approved": false, "userInput": "not today"}}}))
			if got := textOf(evs); !strings.Contains(got, "You said: not today") {
				t.Fatalf("denied text %q", got)
			}
		})

		t.Run("errors", func(t *testing.T) {
			thread := "ag-resume-errors"
			in := interruptOf(t, h, thread)
			id := in["id"].(string)
			// The interrupt contract answers each with RUN_ERROR.
			cases := []struct {
				name, body, code, field string
			}{
				{"missing resume", servertest.RunAgentInput(thread, "r-x", "hello", nil), "interrupts_unanswered", "resume"},
				{"resume of another id only", resumeBody(thread, "r-x", []any{
					map[string]any{"interruptId": "cr_nope", "status": "cancelled"}}), "interrupt_not_open", "resume[0].interruptId"},
				{"unknown interrupt id", resumeBody(thread, "r-x", []any{
					map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": true}},
					map[string]any{"interruptId": "cr_nope", "status": "resolved", "payload": map[string]any{"approved": true}}}),
					"interrupt_not_open", "resume[1].interruptId"},
				{"answered twice", resumeBody(thread, "r-x", []any{
					map[string]any{"interruptId": id, "status": "cancelled"}, map[string]any{"interruptId": id, "status": "cancelled"}}),
					"invalid_resume", "resume[1].interruptId"},
				{"resolved without approved", resumeBody(thread, "r-x", []any{map[string]any{"interruptId": id, "status": "resolved",
					"payload": map[string]any{"userInput": "?"}}}), "invalid_resume", "resume[0].payload"},
			}
			for _, c := range cases {
				code, field := h.runAgentRefused(c.body)
				if code != c.code || field != c.field {
					t.Fatalf("%s: RUN_ERROR %s naming %q, want %s naming %q", c.name, code, field, c.code, c.field)
				}
			}
			// Nothing was answered: the run still waits, and a valid resume
			// continues it.
			if st := h.ThreadStatus(thread); !st.IsSuspended {
				t.Fatalf("status after rejected resumes: %+v", st)
			}
			evs := h.runAgentBody(resumeBody(thread, "r-ok", []any{map[string]any{"interruptId": id, "status": "cancelled"}}))
			if o := outcomeOf(t, evs); o["type"] != "success" {
				t.Fatalf("outcome %v", o)
			}
			// Answered and finished: replaying the resume does nothing twice,
			// and names the id.
			if code, field := h.runAgentRefused(resumeBody(thread, "r-again", []any{map[string]any{"interruptId": id, "status": "cancelled"}})); code != "interrupt_not_open" || field != "resume[0].interruptId" {
				t.Fatalf("second resume: %s %q", code, field)
			}
		})

		t.Run("busy thread", func(t *testing.T) {
			thread := "ag-resume-busy"
			slow := start(t, store, servertest.Options{AgentDelay: 5 * time.Millisecond})
			stop := openLongRun(t, slow, thread, nil)
			defer stop()
			status, code, _ := slow.runAgentRejected(resumeBody(thread, "r-busy", []any{map[string]any{"interruptId": "cr_x", "status": "cancelled"}}))
			if status != http.StatusConflict || code != "run_active" {
				t.Fatalf("resume on a busy thread: %d %s", status, code)
			}
		})
	})
}
