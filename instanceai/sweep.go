package instanceai

import (
	"context"
	"fmt"
)

// interruptedToolError is what a tool call left in flight by a dead process
// is settled with (n8n's wording).
const interruptedToolError = "Interrupted by a process restart — effect unverified; verify before retrying."

// Sweep settles the runs a crash left open: every run with a run-start and
// no run-finish that is not live in this process gets tool-interrupted for
// each tool call without an outcome, agent-completed{status:"error"} for
// each background agent that never completed, then
// run-finish{status:"interrupted", reason:"crash_interrupted"} from
// orchestrator-<runId>. Pending confirmations of those runs are closed. It
// returns the number of runs settled, after their events are stored.
func (m *Runs) Sweep(ctx context.Context, index RunIndex) (int, error) {
	runs, err := index.UnfinishedRuns(ctx)
	if err != nil {
		return 0, fmt.Errorf("sweep: list unfinished runs: %w", err)
	}
	settled := 0
	threads := map[string]bool{}
	for _, ref := range runs {
		if m.isLive(ref) {
			continue
		}
		if m.agentResumes() {
			// A run suspended on a confirmation is waiting, not orphaned:
			// it resumes when answered.
			if c, err := m.suspendedRun(ctx, ref.ThreadID); err != nil {
				return settled, err
			} else if c != nil && c.RunID == ref.RunID {
				continue
			}
		}
		rows, err := index.RunEvents(ctx, ref.ThreadID, ref.RunID)
		if err != nil {
			return settled, fmt.Errorf("sweep: read run %s: %w", ref.RunID, err)
		}
		for _, ev := range settleInterrupted(ref.RunID, rows, m.now().UnixMilli()) {
			if err := ev.Validate(); err != nil {
				return settled, fmt.Errorf("sweep: run %s: %w", ref.RunID, err)
			}
			if err := m.writer.Enqueue(ref.ThreadID, ev); err != nil {
				return settled, err
			}
		}
		if m.confirms != nil {
			for _, ev := range rows {
				if p, ok := ev.Event.Payload.(*ConfirmationRequest); ok {
					m.closeConfirmation(p.RequestID)
				}
			}
		}
		threads[ref.ThreadID] = true
		settled++
		m.log.Info("settled a run interrupted by a restart", "thread", ref.ThreadID, "run", ref.RunID)
	}
	for thread := range threads {
		if err := m.writer.Sync(ctx, thread); err != nil {
			return settled, err
		}
	}
	return settled, nil
}

func (m *Runs) isLive(ref RunRef) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.active[ref.ThreadID]; r != nil && r.ID == ref.RunID {
		return true
	}
	for _, t := range m.background[ref.ThreadID] {
		if t.RunID == ref.RunID {
			return true
		}
	}
	return false
}

// settleInterrupted returns the events that close an interrupted run.
func settleInterrupted(runID string, rows []StoredEvent, now int64) []Event {
	type call struct{ id, agent string }
	var open []call
	var userID string
	spawned := map[string]string{} // agent id → role, until completed
	var agents []string
	for _, row := range rows {
		ev := row.Event
		if ev.UserID != "" {
			userID = ev.UserID
		}
		switch p := ev.Payload.(type) {
		case *ToolInputStart, *ToolCall:
			id := toolCallID(p)
			known := false
			for _, c := range open {
				known = known || c.id == id
			}
			if !known {
				open = append(open, call{id, ev.AgentID})
			}
		case *ToolResult, *ToolError:
			id := toolCallID(p)
			for i, c := range open {
				if c.id == id {
					open = append(open[:i], open[i+1:]...)
					break
				}
			}
		case *AgentSpawned:
			spawned[ev.AgentID] = p.Role
			agents = append(agents, ev.AgentID)
		case *AgentCompleted:
			delete(spawned, ev.AgentID)
		}
	}
	var out []Event
	for _, c := range open {
		out = append(out, Event{Type: TypeToolInterrupted, RunID: runID, AgentID: c.agent, UserID: userID, TS: now,
			Payload: &ToolError{ToolCallID: c.id, Error: interruptedToolError}})
	}
	for _, a := range agents {
		if role, ok := spawned[a]; ok {
			out = append(out, Event{Type: TypeAgentCompleted, RunID: runID, AgentID: a, UserID: userID, TS: now,
				Payload: &AgentCompleted{Role: role, Status: RunError, Error: "interrupted by a process restart"}})
		}
	}
	out = append(out, Event{Type: TypeRunFinish, RunID: runID, AgentID: OrchestratorAgentID(runID), UserID: userID, TS: now,
		Payload: &RunFinish{Status: RunInterrupted, Reason: ReasonCrashed}})
	return out
}

func toolCallID(p Payload) string {
	switch p := p.(type) {
	case *ToolInputStart:
		return p.ToolCallID
	case *ToolCall:
		return p.ToolCallID
	case *ToolResult:
		return p.ToolCallID
	case *ToolError:
		return p.ToolCallID
	}
	return ""
}
