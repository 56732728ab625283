package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

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
		token, mine, err := m.claimForSweep(ctx, ref)
		if err != nil {
			return settled, fmt.Errorf("sweep: %w", err)
		}
		if !mine {
			continue
		}
		done, err := m.settleRun(ctx, ref, token)
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
	agents, err := m.sweepAgents(ctx)
	return settled + agents, err
}

// sweepAgents settles the background agents whose instance is gone: an
// agent that works on after its run's run-finish holds a row of its own
// (see AgentClaims), which its instance's heartbeat renews while the agent
// works. Each row whose lease ran out, that no agent of this process is
// behind, is taken (one instance wins it) and its agent, if the log has it
// spawned and not completed, gets tool-interrupted for each of its calls
// without an outcome and agent-completed{status:"error"}, as a crashed
// run's agents do (see settleAgent); so is the row of an agent that ended
// without its owner letting go of it (see releaseAgentRow). An agent of a run
// without a run-finish is left to that run's settlement, which completes
// it with the run: its row, taken and not renewed, runs out again. It
// returns how many agents it settled, after their events are stored.
func (m *Runs) sweepAgents(ctx context.Context) (int, error) {
	if m.leases.agentRows == nil || m.index == nil {
		return 0, nil
	}
	rows, err := m.leases.agentRows.ExpiredAgents(ctx)
	if err != nil {
		return 0, fmt.Errorf("sweep: list expired background agents: %w", err)
	}
	n := 0
	for _, row := range rows {
		if m.isLiveAgent(row.AgentRef) || m.leaveToPeer(ctx, RunRef{ThreadID: row.ThreadID, RunID: row.RunID}, row.Owner, row.LeaseExpires) {
			continue
		}
		// Not taken while the log has not seen the run finish: the run's
		// settlement completes the agent, or, when its owner was only
		// slow (its run's claim held), its agent-spawned and the agent's
		// work are still on their way, and a take would fence them out
		// after the spawn is stored.
		finished, err := m.loggedFinish(ctx, RunRef{ThreadID: row.ThreadID, RunID: row.RunID})
		if err != nil {
			return n, fmt.Errorf("sweep: %w", err)
		}
		if !finished {
			continue
		}
		token, won, err := m.leases.takeAgentRow(ctx, row.AgentRef)
		if err != nil {
			return n, fmt.Errorf("sweep: %w", err)
		}
		if !won {
			continue
		}
		outcome, err := m.settleAgent(ctx, row.AgentRef, token, crashedAgent)
		if err != nil {
			return n, fmt.Errorf("sweep: %w", err)
		}
		if outcome == agentSettled {
			m.log.Info("settled a background agent whose process is gone", "thread", row.ThreadID, "run", row.RunID, "agent", row.AgentID)
			n++
		}
	}
	return n, nil
}

// agentOutcome is what settleAgent came to.
type agentOutcome int

const (
	// agentSettled: its settlement is in the log, and its row released.
	agentSettled agentOutcome = iota + 1
	// agentNeedsNone: the log has its agent-completed already, or never
	// had it spawned (or its thread is gone); its row is released.
	agentNeedsNone
	// agentWaits: its run has not finished in the log, and the run's own
	// ending or settlement completes it; nothing was written, the row
	// stays.
	agentWaits
	// agentTaken: the log refused the settlement, whose token another
	// instance's take made stale; that instance settles it.
	agentTaken
)

// settleWhy is what the events that settle an agent from the log say
// happened to it: the error of its agent-completed and of the
// tool-interrupted of each of its open calls.
type settleWhy struct{ agent, tool string }

// crashedAgent settles the work of a process that is gone (n8n's wording).
var crashedAgent = settleWhy{agent: "interrupted by a process restart", tool: interruptedToolError}

