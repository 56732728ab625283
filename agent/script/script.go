// Package script is the deterministic reference agent. It picks a scenario
// by the first word of the user's message and emits the same events every
// time (ids aside), so that conformance checks, tests and benchmarks have a
// known stream to drive. It is the default agent so a fresh server is useful.
package script

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// MaxLong caps the number of deltas of the `long N` scenario.
const MaxLong = 100000

// Agent runs the reference scenarios.
type Agent struct {
	// Delay is the pause between events (0 in tests).
	Delay time.Duration
}

// Scenarios lists the scenario names the agent understands.
var Scenarios = []string{"simple", "tools", "tasks", "error", "long", "confirm", "background", "frontend-tool"}

// Run plays the scenario named by the message's first word; anything else
// plays `simple`, echoing the message.
func (a *Agent) Run(ctx context.Context, run *instanceai.Run) error {
	p := &player{ctx: ctx, run: run, delay: a.Delay}
	if run.ToolResult != nil {
		return p.continueFromClient(run.ToolResult)
	}
	fields := strings.Fields(run.Message)
	first := ""
	if len(fields) > 0 {
		first = strings.ToLower(fields[0])
	}
	switch first {
	case "tools":
		return p.tools()
	case "tasks":
		return p.tasks()
	case "error":
		return p.fail()
	case "confirm":
		return p.confirm()
	case "background":
		return p.background()
	case "frontend-tool":
		return p.frontendTool()
	case "long":
		n := 1000
		if len(fields) > 1 {
			v, err := strconv.Atoi(fields[1])
			if err != nil || v < 1 {
				return fmt.Errorf("long needs a positive number of deltas, got %q", fields[1])
			}
			n = min(v, MaxLong)
		}
		return p.long(n)
	default:
		return p.simple(run.Message)
	}
}

// player emits events with the configured pause and stops at cancel.
type player struct {
	ctx   context.Context
	run   *instanceai.Run
	delay time.Duration
	err   error
	n     int
	// as, when set, is the background agent the events are emitted as.
	as *instanceai.SubAgent
}

// emit sends one event after the pause; after the first failure it does
// nothing, so scenarios read as straight-line scripts.
func (p *player) emit(ev instanceai.Event) {
	if p.err != nil {
		return
	}
	if p.delay > 0 {
		t := time.NewTimer(p.delay)
		select {
		case <-p.ctx.Done():
			t.Stop()
			p.err = p.ctx.Err()
			return
		case <-t.C:
		}
	} else if err := p.ctx.Err(); err != nil {
		p.err = err
		return
	}
	if p.as != nil {
		p.err = p.as.Emit(ev)
		return
	}
	p.err = p.run.Emit(ev)
}

func (p *player) responseID() string {
	p.n++
	return fmt.Sprintf("%s:seg:%d", p.run.ID, p.n)
}

func (p *player) text(typ instanceai.EventType, responseID string, chunks ...string) {
	for _, c := range chunks {
		p.emit(instanceai.Event{Type: typ, ResponseID: responseID, Payload: &instanceai.Text{Text: c}})
	}
}

func (p *player) toolCall(id, name string, args any) {
	p.emit(instanceai.Event{Type: instanceai.TypeToolCall,
		Payload: &instanceai.ToolCall{ToolCallID: id, ToolName: name, Args: mustJSON(args)}})
}

func (p *player) toolResult(id string, result any) {
	p.emit(instanceai.Event{Type: instanceai.TypeToolResult,
		Payload: &instanceai.ToolResult{ToolCallID: id, Result: mustJSON(result)}})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // scenario data is static
	}
	return b
}

// words splits s into word-sized chunks that keep their spaces, so the
// deltas concatenate back to s.
func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

