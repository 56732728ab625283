package mapping

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui"
	verify "github.com/threadline/threadline/conformance/aguiverify"
	"github.com/threadline/threadline/instanceai"
)

// streamGen produces random valid instance-ai streams from a small grammar:
// a run of steps by the orchestrator and its (nested) sub-agents — text and
// reasoning segments, replayed blocks, tool calls with results, tasks,
// notices, confirmations — ending in a run-finish of any status, with
// background agents that may outlive it.
type streamGen struct {
	r       *rand.Rand
	out     []instanceai.Event
	ts      int64
	n       int
	agents  []string // active, orchestrator first until it finishes
	tools   map[string][]string
	resp    map[string]string
	tasks   []instanceai.Task
	lastSet []instanceai.Task
	hasTask bool
}

func (g *streamGen) id(prefix string) string { g.n++; return fmt.Sprintf("%s%d", prefix, g.n) }

func (g *streamGen) emit(t instanceai.EventType, agent, resp string, p instanceai.Payload) {
	g.ts += int64(1 + g.r.IntN(5))
	g.out = append(g.out, instanceai.Event{Type: t, RunID: run, AgentID: agent, ResponseID: resp, TS: g.ts, Payload: p})
}

func (g *streamGen) pick() string { return g.agents[g.r.IntN(len(g.agents))] }

func (g *streamGen) responseID(agent string) string {
	if g.resp[agent] == "" || g.r.IntN(3) == 0 {
		g.resp[agent] = g.id("resp")
	}
	return g.resp[agent]
}

func (g *streamGen) step(orchestratorDone bool) {
	agent := g.pick()
	switch k := g.r.IntN(14); {
	case k < 3: // live text or reasoning segment
		typ := instanceai.TypeTextDelta
		if k == 2 {
			typ = instanceai.TypeReasoningDelta
		}
		resp := g.responseID(agent)
		for i := 0; i <= g.r.IntN(3); i++ {
			g.emit(typ, agent, resp, &instanceai.Text{Text: g.id("w") + " "})
		}
		if g.r.IntN(4) == 0 { // the replay of that same segment
			bt := instanceai.TypeTextBlock
			if typ == instanceai.TypeReasoningDelta {
				bt = instanceai.TypeReasoningBlock
			}
			g.emit(bt, agent, resp, &instanceai.Text{Text: "whole"})
		}
	case k == 3: // replayed block
		typ := []instanceai.EventType{instanceai.TypeTextBlock, instanceai.TypeReasoningBlock}[g.r.IntN(2)]
		g.emit(typ, agent, g.id("resp"), &instanceai.Text{Text: "block"})
	case k < 6: // tool call
		id := g.id("tc")
		if g.r.IntN(2) == 0 {
			g.emit(instanceai.TypeToolInputStart, agent, "", &instanceai.ToolInputStart{ToolCallID: id, ToolName: "tool"})
			switch g.r.IntN(5) {
			case 0: // fails before its arguments are complete
				g.emit(instanceai.TypeToolError, agent, "", &instanceai.ToolError{ToolCallID: id, Error: "bad input"})
				return
			case 1: // still streaming its arguments when the run ends
				return
			}
		}
		g.emit(instanceai.TypeToolCall, agent, "", &instanceai.ToolCall{ToolCallID: id, ToolName: "tool", Args: json.RawMessage(`{"n":1}`)})
		g.tools[agent] = append(g.tools[agent], id)
	case k == 6: // settle a pending tool call
		if ts := g.tools[agent]; len(ts) > 0 {
			id := ts[0]
			g.tools[agent] = ts[1:]
			switch g.r.IntN(3) {
			case 0:
				g.emit(instanceai.TypeToolResult, agent, "", &instanceai.ToolResult{ToolCallID: id, Result: json.RawMessage(`{"ok":true}`)})
			case 1:
				g.emit(instanceai.TypeToolError, agent, "", &instanceai.ToolError{ToolCallID: id, Error: "failed"})
			default:
				g.emit(instanceai.TypeToolInterrupted, agent, "", &instanceai.ToolError{ToolCallID: id, Error: "interrupted"})
			}
		}
	case k == 7: // spawn a (possibly nested) sub-agent
		if len(g.agents) < 5 {
			id := g.id("agent_")
			g.emit(instanceai.TypeAgentSpawned, id, "", &instanceai.AgentSpawned{ParentID: agent, Role: "builder", Tools: []string{}})
			g.agents = append(g.agents, id)
		}
	case k == 8: // a sub-agent completes
		if i := len(g.agents) - 1; i > 0 && (orchestratorDone || g.agents[i] != orch) {
			sub := g.agents[i]
			if sub != orch {
				g.agents = g.agents[:i]
				status := []string{instanceai.RunCompleted, instanceai.RunCompleted, instanceai.RunError, instanceai.RunCancelled}[g.r.IntN(4)]
				p := &instanceai.AgentCompleted{Role: "builder", Result: "result", Status: status}
				if status == instanceai.RunError {
					p.Error = "boom"
				}
				g.emit(instanceai.TypeAgentCompleted, sub, "", p)
			}
		}
	case k == 9: // tasks
		g.mutateTasks()
		g.emit(instanceai.TypeTasksUpdate, agent, "", &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: slices.Clone(g.tasks)}})
		g.lastSet, g.hasTask = slices.Clone(g.tasks), true
	case k == 10:
		g.emit(instanceai.TypeStatus, agent, "", &instanceai.Status{Message: "working"})
	case k == 11:
		g.emit(instanceai.TypeThreadTitleUpdated, agent, "", &instanceai.ThreadTitle{Title: "title"})
	case k == 12:
		g.emit(instanceai.TypeError, agent, "", &instanceai.ErrorPayload{Content: "transient"})
	default:
		if g.r.IntN(3) == 0 {
			g.emit(instanceai.TypeConfirmRequest, agent, "", &instanceai.ConfirmationRequest{RequestID: g.id("req"),
				ToolCallID: g.id("tc"), ToolName: "delete", Severity: instanceai.SeverityWarning, Message: "Sure?"})
		}
	}
}

