package instanceai

import (
	"context"
	"errors"
	"fmt"
)

// interruptedToolError is what a tool call left in flight by a dead process
// is settled with (n8n's wording).
const interruptedToolError = "Interrupted by a process restart — effect unverified; verify before retrying."

// Sweep settles the runs a crash left open, across all threads: every run
// with a run-start and no run-finish that no live process holds gets
// tool-interrupted for each tool call without an outcome,
// agent-completed{status:"error"} for each background agent that never
// completed, then run-finish{status:"interrupted",
// reason:"crash_interrupted"} from orchestrator-<runId>. Pending
// confirmations of those runs are closed. A run whose claim another
// instance's heartbeat keeps alive is left alone, and so is a run suspended
// on a confirmation when the agent can resume it. It returns the number of
// runs settled, after their events are stored.
//
// Serve calls it once after binding its port (a process that cannot bind
// must change nothing); Maintain then settles expired claims periodically.
func (m *Runs) Sweep(ctx context.Context, index RunIndex) (int, error) {
	if m.index == nil {
		m.index = index
	}
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
		mine, err := m.claimForSweep(ctx, ref)
		if err != nil {
			return settled, fmt.Errorf("sweep: %w", err)
		}
		if !mine {
			continue
		}
		done, err := m.settleRun(ctx, ref)
		if err != nil {
			return settled, fmt.Errorf("sweep: %w", err)
		}
		if done {
			threads[ref.ThreadID] = true
			settled++
		}
	}
	for thread := range threads {
		if err := m.writer.Sync(ctx, thread); err != nil {
			return settled, err
		}
	}
	return settled, nil
}

// claimForSweep decides whether an unfinished run is dead and, if so, makes
// it this instance's to settle, so that no other sweeper settles it too.
func (m *Runs) claimForSweep(ctx context.Context, ref RunRef) (bool, error) {
	row, err := m.claims.ActiveRun(ctx, ref.ThreadID)
	switch {
	case err == nil && row.RunID == ref.RunID:
		if row.Suspended && m.agentResumes() {
			return false, nil // waiting for a person
		}
		if !row.Free(m.now()) {
			return false, nil // its instance is alive
		}
		return m.claims.TakeRun(ctx, ref.ThreadID, ref.RunID, m.instance, m.lease)
	case err == nil:
		// The thread's row is another run's, so this one holds nothing: no
		// process can be running it.
		return true, nil
	case !errors.Is(err, ErrNotFound):
		return false, err
	}
	// No row at all: a run written before runs were claimed. Claim it now.
	if _, err := m.claims.ClaimThread(ctx, ref.ThreadID, ref.RunID, m.instance, m.lease); err != nil {
		if errors.Is(err, ErrRunActive) {
			return false, nil
		}
		return false, err
	}
	if m.agentResumes() {
		// Suspended on a confirmation: keep it so, owned by nobody.
		if c, err := m.pendingOf(ctx, ref); err != nil {
			return false, err
		} else if c != nil {
			err := errors.Join(m.claims.SuspendRun(ctx, ref.ThreadID, ref.RunID, true),
				m.claims.DisownRun(ctx, ref.ThreadID, ref.RunID, m.instance))
			return false, err
		}
	}
	return true, nil
}

// pendingOf returns the run's pending confirmation, if any.
func (m *Runs) pendingOf(ctx context.Context, ref RunRef) (*Confirmation, error) {
	if m.confirms == nil {
		return nil, nil
	}
	pending, err := m.confirms.PendingConfirmations(ctx, ref.ThreadID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		return nil, err
	}
	for i := range pending {
		if pending[i].RunID == ref.RunID {
			return &pending[i], nil
		}
	}
	return nil, nil
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
