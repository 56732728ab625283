package instanceai

import "sync"

// runTable is the runs active in this process, one per thread, with what
// keeps new ones out: a deletion under way on their thread, or a drain.
// Its lock also guards each run's tableMarks. Lock order: a run's own
// lock, then the table's, then the background agents', the
// confirmations' or the orphaned claims'.
type runTable struct {
	mu       sync.Mutex
	byThread map[string]*Run
	// deleting counts the deletions under way per thread: a run does not
	// start on a thread while one is (see Runs.beginDelete).
	deleting map[string]int
	// draining refuses new runs (see Runs.Drain).
	draining bool
}

// tableMarks is what the run table records of a run, under its lock.
type tableMarks struct {
	// claimed is set once the run holds its thread's row: from then on
	// the heartbeat expects to renew it.
	claimed bool
	// deleted is set when a deletion of the thread begins while the run
	// is registered.
	deleted bool
}

func newRunTable() runTable {
	return runTable{byThread: map[string]*Run{}, deleting: map[string]int{}}
}

// admit registers the run build makes (under the table's lock) as the
// thread's active run, unless the thread has one (returned, with
// *RunActiveError), a drain began (ErrDraining), or a deletion of the
// thread is under way (*ThreadNotFoundError).
func (t *runTable) admit(threadID string, build func() *Run) (*Run, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.byThread[threadID]; r != nil {
		return r, &RunActiveError{ThreadID: threadID, RunID: r.ID}
	}
	if t.draining {
		return nil, ErrDraining
	}
	if t.deleting[threadID] > 0 {
		return nil, &ThreadNotFoundError{ThreadID: threadID}
	}
	r := build()
	t.byThread[threadID] = r
	return r, nil
}

// adopt registers the run build makes as the thread's active run unless
// the thread has one, and reports whether it did: a run that goes on in
// this process is taken in during a drain or a deletion too, as it was
// before it left.
func (t *runTable) adopt(threadID string, build func() *Run) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byThread[threadID] != nil {
		return false
	}
	t.byThread[threadID] = build()
	return true
}

// get returns the thread's active run, if any.
func (t *runTable) get(threadID string) *Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byThread[threadID]
}

// isLocked reports whether the run runID is the thread's active run;
// t.mu is held.
func (t *runTable) isLocked(threadID, runID string) bool {
	r := t.byThread[threadID]
	return r != nil && r.ID == runID
}

// holds reports whether r is still its thread's active run.
func (t *runTable) holds(r *Run) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byThread[r.ThreadID] == r
}

// all returns the active runs.
func (t *runTable) all() []*Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.allLocked()
}

func (t *runTable) allLocked() []*Run {
	runs := make([]*Run, 0, len(t.byThread))
	for _, r := range t.byThread {
		runs = append(runs, r)
	}
	return runs
}

// count returns the number of active runs.
func (t *runTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byThread)
}

// remove takes r out of the table, if it is still its thread's run.
func (t *runTable) remove(r *Run) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(r)
}

// removeLocked is remove with t.mu held; it reports whether r was there.
func (t *runTable) removeLocked(r *Run) bool {
	if t.byThread[r.ThreadID] != r {
		return false
	}
	delete(t.byThread, r.ThreadID)
	return true
}

// markClaimed records that r holds its thread's row.
func (t *runTable) markClaimed(r *Run) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.marks.claimed = true
}

// claimedRuns returns the runs that hold their thread's row.
func (t *runTable) claimedRuns() []*Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	runs := make([]*Run, 0, len(t.byThread))
	for _, r := range t.byThread {
		if r.marks.claimed {
			runs = append(runs, r)
		}
	}
	return runs
}

// starting reports whether a run of the thread is registered without its
// claim yet.
func (t *runTable) starting(threadID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.byThread[threadID]
	return r != nil && !r.marks.claimed
}

// beginDelete marks the thread as being deleted until the returned func
// is called (see Runs.beginDelete).
func (t *runTable) beginDelete(threadID string) (end func()) {
	t.mu.Lock()
	t.deleting[threadID]++
	if r := t.byThread[threadID]; r != nil {
		r.marks.deleted = true
	}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.deleting[threadID]--; t.deleting[threadID] <= 0 {
			delete(t.deleting, threadID)
		}
	}
}

// deletedWhileRegistered reports whether a deletion of r's thread began
// while r was registered.
func (t *runTable) deletedWhileRegistered(r *Run) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.marks.deleted
}

// drain refuses new runs from now on.
func (t *runTable) drain() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.draining = true
}

// isDraining reports whether drain was called.
func (t *runTable) isDraining() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.draining
}