func (g *streamGen) mutateTasks() {
	statuses := []string{instanceai.TaskTodo, instanceai.TaskInProgress, instanceai.TaskDone, instanceai.TaskFailed, instanceai.TaskCancelled}
	switch g.r.IntN(3) {
	case 0:
		g.tasks = append(g.tasks, instanceai.Task{ID: g.id("task"), Description: "do", Status: instanceai.TaskTodo})
	case 1:
		if len(g.tasks) > 0 {
			i := g.r.IntN(len(g.tasks))
			g.tasks[i].Status = statuses[g.r.IntN(len(statuses))]
		}
	default:
		if len(g.tasks) > 0 {
			g.tasks = g.tasks[:g.r.IntN(len(g.tasks))]
		}
	}
}

// generate returns a stream; complete reports whether it ends with every
// agent settled (so the run must end as the finish status says).
func generate(r *rand.Rand) (evs []instanceai.Event, status string, complete bool, lastTasks []instanceai.Task, hasTasks bool) {
	g := &streamGen{r: r, agents: []string{orch}, tools: map[string][]string{}, resp: map[string]string{}}
	g.emit(instanceai.TypeRunStart, orch, "", &instanceai.RunStart{MessageID: "m"})
	for i := r.IntN(25); i > 0; i-- {
		g.step(false)
	}
	status = []string{instanceai.RunCompleted, instanceai.RunCancelled, instanceai.RunError, instanceai.RunInterrupted}[r.IntN(4)]
	if r.IntN(10) == 0 { // the source dies without a run-finish
		return g.out, "", false, g.lastSet, g.hasTask
	}
	g.emit(instanceai.TypeRunFinish, orch, "", &instanceai.RunFinish{Status: status})
	g.agents = slices.DeleteFunc(g.agents, func(a string) bool { return a == orch })
	for len(g.agents) > 0 { // background agents keep working, then settle
		if r.IntN(3) == 0 {
			g.step(true)
			continue
		}
		sub := g.agents[len(g.agents)-1]
		g.agents = g.agents[:len(g.agents)-1]
		g.emit(instanceai.TypeAgentCompleted, sub, "", &instanceai.AgentCompleted{Role: "builder", Result: "late", Status: instanceai.RunCompleted})
	}
	return g.out, status, true, g.lastSet, g.hasTask
}

