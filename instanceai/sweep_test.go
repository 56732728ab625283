package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// appendRun stores events as run runID's, of user u.
func appendRun(t *testing.T, store *memory.Store, thread, runID string, events []instanceai.Event) {
	t.Helper()
	for i := range events {
		events[i].RunID, events[i].UserID, events[i].TS = runID, "u", 1
		if err := events[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Append(context.Background(), thread, events); err != nil {
		t.Fatal(err)
	}
}

// leaveCrashedRun writes what a process that died mid-run leaves behind:
// a run-start, an open tool call, a background agent that never completed
// and a pending confirmation, with a claim whose lease has already run out.
func leaveCrashedRun(t *testing.T, store *memory.Store, thread, runID string) {
	t.Helper()
	ctx := context.Background()
	orch := instanceai.OrchestratorAgentID(runID)
	req := &instanceai.ConfirmationRequest{RequestID: "cr-dead", ToolCallID: "c2", ToolName: "tool", Args: json.RawMessage(`{}`),
		Severity: instanceai.SeverityWarning, Message: "Go on?"}
	events := []instanceai.Event{
		{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeToolCall, AgentID: orch, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "tool", Args: json.RawMessage(`{}`)}},
		{Type: instanceai.TypeAgentSpawned, AgentID: "agent_dead", Payload: &instanceai.AgentSpawned{ParentID: orch, Role: "helper", Tools: []string{}}},
		{Type: instanceai.TypeConfirmRequest, AgentID: orch, Payload: req},
	}
	appendRun(t, store, thread, runID, events)
	raw, _ := json.Marshal(req)
	if err := store.AddConfirmation(ctx, instanceai.Confirmation{RequestID: "cr-dead", ThreadID: thread, RunID: runID, AgentID: orch,
		ToolCallID: "c2", OwnerID: "u", Request: raw, Status: instanceai.ConfirmationPending, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ClaimThread(ctx, thread, runID, "inst-dead", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead instance's lease expired", func() bool {
		row, err := store.ActiveRun(ctx, thread)
		return err == nil && row.Free(time.Now())
	})
}

var crashedRunLog = []string{
	"run-start @orch",
	"tool-call:c1 @orch",
	"agent-spawned:helper @helper",
	"confirmation-request:cr-dead @orch",
}

var settledCrashLog = append(slices.Clone(crashedRunLog),
	"tool-interrupted:c1=Interrupted by a process restart — effect unverified; verify before retrying. @orch",
	"agent-completed:helper:error::interrupted by a process restart @helper",
	"run-finish:interrupted:crash_interrupted @orch")

// An instance's sweep settles a run whose owner's lease expired, and
// leaves alone a run suspended on a confirmation and a run another live
// instance works on.
func TestSweepSettlesExpiredRunsOnly(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	working := make(chan struct{})
	agent := resumingAgent{func(ctx context.Context, run *instanceai.Run) error {
		if run.Message != "work" {
			return askingAgent(ctx, run)
		}
		if err := run.Emit(toolCall("c1")); err != nil {
			return err
		}
		close(working)
		<-ctx.Done()
		return ctx.Err()
	}}
	// Instance a is alive: its runs' leases are far from running out.
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: time.Minute}, "crashed", "waiting", "busy")
	waiting := a.suspended("waiting")
	busy := a.start("busy", "work")
	<-working
	a.sync("busy")
	leaveCrashedRun(t, store, "crashed", "run_dead")

	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	b.name("agent_dead", "helper")
	n, err := b.core.Runs().SweepExpired(ctx)
	if err != nil || n != 1 {
		t.Fatalf("SweepExpired = %d, %v; want 1 run settled", n, err)
	}
	b.sync("crashed")
	b.expectLog("crashed", "run_dead", settledCrashLog...)
	if c, err := store.GetConfirmation(ctx, "cr-dead"); err != nil || c.Status != instanceai.ConfirmationCancelled {
		t.Fatalf("the crashed run's confirmation = %+v, %v; want cancelled", c, err)
	}
	if _, err := store.ActiveRun(ctx, "crashed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("claim of the settled run: %v, want ErrNotFound", err)
	}

	// Neither sweep touches the waiting run nor the working one, and a
	// second sweep finds nothing to settle.
	if n, err := b.core.Runs().SweepExpired(ctx); err != nil || n != 0 {
		t.Fatalf("second SweepExpired = %d, %v", n, err)
	}
	if n, err := b.core.Runs().Sweep(ctx, store); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want nothing settled", n, err)
	}
	if n, err := a.core.Runs().Sweep(ctx, store); err != nil || n != 0 {
		t.Fatalf("Sweep by the runs' own instance = %d, %v", n, err)
	}
	b.sync("waiting")
	b.sync("busy")
	a.expectLog("waiting", waiting.ID, "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr1 @orch")
	a.expectLog("busy", busy.ID, "run-start @orch", "tool-call:c1 @orch")
	if a.core.Runs().Active("waiting") != waiting || a.core.Runs().Active("busy") != busy {
		t.Fatal("a sweep took a run from its live instance")
	}
	if row, err := store.ActiveRun(ctx, "busy"); err != nil || row.Owner != "inst-a" {
		t.Fatalf("claim of the working run = %+v, %v", row, err)
	}
	if row, err := store.ActiveRun(ctx, "waiting"); err != nil || row.Owner != "" || !row.Suspended {
		t.Fatalf("claim of the waiting run = %+v, %v; want suspended, owned by nobody", row, err)
	}
	if c, _ := store.GetConfirmation(ctx, "cr1"); c.Status != instanceai.ConfirmationPending {
		t.Fatalf("the waiting run's confirmation became %s", c.Status)
	}

	// The waiting run still takes its answer.
	if _, _, err := a.core.Runs().Answer(ctx, "u", "cr1", instanceai.Answer{Approved: true}); err != nil {
		t.Fatal(err)
	}
	a.settle(waiting)
	a.expectLog("waiting", waiting.ID, "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr1 @orch",
		`tool-result:c1="deleted" @orch`, "run-finish:completed: @orch")
}

