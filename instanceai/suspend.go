package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Resumer is implemented by agents that can continue a run suspended on a
// confirmation in an earlier process: the server restarted while the run
// waited, and the answer arrives now. Resume gets the stored request and the
// answer and emits the rest of the run.
type Resumer interface {
	Resume(ctx context.Context, run *Run, req *ConfirmationRequest, answer Answer) error
}

// errSuspendedAtShutdown cancels a run that is waiting for a confirmation
// when the server shuts down: it stays suspended (no run-finish) and resumes
// in the next process once answered.
var errSuspendedAtShutdown = errors.New("suspended across a shutdown")

// resume continues, in this process, a suspended run that no live process
// runs (its process shut down or died) with the answer. The caller has
// taken the run's claim, whose token is fence.
func (m *Runs) resume(c *Confirmation, a Answer, fence int64) error {
	resumer, ok := m.agent.(Resumer)
	if !ok {
		return ErrConfirmationClosed
	}
	var req ConfirmationRequest
	if err := json.Unmarshal(c.Request, &req); err != nil {
		return fmt.Errorf("stored confirmation %s: %w", c.RequestID, err)
	}
	if err := m.waitStarting(c.ThreadID); err != nil {
		return err
	}
	rules := m.restoredRules(c.ThreadID, c.RunID)
	if r := m.table.get(c.ThreadID); r != nil {
		if r.ID == c.RunID {
			return ErrRunActive
		}
		// The caller holds the thread's row for c's run, so another run of
		// the thread here lost it: one that waited for a person in memory
		// while another instance took it with its answer, and has not
		// heard yet (its bus link is down; its heartbeat would tell it).
		m.stopTakenOver(r, "another instance took the thread's row while this run waited")
	}
	var r *Run
	adopted := m.table.adopt(c.ThreadID, func() *Run {
		ctx, cancel := context.WithCancelCause(context.Background())
		r = &Run{ID: c.RunID, StartRequest: StartRequest{ThreadID: c.ThreadID, UserID: c.OwnerID}, AgentID: OrchestratorAgentID(c.RunID),
			runs: m, ctx: ctx, cancel: cancel, done: make(chan struct{}), marks: tableMarks{claimed: true}, fence: newFence(c.RunID, "", fence),
			doorState: doorState{started: time.Now(), begun: true, rules: rules}}
		m.running.Add(1)
		return r
	})
	if !adopted {
		return ErrRunActive
	}
	go m.execute(r, func(ctx context.Context) error { return resumer.Resume(ctx, r, &req, a) })
	return nil
}

// waitStarting waits while a run is starting on the thread in this process
// without its claim yet: the caller holds the thread's row, so that start's
// claim fails and it goes (chats that a client retries on 409 meet a
// suspended run's answer this way).
func (m *Runs) waitStarting(threadID string) error {
	deadline := time.Now().Add(claimTimeout)
	for {
		if !m.table.starting(threadID) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("resume on thread %q: a run that is starting there did not give way: %w", threadID, ErrRunActive)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finishSuspended ends a run suspended across a restart that is cancelled
// before anyone answered, whose claim the caller took with token fence:
// its waiting call gets a cancelled result, then run-finish{cancelled}.
func (m *Runs) finishSuspended(c *Confirmation, reason string, fence int64) error {
	m.closeConfirmation(c.RequestID)
	var req ConfirmationRequest
	if err := json.Unmarshal(c.Request, &req); err != nil {
		return fmt.Errorf("stored confirmation %s: %w", c.RequestID, err)
	}
	now := m.now().UnixMilli()
	holder := newFence(c.RunID, "", fence)
	result, _ := json.Marshal(map[string]string{"status": "cancelled", "message": "The run was cancelled before this tool finished."})
	for _, ev := range []Event{
		{Type: TypeToolResult, RunID: c.RunID, AgentID: c.AgentID, UserID: c.OwnerID, TS: now,
			Payload: &ToolResult{ToolCallID: req.ToolCallID, Result: result}},
		{Type: TypeRunFinish, RunID: c.RunID, AgentID: OrchestratorAgentID(c.RunID), UserID: c.OwnerID, TS: now,
			Payload: &RunFinish{Status: RunCancelled, Reason: reason}},
	} {
		if err := m.writer.enqueue(c.ThreadID, ev, holder); err != nil {
			return err
		}
	}
	return nil
}

// restoredRules rebuilds, from the log, what the door of a run that goes
// on in this process checks its events against: its agents and its open
// tool calls (the call awaiting the answer among them, which a cancel
// then settles). A log that cannot be read leaves the rules lenient for
// the run, with the door's checks that need no history.
func (m *Runs) restoredRules(threadID, runID string) *runRules {
	k := newRunRules(OrchestratorAgentID(runID))
	if m.index == nil {
		k.lenient = true
		return k
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	rows, err := m.index.RunEvents(ctx, threadID, runID)
	if err != nil {
		m.log.Warn("could not read a resumed run's log; its events are checked without its history",
			"thread", threadID, "run", runID, "err", err)
		k.lenient = true
		return k
	}
	k.restore(rows)
	return k
}
