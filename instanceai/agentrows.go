package instanceai

import (
	"context"
	"errors"
	"sync"
)

// An ended background agent's row.
//
// A background agent's row (see AgentClaims) goes once its agent-completed
// is in the log: deleted sooner, a crash in between would leave the agent
// open with nothing to tell the sweep. Its owner lets go of the row as soon
// as the agent ends. When the database does not let that happen then (the
// release or the writer's commit meets an outage), or when the writer
// could not store the agent's events at all (see failAgents), the agent
// joins the owner's ended agents, which Maintain tries again at every
// heartbeat until each row is released, gone with its thread, or another
// instance's. Meanwhile the row is not renewed (only the rows of agents at
// work are), so should the owner die or stay cut off, the row's lease runs
// out and the sweep of a live instance settles the agent from the log.
// Either way the log holds the agent's agent-completed once: whoever
// writes it from the log reads the log first, and writes under the row's
// token, which a take makes stale.

// endedAgents are the background agents that ended in this process and
// whose rows it has not let go of yet.
type endedAgents struct {
	mu     sync.Mutex
	agents []endedAgent
}

// endedAgent is an agent that ended here, with the token of its row (0:
// it holds none; it wrote under its run's claim or under none).
type endedAgent struct {
	task *BackgroundTask
	row  int64
}

func (e *endedAgents) add(a endedAgent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.agents = append(e.agents, a)
}

// take removes and returns every ended agent: the caller adds back those
// it is not done with.
func (e *endedAgents) take() []endedAgent {
	e.mu.Lock()
	defer e.mu.Unlock()
	agents := e.agents
	e.agents = nil
	return agents
}

// letGoEnded tries once more to let go of the row of each agent that ended
// here; those it cannot let go of yet wait for the next try.
func (m *Runs) letGoEnded(ctx context.Context) {
	for _, a := range m.ended.take() {
		tctx, cancel := context.WithTimeout(ctx, claimTimeout)
		done := ctx.Err() == nil && m.letGoAgent(tctx, a.task, a.row)
		cancel()
		if !done {
			m.ended.add(a)
			continue
		}
		m.log.Info("let go of an ended background agent's row", "thread", a.task.ThreadID, "run", a.task.RunID,
			"agent", a.task.AgentID)
	}
}

// rowOf returns the token of t's row, 0 when it holds none.
func (m *Runs) rowOf(t *BackgroundTask) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !t.claimed {
		return 0
	}
	return t.fence.token()
}

// letGoAgent lets go of row, the row of t, an agent that ended here, once
// the log holds its agent-completed: it releases the row, or finds it gone
// with its thread or taken by another instance. An agent whose events the
// writer could not store is first settled from the log, once the log
// answers and shows its run finished. It reports whether it is done with
// the row; if not, the caller tries again later.
func (m *Runs) letGoAgent(ctx context.Context, t *BackgroundTask, row int64) bool {
	if m.agentsDB == nil {
		return true
	}
	if err := m.writer.Sync(ctx, t.ThreadID); err != nil {
		return false
	}
	// From here the row is let go of, and no longer renewed: a heartbeat
	// that no longer finds it knows it was released, not taken.
	m.mu.Lock()
	t.claimed = false
	m.mu.Unlock()
	if t.unstored.Load() {
		return m.settleUnstored(ctx, t, row)
	}
	if row == 0 {
		return true
	}
	err := m.agentsDB.ReleaseAgent(ctx, t.ref(), row)
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStaleFence) {
		m.log.Debug("could not release a background agent's row", "thread", t.ThreadID, "agent", t.AgentID, "err", err)
		return false
	}
	return true
}

// settleUnstored settles from the log an agent whose events the writer
// could not store, under the token of its row (0 when it holds none; see
// settleAgent), once its run's ending is there: the writer keeps a failed
// run's ending until the log answers, and a working orchestrator ends its
// run itself. It reports whether the log now has the agent completed, or
// needs it not, and the row is let go of.
func (m *Runs) settleUnstored(ctx context.Context, t *BackgroundTask, row int64) bool {
	if m.index == nil {
		return true // no log to read: nothing more can be done here
	}
	if m.writer.keepsEndings(t.ThreadID) {
		return false
	}
	if r := m.Active(t.ThreadID); r != nil && r.ID == t.RunID {
		return false
	}
	outcome, err := m.settleAgent(ctx, t.ref(), row, unstoredAgent)
	if err != nil {
		m.log.Debug("could not settle a background agent whose events were not stored", "thread", t.ThreadID,
			"agent", t.AgentID, "err", err)
		return false
	}
	if outcome == agentSettled {
		m.log.Info("settled a background agent whose events could not be stored", "thread", t.ThreadID, "run", t.RunID,
			"agent", t.AgentID)
	}
	return outcome != agentWaits
}
