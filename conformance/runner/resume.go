package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/threadline/threadline/conformance"
)

// Rules the runner judges itself: how a server answers run requests that
// break AG-UI's interrupt contract. They need a conversation, not a
// recorded stream, so they are played on every AG-UI scenario whose run
// ends with an interrupt.
const (
	ResumeCoversOpen = "agui.resume.covers-open"
	ResumeExpired    = "agui.resume.expired"
	ResumeReplay     = "agui.resume.replay-safe"
)

const srcInterrupts = "ag-ui docs/concepts/interrupts.mdx @821b8c2"

// Rules lists the runner's own rules.
var Rules = []conformance.Rule{
	{ID: ResumeCoversOpen, Title: "a run request on a thread with an open interrupt that omits resume, or whose resume leaves an open interrupt unanswered, gets RUN_ERROR, and the interrupt stays open",
		Source: srcInterrupts + " (Contract rules 3 and 4; Error handling); @ag-ui/client@1.0.0 onInitialize"},
	{ID: ResumeExpired, Title: "a resume that answers an interrupt past its expiresAt gets RUN_ERROR",
		Source: srcInterrupts + " (Contract rule 7; Error handling); @ag-ui/client@1.0.0 isInterruptExpired"},
	{ID: ResumeReplay, Title: "a resume replayed after its interrupt was answered acts no second time: RUN_ERROR (or a 4xx refusal), and no run does work",
		Source: srcInterrupts + " (Contract rules 2 and 5; Error handling)"},
}

// interrupt is the part of an interrupt the runner reads.
type interrupt struct {
	ID        string `json:"id"`
	ExpiresAt string `json:"expiresAt"`
}

// interrupts are the interrupts a run ended with.
func interrupts(rec *conformance.Recording) []interrupt {
	for _, f := range rec.Data() {
		var ev struct {
			Type    string `json:"type"`
			Outcome *struct {
				Type       string      `json:"type"`
				Interrupts []interrupt `json:"interrupts"`
			} `json:"outcome"`
		}
		if json.Unmarshal([]byte(f.Data), &ev) == nil && ev.Type == "RUN_FINISHED" && ev.Outcome != nil &&
			ev.Outcome.Type == "interrupt" && len(ev.Outcome.Interrupts) > 0 {
			return ev.Outcome.Interrupts
		}
	}
	return nil
}

// answer is how a server answered a run request: an HTTP refusal, or the
// types of the events it streamed and the RUN_ERROR's code.
type answer struct {
	status int
	body   string
	types  []string
	code   string
	err    error
}

// refusedWithRunError tells whether the answer is the RUN_ERROR the
// interrupt contract asks for: a stream whose run ends with RUN_ERROR and
// that did no work (nothing but RUN_STARTED before it).
func (a answer) refusedWithRunError() bool {
	if a.err != nil || a.status != http.StatusOK || len(a.types) == 0 || a.types[len(a.types)-1] != "RUN_ERROR" {
		return false
	}
	for _, t := range a.types[:len(a.types)-1] {
		if t != "RUN_STARTED" {
			return false
		}
	}
	return true
}

func (a answer) String() string {
	switch {
	case a.err != nil:
		return a.err.Error()
	case a.status != http.StatusOK:
		return fmt.Sprintf("HTTP %d %.200s", a.status, a.body)
	case a.code != "":
		return fmt.Sprintf("a stream of %v (RUN_ERROR code %q)", a.types, a.code)
	}
	return fmt.Sprintf("a stream of %v", a.types)
}

// send posts a RunAgentInput and reads the answer whole.
func (r *runner) send(ctx context.Context, input map[string]any) answer {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, err := r.do(ctx, http.MethodPost, "/run-agent", input, http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		var b [512]byte
		n, _ := res.Body.Read(b[:])
		return answer{status: res.StatusCode, body: string(b[:n])}
	}
	rec, err := conformance.Record(ctx, res, nil)
	if err != nil {
		return answer{err: err}
	}
	a := answer{status: res.StatusCode}
	for _, f := range rec.Data() {
		var ev struct {
			Type string `json:"type"`
			Code string `json:"code"`
		}
		if json.Unmarshal([]byte(f.Data), &ev) == nil {
			a.types = append(a.types, ev.Type)
			if ev.Type == "RUN_ERROR" {
				a.code = ev.Code
			}
		}
	}
	return a
}

// resumeInput is a RunAgentInput that resumes thread with entries.
func resumeInput(thread, runID string, entries []any) map[string]any {
	return map[string]any{
		"threadId": thread, "runId": runID, "protocolVersion": protocolVersion, "messages": []any{}, "tools": []any{},
		"context": []any{}, "state": map[string]any{}, "forwardedProps": map[string]any{}, "resume": entries,
	}
}

