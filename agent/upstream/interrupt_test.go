package upstream

import (
	"encoding/json"
	"testing"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// An interrupt is an approval when its schema asks for {approved} (or it
// has none), else a text input; the answer goes back in the shape the
// schema asks for.
func TestInterruptsAndTheirAnswers(t *testing.T) {
	approval := json.RawMessage(`{"type":"object","properties":{"approved":{"type":"boolean"}}}`)
	cases := []struct {
		name       string
		intr       agui.Interrupt
		answer     instanceai.Answer
		input      string
		status     string
		payload    string
		toolCallID string
	}{
		{"no schema is an approval", agui.Interrupt{ID: "i", Reason: "r"}, instanceai.Answer{Approved: true},
			instanceai.InputApproval, agui.ResumeResolved, `{"approved":true}`, "i"},
		{"a denial with a note", agui.Interrupt{ID: "i", ToolCallID: "c", ResponseSchema: approval},
			instanceai.Answer{Approved: false, UserInput: "not now"}, instanceai.InputApproval, agui.ResumeResolved,
			`{"approved":false,"userInput":"not now"}`, "c"},
		{"a string answer", agui.Interrupt{ID: "i", ResponseSchema: json.RawMessage(`{"type":"string"}`)},
			instanceai.Answer{Approved: true, UserInput: "42"}, instanceai.InputText, agui.ResumeResolved, `"42"`, "i"},
		{"a JSON answer", agui.Interrupt{ID: "i", ResponseSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}}}`)},
			instanceai.Answer{Approved: true, UserInput: ` {"n":1} `}, instanceai.InputText, agui.ResumeResolved, `{"n":1}`, "i"},
		{"text that is not JSON", agui.Interrupt{ID: "i", ResponseSchema: json.RawMessage(`{}`)},
			instanceai.Answer{Approved: true, UserInput: "eu-west"}, instanceai.InputText, agui.ResumeResolved, `"eu-west"`, "i"},
		{"a dismissed text input", agui.Interrupt{ID: "i", ResponseSchema: json.RawMessage(`{"type":"string"}`)},
			instanceai.Answer{}, instanceai.InputText, agui.ResumeCancelled, ``, "i"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := confirmation(c.intr, pendingInterrupts{Upstream: "up", RunID: "next"})
			if err != nil {
				t.Fatal(err)
			}
			ev := instanceai.Event{Type: instanceai.TypeConfirmRequest, RunID: "r", AgentID: "a", Payload: &req}
			req.RequestID = "cr_1"
			if err := ev.Validate(); err != nil {
				t.Fatalf("the confirmation does not validate: %v", err)
			}
			if req.InputType != c.input || req.ToolCallID != c.toolCallID || req.Message == "" {
				t.Fatalf("confirmation %+v", req)
			}
			var args interruptArgs
			if err := json.Unmarshal(req.Args, &args); err != nil || args.Interrupt.ID != "i" || args.Continuation.Upstream != "up" {
				t.Fatalf("args %s: %v", req.Args, err)
			}
			r := resumeOf(c.intr, c.answer)
			if r.InterruptID != "i" || r.Status != c.status || string(r.Payload) != c.payload {
				t.Fatalf("resume %+v %s, want %s %s", r, r.Payload, c.status, c.payload)
			}
		})
	}
}
