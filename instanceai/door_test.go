package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// The run's door: the rules of the log and the size bounds, checked for
// every producer before the writer sees an event.

func spawned(agentID, parentID, role string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeAgentSpawned, AgentID: agentID,
		Payload: &instanceai.AgentSpawned{ParentID: parentID, Role: role, Tools: []string{}}}
}

func completed(agentID, role string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeAgentCompleted, AgentID: agentID,
		Payload: &instanceai.AgentCompleted{Role: role, Result: "done"}}
}

func as(agentID string, ev instanceai.Event) instanceai.Event {
	ev.AgentID = agentID
	return ev
}

func TestTheDoorRefusesWhatBreaksTheLogsRules(t *testing.T) {
	orch := func(run *instanceai.Run) string { return run.AgentID }
	cases := []struct {
		name string
		// before are accepted first; then ev is refused for rule at field.
		before func(run *instanceai.Run) []instanceai.Event
		ev     func(run *instanceai.Run) instanceai.Event
		rule   string
		field  string
	}{
		{name: "a text block", rule: instanceai.RuleWriterOnly, field: "type",
			ev: func(*instanceai.Run) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeTextBlock, ResponseID: "r", Payload: &instanceai.Text{Text: "x"}}
			}},
		{name: "a reasoning block", rule: instanceai.RuleWriterOnly, field: "type",
			ev: func(*instanceai.Run) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeReasoningBlock, ResponseID: "r", Payload: &instanceai.Text{Text: "x"}}
			}},
		{name: "a run-start", rule: instanceai.RuleRegistryOnly, field: "type",
			ev: func(*instanceai.Run) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}}
			}},
		{name: "a run-finish", rule: instanceai.RuleRegistryOnly, field: "type",
			ev: func(*instanceai.Run) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}}
			}},
		{name: "an event of another run's orchestrator", rule: instanceai.RuleUnknownAgent, field: "agentId",
			ev: func(*instanceai.Run) instanceai.Event { return as("orchestrator-run_other", toolCall("c1")) }},
		{name: "an event of an agent never spawned", rule: instanceai.RuleUnknownAgent, field: "agentId",
			ev: func(*instanceai.Run) instanceai.Event { return as("stranger", textDelta("r", "hi")) }},
		{name: "agent-completed of an agent never spawned", rule: instanceai.RuleUnknownAgent, field: "agentId",
			ev: func(*instanceai.Run) instanceai.Event { return completed("stranger", "helper") }},
		{name: "agent-completed of the orchestrator", rule: instanceai.RuleAgentCompleted, field: "agentId",
			ev: func(run *instanceai.Run) instanceai.Event { return completed(orch(run), "orchestrator") }},
		{name: "agent-completed twice", rule: instanceai.RuleAgentCompleted, field: "agentId",
			before: func(run *instanceai.Run) []instanceai.Event {
				return []instanceai.Event{spawned("sub1", "", "helper"), completed("sub1", "helper")}
			},
			ev: func(*instanceai.Run) instanceai.Event { return completed("sub1", "helper") }},
		{name: "an event of a completed agent", rule: instanceai.RuleAgentCompleted, field: "agentId",
			before: func(run *instanceai.Run) []instanceai.Event {
				return []instanceai.Event{spawned("sub1", "", "helper"), completed("sub1", "helper")}
			},
			ev: func(*instanceai.Run) instanceai.Event { return as("sub1", textDelta("r", "late")) }},
		{name: "a spawn under another run's agent", rule: instanceai.RuleUnknownParent, field: "payload.parentId",
			ev: func(*instanceai.Run) instanceai.Event { return spawned("sub1", "orchestrator-run_other", "helper") }},
		{name: "a spawn under a completed agent", rule: instanceai.RuleUnknownParent, field: "payload.parentId",
			before: func(run *instanceai.Run) []instanceai.Event {
				return []instanceai.Event{spawned("sub1", "", "helper"), completed("sub1", "helper")}
			},
			ev: func(*instanceai.Run) instanceai.Event { return spawned("sub2", "sub1", "helper") }},
		{name: "a spawn of the orchestrator", rule: instanceai.RuleAgentSpawned, field: "agentId",
			ev: func(run *instanceai.Run) instanceai.Event { return spawned(orch(run), "", "helper") }},
		{name: "a spawn again under another parent", rule: instanceai.RuleAgentSpawned, field: "payload.parentId",
			before: func(run *instanceai.Run) []instanceai.Event {
				return []instanceai.Event{spawned("sub1", "", "helper"), spawned("sub2", "", "helper")}
			},
			ev: func(*instanceai.Run) instanceai.Event { return spawned("sub1", "sub2", "helper") }},
		{name: "a result of an unknown call", rule: instanceai.RuleUnknownToolCall, field: "payload.toolCallId",
			ev: func(*instanceai.Run) instanceai.Event { return toolResult("nope", `1`) }},
		{name: "a result of an answered call", rule: instanceai.RuleUnknownToolCall, field: "payload.toolCallId",
			before: func(*instanceai.Run) []instanceai.Event {
				return []instanceai.Event{toolCall("c1"), toolResult("c1", `1`)}
			},
			ev: func(*instanceai.Run) instanceai.Event { return toolResult("c1", `2`) }},
		{name: "an error of an unknown call", rule: instanceai.RuleUnknownToolCall, field: "payload.toolCallId",
			ev: func(*instanceai.Run) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeToolError, Payload: &instanceai.ToolError{ToolCallID: "nope", Error: "x"}}
			}},
		{name: "an interruption of an unknown call", rule: instanceai.RuleUnknownToolCall, field: "payload.toolCallId",
			ev: func(*instanceai.Run) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeToolInterrupted, Payload: &instanceai.ToolError{ToolCallID: "nope", Error: "x"}}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refused := make(chan error, 1)
			agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
				if c.before != nil {
					if err := emitAll(run, c.before(run)...); err != nil {
						return err
					}
				}
				refused <- run.Emit(c.ev(run))
				return nil
			})
			l := newLifecycle(t, agent, "t")
			run := l.start("t", "go")
			l.settle(run)
			err := <-refused
			var re *instanceai.RuleError
			if !errors.As(err, &re) || re.Rule != c.rule || re.Field != c.field {
				t.Fatalf("Emit = %v, want a RuleError %s at %s", err, c.rule, c.field)
			}
			if !strings.Contains(err.Error(), c.rule) || !strings.Contains(err.Error(), string(re.Type)) {
				t.Fatalf("the refusal %q names neither the rule nor the event", err)
			}
			// Nothing of the refused event was stored; the run ended as its
			// agent did.
			rows := l.rows("t")
			if last := rows[len(rows)-1].Event; last.Type != instanceai.TypeRunFinish ||
				last.Payload.(*instanceai.RunFinish).Status != instanceai.RunCompleted {
				t.Fatalf("the run ended with %+v", last)
			}
			closedByFinish := 0
			for _, r := range rows {
				if p, ok := r.Event.Payload.(*instanceai.AgentCompleted); ok && strings.Contains(p.Error, "run finished") {
					closedByFinish++
				}
			}
			if n := len(rows) - 2 - closedByFinish - len(eventsOr(c.before, run)); n != 0 {
				t.Fatalf("%d more rows than the accepted events and the ends: %v", n, types(rows))
			}
		})
	}
}

