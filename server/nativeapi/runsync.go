package nativeapi

import (
	"context"
	"encoding/json"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// runSync is the payload of an `event: run-sync` frame: a live run's agent
// tree, folded from everything the connection has been sent so far, so a
// client can replace its state for that run instead of trusting what it
// pieced together before a reconnect.
type runSync struct {
	RunID       string               `json:"runId"`
	ThreadID    string               `json:"threadId"`
	Status      string               `json:"status"`
	IsSuspended bool                 `json:"isSuspended"`
	AgentTree   *agenttree.AgentNode `json:"agentTree"`
}

// runSyncFrames builds one id-less run-sync frame per live run of the
// thread whose run-start the connection was sent, folding the run's stored events up to committed plus the open
// segments the connection was just sent.
func (a *API) runSyncFrames(ctx context.Context, threadID string, committed int64, open []instanceai.Event) []instanceai.Delivery {
	var out []instanceai.Delivery
	status := a.core.Status(ctx, threadID)
	for _, runID := range a.core.LiveRuns(threadID) {
		rows, err := a.store.RunEvents(ctx, threadID, runID)
		if err != nil {
			a.cfg.Logger.Warn("run-sync: read run", "thread", threadID, "run", runID, "err", err)
			continue
		}
		// RunEvents begins at the run's run-start, so folding its rows per
		// run is folding them all into the one run.
		run := agenttree.FoldRuns(rows, committed).Get(runID)
		if run == nil {
			// The run began after what this connection was sent: its
			// run-start is coming live, and there is nothing to sync yet.
			continue
		}
		st := run.State
		for _, ev := range open {
			if ev.RunID == runID {
				st.Apply(ev)
			}
		}
		data, err := json.Marshal(runSync{RunID: runID, ThreadID: threadID, Status: st.Status,
			IsSuspended: status.RunID == runID && status.IsSuspended, AgentTree: st.Tree()})
		if err != nil {
			continue
		}
		out = append(out, instanceai.Delivery{Type: "run-sync", Data: data})
	}
	return out
}
