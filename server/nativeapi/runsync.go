package nativeapi

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// runSyncFrames builds the id-less run-sync frames a connection gets when
// its replay is over: one per run whose state its client may hold wrongly
// or in part. Those are the runs live in this process, the thread's active
// run wherever it runs, and the runs the connection resumed at its cursor
// (their run-start came before it): a client that reconnects holds what it
// pieced together of them before, which may be text another instance's
// hub never saw, or that a writer that died never stored. Each is folded
// from the run's stored events up to what the connection was sent, plus
// the open segments it was just sent; a run that began after that has its
// run-start coming live and needs none.
func (a *API) runSyncFrames(ctx context.Context, threadID string, h instanceai.Handoff) []instanceai.Delivery {
	status := a.core.Status(ctx, threadID)
	runs := a.core.LiveRuns(threadID)
	if status.HasActiveRun && !slices.Contains(runs, status.RunID) {
		runs = append(runs, status.RunID)
	}
	for _, id := range h.Resumed {
		if !slices.Contains(runs, id) {
			runs = append(runs, id)
		}
	}
	var out []instanceai.Delivery
	for _, runID := range runs {
		if d, ok := a.runSync(ctx, threadID, runID, h.Last, h.Open, status); ok {
			out = append(out, d)
		}
	}
	return out
}

// runSync folds one run's stored events up to last, and the open segments
// given, into its run-sync frame; false when the run began after last.
func (a *API) runSync(ctx context.Context, threadID, runID string, last int64, open []instanceai.Event, status instanceai.ThreadStatus) (instanceai.Delivery, bool) {
	rows, err := a.core.RunEvents(ctx, threadID, runID)
	if err != nil {
		a.cfg.Logger.Warn("run-sync: read run", "thread", threadID, "run", runID, "err", err)
		return instanceai.Delivery{}, false
	}
	// RunEvents begins at the run's run-start, so folding its rows per
	// run is folding them all into the one run.
	run := agenttree.FoldRuns(rows, last).Get(runID)
	if run == nil {
		return instanceai.Delivery{}, false
	}
	st := run.State
	for _, ev := range open {
		if ev.RunID == runID {
			st.Apply(ev)
		}
	}
	data, err := json.Marshal(agenttree.RunSync{RunID: runID, ThreadID: threadID, Status: st.Status,
		IsSuspended: status.RunID == runID && status.IsSuspended, AgentTree: st.Tree()})
	if err != nil {
		return instanceai.Delivery{}, false
	}
	return instanceai.Delivery{Type: agenttree.RunSyncFrameType, Data: data}, true
}

// restate is a feed's Restate: the run-sync of a run whose client holds
// text of a segment beyond its stored block (see instanceai.Delivery.Repair),
// folded up to the block.
func (a *API) restate(ctx context.Context, threadID, runID string, upTo int64) []instanceai.Delivery {
	status := a.core.Status(ctx, threadID)
	if d, ok := a.runSync(ctx, threadID, runID, upTo, nil, status); ok {
		return []instanceai.Delivery{d}
	}
	return nil
}
