package instanceai

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
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

// openWork is what a run's events leave open, folded by the rules the
// run's door keeps (runRules): its tool calls without an outcome, in call
// order, and its spawned agents that never completed, with the run's user
// and whether its run-finish is there.
type openWork struct {
	userID   string
	rules    *runRules
	finished bool
}

func openWorkOf(runID string, rows []StoredEvent) openWork {
	w := openWork{rules: newRunRules(OrchestratorAgentID(runID))}
	w.rules.restore(rows)
	for _, row := range rows {
		if row.Event.UserID != "" {
			w.userID = row.Event.UserID
		}
		if row.Event.Type == TypeRunFinish {
			w.finished = true
		}
	}
	return w
}

// working returns the role of a spawned agent that has not completed.
func (w openWork) working(agentID string) (role string, ok bool) {
	a := w.rules.agents[agentID]
	if a == nil || a.completed {
		return "", false
	}
	return a.role, true
}

func interruptedCall(runID string, c liveCall, userID, why string, now int64) Event {
	return Event{Type: TypeToolInterrupted, RunID: runID, AgentID: c.agentID, UserID: userID, TS: now,
		Payload: &ToolError{ToolCallID: c.id, Error: why}}
}

func interruptedAgent(runID, agentID, role, userID, why string, now int64) Event {
	return Event{Type: TypeAgentCompleted, RunID: runID, AgentID: agentID, UserID: userID, TS: now,
		Payload: &AgentCompleted{Role: role, Status: RunError, Error: why}}
}

// settleInterrupted returns the events that close an interrupted run.
func settleInterrupted(runID string, rows []StoredEvent, now int64) []Event {
	w := openWorkOf(runID, rows)
	var out []Event
	for _, c := range w.rules.calls {
		out = append(out, interruptedCall(runID, c, w.userID, crashedAgent.tool, now))
	}
	for _, a := range w.rules.spawnedWorking() {
		role, _ := w.working(a)
		out = append(out, interruptedAgent(runID, a, role, w.userID, crashedAgent.agent, now))
	}
	out = append(out, Event{Type: TypeRunFinish, RunID: runID, AgentID: OrchestratorAgentID(runID), UserID: w.userID, TS: now,
		Payload: &RunFinish{Status: RunInterrupted, Reason: ReasonCrashed}})
	return out
}

// openText returns the blocks of the run's segments (agent's only, when
// it is set) that a writer checkpointed and did not live to close (see
// Checkpoint), and whether the store holds pieces of them at all.
//
// The text this instance's hub passed on live of such a segment counts
// too: the writer checkpoints what it has published, so its pieces lag its
// deltas by up to the checkpoint interval, and the clients that followed
// the run hold what they were sent. Where this instance heard more of a
// segment than its pieces hold (both are its writer's text from the
// start), the block is written from what it heard, so that the clients
// here, and on every instance that heard as much, hold the block's text.
func (m *Runs) openText(ctx context.Context, ref RunRef, rows []StoredEvent, agent string) ([]Event, bool, error) {
	var blocks []Event
	var pieces []Checkpoint
	if cs, ok := m.index.(CheckpointStore); ok {
		var err error
		if pieces, err = cs.RunCheckpoints(ctx, ref.ThreadID, ref.RunID); err != nil {
			return nil, false, fmt.Errorf("read the checkpoints of run %s: %w", ref.RunID, err)
		}
		blocks = openSegmentBlocks(rows, pieces, agent)
	}
	if m.leases.hubText != nil {
		open, after := m.leases.hubText(ref.ThreadID, ref.RunID)
		blocks = withHubText(blocks, rows, open, after, agent)
	}
	for i := range blocks {
		// Pieces stored before segments were bounded may hold more than a
		// block may: the settlement keeps what the bound allows.
		if t := blocks[i].Payload.(*Text).Text; escapedLen(t) > m.limits.MaxSegmentBytes {
			blocks[i].Payload = &Text{Text: cutEscaped(t, m.limits.MaxSegmentBytes)}
		}
	}
	return blocks, len(pieces) > 0, nil
}

// withHubText merges the live text of open segments into the blocks
// made of checkpoint pieces: a live text that extends a block's replaces
// it; one of a segment without pieces, that no stored block closed since
// it began, is a block of its own, after the others.
func withHubText(blocks []Event, rows []StoredEvent, open []Event, after []int64, agent string) []Event {
	for i := range open {
		live := &open[i]
		if agent != "" && live.AgentID != agent {
			continue
		}
		typ := TypeTextBlock
		if live.Type == TypeReasoningDelta {
			typ = TypeReasoningBlock
		}
		text := live.Payload.(*Text).Text
		j := slices.IndexFunc(blocks, func(b Event) bool {
			return b.Type == typ && b.AgentID == live.AgentID && b.ResponseID == live.ResponseID
		})
		if j >= 0 {
			if had := blocks[j].Payload.(*Text).Text; len(text) > len(had) && strings.HasPrefix(text, had) {
				blocks[j].Payload = &Text{Text: text}
			}
			continue
		}
		closed := slices.ContainsFunc(rows, func(r StoredEvent) bool {
			return r.Seq > after[i] && r.Event.Type == typ && r.Event.AgentID == live.AgentID && r.Event.ResponseID == live.ResponseID
		})
		if !closed {
			blocks = append(blocks, Event{Type: typ, RunID: live.RunID, AgentID: live.AgentID, UserID: live.UserID,
				ResponseID: live.ResponseID, TS: live.TS, Payload: &Text{Text: text}})
		}
	}
	return blocks
}

// dropPieces deletes the run's checkpoint pieces (agent's only, when it is
// set) once the blocks made of them are stored: the writer's Sync first.
func (m *Runs) dropPieces(ctx context.Context, ref RunRef, agent string) error {
	if err := m.writer.Sync(ctx, ref.ThreadID); err != nil {
		return err
	}
	if err := m.index.(CheckpointStore).DeleteRunCheckpoints(ctx, ref.ThreadID, ref.RunID, agent); err != nil {
		return fmt.Errorf("delete the checkpoints of run %s: %w", ref.RunID, err)
	}
	return nil
}

// hubHoldsText reports whether the hub holds text of the run that is in
// no block yet, each segment of it whole from its start (see Hub.LiveText).
func (m *Runs) hubHoldsText(ref RunRef) bool {
	if m.leases.hubText == nil {
		return false
	}
	open, _ := m.leases.hubText(ref.ThreadID, ref.RunID)
	return len(open) > 0
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