// settleAgent settles one background agent from the log, under token fence
// (that of its row, which the caller holds; 0 for an agent that holds no
// row): if the log has the agent spawned and not completed, and its run
// finished, its open calls get tool-interrupted and the agent
// agent-completed{status:"error"}, saying why, as a crashed run's agents
// do. The row is released (when fence is not 0) once the log holds the
// agent's agent-completed, whoever wrote it: the log is read again after
// the settlement, which an outage may have kept out of it (then the error
// says so, and the row stays for a later try).
func (m *Runs) settleAgent(ctx context.Context, ref AgentRef, fence int64, why settleWhy) (agentOutcome, error) {
	release := func(outcome agentOutcome) (agentOutcome, error) {
		if fence == 0 {
			return outcome, nil
		}
		err := m.leases.agentRows.ReleaseAgent(ctx, ref, fence)
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStaleFence) {
			return 0, err
		}
		return outcome, nil
	}
	rows, err := m.index.RunEvents(ctx, ref.ThreadID, ref.RunID)
	if errors.Is(err, ErrNotFound) {
		return release(agentNeedsNone) // the thread is gone, and its rows with it
	}
	if err != nil {
		return 0, fmt.Errorf("read run %s: %w", ref.RunID, err)
	}
	w := openWorkOf(ref.RunID, rows)
	role, open := w.working(ref.AgentID)
	if !open {
		// Completed already (by its own instance, by the settlement of its
		// run, or by an earlier try), or never spawned in the log.
		return release(agentNeedsNone)
	}
	if !w.finished {
		return agentWaits, nil // the run's own ending or settlement completes it
	}
	now := m.now().UnixMilli()
	events, pieces, err := m.openText(ctx, RunRef{ThreadID: ref.ThreadID, RunID: ref.RunID}, rows, ref.AgentID)
	if err != nil {
		return 0, err
	}
	for _, c := range w.rules.calls {
		if c.agentID == ref.AgentID {
			events = append(events, interruptedCall(ref.RunID, c, w.userID, why.tool, now))
		}
	}
	events = append(events, interruptedAgent(ref.RunID, ref.AgentID, role, w.userID, why.agent, now))
	holder := newSettlement(ref.RunID, ref.AgentID, fence)
	for _, ev := range events {
		if err := ev.Validate(); err != nil {
			return 0, fmt.Errorf("agent %s: %w", ref.AgentID, err)
		}
		if err := m.writer.enqueue(ref.ThreadID, ev, holder); err != nil {
			return 0, err
		}
	}
	if err := m.writer.Sync(ctx, ref.ThreadID); err != nil {
		return 0, err
	}
	if holder.lost.Load() {
		return agentTaken, nil
	}
	if rows, err = m.index.RunEvents(ctx, ref.ThreadID, ref.RunID); err != nil {
		return 0, fmt.Errorf("read run %s: %w", ref.RunID, err)
	}
	if _, open := openWorkOf(ref.RunID, rows).working(ref.AgentID); open {
		return 0, fmt.Errorf("the settlement of agent %s of run %s was not stored", ref.AgentID, ref.RunID)
	}
	if pieces {
		if err := m.dropPieces(ctx, RunRef{ThreadID: ref.ThreadID, RunID: ref.RunID}, ref.AgentID); err != nil {
			return 0, err
		}
	}
	return release(agentSettled)
}