func TestPropertyMappedStreamsPassTheVerifier(t *testing.T) {
	for seed := uint64(0); seed < 3000; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		evs, status, complete, lastTasks, hasTasks := generate(r)
		m := NewInstanceToAGUI("thread", "run-0")
		var out []agui.Event
		runs, interrupted, abandoned := 1, false, false
		resume := func() {
			out = append(out, m.Resume(fmt.Sprintf("run-%d", runs))...)
			runs++
		}
		for _, e := range evs {
			out = append(out, m.Push(e)...)
			if !m.Suspended() {
				continue
			}
			interrupted = true
			if r.IntN(6) == 0 { // the client never resumes
				abandoned = true
				break
			}
			// The answer comes at once or after more events were pushed.
			if r.IntN(2) == 0 {
				resume()
			}
		}
		for !abandoned && m.Suspended() {
			resume()
		}
		if !m.Finished() {
			var err error
			if r.IntN(2) == 0 {
				err = errors.New("source failed")
			}
			out = append(out, m.Close(err)...)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			lines := summaries(out)
			t.Fatalf("seed %d: %s\ninput types: %v\noutput:\n  %s", seed, fmt.Sprintf(format, args...), types(evs), strings.Join(lines, "\n  "))
		}
		if err := verify.Stream(out); err != nil {
			fail("%v", err)
		}
		starts, terminals := 0, 0
		for i, e := range out {
			switch {
			case e.Type() == agui.TypeRunStarted:
				starts++
			case verify.IsTerminal(e):
				terminals++
				if i+1 < len(out) && out[i+1].Type() != agui.TypeRunStarted {
					fail("event after the terminal event %d", i)
				}
			}
		}
		if starts != terminals {
			fail("%d runs started, %d terminal events", starts, terminals)
		}
		if complete && !abandoned {
			last := summary(out[len(out)-1])
			want := map[string]string{
				instanceai.RunCompleted:   "RUN_FINISHED outcome=success",
				instanceai.RunCancelled:   "RUN_FINISHED outcome=cancelled",
				instanceai.RunError:       "RUN_ERROR code=run_failed",
				instanceai.RunInterrupted: "RUN_ERROR code=interrupted",
			}[status]
			if !strings.HasPrefix(last, want) {
				fail("run-finish %s ended as %q", status, last)
			}
		}
		if abandoned && summary(out[len(out)-1]) != "RUN_FINISHED outcome=interrupt" {
			fail("an unanswered interrupt must end the stream")
		}
		if hasTasks && !abandoned && !interrupted {
			v := verify.New()
			for _, e := range out {
				_ = v.Check(e)
			}
			want := map[string]any{"tasks": []any{}}
			raw, _ := json.Marshal(map[string]any{"tasks": nonNilTasks(lastTasks)})
			_ = json.Unmarshal(raw, &want)
			if got := v.State(); !reflect.DeepEqual(got, want) {
				fail("state %v, want %v", got, want)
			}
		}
	}
}

func nonNilTasks(ts []instanceai.Task) []instanceai.Task {
	if ts == nil {
		return []instanceai.Task{}
	}
	return ts
}

func types(evs []instanceai.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type) + "@" + e.AgentID
	}
	return out
}