// The startup sweep settles a dead instance's run too, and leaves a run of
// its own process alone.
func TestStartupSweepSettlesADeadInstancesRun(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		<-ctx.Done()
		return ctx.Err()
	})
	l := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Lease: time.Minute}, "crashed", "live")
	l.name("agent_dead", "helper")
	live := l.start("live", "work")
	leaveCrashedRun(t, store, "crashed", "run_dead")
	n, err := l.core.Runs().Sweep(ctx, store)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	// Sweep returns once the settling events are stored.
	l.expectLog("crashed", "run_dead", settledCrashLog...)
	l.sync("live")
	l.expectLog("live", live.ID, "run-start @orch")
	if l.core.Runs().Active("live") != live {
		t.Fatal("the startup sweep took this process's own run")
	}
}

// A process that stored a run's suspension and its confirmation, and died
// before the confirmation-request reached the log, leaves a suspended run
// it still owns: nobody was asked, so nobody can answer, and once its lease
// runs out the sweep settles it like any crashed run and closes the
// confirmation, instead of leaving it waiting forever.
func TestSweepSettlesASuspendedRunWhoseRequestWasNeverStored(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	l := newLifecycleOn(t, store, resumingAgent{askingAgent}, instanceai.CoreConfig{Instance: "inst-b"}, "unasked")
	orch := instanceai.OrchestratorAgentID("run_dead")
	appendRun(t, store, "unasked", "run_dead", []instanceai.Event{
		{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeToolCall, AgentID: orch, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "tool", Args: json.RawMessage(`{}`)}},
	})
	if err := store.AddConfirmation(ctx, instanceai.Confirmation{RequestID: "cr-unsent", ThreadID: "unasked", RunID: "run_dead", AgentID: orch,
		ToolCallID: "c1", OwnerID: "u", Request: json.RawMessage(`{}`), Status: instanceai.ConfirmationPending, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	row, err := store.ClaimThread(ctx, "unasked", "run_dead", "inst-dead", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SuspendRun(ctx, "unasked", "run_dead", row.Fence, true); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead instance's lease expired", func() bool {
		row, err := store.ActiveRun(ctx, "unasked")
		return err == nil && row.Free(time.Now())
	})
	if n, err := l.core.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired = %d, %v; want the run settled", n, err)
	}
	l.sync("unasked")
	l.expectLog("unasked", "run_dead", "run-start @orch", "tool-call:c1 @orch",
		"tool-interrupted:c1=Interrupted by a process restart — effect unverified; verify before retrying. @orch",
		"run-finish:interrupted:crash_interrupted @orch")
	if c, err := store.GetConfirmation(ctx, "cr-unsent"); err != nil || c.Status != instanceai.ConfirmationCancelled {
		t.Fatalf("the confirmation nobody was sent = %+v, %v; want cancelled", c, err)
	}
	if _, err := store.ActiveRun(ctx, "unasked"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("claim of the settled run: %v, want ErrNotFound", err)
	}
}

