// Package op runs a builder operation (generate, modify or iterate a
// workflow) as a run's work on the core: its steps are Instance AI events
// in the thread's durable log, so a builder run is replayable, resumable
// and visible on every surface like a chat. Each step is a tool call of
// the orchestrator (its name one of the Step constants) with a StepResult
// as its result, framed by tasks-update events that make the steps a
// checklist (AG-UI steps and state). The builder's SSE dialect
// (mapping.InstanceToBuilder) is rendered from these events alone.
package op

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/workflow"
)

// Kind is the operation.
type Kind string

// The operations of the seed's standard API.
const (
	Generate Kind = "generate"
	Modify   Kind = "modify"
	Iterate  Kind = "iterate"
)

// Steps, in order: the tool names of the operation's calls.
const (
	StepValidateRequest  = "validate_request"
	StepCheckLLM         = "check_llm"
	StepBuildWorkflow    = "build_workflow"
	StepValidateWorkflow = "validate_workflow"
)

// Steps lists the steps in the order they run.
var Steps = []string{StepValidateRequest, StepCheckLLM, StepBuildWorkflow, StepValidateWorkflow}

// StepTitle is each step's description in the checklist.
var StepTitle = map[string]string{
	StepValidateRequest:  "Validate the request",
	StepCheckLLM:         "Check the model service",
	StepBuildWorkflow:    "Build the workflow",
	StepValidateWorkflow: "Validate the workflow",
}

// Request is what an operation works on.
type Request struct {
	Kind       Kind   `json:"kind"`
	WorkflowID string `json:"workflow_id"`
	// Description is generate's description, or modify's modification
	// description.
	Description string `json:"description,omitempty"`
	// Existing is the workflow modify and iterate start from, as the
	// client sent it (the JSON text of existing_workflow_json).
	Existing string `json:"existing_workflow_json,omitempty"`
	// Feedback and Additional are iterate's feedback from testing and
	// additional requirements.
	Feedback   string `json:"feedback_from_testing,omitempty"`
	Additional string `json:"additional_requirements,omitempty"`
}

// StepResult is the result of each step's tool call.
type StepResult struct {
	OK         bool   `json:"ok"`
	WorkflowID string `json:"workflow_id"`
	Message    string `json:"message"`
	// Error says why the step failed.
	Error *workflow.ErrorDetail `json:"error,omitempty"`
	// WorkflowJSON is the built workflow's JSON text (validate_workflow).
	WorkflowJSON string `json:"workflow_json,omitempty"`
	// Validation is the built workflow's ValidationResult
	// (validate_workflow).
	Validation json.RawMessage `json:"validation_result,omitempty"`
}

// Builder builds the workflow of a request: an agent's builder side.
// check is the validator the operation's result will be judged by, for a
// builder that repairs what it made before it answers. Errors that are
// *workflow.ErrorDetail reach the client as they are.
type Builder interface {
	BuildWorkflow(ctx context.Context, req Request, check Validator) (json.RawMessage, error)
}

// LLMChecker reports whether the model a builder uses answers; nil means
// it does. A builder without a model has no checker.
type LLMChecker interface {
	CheckLLM(ctx context.Context) *workflow.ErrorDetail
}

// Validator checks a workflow document: its seed ValidationResult (to be
// marshalled as it is) and the errors among its findings.
type Validator func(doc []byte) (result any, errs []workflow.ErrorDetail)

// Recorder keeps what an operation built (the iteration history of modify
// and iterate); it runs before the result is announced, and its failure
// fails the last step.
type Recorder func(ctx context.Context, req Request, built json.RawMessage) error

// Config is what an operation works with.
type Config struct {
	Builder Builder
	Check   Validator
	// Record, if set, keeps what the operation built.
	Record Recorder
	// Activity, if set, counts the operations and steps at work.
	Activity *Activity
}