func eventsOr(f func(*instanceai.Run) []instanceai.Event, run *instanceai.Run) []instanceai.Event {
	if f == nil {
		return nil
	}
	return f(run)
}

func types(rows []instanceai.StoredEvent) []instanceai.EventType {
	var out []instanceai.EventType
	for _, r := range rows {
		out = append(out, r.Event.Type)
	}
	return out
}

func TestTheDoorLetsThroughWhatTheRulesAllow(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		return emitAll(run,
			spawned("sub1", "", "helper"),
			spawned("sub1", "", "helper"), // a repeat refreshes it
			spawned("sub2", "sub1", "researcher"),
			as("sub2", textDelta("r2", "found")),
			as("sub2", toolCall("c2")),
			as("sub2", toolResult("c2", `"ok"`)),
			completed("sub2", "researcher"),
			as("sub1", textDelta("r1", "done")),
			completed("sub1", "helper"),
			toolCall("c1"),
			toolResult("c1", `1`),
		)
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	l.name("sub1", "sub1")
	l.name("sub2", "sub2")
	l.settle(run)
	l.expectLog("t", run.ID,
		"run-start @orch",
		"agent-spawned:helper @sub1",
		"agent-spawned:helper @sub1",
		"agent-spawned:researcher parent=sub1 @sub2",
		"text-block:found @sub2",
		"tool-call:c2 @sub2",
		"tool-result:c2=\"ok\" @sub2",
		"agent-completed:researcher::done: @sub2",
		"text-block:done @sub1",
		"agent-completed:helper::done: @sub1",
		"tool-call:c1 @orch",
		"tool-result:c1=1 @orch",
		"run-finish:completed: @orch")
}

