package instanceai

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

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
		if err := m.settleUnbegun(ctx, ref, holder); err != nil {
			return false, err
		}
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
	m.closeSettledConfirmations(ctx, ref)
	m.log.Info("settled a run whose process is gone", "thread", ref.ThreadID, "run", ref.RunID)
	return true, nil
}

// settleUnbegun settles a run claimed by a process that died, or was cut
// off, before its run-start was stored: its client may hold the run's id
// (a chat is answered once the run-start is queued), so the run is written
// under holder as begun and interrupted at once, rather than never heard
// of again.
func (m *Runs) settleUnbegun(ctx context.Context, ref RunRef, holder *fence) error {
	now := m.now().UnixMilli()
	var user string
	if m.threads != nil {
		t, err := m.threads.GetThread(ctx, ref.ThreadID)
		if err != nil {
			return fmt.Errorf("read thread %q: %w", ref.ThreadID, err)
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
			return err
		}
	}
	m.log.Info("settled a run whose process died before its run-start was stored", "thread", ref.ThreadID, "run", ref.RunID)
	return nil
}

// closeSettledConfirmations closes the confirmations of a settled run
// that the store holds pending, whether or not their request reached the
// log (a process may die in between).
func (m *Runs) closeSettledConfirmations(ctx context.Context, ref RunRef) {
	if m.confirmations.store == nil {
		return
	}
	pending, err := m.confirmations.store.PendingConfirmations(ctx, ref.ThreadID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		// The settlement is queued already; an answer to one of them is
		// refused once the run-finish is stored anyway.
		m.log.Warn("could not close a settled run's confirmations", "thread", ref.ThreadID, "run", ref.RunID, "err", err)
	}
	for _, c := range pending {
		if c.RunID == ref.RunID {
			m.closeConfirmation(c.RequestID)
		}
	}
}

// interruptedToolError is what a tool call left in flight by a dead process
// is settled with (n8n's wording).
const interruptedToolError = "Interrupted by a process restart — effect unverified; verify before retrying."

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