func (p *player) simple(message string) error {
	p.text(instanceai.TypeReasoningDelta, p.responseID(), words("Let me look up the workflows first.")...)
	id := p.run.ID + ":tc:1"
	p.toolCall(id, "workflows", map[string]any{"action": "list"})
	p.toolResult(id, map[string]any{"workflows": []map[string]any{
		{"id": "1", "name": "Daily report", "active": true},
		{"id": "2", "name": "Slack alerts", "active": false},
	}})
	reply := "You have 2 workflows. You said: " + message
	p.text(instanceai.TypeTextDelta, p.responseID(), words(reply)...)
	return p.err
}

func (p *player) tools() error {
	p.text(instanceai.TypeTextDelta, p.responseID(), words("Checking a few things.")...)
	first := p.run.ID + ":tc:1"
	p.toolCall(first, "workflows", map[string]any{"action": "list"})
	p.toolResult(first, map[string]any{"count": 2})
	second := p.run.ID + ":tc:2"
	p.emit(instanceai.Event{Type: instanceai.TypeToolInputStart,
		Payload: &instanceai.ToolInputStart{ToolCallID: second, ToolName: "build-workflow"}})
	p.toolCall(second, "build-workflow", map[string]any{"name": "Weather to Slack", "nodes": 3})
	p.toolResult(second, map[string]any{"workflowId": "wf-123"})
	third := p.run.ID + ":tc:3"
	p.toolCall(third, "executions", map[string]any{"action": "run", "workflowId": "wf-123"})
	p.emit(instanceai.Event{Type: instanceai.TypeToolError,
		Payload: &instanceai.ToolError{ToolCallID: third, Error: "Credential 'Slack' is missing"}})
	p.text(instanceai.TypeTextDelta, p.responseID(), words("The workflow is built, but the test run needs a Slack credential.")...)
	return p.err
}

func (p *player) tasks() error {
	list := []instanceai.Task{
		{ID: "t1", Description: "Build the workflow", Status: instanceai.TaskTodo},
		{ID: "t2", Description: "Set up credentials", Status: instanceai.TaskTodo},
		{ID: "t3", Description: "Test end to end", Status: instanceai.TaskTodo},
	}
	update := func() {
		p.emit(instanceai.Event{Type: instanceai.TypeTasksUpdate,
			Payload: &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: append([]instanceai.Task(nil), list...)}}})
	}
	update()
	for i := range list {
		list[i].Status = instanceai.TaskInProgress
		update()
		p.emit(instanceai.Event{Type: instanceai.TypeStatus, Payload: &instanceai.Status{Message: list[i].Description + "..."}})
		list[i].Status = instanceai.TaskDone
		update()
	}
	p.emit(instanceai.Event{Type: instanceai.TypeStatus, Payload: &instanceai.Status{Message: ""}})
	p.text(instanceai.TypeTextDelta, p.responseID(), words("All three tasks are done.")...)
	return p.err
}

func (p *player) fail() error {
	p.text(instanceai.TypeReasoningDelta, p.responseID(), words("Calling the model provider.")...)
	if p.err != nil {
		return p.err
	}
	return &instanceai.ProviderError{
		Message:    "The model provider is unavailable (HTTP 503). Try again in a minute, or check the provider's status page.",
		Code:       "provider_unavailable",
		Provider:   "script",
		StatusCode: 503,
		Details:    "upstream returned 503 Service Unavailable",
	}
}

func (p *player) long(n int) error {
	rid := p.responseID()
	for i := 0; i < n && p.err == nil; i++ {
		p.emit(instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: rid,
			Payload: &instanceai.Text{Text: fmt.Sprintf("chunk %d. ", i)}})
	}
	return p.err
}

// confirm asks for approval before a destructive call, then answers
// according to the decision.
func (p *player) confirm() error {
	p.text(instanceai.TypeTextDelta, p.responseID(), words("I can archive the workflow 'Daily report' for you.")...)
	id := p.run.ID + ":tc:1"
	args := map[string]any{"action": "archive", "workflowId": "1"}
	p.toolCall(id, "workflows", args)
	if p.err != nil {
		return p.err
	}
	answer, err := p.run.Confirm(p.ctx, "", instanceai.ConfirmationRequest{
		ToolCallID: id, ToolName: "workflows", Args: mustJSON(args), Severity: "destructive",
		Message: "Archive workflow 'Daily report'?",
	})
	if err != nil {
		return err
	}
	return p.afterConfirm(id, answer)
}

