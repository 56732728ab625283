package agenttree

import "github.com/threadline/threadline/instanceai"

// Run is one run of a thread's log with its own state, as a chat message
// shows it: folded from its run-start on, apart from the thread's other
// runs.
type Run struct {
	ID string
	// StartedAt is the TS of the run's run-start (Unix milliseconds).
	StartedAt int64
	State     *State
}

// Runs folds a thread's log per run. The zero value is ready for use.
type Runs struct {
	order []*Run
	byID  map[string]*Run
}

// Apply folds one event, given in log order, into its run's state. A run
// begins at its run-start: an event of a run whose run-start has not come,
// or of no run at all (a title update), is left out.
func (rs *Runs) Apply(ev instanceai.Event) {
	r := rs.byID[ev.RunID]
	if r == nil {
		if ev.Type != instanceai.TypeRunStart {
			return
		}
		if rs.byID == nil {
			rs.byID = map[string]*Run{}
		}
		r = &Run{ID: ev.RunID, StartedAt: ev.TS, State: New()}
		rs.byID[ev.RunID] = r
		rs.order = append(rs.order, r)
	}
	r.State.Apply(ev)
}

// Get returns the run of an id, nil before its run-start.
func (rs *Runs) Get(runID string) *Run { return rs.byID[runID] }

// All returns the runs in the order of their run-starts.
func (rs *Runs) All() []*Run { return rs.order }

// FoldRuns folds the stored events up to and with seq through (rows in seq
// order) per run.
func FoldRuns(rows []instanceai.StoredEvent, through int64) *Runs {
	rs := &Runs{}
	for _, row := range rows {
		if row.Seq > through {
			break
		}
		rs.Apply(row.Event)
	}
	return rs
}
