package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// remoteCancelWait bounds how long a cancel waits for the work it asked to
// stop to let go of its rows, and an answer for its run to go on, before
// they answer "accepted" rather than "applied".
const remoteCancelWait = 5 * time.Second

// claimTimeout bounds one claims-table statement made outside a request.
const claimTimeout = 10 * time.Second

// errLeaseLost cancels a run whose claim another instance took: that
// instance settled it, so nothing more of it may be written from here.
var errLeaseLost = errors.New("run was taken over by another instance")

// claim makes r the thread's active run in the claims table, with the
// claim's token in r's holder. When another run holds the thread, it
// returns that run and ErrRunActive.
func (m *Runs) claim(r *Run) (*Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		row, err := m.leases.claimThread(ctx, r.ThreadID, r.ID)
		if err == nil {
			r.fence.v.Store(row.Fence)
			return nil, nil
		}
		if !errors.Is(err, ErrRunActive) {
			return nil, fmt.Errorf("claim thread %q: %w", r.ThreadID, err)
		}
		if attempt == 0 && row.Owner == m.leases.instance {
			// A run of this process whose run-finish is queued but not yet
			// stored: its row goes with that commit.
			if err := m.writer.Sync(ctx, r.ThreadID); err != nil {
				return nil, err
			}
			continue
		}
		return &Run{ID: row.RunID, StartRequest: StartRequest{ThreadID: r.ThreadID}}, &RunActiveError{ThreadID: r.ThreadID, RunID: row.RunID}
	}
}

// releaseClaim deletes the run's row, if it still holds fence: a row
// another instance took meanwhile is that instance's to release.
func (m *Runs) releaseClaim(threadID, runID string, fence int64) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	err := m.leases.claims.ReleaseRun(ctx, threadID, runID, fence)
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStaleFence) {
		m.log.Error("could not release a finished run's claim", "thread", threadID, "run", runID, "err", err)
	}
}

// runFinished is the writer's word that a run's run-finish is in the log,
// stored under fence: the thread is free for the next run, on any
// instance.
func (m *Runs) runFinished(threadID, runID string, fence int64) {
	m.releaseClaim(threadID, runID, fence)
}

// settleUnheld takes a run no live process holds and ends it: cancelled
// with its waiting call settled when it was suspended on a confirmation,
// interrupted like a crashed run otherwise.
func (m *Runs) settleUnheld(ctx context.Context, row ActiveRun, reason string) error {
	token, won, err := m.leases.takeRun(ctx, row.ThreadID, row.RunID)
	if err != nil || !won {
		return err
	}
	if row.Suspended && m.confirmations.store != nil {
		pending, err := m.confirmations.store.PendingConfirmations(ctx, row.ThreadID)
		if err != nil {
			return err
		}
		for i := range pending {
			if pending[i].RunID == row.RunID {
				return m.finishSuspended(&pending[i], reason, token)
			}
		}
	}
	_, err = m.settleRun(ctx, RunRef{ThreadID: row.ThreadID, RunID: row.RunID}, token)
	return err
}