func TestTheFinishClosesWhatTheProducerLeftOpen(t *testing.T) {
	for _, c := range []struct {
		name   string
		cancel bool
		want   []string
	}{
		{name: "completed", want: []string{
			"run-start @orch",
			"agent-spawned:helper @sub1",
			"agent-spawned:researcher parent=sub1 @sub2",
			"tool-call:c2 @sub2",
			"tool-call:c1 @orch",
			"tool-call:client @orch",
			"tool-error:c2=" + runEnded + " @sub2",
			"tool-error:c1=" + runEnded + " @orch",
			"agent-completed:researcher:error::the run finished before this agent completed @sub2",
			"agent-completed:helper:error::the run finished before this agent completed @sub1",
			"run-finish:completed: @orch",
		}},
		{name: "cancelled", cancel: true, want: []string{
			"run-start @orch",
			"agent-spawned:helper @sub1",
			"agent-spawned:researcher parent=sub1 @sub2",
			"tool-call:c2 @sub2",
			"tool-call:c1 @orch",
			"tool-call:client @orch",
			"tool-result:c2=" + cancelledResult + " @sub2",
			"tool-result:c1=" + cancelledResult + " @orch",
			"tool-result:client=" + cancelledResult + " @orch",
			"agent-completed:researcher:cancelled::the run was cancelled before this agent completed @sub2",
			"agent-completed:helper:cancelled::the run was cancelled before this agent completed @sub1",
			"run-finish:cancelled:user_cancelled @orch",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			emitted := make(chan struct{})
			agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
				err := emitAll(run, spawned("sub1", "", "helper"), spawned("sub2", "sub1", "researcher"),
					as("sub2", toolCall("c2")), toolCall("c1"),
					instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "client", ToolName: "pick_color", Args: json.RawMessage(`{}`)}})
				close(emitted)
				if err != nil || !c.cancel {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			})
			l := newLifecycle(t, agent, "t")
			l.name("sub1", "sub1")
			l.name("sub2", "sub2")
			// pick_color is a tool of the client's: its call stays open at a
			// completed finish, for the client to answer in the next run.
			run, err := l.core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "go",
				Tools: []instanceai.ToolSpec{{Name: "pick_color"}}})
			if err != nil {
				t.Fatal(err)
			}
			<-emitted
			if c.cancel {
				if _, _, err := l.core.Runs().Cancel("t", "user_cancelled"); err != nil {
					t.Fatal(err)
				}
			}
			l.settle(run)
			l.expectLog("t", run.ID, c.want...)
		})
	}
}

