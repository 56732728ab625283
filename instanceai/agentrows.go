package instanceai

import (
	"context"
	"errors"
	"fmt"
)

// Background agents' rows (see AgentClaims): renewed by their instance's
// heartbeat while the agent works (renewAgents), taken by the settlement
// of their run (takeAgentRows), and let go of once the agent ended.
//
// A background agent's row goes once its agent-completed is in the log:
// deleted sooner, a crash in between would leave the agent open with
// nothing to tell the sweep. Its owner lets go of the row as soon as the
// agent ends. When the database does not let that happen then (the
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

// retryEndedAgentRows tries once more to let go of the row of each agent
// that ended here; those it cannot let go of yet wait for the next try.
func (m *Runs) retryEndedAgentRows(ctx context.Context) {
	for _, a := range m.background.ended.take() {
		tctx, cancel := context.WithTimeout(ctx, claimTimeout)
		done := ctx.Err() == nil && m.releaseAgentRow(tctx, a.task, a.row)
		cancel()
		if !done {
			m.background.ended.add(a)
			continue
		}
		m.log.Info("let go of an ended background agent's row", "thread", a.task.ThreadID, "run", a.task.RunID,
			"agent", a.task.AgentID)
	}
}

// releaseAgentRow lets go of row, the row of t, an agent that ended here,
// once the log holds its agent-completed: it releases the row, or finds it
// gone with its thread or taken by another instance. An agent whose events
// the writer could not store is first settled from the log, once the log
// answers and shows its run finished. It reports whether it is done with
// the row; if not, the caller tries again later.
func (m *Runs) releaseAgentRow(ctx context.Context, t *BackgroundTask, row int64) bool {
	if m.leases.agentRows == nil {
		return true
	}
	if err := m.writer.Sync(ctx, t.ThreadID); err != nil {
		return false
	}
	// From here the row is let go of, and no longer renewed: a heartbeat
	// that no longer finds it knows it was released, not taken.
	m.background.unclaim(t)
	if t.unstored.Load() {
		return m.settleUnstored(ctx, t, row)
	}
	if row == 0 {
		return true
	}
	err := m.leases.agentRows.ReleaseAgent(ctx, t.ref(), row)
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

// renewAgents renews the leases of this instance's background agents at
// work, and of no other row it owns (an agent that ended without letting
// go of its row, a settlement's take): those run out, for the sweep. An
// agent whose row no longer holds its token was settled by another
// instance, which believed us dead: it stops without writing anything more.
func (m *Runs) renewAgents(ctx context.Context) bool {
	if m.leases.agentRows == nil {
		return true
	}
	before, fences := m.background.claimedFences()
	if len(fences) == 0 {
		return true
	}
	held, err := m.leases.renewAgentRows(ctx, fences)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("could not renew background agent leases", "err", err)
		}
		return false
	}
	lost, asked, reasons := m.background.judgeRenewal(before, held)
	for _, t := range lost {
		m.stopTakenOverAgent(t, "its row holds another instance's claim (its lease ran out here)")
	}
	for i, t := range asked {
		t.cancel(cancelled{reasons[i]})
	}
	return true
}

// stopTakenOverAgent stops a background agent whose claim another instance
// took, writing nothing more of it; why says how this process found out.
func (m *Runs) stopTakenOverAgent(t *BackgroundTask, why string) {
	m.log.Warn("another instance settled this background agent; stopping it without writing",
		"thread", t.ThreadID, "run", t.RunID, "agent", t.AgentID, "why", why)
	t.cancel(errLeaseLost)
	m.writer.dropFence(t.ThreadID, t.fence)
}

// takeAgentRows claims the rows of the run's background agents that the log
// shows at work (spawned, not completed), before the run's settlement
// completes them: an instance that still runs one (cut off from the
// database past its lease) then holds a stale token for it, and nothing
// it writes lands after the settlement. It returns the rows it claimed,
// with their tokens, to release once the settlement is stored.
func (m *Runs) takeAgentRows(ctx context.Context, ref RunRef, rows []StoredEvent, runFence int64) (map[AgentRef]int64, error) {
	if m.leases.agentRows == nil {
		return nil, nil
	}
	w := openWorkOf(ref.RunID, rows)
	taken := map[AgentRef]int64{}
	agents := w.rules.spawnedWorking()
	// And the rows of agents the log does not show: their agent-spawned
	// was still on its way when the run was taken, and their own events
	// would land after the settlement's run-finish. (A row made after the
	// take is refused: see AgentClaims.ClaimAgent.)
	claimed, err := m.leases.agentRows.RunAgents(ctx, ref.ThreadID, ref.RunID)
	if err != nil {
		return taken, fmt.Errorf("list the agents of run %s: %w", ref.RunID, err)
	}
	for _, c := range claimed {
		if _, ok := w.working(c.AgentID); !ok {
			agents = append(agents, c.AgentID)
		}
	}
	for _, agent := range agents {
		a := AgentRef{ThreadID: ref.ThreadID, RunID: ref.RunID, AgentID: agent}
		token, err := m.leases.claimAgentRow(ctx, a, runFence)
		if errors.Is(err, ErrNotFound) {
			return taken, nil // the thread is gone: nothing to settle
		}
		if err != nil {
			return taken, fmt.Errorf("claim agent %s of run %s: %w", agent, ref.RunID, err)
		}
		taken[a] = token
	}
	return taken, nil
}

// releaseTakenAgentRows releases the agents' rows that a settlement took
// (see takeAgentRows), once what the thread has queued is stored.
func (m *Runs) releaseTakenAgentRows(threadID string, agents map[AgentRef]int64) {
	if len(agents) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	if err := m.writer.Sync(ctx, threadID); err != nil {
		m.log.Warn("releasing settled agents' rows before their settlement is stored", "thread", threadID, "err", err)
	}
	for agent, token := range agents {
		err := m.leases.agentRows.ReleaseAgent(ctx, agent, token)
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStaleFence) {
			m.log.Error("could not release a settled agent's row", "thread", threadID, "agent", agent.AgentID, "err", err)
		}
	}
}
