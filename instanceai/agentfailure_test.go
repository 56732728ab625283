package instanceai_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// A batch that holds only a background agent's own events (written under
// a claim of its own) and cannot be stored fails the agent alone: its run,
// whose run-finish is in the log already, gets no second ending, nothing
// is published for it, the registry is told about the agent once, and what
// the agent still queues is dropped, while the thread's other events are
// stored as usual once the log answers.
func TestRetryBudgetFailsABackgroundAgentAlone(t *testing.T) {
	store := memory.New()
	counting := &countingLog{EventLog: store}
	var mu sync.Mutex
	var failedRuns, failedAgents []string
	e := newEnv(t, counting, instanceai.WriterConfig{IdleFlush: time.Hour, Retries: 1, RetryBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		OnRunFailed: func(thread, run string, err error) {
			mu.Lock()
			defer mu.Unlock()
			failedRuns = append(failedRuns, thread+"/"+run)
		},
		OnAgentFailed: func(thread, run, agent string, err error) {
			mu.Lock()
			defer mu.Unlock()
			failedAgents = append(failedAgents, thread+"/"+run+"/"+agent)
		}})
	e.store = store
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()
	e.send(t, ev(instanceai.TypeRunStart, "r", "o", &instanceai.RunStart{MessageID: "m"}), finish("r", "o"))
	helper := instanceai.NewFence("r", "h", 0)
	sendAs := func(f *instanceai.Fence, events ...instanceai.Event) {
		t.Helper()
		for _, x := range events {
			if err := instanceai.EnqueueFenced(e.writer, "t", x, f); err != nil {
				t.Fatal(err)
			}
		}
		e.send(t)
	}
	counting.failing.Store(2) // the append and its one retry
	sendAs(helper, call("r", "h", "c1"))
	sendAs(helper, call("r", "h", "c2"))
	e.send(t, ev(instanceai.TypeRunStart, "r2", "o2", &instanceai.RunStart{MessageID: "m2"}))

	expectLog(t, e.logShape(t), "run-start[o]", "run-finish[o]", "run-start[o2]")
	mu.Lock()
	defer mu.Unlock()
	if len(failedRuns) != 0 || len(failedAgents) != 1 || failedAgents[0] != "t/r/h" {
		t.Fatalf("failed runs %v, agents %v; want agent t/r/h alone", failedRuns, failedAgents)
	}
	published := publishedUntil(t, sub, func(last string) bool { return last == "run-start@3" })
	if want := "run-start@1 run-finish@2 run-start@3"; strings.Join(published, " ") != want {
		t.Fatalf("published %v, want %s", published, want)
	}
}

// The database goes away under a live background agent until the writer
// gives up: either while the orchestrator works (the run fails with
// storage_unavailable, and its agent's events are dropped with it) or
// after the run's finish (the agent's own events fail). The agent is
// stopped either way, and once the database is back, its instance settles
// it from the log: its open call gets tool-interrupted and the agent
// agent-completed{error}, once, after which its row is released. The run
// has one run-finish.
func TestAFailedWriteSettlesTheBackgroundAgentOnce(t *testing.T) {
	toolInterrupted := "tool-interrupted:h1=Interrupted: the server could not store this agent's events — effect unverified; verify before retrying. @helper"
	agentCompleted := "agent-completed:helper:error::The server could not store this agent's events; the agent was stopped. @helper"
	for _, tc := range []struct {
		name string
		// orchestrating: the orchestrator works on while the database
		// goes away, and emits during the outage; else the agent does,
		// after the run's finish.
		orchestrating bool
		// stored is how many events of the run the log holds when the
		// database goes away.
		stored int
		want   []string
	}{
		{name: "while the orchestrator works", orchestrating: true, stored: 3, want: []string{
			"run-start @orch",
			"agent-spawned:helper @helper",
			"tool-call:h1 @helper",
			"error:The server could not store this run's events; the run was stopped. @orch",
			"run-finish:error:storage_unavailable @orch",
			toolInterrupted,
			agentCompleted,
		}},
		{name: "after the run's finish", stored: 4, want: []string{
			"run-start @orch",
			"agent-spawned:helper @helper",
			"tool-call:h1 @helper",
			"run-finish:completed: @orch",
			toolInterrupted,
			agentCompleted,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			p := newPGBehindProxy(t)
			calling, cut := make(chan struct{}), make(chan struct{})
			agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
				_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
					err := a.Emit(toolCall("h1"))
					close(calling)
					if err != nil {
						return "", err
					}
					if !tc.orchestrating {
						<-cut
						if err := a.Emit(toolResult("h1", `1`)); err != nil {
							return "", err
						}
					}
					<-ctx.Done()
					return "", context.Cause(ctx)
				})
				if err != nil {
					return err
				}
				<-calling
				if !tc.orchestrating {
					return nil
				}
				if err := run.Sync(ctx); err != nil {
					return err
				}
				<-cut
				if err := run.Emit(toolCall("o1")); err != nil {
					return err
				}
				<-ctx.Done()
				return context.Cause(ctx)
			})
			core := p.core(t, p.store, agent)
			run, err := core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "go"})
			if err != nil {
				t.Fatal(err)
			}
			<-calling
			if !tc.orchestrating {
				<-run.Done()
			}
			p.waitFor(t, "what the run emitted before the outage is stored", func() bool {
				return len(p.runLog(t, run.ID)) == tc.stored
			})
			p.proxy.Cut()
			close(cut)
			p.waitFor(t, "the write failed and the agent stopped", func() bool {
				st := core.Status(ctx, "t")
				return !st.HasActiveRun && len(st.BackgroundTasks) == 0
			})
			if rows := p.agentRows(t, run.ID); len(rows) != 1 {
				t.Fatalf("the agent's rows during the outage: %+v; want its row", rows)
			}

			p.proxy.Heal()
			p.waitFor(t, "the agent's row is released", func() bool { return len(p.agentRows(t, run.ID)) == 0 })
			expectLog(t, p.runLog(t, run.ID), tc.want...)
		})
	}
}