func TestAParentsCompletionCompletesItsWorkingChildrenFirst(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		return emitAll(run, spawned("sub1", "", "helper"), spawned("sub2", "sub1", "researcher"),
			as("sub2", toolCall("c2")), completed("sub1", "helper"))
	})
	l := newLifecycle(t, agent, "t")
	l.name("sub1", "sub1")
	l.name("sub2", "sub2")
	run := l.start("t", "go")
	l.settle(run)
	l.expectLog("t", run.ID,
		"run-start @orch",
		"agent-spawned:helper @sub1",
		"agent-spawned:researcher parent=sub1 @sub2",
		"tool-call:c2 @sub2",
		"tool-error:c2="+runEnded+" @sub2",
		"agent-completed:researcher:error::its parent agent completed before it did @sub2",
		"agent-completed:helper::done: @sub1",
		"run-finish:completed: @orch")
}

func TestASegmentPastItsBoundEndsTheRunWithTheTextUpToIt(t *testing.T) {
	const bound = 100 << 10
	results := make(chan error, 3)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		// 60 KiB, then 60 KiB with characters that escape (a quote is two
		// bytes in the block): the bound falls inside the second delta.
		results <- run.Emit(textDelta("r", strings.Repeat("a", 60<<10)))
		err := run.Emit(textDelta("r", strings.Repeat(`"`, 60<<10)))
		results <- err
		results <- run.Emit(textDelta("r", "more"))
		return err
	})
	l := newLifecycleOn(t, memory.New(), agent, instanceai.CoreConfig{
		Limits: instanceai.Limits{MaxSegmentBytes: bound, MaxEventBytes: bound + 64<<10}}, "t")
	run := l.start("t", "go")
	l.settle(run)
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	var le *instanceai.LimitError
	if err := <-results; !errors.As(err, &le) || le.Code != instanceai.CodeSegmentTooLarge || le.Limit != bound {
		t.Fatalf("the delta past the bound: %v, want a segment_too_large LimitError", err)
	}
	if err := <-results; !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("a delta after the run ended: %v, want ErrRunFinished", err)
	}
	rows := l.rows("t")
	if got := types(rows); len(got) != 4 || got[1] != instanceai.TypeTextBlock || got[2] != instanceai.TypeError || got[3] != instanceai.TypeRunFinish {
		t.Fatalf("stored %v, want run-start, text-block, error, run-finish", got)
	}
	text := rows[1].Event.Payload.(*instanceai.Text).Text
	want := strings.Repeat("a", 60<<10) + strings.Repeat(`"`, (bound-60<<10)/2)
	if text != want {
		t.Fatalf("the block holds %d bytes, want the %d up to the bound", len(text), len(want))
	}
	if enc, _ := json.Marshal(text); len(enc)-2 != bound {
		t.Fatalf("the block's text takes %d bytes stored, want the bound %d", len(enc)-2, bound)
	}
	e := rows[2].Event.Payload.(*instanceai.ErrorPayload)
	if e.Code != instanceai.CodeSegmentTooLarge || !strings.Contains(e.Content, "--max-segment-bytes") || !strings.Contains(e.Content, "100 KiB") {
		t.Fatalf("the error event %+v names neither the bound nor its flag", e)
	}
	if f := rows[3].Event.Payload.(*instanceai.RunFinish); f.Status != instanceai.RunError || f.Reason != instanceai.CodeSegmentTooLarge {
		t.Fatalf("run-finish %+v, want error for segment_too_large", f)
	}
}

func TestAnEventPastItsBoundIsRefusedAndTheRunGoesOn(t *testing.T) {
	const bound = 64 << 10
	refused := make(chan error, 1)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if err := run.Emit(toolCall("c1")); err != nil {
			return err
		}
		big, _ := json.Marshal(strings.Repeat("x", bound))
		refused <- run.Emit(toolResult("c1", string(big)))
		return emitAll(run, toolResult("c1", `"small"`))
	})
	l := newLifecycleOn(t, memory.New(), agent, instanceai.CoreConfig{
		Limits: instanceai.Limits{MaxSegmentBytes: 1 << 10, MaxEventBytes: bound}}, "t")
	run := l.start("t", "go")
	l.settle(run)
	var le *instanceai.LimitError
	if err := <-refused; !errors.As(err, &le) || le.Code != instanceai.CodeEventTooLarge || le.Size <= bound ||
		!strings.Contains(err.Error(), "--max-event-bytes") {
		t.Fatalf("the oversized result: %v, want an event_too_large LimitError naming its flag", err)
	}
	l.expectLog("t", run.ID, "run-start @orch", "tool-call:c1 @orch", `tool-result:c1="small" @orch`, "run-finish:completed: @orch")
}

