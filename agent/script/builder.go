package script

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/generate"
)

// BuildWorkflow is the reference agent's builder: workflows made from the
// request's keywords by workflow/generate, deterministic and offline, so
// the builder API works without a model. Its workflows are valid by
// construction, so it does not repair. A description it cannot read is an
// ErrorDetail that says how to phrase it.
func (a *Agent) BuildWorkflow(ctx context.Context, req op.Request, _ op.Validator) (json.RawMessage, error) {
	if err := a.pause(ctx); err != nil {
		return nil, err
	}
	var (
		w   *workflow.Workflow
		err error
	)
	switch req.Kind {
	case op.Generate:
		w, err = generate.Generate(req.Description)
	case op.Modify, op.Iterate:
		var existing *workflow.Workflow
		if existing, err = workflow.Parse([]byte(req.Existing)); err == nil {
			if req.Kind == op.Modify {
				w, err = generate.Modify(existing, req.Description)
			} else {
				w, err = generate.Iterate(existing, req.Feedback, req.Additional)
			}
		}
	default:
		err = errors.New("unknown operation " + string(req.Kind))
	}
	if err != nil {
		return nil, notUnderstood(req, err)
	}
	return json.Marshal(w)
}

// notUnderstood explains a request the generator could not act on.
func notUnderstood(req op.Request, err error) error {
	return &workflow.ErrorDetail{
		Category: workflow.CategoryValidation, Severity: workflow.SeverityError,
		Title:   "The request could not be turned into a workflow",
		Message: err.Error(),
		UserGuidance: "The reference builder reads keywords: name a trigger (webhook, schedule, new file in a folder, " +
			"new email, form, chat) and the steps (send an email, post to Slack, call an HTTP API, write to a database, " +
			"Google Sheets, log, if, AI agent), or for a change say what to add, remove or rename and after which node.",
		FixSuggestions: []string{"Name the trigger and the steps in plain words",
			"Say where a new step goes: \"after <node>\"", "Use an LLM agent (--agent openai) for free-form requests"},
		TechnicalDetails: "workflow/generate (" + string(req.Kind) + "): " + err.Error(),
	}
}

// pause waits the agent's delay, as its chats do between events, so that
// a builder run can be watched and cancelled in demos and tests.
func (a *Agent) pause(ctx context.Context) error {
	if a.Delay <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(a.Delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
