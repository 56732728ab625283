package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
)

// InterruptToolName is the tool name of the confirmation an upstream
// interrupt becomes when it belongs to no tool call of the run.
const InterruptToolName = "ag-ui-interrupt"

// pendingInterrupts is what a confirmation made of an upstream interrupt
// keeps under args.continuation: all that is needed to send its answer,
// and the interrupts after it, upstream, also from a process that did not
// ask (the one that asked stopped meanwhile).
type pendingInterrupts struct {
	Upstream string `json:"upstream"`
	// RunID is the upstream run id the answers go out under.
	RunID string `json:"runId"`
	// Rest are the interrupts still to ask after this one, Answered the
	// answers to those asked before it, in order.
	Rest     []agui.Interrupt `json:"rest,omitempty"`
	Answered []agui.Resume    `json:"answered,omitempty"`
	// The request's parts that the log does not hold.
	Tools          []agui.Tool     `json:"tools,omitempty"`
	Context        []agui.Context  `json:"context,omitempty"`
	State          json.RawMessage `json:"state,omitempty"`
	ForwardedProps json.RawMessage `json:"forwardedProps,omitempty"`
	// ClientHistory is set when the conversation was the client's own:
	// then it is sent again as it was.
	ClientHistory []agui.Message `json:"clientHistory,omitempty"`
}

// interruptArgs is a confirmation's args: the interrupt as the upstream
// sent it, and what continues the run.
type interruptArgs struct {
	Interrupt    agui.Interrupt    `json:"interrupt"`
	Continuation pendingInterrupts `json:"continuation"`
}

// askRest asks the interrupts one by one, each confirmation carrying the
// answers before it and the interrupts after it.
func (a *Agent) askRest(ctx context.Context, run *instanceai.Run, interrupts []agui.Interrupt, p pendingInterrupts) ([]agui.Resume, error) {
	for i, intr := range interrupts {
		p.Rest = interrupts[i+1:]
		req, err := confirmation(intr, p)
		if err != nil {
			return nil, err
		}
		answer, err := run.Confirm(ctx, "", req)
		if err != nil {
			return nil, err
		}
		p.Answered = append(p.Answered, resumeOf(intr, answer))
	}
	return p.Answered, nil
}

// confirmation is the confirmation-request an interrupt becomes: its
// message, an approval when its responseSchema asks for {approved}, else
// a text input.
func confirmation(intr agui.Interrupt, p pendingInterrupts) (instanceai.ConfirmationRequest, error) {
	args, err := json.Marshal(interruptArgs{Interrupt: intr, Continuation: p})
	if err != nil {
		return instanceai.ConfirmationRequest{}, err
	}
	req := instanceai.ConfirmationRequest{ToolCallID: intr.ToolCallID, ToolName: InterruptToolName, Args: args,
		Severity: instanceai.SeverityWarning, Message: intr.Message, InputType: instanceai.InputApproval}
	if req.ToolCallID == "" {
		req.ToolCallID = intr.ID
	}
	if intr.Reason != "" && intr.ToolCallID == "" {
		req.ToolName = intr.Reason
	}
	if req.Message == "" {
		req.Message = fmt.Sprintf("The agent asks for an answer (%s).", orDefault(intr.Reason, "interrupt"))
	}
	if !asksApproval(intr.ResponseSchema) {
		req.InputType, req.Severity = instanceai.InputText, instanceai.SeverityInfo
	}
	return req, nil
}

// asksApproval reports whether an interrupt's responseSchema is answered
// by {approved: boolean}: no schema, or one with that property.
func asksApproval(schema json.RawMessage) bool {
	if len(schema) == 0 {
		return true
	}
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return false
	}
	return s.Properties["approved"].Type == "boolean"
}

// resumeOf is a person's answer to an interrupt as AG-UI resume: an
// approval as {approved, userInput?}; a text answer as its JSON when it is
// JSON, else as a string, or cancelled when it was dismissed.
func resumeOf(intr agui.Interrupt, a instanceai.Answer) agui.Resume {
	r := agui.Resume{InterruptID: intr.ID, Status: agui.ResumeResolved}
	if asksApproval(intr.ResponseSchema) {
		r.Payload, _ = json.Marshal(struct {
			Approved  bool   `json:"approved"`
			UserInput string `json:"userInput,omitempty"`
		}{a.Approved, a.UserInput})
		return r
	}
	if !a.Approved && a.UserInput == "" {
		r.Status = agui.ResumeCancelled
		return r
	}
	if t := bytes.TrimSpace([]byte(a.UserInput)); json.Valid(t) && !isStringSchema(intr.ResponseSchema) {
		r.Payload = t
	} else {
		r.Payload, _ = json.Marshal(a.UserInput)
	}
	return r
}

func isStringSchema(schema json.RawMessage) bool {
	var s struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(schema, &s) == nil && s.Type == "string"
}

// Resume continues a run that waited on an upstream interrupt in a process
// that stopped: the answer, the answers given before it and the
// interrupts after it (all kept in the confirmation's args) go upstream as
// the next run's resume, and the rest of the upstream's work continues the
// same Threadline run (instanceai.Resumer).
func (a *Agent) Resume(ctx context.Context, run *instanceai.Run, req *instanceai.ConfirmationRequest, answer instanceai.Answer) error {
	var args interruptArgs
	if err := json.Unmarshal(req.Args, &args); err != nil || args.Continuation.Upstream == "" {
		return errors.New("the confirmation was not asked for an upstream AG-UI interrupt, so its run cannot continue here")
	}
	p := args.Continuation
	up, err := a.upstream(p.Upstream)
	if err != nil {
		return err
	}
	p.Answered = append(p.Answered, resumeOf(args.Interrupt, answer))
	resume, err := a.askRest(ctx, run, p.Rest, p)
	if err != nil {
		return err
	}
	input := agui.RunAgentInput{ThreadID: run.ThreadID, Tools: p.Tools, Context: p.Context, State: orEmptyObject(p.State),
		ForwardedProps: orEmptyObject(p.ForwardedProps), Messages: p.ClientHistory}
	clientHistory := p.ClientHistory != nil
	if input, err = a.next(ctx, run, input, p.RunID, resume, clientHistory); err != nil {
		return err
	}
	// What the run translated before the restart is in the log: this
	// translator starts with nothing open, and the upstream continues
	// from its own checkpoint.
	return a.drive(ctx, run, up, input, clientHistory, mapping.NewAGUIToInstance(run.ID, run.AgentID, up.Name))
}
