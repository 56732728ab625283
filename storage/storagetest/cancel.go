package storagetest

import (
	"context"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// testCancelRequests: a cancel asked of a thread's work is written into
// the rows of its active run and of all its background agents, and the
// owners' renewals return it; a thread without rows has nothing to ask;
// the request goes with the rows, and a later claim starts without one.
func testCancelRequests(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "c", "owner")
	ensure(t, s, "idle", "owner")
	if asked, err := s.RequestCancel(ctx, "idle", instanceai.ReasonUserCancelled); err != nil || asked {
		t.Fatalf("a thread without work: asked %v, %v", asked, err)
	}
	if pending, err := s.CancelPending(ctx, "idle"); err != nil || pending {
		t.Fatalf("pending on a thread without work: %v, %v", pending, err)
	}
	row, err := s.ClaimThread(ctx, "c", "run-1", "inst-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	agent := instanceai.AgentRef{ThreadID: "c", RunID: "run-0", AgentID: "agent-1"}
	agentFence, err := s.ClaimAgent(ctx, agent, "inst-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := s.CancelPending(ctx, "c"); err != nil || pending {
		t.Fatalf("pending before any cancel: %v, %v", pending, err)
	}
	if asked, err := s.RequestCancel(ctx, "c", instanceai.ReasonUserCancelled); err != nil || !asked {
		t.Fatalf("RequestCancel: asked %v, %v", asked, err)
	}
	if pending, err := s.CancelPending(ctx, "c"); err != nil || !pending {
		t.Fatalf("pending after the cancel: %v, %v", pending, err)
	}
	runs, err := s.RenewRuns(ctx, "inst-a", time.Minute)
	if err != nil || len(runs) != 1 || runs[0].CancelReason != instanceai.ReasonUserCancelled || runs[0].Fence != row.Fence {
		t.Fatalf("the run's owner renews %+v, %v; want the row with the request", runs, err)
	}
	agents, err := s.RenewAgents(ctx, "inst-b", time.Minute)
	if err != nil || len(agents) != 1 || agents[0].CancelReason != instanceai.ReasonUserCancelled {
		t.Fatalf("the agent's owner renews %+v, %v; want the row with the request", agents, err)
	}
	if got, err := s.ActiveRun(ctx, "c"); err != nil || got.CancelReason != instanceai.ReasonUserCancelled {
		t.Fatalf("ActiveRun = %+v, %v", got, err)
	}
	// The work lets go: the run's finish and the agent's completion
	// release their rows, and the request is gone with them.
	if err := s.ReleaseRun(ctx, "c", "run-1", row.Fence); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.CancelPending(ctx, "c"); err != nil || !pending {
		t.Fatalf("pending while the agent still holds its row: %v, %v", pending, err)
	}
	if err := s.ReleaseAgent(ctx, agent, agentFence); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.CancelPending(ctx, "c"); err != nil || pending {
		t.Fatalf("pending once every row let go: %v, %v", pending, err)
	}
	next, err := s.ClaimThread(ctx, "c", "run-2", "inst-a", time.Minute)
	if err != nil || next.CancelReason != "" {
		t.Fatalf("the next run's claim = %+v, %v; want no request", next, err)
	}
}
