package instanceai

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Gone stops a run whose events the log refused as not found: its thread
// was deleted under it (by another instance, or before the run's start
// could see it), and maybe created again by someone else. The run and its
// background agents stop at once and write nothing more; the writer drops
// what they still queue.
func (m *Runs) Gone(threadID, runID string) {
	r, tasks := m.workOf(threadID, func(t *BackgroundTask) bool { return t.RunID == runID })
	for _, t := range tasks {
		t.cancel(errThreadGone)
	}
	if r == nil || r.ID != runID {
		return
	}
	m.log.Warn("stopping a run whose thread is gone", "thread", threadID, "run", runID)
	// Out of the registry before its agent can return, so that whoever
	// waits for the run's end finds the thread free.
	r.mu.Lock()
	r.finished = true
	r.mu.Unlock()
	m.table.remove(r)
	m.releaseClaim(threadID, runID, r.fence.token())
	r.cancel(errThreadGone)
}

// ControlOutcome says what a request that steers a run (a cancel, an
// answer) came to.
type ControlOutcome string

const (
	// Applied: the request took effect. For a cancel, none of the
	// thread's work runs any more: it was stopped here, or by the instance
	// that ran it within the wait, or settled here (no live process held
	// it), or nothing was running. For an answer, the run took it and
	// went on.
	Applied ControlOutcome = "applied"
	// Accepted: the request is recorded in the database, but the
	// instance that runs the work has not acted on it within the wait; it
	// does at its next lease renewal at the latest.
	Accepted ControlOutcome = "accepted"
)

// Cancel stops the thread's active run and its background agents, if any,
// wherever they run. It is idempotent. A run of this process is finished
// (cancelled) before it returns; each background agent ends with
// agent-completed{status:"cancelled"} as soon as it stops. Work another
// instance runs is asked to stop in the database, where its owner reads
// the request with its next lease renewal (the bus tells it at once when
// it can), and Cancel waits (a few seconds at most) until every row of the
// thread's work let go: then the outcome is Applied, otherwise
// Accepted. A run no live process holds (suspended on a
// confirmation, or left by a dead instance) is taken and settled here. An
// error means the request could not be recorded, and no work of the
// thread was stopped here: the cancel may not happen.
func (m *Runs) Cancel(threadID, reason string) (*Run, ControlOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteCancelWait)
	defer cancel()
	asked, askErr := m.leases.claims.RequestCancel(ctx, threadID, reason)
	m.control.SendControl(Control{Kind: ControlCancel, ThreadID: threadID, Reason: reason})
	local := m.cancelLocal(threadID, reason)
	stoppedHere := local != nil || m.hasBackground(threadID)
	ref := local
	if askErr != nil {
		if !stoppedHere {
			return nil, "", fmt.Errorf("cancel: record the request: %w", askErr)
		}
		m.log.Warn("cancel: could not record the request; stopped what runs here", "thread", threadID, "err", askErr)
		return ref, Applied, nil
	}
	if !asked && !stoppedHere {
		return nil, Applied, nil // nothing runs
	}
	if local == nil {
		row, err := m.leases.claims.ActiveRun(ctx, threadID)
		switch {
		case err == nil:
			ref = &Run{ID: row.RunID, StartRequest: StartRequest{ThreadID: threadID}}
			if row.Free(m.now()) {
				if err := m.settleUnheld(ctx, row, reason); err != nil {
					m.log.Error("could not cancel a run no process holds", "thread", threadID, "run", row.RunID, "err", err)
				}
			}
		case !errors.Is(err, ErrNotFound):
			m.log.Error("cancel: could not read the thread's active run", "thread", threadID, "err", err)
		}
	}
	if m.waitCancelled(ctx, threadID) {
		return ref, Applied, nil
	}
	return ref, Accepted, nil
}

// hasBackground reports whether background agents of the thread work here.
func (m *Runs) hasBackground(threadID string) bool {
	return m.background.any(threadID, func(*BackgroundTask) bool { return true })
}