// Work returns the run's work for req: the steps in order, each a tool
// call with its StepResult, stopping at the first that fails (the run
// then ends in error, the step's result carrying its ErrorDetail).
func Work(req Request, cfg Config) instanceai.AgentFunc {
	b, check, record := cfg.Builder, cfg.Check, cfg.Record
	return func(ctx context.Context, run *instanceai.Run) error {
		cfg.Activity.add(RoleOrchestrator, 1)
		defer cfg.Activity.add(RoleOrchestrator, -1)
		s := &steps{run: run, req: req, activity: cfg.Activity}
		if err := s.do(StepValidateRequest, func() (StepResult, error) { return validateRequest(req, check) }); err != nil {
			return err
		}
		if err := s.do(StepCheckLLM, func() (StepResult, error) { return checkLLM(ctx, b) }); err != nil {
			return err
		}
		var built json.RawMessage
		err := s.do(StepBuildWorkflow, func() (StepResult, error) {
			doc, err := b.BuildWorkflow(ctx, req, check)
			if err != nil {
				return StepResult{}, err
			}
			built = doc
			// The workflow itself goes with the validation's result, once.
			return StepResult{OK: true, Message: builtMessage(req.Kind)}, nil
		})
		if err != nil {
			return err
		}
		var valid bool
		err = s.do(StepValidateWorkflow, func() (StepResult, error) {
			result, errs := check(built)
			raw, err := json.Marshal(result)
			if err != nil {
				return StepResult{}, err
			}
			valid = len(errs) == 0
			if record != nil {
				if err := record(ctx, req, built); err != nil {
					return StepResult{}, fmt.Errorf("store the workflow's history: %w", err)
				}
			}
			msg := "The workflow is valid"
			if !valid {
				msg = fmt.Sprintf("The workflow has %d problem(s); see validation_result", len(errs))
			}
			// A built workflow with findings is still the operation's
			// result: the client sees them beside it, as the seed's
			// WORKFLOW_GENERATED carries both.
			return StepResult{OK: true, Message: msg, WorkflowJSON: string(built), Validation: raw}, nil
		})
		if err != nil {
			return err
		}
		return s.summary(built, valid)
	}
}

// steps emits the checklist and the steps' calls.
type steps struct {
	run      *instanceai.Run
	req      Request
	activity *Activity
	state    map[string]string
	n        int
}

func (s *steps) tasks() error {
	list := make([]instanceai.Task, len(Steps))
	for i, id := range Steps {
		status := s.state[id]
		if status == "" {
			status = "todo"
		}
		list[i] = instanceai.Task{ID: id, Description: StepTitle[id], Status: status}
	}
	return s.run.Emit(instanceai.Event{Type: instanceai.TypeTasksUpdate,
		Payload: &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: list}}})
}

// do runs one step: in progress, its call, its result, done or failed.
func (s *steps) do(step string, body func() (StepResult, error)) error {
	if s.state == nil {
		s.state = map[string]string{}
	}
	s.state[step] = "in_progress"
	if err := s.tasks(); err != nil {
		return err
	}
	s.n++
	callID := fmt.Sprintf("call_%s_%d", step, s.n)
	// The first call carries the whole request; the others name only the
	// operation and its workflow, so an existing workflow (up to megabytes)
	// is stored once per run, not once per step.
	req := s.req
	if s.n > 1 {
		req = Request{Kind: req.Kind, WorkflowID: req.WorkflowID}
	}
	args, _ := json.Marshal(req) // strings only
	if err := s.run.Emit(instanceai.Event{Type: instanceai.TypeToolCall,
		Payload: &instanceai.ToolCall{ToolCallID: callID, ToolName: step, Args: args}}); err != nil {
		return err
	}
	role := roleOf[step]
	s.activity.add(role, 1)
	res, err := body()
	s.activity.add(role, -1)
	if err != nil {
		res = StepResult{Message: err.Error(), Error: detailOf(step, err)}
	}
	res.WorkflowID = s.req.WorkflowID
	raw, merr := json.Marshal(res)
	if merr != nil {
		return merr
	}
	if eerr := s.run.Emit(instanceai.Event{Type: instanceai.TypeToolResult,
		Payload: &instanceai.ToolResult{ToolCallID: callID, Result: raw}}); eerr != nil {
		return eerr
	}
	s.state[step] = "done"
	if !res.OK {
		s.state[step] = "failed"
	}
	if terr := s.tasks(); terr != nil {
		return terr
	}
	if !res.OK {
		return &StepError{Step: step, Detail: *res.Error}
	}
	return nil
}