func TestABackgroundAgentPastItsBoundEndsAloneWithTheError(t *testing.T) {
	const bound = 4 << 10
	agentDone := make(chan error, 1)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "writer"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			for {
				if err := a.Emit(textDelta("bg", strings.Repeat("b", 1<<10))); err != nil {
					agentDone <- err
					return "", err
				}
			}
		})
		return err
	})
	l := newLifecycleOn(t, memory.New(), agent, instanceai.CoreConfig{
		Limits: instanceai.Limits{MaxSegmentBytes: bound, MaxEventBytes: 128 << 10}}, "t")
	run := l.start("t", "go")
	var le *instanceai.LimitError
	if err := <-agentDone; !errors.As(err, &le) || le.Code != instanceai.CodeSegmentTooLarge {
		t.Fatalf("the agent's Emit past the bound: %v", err)
	}
	l.settle(run)
	waitUntil(t, "the agent completed", func() bool {
		l.sync("t")
		return slices.Contains(types(l.rows("t")), instanceai.TypeAgentCompleted)
	})
	rows := l.rows("t")
	var block string
	var done *instanceai.AgentCompleted
	var finish *instanceai.RunFinish
	for _, r := range rows {
		switch p := r.Event.Payload.(type) {
		case *instanceai.Text:
			block += p.Text
		case *instanceai.AgentCompleted:
			done = p
		case *instanceai.RunFinish:
			finish = p
		}
	}
	if len(block) != bound {
		t.Fatalf("the agent's text is %d bytes, want the bound %d", len(block), bound)
	}
	if done == nil || done.Status != instanceai.RunError || !strings.Contains(done.Error, "--max-segment-bytes") ||
		!strings.Contains(done.Error, "the agent was stopped") {
		t.Fatalf("agent-completed %+v, want an error naming the bound's flag", done)
	}
	if finish == nil || finish.Status != instanceai.RunCompleted {
		t.Fatalf("the run's finish %+v: the orchestrator did not fail with its agent", finish)
	}
}

func TestLimitsThatCannotHoldTogetherAreRefused(t *testing.T) {
	if err := (instanceai.Limits{MaxEventBytes: 1 << 20, MaxSegmentBytes: 1 << 20}).Check(); err == nil ||
		!strings.Contains(err.Error(), "--max-segment-bytes") {
		t.Fatalf("a segment bound equal to the event bound: %v", err)
	}
	if err := (instanceai.Limits{}).Check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}

// refusals is an Observer that keeps the door's refusals.
type refusals struct {
	instanceai.NopObserver
	mu      sync.Mutex
	reasons []string
}

func (r *refusals) EventRefused(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func TestTheDoorCountsWhatItRefuses(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_ = run.Emit(toolResult("nope", `1`))
		_ = run.Emit(instanceai.Event{Type: instanceai.TypeStatus, Payload: &instanceai.Status{Message: strings.Repeat("s", 80<<10)}})
		_ = run.Emit(textDelta("r", strings.Repeat("t", 8<<10)))
		return nil
	})
	obs := &refusals{}
	l := newLifecycleOn(t, memory.New(), agent, instanceai.CoreConfig{Observer: obs,
		Limits: instanceai.Limits{MaxSegmentBytes: 4 << 10, MaxEventBytes: 72 << 10}}, "t")
	l.settle(l.start("t", "go"))
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := []string{instanceai.RuleUnknownToolCall, instanceai.CodeEventTooLarge, instanceai.CodeSegmentTooLarge}
	if !slices.Equal(obs.reasons, want) {
		t.Fatalf("refusals counted %v, want %v", obs.reasons, want)
	}
}