// settleRun ends a run this instance has claimed, with token fence (0:
// the run holds no row), and no process runs: its open tool calls are
// interrupted, its background agents completed with an error, and
// run-finish{interrupted, crash_interrupted} follows, written under the
// token. A run that finished meanwhile only has its row released. It
// reports whether it settled the run.
func (m *Runs) settleRun(ctx context.Context, ref RunRef, fence int64) (bool, error) {
	rows, err := m.index.RunEvents(ctx, ref.ThreadID, ref.RunID)
	if err != nil {
		return false, fmt.Errorf("read run %s: %w", ref.RunID, err)
	}
	for _, ev := range rows {
		if ev.Event.Type == TypeRunFinish {
			m.releaseClaim(ref.ThreadID, ref.RunID, fence)
			return false, nil
		}
	}
	holder := newSettlement(ref.RunID, "", fence)
	var under int64
	if m.leases.fenced {
		under = fence
	}
	agents, err := m.takeAgentRows(ctx, ref, rows, under)
	// Whatever happens from here, the rows go once what was queued is
	// stored: kept, they would be left to run out for no agent.
	defer m.releaseTakenAgentRows(ref.ThreadID, agents)
	if err != nil {
		return false, err
	}
	// An agent still at work on a cut-off instance writes under its own
	// row's token until the claim above: what it wrote since the first
	// read (its agent-completed, say) is read now, so that the settlement
	// does not complete the agent a second time.
	if rows, err = m.index.RunEvents(ctx, ref.ThreadID, ref.RunID); err != nil {
		return false, fmt.Errorf("read run %s: %w", ref.RunID, err)
	}
	if !slices.ContainsFunc(rows, func(ev StoredEvent) bool { return ev.Event.Type == TypeRunStart }) {
		// Claimed by a process that died, or was cut off, before its
		// run-start was stored: its client may hold the run's id (a chat is
		// answered once the run-start is queued), so the run is written as
		// begun and interrupted at once, rather than never heard of again.
		now := m.now().UnixMilli()
		var user string
		if m.threads != nil {
			t, err := m.threads.GetThread(ctx, ref.ThreadID)
			if err != nil {
				return false, fmt.Errorf("read thread %q: %w", ref.ThreadID, err)
			}
			user = t.OwnerID
		}
		for _, ev := range []Event{
			{Type: TypeRunStart, RunID: ref.RunID, AgentID: OrchestratorAgentID(ref.RunID), UserID: user, TS: now,
				Payload: &RunStart{MessageID: NewID("msg_")}},
			{Type: TypeRunFinish, RunID: ref.RunID, AgentID: OrchestratorAgentID(ref.RunID), UserID: user, TS: now,
				Payload: &RunFinish{Status: RunInterrupted, Reason: ReasonCrashed}},
		} {
			if err := m.writer.enqueue(ref.ThreadID, ev, holder); err != nil {
				return false, err
			}
		}
		m.log.Info("settled a run whose process died before its run-start was stored", "thread", ref.ThreadID, "run", ref.RunID)
		return true, nil
	}
	blocks, pieces, err := m.openText(ctx, ref, rows, "")
	if err != nil {
		return false, err
	}
	for _, ev := range append(blocks, settleInterrupted(ref.RunID, rows, m.now().UnixMilli())...) {
		if err := ev.Validate(); err != nil {
			return false, fmt.Errorf("run %s: %w", ref.RunID, err)
		}
		if err := m.writer.enqueue(ref.ThreadID, ev, holder); err != nil {
			return false, err
		}
	}
	if pieces {
		if err := m.dropPieces(ctx, ref, ""); err != nil {
			return false, err
		}
	}
	if m.confirmations.store != nil {
		// Those the store holds pending, whether or not their request
		// reached the log (a process may die in between).
		pending, err := m.confirmations.store.PendingConfirmations(ctx, ref.ThreadID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			// The settlement is queued already; an answer to one of them
			// is refused once the run-finish is stored anyway.
			m.log.Warn("could not close a settled run's confirmations", "thread", ref.ThreadID, "run", ref.RunID, "err", err)
		}
		for _, c := range pending {
			if c.RunID == ref.RunID {
				m.closeConfirmation(c.RequestID)
			}
		}
	}
	m.log.Info("settled a run whose process is gone", "thread", ref.ThreadID, "run", ref.RunID)
	return true, nil
}

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
	// A run not renewed under its token may have been taken, or may only
	// look so: it was disowned to wait for a person (its row then has no
	// owner, and keeps its token until another instance takes it, which
	// its retake finds out), or it changed hands within this process
	// while the renewal ran. The suspects' rows are read to tell.
	var suspects []*Run
	for _, r := range before {
		r.mu.Lock()
		disowned := r.waiting.disowned
		r.mu.Unlock()
		if !disowned && !holds[heldClaim{RunRef{ThreadID: r.ThreadID, RunID: r.ID}, r.fence.token()}] {
			suspects = append(suspects, r)
		}
	}
	m.table.mu.Lock()
	orphaned := m.leases.orphans.count(holds, func(row heldClaim) bool { return m.table.isLocked(row.ThreadID, row.RunID) })
	m.table.mu.Unlock()
	for _, r := range suspects {
		if m.claimLost(hctx, r) {
			m.stopTakenOver(r, "its row holds another instance's claim (its lease ran out here)")
		}
	}
	// Cancels asked through another instance, whether or not the bus
	// brought them too.
	for _, row := range held {
		if row.CancelReason == "" {
			continue
		}
		if r := m.Active(row.ThreadID); r != nil && r.ID == row.RunID && r.fence.token() == row.Fence {
			m.log.Info("stopping a run whose cancel was asked through another instance", "thread", row.ThreadID, "run", row.RunID)
			r.stop(row.CancelReason)
		}
	}
	for _, row := range orphaned {
		m.releaseOrphan(hctx, row)
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

// SweepExpired settles the runs whose owner's lease ran out, which no other
// instance took first. A run suspended on a confirmation is waiting, not
// dead, and is left alone when the agent can resume it, unless its
// confirmation was answered while its process was gone: then it resumes
// here. It returns the number of runs settled or resumed.
func (m *Runs) SweepExpired(ctx context.Context) (int, error) {
	rows, err := m.leases.claims.ExpiredRuns(ctx)
	if err != nil {
		return 0, fmt.Errorf("list expired runs: %w", err)
	}
	n := 0
	for _, row := range rows {
		ref := RunRef{ThreadID: row.ThreadID, RunID: row.RunID}
		if m.isLive(ref) {
			continue
		}
		if row.Suspended && m.agentResumes() {
			resumed, waits, err := m.resumeAnswered(ctx, row)
			if err != nil {
				return n, err
			}
			if resumed {
				n++
			}
			if waits && !resumed && row.Owner != "" {
				// Its process died after storing the request but before
				// handing the run to no one: do that for it, so that an
				// answer or a cancel acts on it at once; a cancel asked
				// meanwhile ends it now.
				if err := m.disownForDeadOwner(ctx, row); err != nil {
					return n, err
				}
			}
			if resumed || waits {
				continue
			}
			// The row says the run waits for a person, but its log says
			// it does not (it went on after the answer, then lost its
			// process; or it ended): it is settled as any run whose
			// process is gone, or only released when it ended.
		}
		if m.leaveToPeer(ctx, ref, row.Owner, row.LeaseExpires) {
			continue
		}
		token, won, err := m.leases.takeRun(ctx, row.ThreadID, row.RunID)
		if err != nil {
			return n, err
		}
		if !won {
			continue
		}
		settled, err := m.settleRun(ctx, ref, token)
		if err != nil {
			return n, err
		}
		if settled {
			n++
		}
	}
	agents, err := m.sweepAgents(ctx)
	return n + agents, err
}

// resumeAnswered continues a suspended run whose process is gone if the
// confirmation it waits for has been answered meanwhile (the answer reached
// the dead owner only, or the instance that got it died before it took the
// run). It reports whether it resumed the run, and whether the run's log
// shows it waiting for a confirmation at all: a run that went on after its
// answer (another instance resumed it, then died), or that ended, does
// not, whatever its row says, and must not be resumed a second time.
func (m *Runs) resumeAnswered(ctx context.Context, row ActiveRun) (resumed, waits bool, err error) {
	events, err := m.index.RunEvents(ctx, row.ThreadID, row.RunID)
	if err != nil {
		return false, false, err
	}
	requestID := awaitedRequest(events)
	if requestID == "" {
		return false, false, nil
	}
	c, err := m.confirmations.store.GetConfirmation(ctx, requestID)
	if err != nil || (c.Status != ConfirmationApproved && c.Status != ConfirmationDenied) {
		return false, true, nil
	}
	var a Answer
	if err := json.Unmarshal(c.Answer, &a); err != nil {
		return false, true, fmt.Errorf("stored answer of %s: %w", requestID, err)
	}
	token, won, err := m.leases.takeRun(ctx, row.ThreadID, row.RunID)
	if err != nil || !won {
		return false, true, err
	}
	if err := m.resume(&c, a, token); err != nil {
		return false, true, err
	}
	m.log.Info("resumed a run answered while its process was gone", "thread", row.ThreadID, "run", row.RunID)
	return true, true, nil
}

// awaitedRequest returns the request id of the confirmation a run's log
// shows it waiting for: its last confirmation-request, if the run has not
// finished and the request's tool call has no outcome after it. "" when
// the log shows the run waiting for none.
func awaitedRequest(events []StoredEvent) string {
	var req *ConfirmationRequest
	for i := range events {
		switch p := events[i].Event.Payload.(type) {
		case *ConfirmationRequest:
			req = p
		case *RunFinish:
			return ""
		case *ToolResult:
			if req != nil && p.ToolCallID == req.ToolCallID {
				req = nil
			}
		case *ToolError:
			if req != nil && p.ToolCallID == req.ToolCallID {
				req = nil
			}
		}
	}
	if req == nil {
		return ""
	}
	return req.RequestID
}

// ThreadDeleted tells the other instances that the thread is gone: they
// stop what they still run of it and end its open streams.
func (m *Runs) ThreadDeleted(threadID string) {
	m.control.SendControl(Control{Kind: ControlDelete, ThreadID: threadID})
}

// HandleControl acts on a control message from another instance.
func (m *Runs) HandleControl(c Control) {
	switch c.Kind {
	case ControlCancel:
		m.cancelLocal(c.ThreadID, c.Reason)
	case ControlDelete:
		m.cancelLocal(c.ThreadID, ReasonUserCancelled)
	case ControlAnswer:
		m.deliverAnswer(c.RequestID)
	}
}

// deliverAnswer hands an answer stored by another instance to the run of
// this process that waits for it.
func (m *Runs) deliverAnswer(requestID string) {
	wait := m.confirmations.waiter(requestID)
	if wait == nil || m.confirmations.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	c, err := m.confirmations.store.GetConfirmation(ctx, requestID)
	if err != nil {
		m.log.Error("could not read an answer stored by another instance", "request", requestID, "err", err)
		return
	}
	if c.Status != ConfirmationApproved && c.Status != ConfirmationDenied {
		return
	}
	var a Answer
	if err := json.Unmarshal(c.Answer, &a); err != nil {
		m.log.Error("stored answer does not decode", "request", requestID, "err", err)
		return
	}
	select {
	case wait <- a:
	default: // already delivered
	}
}

// LiveHeld reports whether this instance's leases may have run out (it
// could not renew them for most of a lease: its database link is down or
// it was paused), so that another instance may settle its runs from what
// it heard of their text: the writer then publishes their deltas to no one
// (the text still reaches the log in its block, and clients with it). It
// is false until the heartbeat runs, and without a store's claims.
func (m *Runs) LiveHeld() bool { return m.leases.mayHaveRunOut() }

// disownForDeadOwner takes a suspended run whose owner died while it still
// held it, and leaves it suspended and owned by no process, as its owner
// would have (see disownWhileWaiting); or ends it cancelled when a cancel
// of it was asked meanwhile.
func (m *Runs) disownForDeadOwner(ctx context.Context, row ActiveRun) error {
	if row.CancelReason != "" {
		return m.settleUnheld(ctx, row, row.CancelReason)
	}
	token, won, err := m.leases.takeRun(ctx, row.ThreadID, row.RunID)
	if err != nil || !won {
		return err
	}
	return errors.Join(m.leases.claims.SuspendRun(ctx, row.ThreadID, row.RunID, token, true),
		m.leases.claims.DisownRun(ctx, row.ThreadID, row.RunID, token))
}
