package instanceai

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Maintain keeps this instance's claims alive and settles the runs of dead
// instances: every interval it renews the leases of the runs and
// background agents it holds, tries again to let go of the rows of its
// agents that ended (see releaseAgentRow), and sweeps the runs whose lease
// expired. It returns when ctx ends.
func (m *Runs) Maintain(ctx context.Context, interval time.Duration) {
	m.leases.renewedFrom(time.Now())
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// The ended agents are tried beside the heartbeat, one pass at a time:
	// a try waits for a writer or a database that may not answer, which
	// must not hold up the renewal of the leases.
	var ended sync.WaitGroup
	defer ended.Wait()
	var trying atomic.Bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m.heartbeat(ctx)
		if trying.CompareAndSwap(false, true) {
			ended.Go(func() {
				defer trying.Store(false)
				m.retryEndedAgentRows(ctx)
			})
		}
		if _, err := m.SweepExpired(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("sweep of expired runs failed; retrying at the next heartbeat", "err", err)
		}
	}
}

// heartbeat renews this instance's leases. A live run whose row no longer
// holds its token was taken by another instance, which believed us dead:
// it is abandoned without writing anything more. A row we own with no live
// run behind it (its run failed to store its finish) is disowned, so that
// the sweep settles it.
func (m *Runs) heartbeat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, m.leases.ttl/2)
	defer cancel()
	start := time.Now()
	agentsRenewed := m.renewAgents(hctx)
	m.deliverStoredAnswers()
	// Only runs whose claim was stored before the renewal can be judged
	// by it: a run claimed while it ran is simply not in its answer.
	before := m.table.claimedRuns()
	held, err := m.leases.renewRuns(hctx)
	if err == nil && agentsRenewed {
		m.leases.renewedFrom(start)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("could not renew run leases", "err", err)
		}
		return
	}
	holds := make(map[heldClaim]bool, len(held))
	for _, row := range held {
		holds[heldClaim{RunRef{ThreadID: row.ThreadID, RunID: row.RunID}, row.Fence}] = true
	}
	suspects := notRenewed(before, holds)
	m.table.mu.Lock()
	orphaned := m.leases.orphans.count(holds, func(row heldClaim) bool { return m.table.isLocked(row.ThreadID, row.RunID) })
	m.table.mu.Unlock()
	for _, r := range suspects {
		if m.claimLost(hctx, r) {
			m.stopTakenOver(r, "its row holds another instance's claim (its lease ran out here)")
		}
	}
	m.stopCancelledElsewhere(held)
	for _, row := range orphaned {
		m.releaseOrphan(hctx, row)
	}
}

// notRenewed returns the runs of before whose row the renewal, holds, did
// not renew under their token. Such a run may have been taken, or may only
// look so: it was disowned to wait for a person (its row then has no
// owner, and keeps its token until another instance takes it, which its
// retake finds out), or it changed hands within this process while the
// renewal ran. The suspects' rows are read to tell.
func notRenewed(before []*Run, holds map[heldClaim]bool) []*Run {
	var suspects []*Run
	for _, r := range before {
		r.mu.Lock()
		disowned := r.waiting.disowned
		r.mu.Unlock()
		if !disowned && !holds[heldClaim{RunRef{ThreadID: r.ThreadID, RunID: r.ID}, r.fence.token()}] {
			suspects = append(suspects, r)
		}
	}
	return suspects
}

// stopCancelledElsewhere stops the runs whose renewed rows, held, carry a
// cancel asked through another instance, whether or not the bus brought
// it too.
func (m *Runs) stopCancelledElsewhere(held []ActiveRun) {
	for _, row := range held {
		if row.CancelReason == "" {
			continue
		}
		if r := m.Active(row.ThreadID); r != nil && r.ID == row.RunID && r.fence.token() == row.Fence {
			m.log.Info("stopping a run whose cancel was asked through another instance", "thread", row.ThreadID, "run", row.RunID)
			r.stop(row.CancelReason)
		}
	}
}