// appendsFail is a memory store whose appends fail while failing is set,
// as over a link to a database that does not answer.
type appendsFail struct {
	*memory.Store
	failing atomic.Bool
}

var errNoAnswer = errors.New("the database does not answer")

func (s *appendsFail) AppendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	if s.failing.Load() {
		return 0, errNoAnswer
	}
	return s.Store.AppendFenced(ctx, threadID, events, data, fences)
}

func (s *appendsFail) AppendEncoded(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte) (int64, error) {
	if s.failing.Load() {
		return 0, errNoAnswer
	}
	return s.Store.AppendEncoded(ctx, threadID, events, data)
}

// A sweep whose settlement of an orphaned background agent the log could
// not store keeps the agent's row (taken, and not renewed), so that a
// later sweep settles the agent once the log answers: once.
func TestASettlementTheLogCouldNotStoreKeepsTheRow(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "orphaned", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	leaveOrphanedAgent(t, store, "orphaned", "run_dead", "agent_dead")
	failing := &appendsFail{Store: store}
	failing.failing.Store(true)
	idle := instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil })
	b := instanceai.NewCore(failing, idle, instanceai.CoreConfig{Instance: "inst-b", Lease: 50 * time.Millisecond,
		Writer: instanceai.WriterConfig{IdleFlush: time.Hour, Retries: 1, RetryBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	t.Cleanup(func() { _ = b.Shutdown(ctx) })
	if n, err := b.Runs().SweepExpired(ctx); err == nil || n != 0 {
		t.Fatalf("SweepExpired while the log fails = %d, %v; want the settlement reported as not stored", n, err)
	}
	if rows, err := store.RunAgents(ctx, "orphaned", "run_dead"); err != nil || len(rows) != 1 || rows[0].Owner != "inst-b" {
		t.Fatalf("the agent's row after the failed settlement: %+v, %v; want it kept, taken by inst-b", rows, err)
	}

	failing.failing.Store(false)
	waitUntil(t, "the taken row ran out", func() bool {
		expired, err := store.ExpiredAgents(ctx)
		return err == nil && len(expired) == 1
	})
	if n, err := b.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired once the log answers = %d, %v; want the agent settled", n, err)
	}
	if rows, err := store.RunAgents(ctx, "orphaned", "run_dead"); err != nil || len(rows) != 0 {
		t.Fatalf("the agent's rows after its settlement: %+v, %v; want none", rows, err)
	}
	l := &lifecycle{t: t, store: store, agents: map[string]string{"agent_dead": "helper"}}
	l.expectLog("orphaned", "run_dead",
		"run-start @orch",
		"agent-spawned:helper @helper",
		"run-finish:completed: @orch",
		"tool-call:bg1 @helper",
		"tool-result:bg1=1 @helper",
		"tool-call:bg2 @helper",
		"tool-interrupted:bg2=Interrupted by a process restart — effect unverified; verify before retrying. @helper",
		"agent-completed:helper:error::interrupted by a process restart @helper")
}
