package op_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
	"github.com/threadline/threadline/workflow"
)

// builderFunc adapts a function to op.Builder.
type builderFunc func(ctx context.Context, req op.Request) (json.RawMessage, error)

func (f builderFunc) BuildWorkflow(ctx context.Context, req op.Request, _ op.Validator) (json.RawMessage, error) {
	return f(ctx, req)
}

func noFindings([]byte) (any, []workflow.ErrorDetail) { return map[string]bool{"is_valid": true}, nil }

// run starts the operation's work as a run and returns its stored events.
func run(t *testing.T, req op.Request, cfg op.Config) []instanceai.Event {
	t.Helper()
	ctx := context.Background()
	store := memory.New()
	core := instanceai.NewCore(store, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }),
		instanceai.CoreConfig{})
	t.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	th, err := core.OpenThread(ctx, "th", "u")
	if err != nil {
		t.Fatal(err)
	}
	r, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "build", Work: op.Work(req, cfg)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the operation did not end")
	}
	if err := core.Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	rows, err := store.RunEvents(ctx, "th", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []instanceai.Event
	for _, row := range rows {
		out = append(out, row.Event)
	}
	return out
}

// stepResults returns each step's result, by step.
func stepResults(t *testing.T, evs []instanceai.Event) map[string]op.StepResult {
	t.Helper()
	steps := map[string]string{}
	out := map[string]op.StepResult{}
	for _, ev := range evs {
		switch p := ev.Payload.(type) {
		case *instanceai.ToolCall:
			steps[p.ToolCallID] = p.ToolName
		case *instanceai.ToolResult:
			var r op.StepResult
			if err := json.Unmarshal(p.Result, &r); err != nil {
				t.Fatal(err)
			}
			out[steps[p.ToolCallID]] = r
		}
	}
	return out
}

// A builder's ErrorDetail is the failed step's error as it is, the steps
// after it do not run, and the run ends in error.
func TestBuilderErrorDetailPassesThrough(t *testing.T) {
	detail := &workflow.ErrorDetail{Category: workflow.CategoryLLMService, Severity: workflow.SeverityError,
		Title: "Model gone", Message: "the model did not answer", UserGuidance: "start it", FixSuggestions: []string{"start it"}}
	evs := run(t, op.Request{Kind: op.Generate, WorkflowID: "wf", Description: "x"}, op.Config{
		Builder: builderFunc(func(context.Context, op.Request) (json.RawMessage, error) { return nil, detail }), Check: noFindings})
	res := stepResults(t, evs)
	built, ok := res[op.StepBuildWorkflow]
	if !ok || built.OK || built.Error == nil || built.Error.Title != "Model gone" || built.WorkflowID != "wf" {
		t.Fatalf("build step = %+v", built)
	}
	if _, ran := res[op.StepValidateWorkflow]; ran {
		t.Fatal("the validation step ran after the build failed")
	}
	last := evs[len(evs)-1].Payload.(*instanceai.RunFinish)
	if last.Status != instanceai.RunError {
		t.Fatalf("run-finish %+v", last)
	}
}

// Activity counts the orchestrator for the whole operation and the
// generator while it builds; all are idle afterwards.
func TestActivityCountsTheRoles(t *testing.T) {
	var act op.Activity
	seen := make(chan map[string]int, 1)
	doc := json.RawMessage(`{"name":"w","nodes":[],"connections":{}}`)
	evs := run(t, op.Request{Kind: op.Generate, WorkflowID: "wf", Description: "x"}, op.Config{Activity: &act, Check: noFindings,
		Builder: builderFunc(func(context.Context, op.Request) (json.RawMessage, error) {
			seen <- act.Tasks()
			return doc, nil
		})})
	during := <-seen
	if during[op.RoleOrchestrator] != 1 || during[op.RoleGenerator] != 1 || during[op.RoleValidator] != 0 {
		t.Fatalf("while building: %v", during)
	}
	for role, n := range act.Tasks() {
		if n != 0 {
			t.Fatalf("after the run: %s has %d", role, n)
		}
	}
	if r := stepResults(t, evs)[op.StepValidateWorkflow]; !r.OK || r.WorkflowJSON != string(doc) {
		t.Fatalf("validate step = %+v", r)
	}
	var nilActivity *op.Activity
	if got := nilActivity.Tasks(); len(got) != len(op.Roles) {
		t.Fatalf("a nil Activity reports %v", got)
	}
}
