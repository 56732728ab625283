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
	agentFence, err := s.ClaimAgent(ctx, agent, "inst-b", time.Minute, 0)
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
	agents, err := s.RenewAgents(ctx, "inst-b", time.Minute, []int64{agentFence})
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

// testDisownedRowsTheSweepTakes: ExpiredRuns lists, besides the rows whose
// owner's lease ran out, the rows without an owner that no process keeps:
// one that waits for no person, and one that waits for a person whose
// answer is stored once its lease ran out (the instance that got the
// answer died before it took the run). A row that waits for an unanswered
// person, and one whose lease is live, are not listed. A store without
// confirmations (one process) lists the first kind only.
func testDisownedRowsTheSweepTakes(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	listed := func() map[string]bool {
		t.Helper()
		rows, err := s.ExpiredRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range rows {
			out[r.ThreadID] = true
		}
		return out
	}
	claim := func(thread string, suspended bool, ttl time.Duration) instanceai.ActiveRun {
		t.Helper()
		ensure(t, s, thread, "owner")
		row, err := s.ClaimThread(ctx, thread, "run-"+thread, "inst-a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SuspendRun(ctx, thread, row.RunID, row.Fence, suspended); err != nil {
			t.Fatal(err)
		}
		if err := s.DisownRun(ctx, thread, row.RunID, row.Fence); err != nil {
			t.Fatal(err)
		}
		return row
	}
	confirm := func(thread, status string) {
		t.Helper()
		id := "cr-" + thread
		if err := s.AddConfirmation(ctx, instanceai.Confirmation{RequestID: id, ThreadID: thread, RunID: "run-" + thread,
			AgentID: "a", ToolCallID: "c", OwnerID: "owner", Request: []byte(`{}`), Status: instanceai.ConfirmationPending,
			CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if status != instanceai.ConfirmationPending {
			if err := s.AnswerConfirmation(ctx, id, status, []byte(`{"approved":true}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim("stray", false, time.Hour)
	claim("waiting", true, -time.Second)
	confirm("waiting", instanceai.ConfirmationPending)
	claim("answered", true, -time.Second)
	confirm("answered", instanceai.ConfirmationApproved)
	claim("just-answered", true, time.Hour)
	confirm("just-answered", instanceai.ConfirmationDenied)
	got := listed()
	if !got["stray"] || got["waiting"] || got["just-answered"] {
		t.Fatalf("ExpiredRuns lists %v; want the stray, not the waiting run nor the one just answered", got)
	}
	// A store several processes share (one that keeps their registry)
	// knows the answers of runs no process holds.
	if _, shared := s.(instanceai.InstanceRegistry); shared && !got["answered"] {
		t.Fatalf("ExpiredRuns lists %v; want the answered run whose lease ran out", got)
	}
}