// leaveOrphanedAgent writes what a process that died while a background
// agent worked after its run's run-finish leaves behind: a finished run
// whose agent has spawned, opened a tool call and never completed, and the
// agent's row, whose lease has already run out.
func leaveOrphanedAgent(t *testing.T, store *memory.Store, thread, runID, agentID string) {
	t.Helper()
	ctx := context.Background()
	orch := instanceai.OrchestratorAgentID(runID)
	events := []instanceai.Event{
		{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeAgentSpawned, AgentID: agentID, Payload: &instanceai.AgentSpawned{ParentID: orch, Role: "helper", Tools: []string{}}},
		{Type: instanceai.TypeRunFinish, AgentID: orch, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}},
		{Type: instanceai.TypeToolCall, AgentID: agentID, Payload: &instanceai.ToolCall{ToolCallID: "bg1", ToolName: "tool", Args: json.RawMessage(`{}`)}},
		{Type: instanceai.TypeToolResult, AgentID: agentID, Payload: &instanceai.ToolResult{ToolCallID: "bg1", Result: json.RawMessage(`1`)}},
		{Type: instanceai.TypeToolCall, AgentID: agentID, Payload: &instanceai.ToolCall{ToolCallID: "bg2", ToolName: "tool", Args: json.RawMessage(`{}`)}},
	}
	appendRun(t, store, thread, runID, events)
	if _, err := store.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: thread, RunID: runID, AgentID: agentID}, "inst-dead", -time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
}