// waitCancelled waits until no row of the thread carries a cancel request
// (the work let go of them), or ctx ends; it reports which.
func (m *Runs) waitCancelled(ctx context.Context, threadID string) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pending, err := m.leases.claims.CancelPending(ctx, threadID)
		if err == nil && !pending {
			return true
		}
		select {
		case <-ctx.Done():
			m.log.Warn("a cancelled run's instance did not let go of it in time; it stops it at its next lease renewal",
				"thread", threadID)
			return false
		case <-tick.C:
		}
	}
}

// cancelLocal stops what this process runs of the thread: its background
// agents and its active run. It returns the run it stopped, if any.
func (m *Runs) cancelLocal(threadID, reason string) *Run {
	for _, t := range m.background.ofThread(threadID) {
		t.cancel(cancelled{reason})
	}
	r := m.Active(threadID)
	if r == nil {
		return nil
	}
	r.stop(reason)
	return r
}

// drainPoll is how often Drain looks whether the runs are done.
const drainPoll = 50 * time.Millisecond

// Drain refuses new runs (Start gives ErrDraining) and waits until the
// runs working on this instance are done, or ctx ends: runs suspended on
// a confirmation do not count, since Shutdown hands them over, but
// background agents do. It returns how many are still working. A rolling
// restart drains each instance, so runs finish instead of being cancelled.
func (m *Runs) Drain(ctx context.Context) int {
	m.table.drain()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		n := m.atWork()
		if n == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
	}
}

// Draining reports whether Drain began.
func (m *Runs) Draining() bool { return m.table.isDraining() }

// atWork counts the runs and background agents still at work here.
func (m *Runs) atWork() int {
	runs, tasks := m.allWork()
	n := len(tasks)
	// A run's own lock is taken with the table's released, as everywhere
	// else.
	for _, r := range runs {
		r.mu.Lock()
		if r.waiting.asked == 0 {
			n++
		}
		r.mu.Unlock()
	}
	return n
}

// Shutdown cancels every active run (reason service_shutdown) and waits for
// their agents to return, or ctx to end.
func (m *Runs) Shutdown(ctx context.Context) error {
	runs, tasks := m.allWork()
	for _, t := range tasks {
		t.cancel(cancelled{ReasonServiceShutdown})
	}
	for _, r := range runs {
		r.mu.Lock()
		// A run that waits for a person whose request is out; one that
		// stored its suspension but has not queued the request yet is
		// stopped like a working one: nobody could answer it.
		waiting := r.waiting.asked > 0
		r.mu.Unlock()
		if waiting && m.agentResumes() {
			// Waiting for a person: keep it suspended, owned by no process,
			// for whichever instance gets the answer.
			r.cancel(errSuspendedAtShutdown)
			m.table.remove(r)
			if err := m.leases.claims.DisownRun(context.Background(), r.ThreadID, r.ID, r.fence.token()); err != nil {
				m.log.Error("could not hand over a suspended run", "thread", r.ThreadID, "run", r.ID, "err", err)
			}
			continue
		}
		r.stop(ReasonServiceShutdown)
	}
	done := make(chan struct{})
	go func() { m.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fail ends a run whose events could not be stored; the writer has already
// published its error and run-finish live. Its background agents stop too
// (see failAgents).
func (m *Runs) Fail(threadID, runID string, err error) {
	m.failAgents(threadID, runID, "", err)
	r := m.Active(threadID)
	if r == nil || r.ID != runID {
		return
	}
	r.cancel(err)
	r.mu.Lock()
	was := r.finished
	r.finished = true
	r.mu.Unlock()
	m.table.remove(r)
	// The writer queued its run-finish{error, storage_unavailable}.
	if ro, ok := m.obs.(RunObserver); ok && !was {
		ro.RunFinished(r.agentLabel(), RunError)
	}
}