// releaseOrphan gives up a row this instance owns with no live run behind
// it: one whose run ended (its release failed when the database did not
// answer) is released; any other is disowned, and the sweep settles it, or
// the answer its run waits for resumes it.
func (m *Runs) releaseOrphan(ctx context.Context, row heldClaim) {
	// The run may only be slow to store its run-finish, or wait for the
	// database to take the ending its outage kept: judged at a later beat
	// once the writer has nothing of the thread.
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err := m.writer.Sync(sctx, row.ThreadID)
	cancel()
	if err != nil || m.writer.keepsEndings(row.ThreadID) {
		return
	}
	if m.index != nil {
		if events, err := m.index.RunEvents(ctx, row.ThreadID, row.RunID); err == nil &&
			slices.ContainsFunc(events, func(ev StoredEvent) bool { return ev.Event.Type == TypeRunFinish }) {
			m.releaseClaim(row.ThreadID, row.RunID, row.fence)
			return
		}
	}
	if err := m.leases.claims.DisownRun(ctx, row.ThreadID, row.RunID, row.fence); err != nil && !errors.Is(err, ErrStaleFence) {
		m.log.Warn("could not disown a run without a process", "thread", row.ThreadID, "run", row.RunID, "err", err)
	}
}

// claimLost reports whether another instance took the claim of r, a live
// run of this process: the thread's row no longer holds r's token. The
// token is read once no retake of r is under way. A row that cannot be read
// is not judged, and neither is a run that left the registry meanwhile (its
// own row goes once its run-finish is stored).
func (m *Runs) claimLost(ctx context.Context, r *Run) bool {
	r.fence.mu.Lock()
	row, err := m.leases.claims.ActiveRun(ctx, r.ThreadID)
	token := r.fence.v.Load()
	r.fence.mu.Unlock()
	if err != nil && !errors.Is(err, ErrNotFound) {
		return false
	}
	if err == nil && row.RunID == r.ID && row.Fence == token {
		return false
	}
	return m.table.holds(r)
}

// stopTakenOver stops a live run another instance took over, writing
// nothing more of it, and the background agents that write under the run's
// claim (those that could not claim a row of their own); why says how this
// process found out. A run no longer live is left alone.
func (m *Runs) stopTakenOver(r *Run, why string) {
	m.table.mu.Lock()
	live := m.table.removeLocked(r)
	tasks := m.background.matching(r.ThreadID, func(t *BackgroundTask) bool { return t.RunID == r.ID && t.fence == r.fence })
	m.table.mu.Unlock()
	if !live {
		return
	}
	m.log.Warn("another instance took over this run; stopping it without writing", "thread", r.ThreadID, "run", r.ID, "why", why)
	r.cancel(errLeaseLost)
	r.mu.Lock()
	r.finished = true
	r.mu.Unlock()
	for _, t := range tasks {
		t.cancel(errLeaseLost)
	}
	m.writer.dropFence(r.ThreadID, r.fence)
}

// Fenced stops what the log refused to store for a stale fencing token:
// another instance took the claim of the run (agentID "") or of its
// background agent agentID, and settles it. The run or the agent stops at
// once, writing nothing more; the writer has dropped its events. A
// settlement of this process refused so (a third instance was quicker) has
// nothing live to stop.
func (m *Runs) Fenced(threadID, runID, agentID string) {
	const why = "the database refused its events for a stale fencing token (its lease ran out here)"
	r, tasks := m.workOf(threadID, func(t *BackgroundTask) bool { return t.RunID == runID && t.AgentID == agentID })
	var task *BackgroundTask
	if len(tasks) > 0 {
		task = tasks[len(tasks)-1]
	}
	switch {
	case agentID == "" && r != nil && r.ID == runID:
		m.stopTakenOver(r, why)
	case task != nil:
		m.stopTakenOverAgent(task, why)
	default:
		m.log.Warn("another instance settled this run first; its events from here were dropped",
			"thread", threadID, "run", runID, "agent", agentID)
	}
}

// LiveHeld reports whether this instance's leases may have run out (it
// could not renew them for most of a lease: its database link is down or
// it was paused), so that another instance may settle its runs from what
// it heard of their text: the writer then publishes their deltas to no one
// (the text still reaches the log in its block, and clients with it). It
// is false until the heartbeat runs, and without a store's claims.
func (m *Runs) LiveHeld() bool { return m.leases.mayHaveRunOut() }