// A background agent that worked on after its run's run-finish when its
// process died is settled by a live instance's sweep, once: its open call
// gets tool-interrupted and the agent agent-completed{error}. A background
// agent that a live instance runs after its own run's finish is left alone,
// by that instance's sweep and by another's, and its lease is renewed.
func TestSweepSettlesOrphanedBackgroundAgents(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	working := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "builder"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			if err := a.Emit(toolCall("live1")); err != nil {
				return "", err
			}
			close(working)
			<-ctx.Done()
			return "", ctx.Err()
		})
		return err
	})
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 50 * time.Millisecond}, "orphaned", "busy")
	busy := a.start("busy", "work")
	a.settle(busy)
	<-working
	a.sync("busy")
	leaveOrphanedAgent(t, store, "orphaned", "run_dead", "agent_dead")
	// inst-a's own row runs out too, as when its heartbeat is late: its own
	// sweep must still tell its live agent from a dead one.
	time.Sleep(60 * time.Millisecond)

	if n, err := a.core.Runs().Sweep(ctx, store); err != nil || n != 1 {
		t.Fatalf("Sweep by inst-a = %d, %v; want the orphaned agent settled", n, err)
	}
	a.name("agent_dead", "helper")
	a.expectLog("orphaned", "run_dead",
		"run-start @orch",
		"agent-spawned:helper @helper",
		"run-finish:completed: @orch",
		"tool-call:bg1 @helper",
		"tool-result:bg1=1 @helper",
		"tool-call:bg2 @helper",
		"tool-interrupted:bg2=Interrupted by a process restart — effect unverified; verify before retrying. @helper",
		"agent-completed:helper:error::interrupted by a process restart @helper")
	if expired, err := store.ExpiredAgents(ctx); err != nil || len(expired) != 1 || expired[0].AgentID == "agent_dead" {
		t.Fatalf("agent rows left expired = %+v, %v; want only inst-a's live agent", expired, err)
	}

	// Another instance's sweeps settle nothing more: not the agent settled
	// already, not inst-a's live agent once its heartbeat renewed it.
	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	a.core.Start(10 * time.Millisecond)
	waitUntil(t, "inst-a renewed its agent's lease", func() bool {
		expired, err := store.ExpiredAgents(ctx)
		return err == nil && len(expired) == 0
	})
	for _, sweep := range []func(context.Context) (int, error){
		b.core.Runs().SweepExpired, func(ctx context.Context) (int, error) { return b.core.Runs().Sweep(ctx, store) },
	} {
		if n, err := sweep(ctx); err != nil || n != 0 {
			t.Fatalf("a second sweep = %d, %v; want nothing settled", n, err)
		}
	}
	if st := a.core.Runs().Status(ctx, "busy"); len(st.BackgroundTasks) != 1 {
		t.Fatalf("inst-a's live agent is gone from its status: %+v", st)
	}
	a.sync("orphaned")
	if rows := a.rows("orphaned"); len(rows) != 8 {
		t.Fatalf("the orphaned agent's log has %d events after the later sweeps, want 8", len(rows))
	}
	for _, r := range a.rows("busy") {
		if r.Event.Type == instanceai.TypeAgentCompleted {
			t.Fatal("a sweep completed inst-a's live agent")
		}
	}

	// Once the live agent completes, its row goes.
	a.core.Cancel("busy")
	a.waitIdle("busy")
	waitUntil(t, "the completed agent's row is released", func() bool {
		refs, err := store.RunAgents(ctx, "busy", busy.ID)
		return err == nil && len(refs) == 0
	})
}