// loggedFinish reports whether the log holds the run's run-finish (a
// thread that is gone counts as finished: nothing more of it is stored).
func (m *Runs) loggedFinish(ctx context.Context, ref RunRef) (bool, error) {
	rows, err := m.index.RunEvents(ctx, ref.ThreadID, ref.RunID)
	switch {
	case errors.Is(err, ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read run %s: %w", ref.RunID, err)
	}
	return openWorkOf(ref.RunID, rows).finished, nil
}

// isLiveAgent reports whether the agent works in this process.
func (m *Runs) isLiveAgent(ref AgentRef) bool {
	return m.background.any(ref.ThreadID, func(t *BackgroundTask) bool { return t.AgentID == ref.AgentID })
}

// claimForSweep decides whether an unfinished run is dead and, if so, makes
// it this instance's to settle, so that no other sweeper settles it too.
// It returns the token of the claim it took, 0 for a run that holds no
// row.
func (m *Runs) claimForSweep(ctx context.Context, ref RunRef) (fence int64, mine bool, err error) {
	row, err := m.leases.claims.ActiveRun(ctx, ref.ThreadID)
	switch {
	case err == nil && row.RunID == ref.RunID:
		if row.Suspended && m.agentResumes() {
			return 0, false, nil // waiting for a person
		}
		if !row.Free(m.now()) {
			return 0, false, nil // its instance is alive
		}
		if m.leaveToPeer(ctx, ref, row.Owner, row.LeaseExpires) {
			return 0, false, nil
		}
		return m.leases.takeRun(ctx, ref.ThreadID, ref.RunID)
	case err == nil:
		// The thread's row is another run's, so this one holds nothing: no
		// process can be running it.
		return 0, true, nil
	case !errors.Is(err, ErrNotFound):
		return 0, false, err
	}
	// No row at all: a run written before runs were claimed. Claim it now.
	row, err = m.leases.claimThread(ctx, ref.ThreadID, ref.RunID)
	if err != nil {
		if errors.Is(err, ErrRunActive) {
			return 0, false, nil
		}
		return 0, false, err
	}
	if m.agentResumes() {
		// Suspended on a confirmation: keep it so, owned by nobody.
		if c, err := m.pendingOf(ctx, ref); err != nil {
			return 0, false, err
		} else if c != nil {
			err := errors.Join(m.leases.claims.SuspendRun(ctx, ref.ThreadID, ref.RunID, row.Fence, true),
				m.leases.claims.DisownRun(ctx, ref.ThreadID, ref.RunID, row.Fence))
			return 0, false, err
		}
	}
	return row.Fence, true, nil
}

// pendingOf returns the run's pending confirmation, if any.
func (m *Runs) pendingOf(ctx context.Context, ref RunRef) (*Confirmation, error) {
	if m.confirmations.store == nil {
		return nil, nil
	}
	pending, err := m.confirmations.store.PendingConfirmations(ctx, ref.ThreadID)
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
	r, tasks := m.workOf(ref.ThreadID, func(t *BackgroundTask) bool { return t.RunID == ref.RunID })
	return (r != nil && r.ID == ref.RunID) || len(tasks) > 0
}

// leaveToPeer reports whether the settlement of work on the thread whose
// claim, held by owner, ran out at expires is better left to another
// instance for now. A settlement writes the text the work streamed and
// stored in no block from what its hub heard live; a process that started
// after the owner last renewed the claim (a restarted instance) may have
// heard none of it, while an instance that was up then heard all the bus
// carried. So while such an instance is live, a newer process leaves the
// work to it. On a bus that routes by thread, an instance hears only the
// threads it serves, from when it began to: one that did not hear the
// run from its run-start leaves the work to any other live instance, one
// of which may have (those settle at the expiry). Either way for at most
// one more lease past the expiry (two for an instance that did not hear
// the run and holds none of its text): after that it settles the work
// anyway.
func (m *Runs) leaveToPeer(ctx context.Context, ref RunRef, owner string, expires time.Time) bool {
	lastRenewal := expires.Add(-m.leases.ttl)
	unheard := m.leases.heardRun != nil && !m.leases.heardRun(ref.ThreadID, ref.RunID)
	wait := m.leases.ttl
	if unheard && !m.hubHoldsText(ref) {
		// One that holds none of the run's text waits a lease longer
		// than one that began to follow the thread after the run started
		// but heard a segment of it whole: that one settles first.
		wait = 2 * m.leases.ttl
	}
	if m.leases.peers == nil || m.now().After(expires.Add(wait)) {
		return false
	}
	if !unheard && !m.leases.startedAt.After(lastRenewal) {
		return false
	}
	live, err := m.leases.peers(ctx)
	if err != nil {
		return false // settle now rather than not at all
	}
	return slices.ContainsFunc(live, func(o Instance) bool {
		return o.ID != m.leases.instance && o.ID != owner && (unheard || o.StartedAt.Before(lastRenewal))
	})
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