// summary says what was built, as the run's text.
func (s *steps) summary(doc json.RawMessage, valid bool) error {
	w, err := workflow.Parse(doc)
	name, nodes := "the workflow", 0
	if err == nil {
		name, nodes = fmt.Sprintf("%q", w.Name), len(w.Nodes)
	}
	verdict := "it passes validation"
	if !valid {
		verdict = "validation found problems to fix"
	}
	verb := builtMessage(s.req.Kind)
	text := fmt.Sprintf("%s%s %s with %d nodes; %s.", strings.ToUpper(verb[:1]), verb[1:], name, nodes, verdict)
	return s.run.Emit(instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "summary",
		Payload: &instanceai.Text{Text: text}})
}

func builtMessage(k Kind) string {
	switch k {
	case Modify:
		return "modified"
	case Iterate:
		return "iterated on"
	}
	return "generated"
}

// StepError ends a run whose step failed. The step's tool result carries
// the ErrorDetail whole; the run's error event says it in a line.
type StepError struct {
	Step   string
	Detail workflow.ErrorDetail
}

func (e *StepError) Error() string { return e.Detail.Title + ": " + e.Detail.Message }

// detailOf turns a step's failure into an ErrorDetail.
func detailOf(step string, err error) *workflow.ErrorDetail {
	var d *workflow.ErrorDetail
	if errors.As(err, &d) {
		return d
	}
	return &workflow.ErrorDetail{Category: workflow.CategoryValidation, Severity: workflow.SeverityError,
		Title: "The " + StepTitle[step] + " step failed", Message: err.Error(),
		UserGuidance:     "Try again; if it keeps failing, rephrase the request or check the server's log.",
		FixSuggestions:   []string{"Retry the request", "Describe the workflow in simpler terms"},
		TechnicalDetails: fmt.Sprintf("step %s: %v", step, err)}
}

// validateRequest checks what the HTTP layer cannot: that the existing
// workflow of modify and iterate is a workflow.
func validateRequest(req Request, check Validator) (StepResult, error) {
	if req.Kind == Generate {
		return StepResult{OK: true, Message: "The request is valid"}, nil
	}
	if _, errs := check([]byte(req.Existing)); len(errs) > 0 {
		d := errs[0]
		return StepResult{Message: d.Message, Error: &d}, nil
	}
	return StepResult{OK: true, Message: "The request and its existing workflow are valid"}, nil
}

func checkLLM(ctx context.Context, b Builder) (StepResult, error) {
	c, ok := b.(LLMChecker)
	if !ok {
		return StepResult{OK: true, Message: "This builder needs no model service"}, nil
	}
	if d := c.CheckLLM(ctx); d != nil {
		return StepResult{Message: d.Message, Error: d}, nil
	}
	return StepResult{OK: true, Message: "LLM service is available and ready"}, nil
}

// The builder's agents as /status lists them: the orchestrator runs the
// operations, the generator builds, the validator checks.
const (
	RoleOrchestrator = "orchestrator"
	RoleGenerator    = "generator"
	RoleValidator    = "validator"
)

// Roles lists them in order.
var Roles = []string{RoleGenerator, RoleValidator, RoleOrchestrator}

var roleOf = map[string]string{
	StepValidateRequest: RoleValidator, StepCheckLLM: RoleOrchestrator,
	StepBuildWorkflow: RoleGenerator, StepValidateWorkflow: RoleValidator,
}

// Activity counts, per role, the operations and steps at work in this
// process. The zero value is ready; a nil *Activity counts nothing.
type Activity struct {
	mu     sync.Mutex
	active map[string]int
}

func (a *Activity) add(role string, n int) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.active == nil {
		a.active = map[string]int{}
	}
	a.active[role] += n
}

// Tasks returns each role's active count (every role present).
func (a *Activity) Tasks() map[string]int {
	out := make(map[string]int, len(Roles))
	for _, r := range Roles {
		out[r] = 0
	}
	if a == nil {
		return out
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for r, n := range a.active {
		out[r] = n
	}
	return out
}