// A background agent's row whose lease ran out while its run has no
// run-finish in the log is left to its owner by another instance's sweep:
// its owner's link to the database may only have stalled, past the agent's
// lease but not past the claim of its run, and the run's agent-spawned and
// the agent's own events may still be on their way. Taking the row would
// fence the agent out while its agent-spawned is then stored under the
// run's claim, which still holds: the agent spawned and never completed.
// (Should the run be settled instead, its settlement completes the agent.)
func TestSweepLeavesTheAgentOfARunTheLogHasNotSeenFinish(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	b := newLifecycleOn(t, store, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }),
		instanceai.CoreConfig{Instance: "inst-b"}, "th")
	orch := instanceai.OrchestratorAgentID("run_slow")
	appendRun(t, store, "th", "run_slow", []instanceai.Event{
		{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
	})
	if _, err := store.ClaimThread(ctx, "th", "run_slow", "inst-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	ref := instanceai.AgentRef{ThreadID: "th", RunID: "run_slow", AgentID: "agent_slow"}
	token, err := store.ClaimAgent(ctx, ref, "inst-a", -time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.core.Runs().Sweep(ctx, store); err != nil || n != 0 {
		t.Fatalf("Sweep by inst-b = %d, %v; want nothing settled", n, err)
	}
	held, err := store.RenewAgents(ctx, "inst-a", time.Minute, []int64{token})
	if err != nil || len(held) != 1 || held[0].AgentRef != ref || held[0].Fence != token {
		t.Fatalf("inst-a's agent rows = %+v, %v; want its row, with its token %d, left to it", held, err, token)
	}
	if rows := b.rows("th"); len(rows) != 1 {
		t.Fatalf("the sweep wrote %d events; want none", len(rows)-1)
	}
}

// An instance whose background agent's row another instance took (its
// lease ran out while its heartbeat stalled, and that instance settled the
// agent) stops the agent at its next heartbeat without writing anything
// more of it.
func TestBackgroundAgentWhoseRowWasTakenStopsSilently(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	working := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "builder"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			close(working)
			<-ctx.Done()
			return "", ctx.Err()
		})
		return err
	})
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a"}, "th")
	run := a.start("th", "work")
	a.settle(run)
	<-working
	st := a.core.Runs().Status(ctx, "th")
	if len(st.BackgroundTasks) != 1 {
		t.Fatalf("status = %+v; want one background task", st)
	}
	bg := st.BackgroundTasks[0]
	ref := instanceai.AgentRef{ThreadID: "th", RunID: bg.RunID, AgentID: bg.AgentID}
	if _, err := store.ClaimAgent(ctx, ref, "inst-b", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	before := len(a.rows("th"))
	a.core.Start(10 * time.Millisecond)
	a.waitIdle("th")
	if after := len(a.rows("th")); after != before {
		t.Fatalf("the agent wrote %d events after its row was taken", after-before)
	}
	if refs, err := store.RunAgents(ctx, "th", ref.RunID); err != nil || len(refs) != 1 || refs[0].AgentRef != ref || refs[0].Owner != "inst-b" {
		t.Fatalf("the taker's row = %+v, %v; want it left to the taker", refs, err)
	}
}