// afterConfirm finishes the confirm scenario once the answer is known.
func (p *player) afterConfirm(toolCallID string, answer instanceai.Answer) error {
	if !answer.Approved {
		p.toolResult(toolCallID, map[string]any{"denied": true, "message": "The user declined to archive the workflow."})
		reply := "Understood, I left 'Daily report' as it is."
		if answer.UserInput != "" {
			reply += " You said: " + answer.UserInput
		}
		p.text(instanceai.TypeTextDelta, p.responseID(), words(reply)...)
		return p.err
	}
	p.toolResult(toolCallID, map[string]any{"archived": true, "workflowId": "1"})
	p.text(instanceai.TypeTextDelta, p.responseID(), words("Done: 'Daily report' is archived.")...)
	return p.err
}

// Resume continues a confirm scenario whose run was suspended across a
// restart, once its answer arrives.
func (a *Agent) Resume(ctx context.Context, run *instanceai.Run, req *instanceai.ConfirmationRequest, answer instanceai.Answer) error {
	// Response ids must not collide with the segments before the restart.
	p := &player{ctx: ctx, run: run, delay: a.Delay, n: 100}
	return p.afterConfirm(req.ToolCallID, answer)
}

// background spawns an eval-setup agent that keeps working after the
// orchestrator has finished.
func (p *player) background() error {
	id := p.run.ID + ":tc:1"
	p.toolCall(id, "eval-setup-with-agent", map[string]any{"workflowId": "wf-123", "task": "Add evaluation nodes"})
	if p.err != nil {
		return p.err
	}
	// The background agent works slower than the orchestrator talks, so
	// its work visibly continues after the orchestrator's run-finish.
	delay := 5 * p.delay
	task, err := p.run.Spawn(instanceai.AgentSpawned{Role: "eval-setup", Tools: []string{"workflows", "nodes"},
		Kind: "eval-setup", Title: "Eval setup"},
		func(ctx context.Context, agent *instanceai.SubAgent) (string, error) {
			bg := &player{ctx: ctx, run: p.run, delay: delay, as: agent}
			get := p.run.ID + ":tc:2"
			bg.toolCall(get, "workflows", map[string]any{"action": "get-json", "workflowId": "wf-123"})
			bg.toolResult(get, map[string]any{"id": "wf-123", "nodes": 3})
			update := p.run.ID + ":tc:3"
			bg.toolCall(update, "workflows", map[string]any{"action": "update", "workflowId": "wf-123"})
			bg.toolResult(update, map[string]any{"id": "wf-123", "nodes": 5})
			return "Added evaluation nodes to workflow wf-123", bg.err
		})
	if err != nil {
		return err
	}
	p.toolResult(id, map[string]any{"result": "Eval setup started (task: " + task.TaskID + ").", "taskId": task.TaskID})
	p.text(instanceai.TypeTextDelta, p.responseID(), words("Evaluation setup has started in the background.")...)
	return p.err
}

// frontendTool calls the first tool the client offered and finishes the run
// without a result: the client runs the tool and continues the thread with
// its result (see continueFromClient).
func (p *player) frontendTool() error {
	if len(p.run.Tools) == 0 {
		p.text(instanceai.TypeTextDelta, p.responseID(), words("No frontend tool was offered, so there is nothing to call in the browser.")...)
		return p.err
	}
	tool := p.run.Tools[0]
	p.text(instanceai.TypeTextDelta, p.responseID(), words("Let me ask the browser.")...)
	p.toolCall(p.run.ID+":tc:1", tool.Name, map[string]any{})
	return p.err
}

// continueFromClient continues a thread whose previous run left a call to a
// client tool open, once the client sends its result.
func (p *player) continueFromClient(res *instanceai.ClientToolResult) error {
	p.text(instanceai.TypeTextDelta, p.responseID(), words("The browser answered: "+res.Content)...)
	return p.err
}
