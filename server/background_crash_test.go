package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/server/servertest"
)

// TestCrashWhileBackgroundAgentWorks kills a real server with SIGKILL while
// the reference agent's background agent works after its run's run-finish,
// in the middle of a tool call, and restarts it on the same store: within
// a lease the agent ends with exactly one agent-completed{status:"error"},
// its open call with exactly one tool-interrupted, no call is left open,
// and the status lists no background task. Later heartbeats settle
// nothing more.
func TestCrashWhileBackgroundAgentWorks(t *testing.T) {
	leases := []string{"-lease", testLease.String(), "-lease-renew", testLeaseRenew.String()}
	for _, st := range crashStores {
		t.Run(st.name, func(t *testing.T) {
			spec := st.spec(t)
			const thread = "bgcrash"
			// The background agent pauses five times as long as the
			// orchestrator, so it works on after the run-finish: 1.5 s
			// between its events, which is how late the kill may land
			// (a busy machine's reader lagging) and still find it at work.
			p := launch(t, spec, 300*time.Millisecond, leases...)
			runID := p.chat(thread, "background")
			orch := instanceai.OrchestratorAgentID(runID)
			finished := false
			var agentID, openCall string
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			p.acked(ctx, thread, func(ev instanceai.Event, _ int) bool {
				switch pl := ev.Payload.(type) {
				case *instanceai.RunFinish:
					finished = true
				case *instanceai.ToolCall:
					if finished && ev.AgentID != orch {
						agentID, openCall = ev.AgentID, pl.ToolCallID
						return true
					}
				}
				return false
			})
			cancel()
			p.Kill()

			p = launch(t, spec, 100*time.Millisecond, leases...)
			conn := p.API.Connect(thread, "", false)
			frames := conn.Until(wait, func(f servertest.Frame) bool {
				return f.Decoded.Type == instanceai.TypeAgentCompleted && f.Decoded.AgentID == agentID
			})
			// A few heartbeats more: nothing else may come.
			for {
				f, ok := conn.FrameWithin(4 * testLeaseRenew)
				if !ok {
					break
				}
				if f.Data != "" {
					frames = append(frames, f)
				}
			}
			conn.Close()

			completed, interrupted := 0, map[string]int{}
			var events []instanceai.Event
			for _, f := range frames {
				ev := f.Decoded
				if ev.RunID != runID {
					t.Fatalf("an event of run %s in the thread", ev.RunID)
				}
				events = append(events, ev)
				if pl, ok := ev.Payload.(*instanceai.AgentCompleted); ok && ev.AgentID == agentID {
					completed++
					if pl.Status != instanceai.RunError {
						t.Fatalf("the background agent completed %+v, want status error", pl)
					}
				}
				if pl, ok := ev.Payload.(*instanceai.ToolError); ok && ev.Type == instanceai.TypeToolInterrupted {
					interrupted[pl.ToolCallID]++
				}
			}
			if completed != 1 {
				t.Fatalf("%d agent-completed events of the background agent, want 1", completed)
			}
			if id := loadingToolCall(agenttree.Fold(events)); id != "" {
				t.Fatalf("the folded tree still shows tool call %s loading", id)
			}
			if fmt.Sprint(interrupted) != fmt.Sprint(map[string]int{openCall: 1}) {
				t.Fatalf("tool-interrupted per call = %v, want one for %s", interrupted, openCall)
			}
			var status instanceai.ThreadStatus
			p.get("/instance-ai/threads/"+thread+"/status", &status)
			if status.HasActiveRun || len(status.BackgroundTasks) != 0 {
				t.Fatalf("status after the settlement = %+v", status)
			}
			p.Kill()
		})
	}
}