// A process that stored a run's confirmation-request and died before it
// handed the run to no one leaves a suspended run it still owns: once its
// lease ran out, the sweep hands it over for it (suspended, owned by no
// process, still waiting for its answer), or ends it cancelled when a
// cancel of it was asked meanwhile.
func TestSweepHandsOverAWaitingRunItsDeadOwnerStillHeld(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		ctx := context.Background()
		store := memory.New()
		l := newLifecycleOn(t, store, resumingAgent{askingAgent}, instanceai.CoreConfig{Instance: "inst-b"}, "t")
		orch := instanceai.OrchestratorAgentID("run_dead")
		req := &instanceai.ConfirmationRequest{RequestID: "cr-1", ToolCallID: "c1", ToolName: "tool", Args: json.RawMessage(`{}`),
			Severity: instanceai.SeverityWarning, Message: "Go on?"}
		appendRun(t, store, "t", "run_dead", []instanceai.Event{
			{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
			{Type: instanceai.TypeToolCall, AgentID: orch, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "tool", Args: json.RawMessage(`{}`)}},
			{Type: instanceai.TypeConfirmRequest, AgentID: orch, Payload: req},
		})
		raw, _ := json.Marshal(req)
		if err := store.AddConfirmation(ctx, instanceai.Confirmation{RequestID: "cr-1", ThreadID: "t", RunID: "run_dead", AgentID: orch,
			ToolCallID: "c1", OwnerID: "u", Request: raw, Status: instanceai.ConfirmationPending, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		row, err := store.ClaimThread(ctx, "t", "run_dead", "inst-dead", time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.SuspendRun(ctx, "t", "run_dead", row.Fence, true); err != nil {
			t.Fatal(err)
		}
		if cancelled {
			if _, err := store.RequestCancel(ctx, "t", instanceai.ReasonUserCancelled); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "the dead instance's lease expired", func() bool {
			row, err := store.ActiveRun(ctx, "t")
			return err == nil && row.Free(time.Now())
		})
		if _, err := l.core.Runs().SweepExpired(ctx); err != nil {
			t.Fatal(err)
		}
		l.sync("t")
		if !cancelled {
			if row, err := store.ActiveRun(ctx, "t"); err != nil || row.Owner != "" || !row.Suspended {
				t.Fatalf("claim after the sweep = %+v, %v; want suspended, owned by nobody", row, err)
			}
			if c, _ := store.GetConfirmation(ctx, "cr-1"); c.Status != instanceai.ConfirmationPending {
				t.Fatalf("the confirmation became %s", c.Status)
			}
			continue
		}
		l.expectLog("t", "run_dead", "run-start @orch", "tool-call:c1 @orch", "confirmation-request:cr-1 @orch",
			"tool-result:c1="+cancelledResult+" @orch", "run-finish:cancelled:user_cancelled @orch")
		if c, _ := store.GetConfirmation(ctx, "cr-1"); c.Status != instanceai.ConfirmationCancelled {
			t.Fatalf("the cancelled run's confirmation is %s", c.Status)
		}
	}
}

// completesAtListing is a memory store on which a cut-off instance's
// background agent completes itself, under its own row's token, at the
// moment a settlement of its run lists the run's agents: after the
// settlement read the run, before it claims the agents' rows.
type completesAtListing struct {
	*memory.Store
	once     sync.Once
	complete func()
}

func (s *completesAtListing) RunAgents(ctx context.Context, threadID, runID string) ([]instanceai.AgentClaim, error) {
	s.once.Do(s.complete)
	return s.Store.RunAgents(ctx, threadID, runID)
}

// A run's settlement completes the run's agents that are still open, and
// no other: an agent of the run that completed itself on its cut-off
// instance between the settlement's read of the run and its claims of the
// agents' rows keeps its own agent-completed, the only one in the log.
func TestASettlementDoesNotCompleteAnAgentThatCompletedMeanwhile(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	orch := instanceai.OrchestratorAgentID("run_cut")
	appendRun(t, store, "t", "run_cut", []instanceai.Event{
		{Type: instanceai.TypeRunStart, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeAgentSpawned, AgentID: "agent_cut", Payload: &instanceai.AgentSpawned{ParentID: orch, Role: "helper", Tools: []string{}}},
	})
	row, err := store.ClaimThread(ctx, "t", "run_cut", "inst-cut", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ref := instanceai.AgentRef{ThreadID: "t", RunID: "run_cut", AgentID: "agent_cut"}
	agentFence, err := store.ClaimAgent(ctx, ref, "inst-cut", time.Minute, row.Fence)
	if err != nil {
		t.Fatal(err)
	}
	completion := instanceai.Event{Type: instanceai.TypeAgentCompleted, RunID: "run_cut", AgentID: "agent_cut", UserID: "u", TS: 1,
		Payload: &instanceai.AgentCompleted{Role: "helper", Status: instanceai.RunCompleted, Result: "done"}}
	wrapped := &completesAtListing{Store: store, complete: func() {
		data, err := json.Marshal(&completion)
		if err == nil {
			_, err = store.AppendFenced(ctx, "t", []instanceai.Event{completion}, [][]byte{data}, []int64{agentFence})
		}
		if err != nil {
			t.Errorf("the agent's own agent-completed: %v", err)
		}
	}}
	idle := instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil })
	b := instanceai.NewCore(wrapped, idle, instanceai.CoreConfig{Instance: "inst-b"})
	t.Cleanup(func() { _ = b.Shutdown(ctx) })
	if n, err := b.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired = %d, %v; want the run settled", n, err)
	}
	if err := b.Writer().Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	l := &lifecycle{t: t, store: store, agents: map[string]string{"agent_cut": "helper"}}
	l.expectLog("t", "run_cut",
		"run-start @orch",
		"agent-spawned:helper @helper",
		"agent-completed:helper:completed:done: @helper",
		"run-finish:interrupted:crash_interrupted @orch")
}