// approvals answers every interrupt (approved, or cancelled).
func approvals(ins []interrupt, status string) []any {
	out := make([]any, len(ins))
	for i, in := range ins {
		e := map[string]any{"interruptId": in.ID, "status": status}
		if status == "resolved" {
			e["payload"] = map[string]any{"approved": true}
		}
		out[i] = e
	}
	return out
}

// breakContract sends the run requests the interrupt contract refuses to a
// thread whose run ended with ins: one without resume, and one whose resume
// leaves the first interrupt out. Each must be answered with RUN_ERROR;
// that the interrupts stay open is judged by the resume that follows.
func (r *runner) breakContract(ctx context.Context, thread string, ins []interrupt) []conformance.Finding {
	var out []conformance.Finding
	plain := map[string]any{
		"threadId": thread, "runId": "run-no-resume", "protocolVersion": protocolVersion,
		"messages": []any{map[string]any{"id": "m-x", "role": "user", "content": "Hello again"}},
		"tools":    []any{}, "context": []any{}, "state": map[string]any{}, "forwardedProps": map[string]any{},
	}
	if a := r.send(ctx, plain); a.refusedWithRunError() {
		out = append(out, conformance.Passf(ResumeCoversOpen))
	} else {
		out = append(out, conformance.Failf(ResumeCoversOpen, "a new message on a thread with open interrupt %q and no resume: %s, want RUN_ERROR", ins[0].ID, a))
	}
	// The first interrupt left out; a made-up id keeps the array non-empty
	// when it is the only one.
	partial := approvals(ins[1:], "resolved")
	if len(partial) == 0 {
		partial = []any{map[string]any{"interruptId": ins[0].ID + "-not-open", "status": "cancelled"}}
	}
	if a := r.send(ctx, resumeInput(thread, "run-partial", partial)); a.refusedWithRunError() {
		out = append(out, conformance.Passf(ResumeCoversOpen))
	} else {
		out = append(out, conformance.Failf(ResumeCoversOpen, "a resume that leaves open interrupt %q unanswered: %s, want RUN_ERROR", ins[0].ID, a))
	}
	return out
}

// expired judges the answer to a resume past an interrupt's expiresAt. It
// waits for the expiry when it is near (within the stream timeout); a far
// or absent one leaves the rule unjudged. It returns the late resume when
// it sent one, which the server may have refused (the interrupts are then
// cancelled, as @ag-ui/client lets an expired interrupt be answered).
func (r *runner) expired(ctx context.Context, thread string, ins []interrupt) (conformance.Finding, map[string]any) {
	var latest time.Time
	for _, in := range ins {
		if in.ExpiresAt == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, in.ExpiresAt)
		if err != nil {
			return conformance.Skipf(ResumeExpired, "interrupt %q: expiresAt %q is not an ISO 8601 time", in.ID, in.ExpiresAt), nil
		}
		if at.After(latest) {
			latest = at
		}
	}
	if latest.IsZero() {
		return conformance.Skipf(ResumeExpired, "no interrupt carries expiresAt"), nil
	}
	wait := time.Until(latest) + 50*time.Millisecond
	if wait > r.cfg.Timeout/2 {
		return conformance.Skipf(ResumeExpired, "the interrupts expire at %s, later than the runner waits", latest.Format(time.RFC3339)), nil
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return conformance.Skipf(ResumeExpired, "cancelled"), nil
	}
	late := resumeInput(thread, "run-late", approvals(ins, "resolved"))
	if a := r.send(ctx, late); !a.refusedWithRunError() {
		return conformance.Failf(ResumeExpired, "a resume after expiresAt %s: %s, want RUN_ERROR", latest.Format(time.RFC3339Nano), a), late
	}
	return conformance.Passf(ResumeExpired), late
}

// replay sends a resume again once it was answered and its run is over.
func (r *runner) replay(ctx context.Context, input map[string]any) conformance.Finding {
	again := make(map[string]any, len(input))
	for k, v := range input {
		again[k] = v
	}
	again["runId"] = fmt.Sprint(input["runId"]) + "-replayed"
	a := r.send(ctx, again)
	if a.refusedWithRunError() || (a.err == nil && a.status/100 == 4) {
		return conformance.Passf(ResumeReplay)
	}
	return conformance.Failf(ResumeReplay, "the same resume sent again after its interrupts were answered: %s, want RUN_ERROR (or a 4xx) and no work", a)
}
