package instanceai

import (
	"context"
	"errors"
	"fmt"
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
