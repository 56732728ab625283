package instanceai

import (
	"errors"
	"fmt"
	"slices"
)

// What a storage failure does to background agents.
//
// A batch the log refused for good fails the runs it touched (see
// threadDrain.fail): their ending is kept and stored once the log answers,
// and whatever they queue later is dropped. That includes the events of
// their background agents, agent-completed among them, so an agent of a
// failed run cannot complete itself in the log. Nor can an agent whose own
// events failed: a background agent at work after its run's run-finish (or
// beside a working orchestrator) writes under a claim of its own, and a
// batch that holds only such events fails those agents alone, never the
// run, whose run-finish may be in the log already.
//
// Either way the registry stops the agents (their work would be lost) and
// marks them: once the log answers, their owner settles each from the log,
// as the sweep settles an agent whose process is gone, before it lets go
// of the agent's row (see releaseAgentRow).

// failAgentsOnly fails the background agents of run runID whose events are
// in items, a batch the log refused for good, if they are all the run has
// there: each is written under the agent's own claim. Their later events
// are dropped and each agent is reported once (OnAgentFailed). It reports
// whether it did so; otherwise the run fails as a whole.
func (d *threadDrain) failAgentsOnly(items []batchItem, runID string, err error) bool {
	if d.failedRuns[runID] != nil {
		return false // failed as a whole at an earlier event of the batch
	}
	var agents []*fence
	for _, it := range items {
		if it.ev.RunID != runID {
			continue
		}
		if it.fence == nil || it.fence.agentID == "" {
			return false // the run's own event, or one of an agent sharing its claim
		}
		if !slices.Contains(agents, it.fence) {
			agents = append(agents, it.fence)
		}
	}
	for _, f := range agents {
		if !d.dropStale(f) {
			continue
		}
		d.w.cfg.Logger.Error("giving up on storing a background agent's events; failing the agent", "thread", d.threadID,
			"run", runID, "agent", f.agentID, "err", err)
		if cb := d.w.cfg.OnAgentFailed; cb != nil {
			cb(d.threadID, runID, f.agentID, err)
		}
	}
	return true
}

// errAgentUnstored stops a background agent whose events the writer could
// not store: nothing more it does would reach the log.
var errAgentUnstored = errors.New("the server could not store this agent's events")

// unstoredAgent settles, from the log, an agent whose events could not be
// stored (see settleAgent).
var unstoredAgent = settleWhy{
	agent: "The server could not store this agent's events; the agent was stopped.",
	tool:  "Interrupted: the server could not store this agent's events — effect unverified; verify before retrying.",
}

// AgentFailed stops the background agent agentID of the run, whose own
// events the writer could not store (see WriterConfig.OnAgentFailed).
func (m *Runs) AgentFailed(threadID, runID, agentID string, err error) {
	m.failAgents(threadID, runID, agentID, err)
}

// failAgents stops the background agents of the run here (agentID's only,
// when it is set) and marks them unstored: their agent-completed may not
// reach the log, so their owner settles them from it before it lets go of
// their rows. The writer calls it (through Fail and AgentFailed) before it
// takes anything queued after the batch it gave up on, so an agent that
// Sync finds unmarked had its events stored.
func (m *Runs) failAgents(threadID, runID, agentID string, err error) {
	tasks := m.background.matching(threadID, func(t *BackgroundTask) bool {
		return t.RunID == runID && (agentID == "" || t.AgentID == agentID)
	})
	for _, t := range tasks {
		t.unstored.Store(true)
	}
	for _, t := range tasks {
		t.cancel(fmt.Errorf("%w: %w", errAgentUnstored, err))
	}
}
