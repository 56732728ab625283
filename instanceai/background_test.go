package instanceai_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// spawner is an orchestrator that spawns one background builder and
// returns as soon as the builder made its first call. The builder then
// waits for release (or its context) and ends as end says.
type spawner struct {
	l       *lifecycle
	calling chan struct{}
	release chan struct{}
	end     func(ctx context.Context, agent *instanceai.SubAgent) (string, error)
	task    *instanceai.BackgroundTask
}

func newSpawner(end func(ctx context.Context, agent *instanceai.SubAgent) (string, error)) *spawner {
	return &spawner{calling: make(chan struct{}), release: make(chan struct{}), end: end}
}

func (s *spawner) Run(ctx context.Context, run *instanceai.Run) error {
	task, err := run.Spawn(instanceai.AgentSpawned{Role: "builder"}, func(ctx context.Context, agent *instanceai.SubAgent) (string, error) {
		if err := agent.Emit(toolCall("b1")); err != nil {
			return "", err
		}
		close(s.calling)
		select {
		case <-s.release:
		case <-ctx.Done():
		}
		return s.end(ctx, agent)
	})
	if err != nil {
		return err
	}
	s.task = task
	s.l.name(task.AgentID, "builder")
	<-s.calling
	return run.Emit(textDelta("r", "the builder is on it"))
}

func (s *spawner) start(t *testing.T) (*lifecycle, *instanceai.Run) {
	s.l = newLifecycle(t, s, "t")
	run := s.l.start("t", "build")
	s.l.settle(run)
	return s.l, run
}

// waitIdle waits until nothing of the thread runs any more.
func (l *lifecycle) waitIdle(thread string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := l.core.Runs().Wait(ctx, thread); err != nil {
		l.t.Fatal(err)
	}
	l.sync(thread)
}

var orchestratorPart = []string{
	"run-start @orch",
	"agent-spawned:builder @builder",
	"tool-call:b1 @builder",
	"text-block:the builder is on it @orch",
	"run-finish:completed: @orch",
}

func TestBackgroundAgentOutlivesTheOrchestratorsFinish(t *testing.T) {
	s := newSpawner(func(ctx context.Context, agent *instanceai.SubAgent) (string, error) {
		if err := agent.Emit(toolResult("b1", `"built"`)); err != nil {
			return "", err
		}
		return "workflow built", nil
	})
	l, run := s.start(t)
	ctx := context.Background()
	l.expectLog("t", run.ID, orchestratorPart...)

	// The orchestrator has finished: the thread is free and the
	// orchestrator can no longer write, but the builder still works.
	if a := l.core.Runs().Active("t"); a != nil {
		t.Fatalf("active run after the orchestrator's finish: %s", a.ID)
	}
	if err := run.Emit(toolCall("late")); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("orchestrator emit after its finish: %v, want ErrRunFinished", err)
	}
	st := l.core.Runs().Status(ctx, "t")
	if st.HasActiveRun || len(st.BackgroundTasks) != 1 || st.BackgroundTasks[0].TaskID != s.task.TaskID ||
		st.BackgroundTasks[0].Status != instanceai.BackgroundRunning || st.BackgroundTasks[0].RunID != run.ID {
		t.Fatalf("status while the builder works = %+v", st)
	}
	if live := l.core.Runs().LiveRuns("t"); len(live) != 1 || live[0] != run.ID {
		t.Fatalf("live runs = %v, want the builder's run", live)
	}

	close(s.release)
	l.waitIdle("t")
	// The builder's events go on under the same run id after the finish,
	// and its end is its agent-completed.
	l.expectLog("t", run.ID, append(orchestratorPart,
		`tool-result:b1="built" @builder`,
		"agent-completed:builder:completed:workflow built: @builder")...)
	if st := l.core.Runs().Status(ctx, "t"); len(st.BackgroundTasks) != 0 {
		t.Fatalf("background tasks after the builder completed: %+v", st.BackgroundTasks)
	}
	// Once completed, the builder's agent id is refused like the
	// orchestrator's.
	if err := run.Emit(instanceai.Event{Type: instanceai.TypeStatus, AgentID: s.task.AgentID,
		Payload: &instanceai.Status{Message: "x"}}); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("emit as a completed builder: %v, want ErrRunFinished", err)
	}
}

func TestBackgroundAgentEnds(t *testing.T) {
	cases := []struct {
		name string
		end  func(ctx context.Context, agent *instanceai.SubAgent) (string, error)
		// cancel cancels the thread instead of releasing the builder.
		cancel bool
		tail   []string
	}{
		{name: "with an error", end: func(context.Context, *instanceai.SubAgent) (string, error) {
			return "half done", errors.New("the builder broke")
		}, tail: []string{"tool-error:b1=" + runEnded + " @builder", "agent-completed:builder:error:half done:the builder broke @builder"}},
		{name: "with a panic", end: func(context.Context, *instanceai.SubAgent) (string, error) { panic("kaput") },
			tail: []string{"tool-error:b1=" + runEnded + " @builder", "agent-completed:builder:error::background agent failed unexpectedly: kaput @builder"}},
		{name: "cancelled with its call open", cancel: true,
			end: func(ctx context.Context, agent *instanceai.SubAgent) (string, error) { return "", ctx.Err() },
			tail: []string{
				"tool-result:b1=" + cancelledResult + " @builder",
				"agent-completed:builder:cancelled::cancelled: user_cancelled @builder",
			}},
		{name: "cancelled, reporting success all the same", cancel: true,
			end: func(ctx context.Context, agent *instanceai.SubAgent) (string, error) {
				<-ctx.Done()
				return "Built the workflow.", nil
			},
			tail: []string{
				"tool-result:b1=" + cancelledResult + " @builder",
				"agent-completed:builder:cancelled::cancelled: user_cancelled @builder",
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSpawner(c.end)
			l, run := s.start(t)
			if c.cancel {
				// The orchestrator is finished; Cancel reaches the builder.
				if got, _, _ := l.core.Runs().Cancel("t", instanceai.ReasonUserCancelled); got != nil {
					t.Fatalf("Cancel returned a run (%s) although only a background agent works", got.ID)
				}
			} else {
				close(s.release)
			}
			l.waitIdle("t")
			l.expectLog("t", run.ID, append(orchestratorPart, c.tail...)...)
		})
	}
}

func TestCancelStopsTheOrchestratorAndItsBackgroundAgents(t *testing.T) {
	calling := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			if err := a.Emit(toolCall("h1")); err != nil {
				return "", err
			}
			close(calling)
			<-ctx.Done()
			return "", ctx.Err()
		})
		if err != nil {
			return err
		}
		<-calling
		if err := run.Emit(toolCall("o1")); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	waitUntil(t, "both calls are stored", func() bool { l.sync("t"); return len(l.rows("t")) == 4 })
	helper := l.rows("t")[1].Event.AgentID
	l.name(helper, "helper")
	if got, _, _ := l.core.Runs().Cancel("t", instanceai.ReasonUserCancelled); got != run {
		t.Fatalf("Cancel returned %v", got)
	}
	l.waitIdle("t")
	// The orchestrator's finish settles its own call only; the helper
	// settles its call when it stops. The two stop concurrently, so their
	// events may interleave, each in its own order.
	l.expectInterleaved("t", run.ID,
		[]string{"run-start @orch", "agent-spawned:helper @helper", "tool-call:h1 @helper", "tool-call:o1 @orch"},
		[]string{"tool-result:o1=" + cancelledResult + " @orch", "run-finish:cancelled:user_cancelled @orch"},
		[]string{"tool-result:h1=" + cancelledResult + " @helper", "agent-completed:helper:cancelled::cancelled: user_cancelled @helper"})
}

// expectInterleaved asserts that the thread's log is prefix followed by a
// merge of a and b that keeps the order within each.
func (l *lifecycle) expectInterleaved(thread, runID string, prefix, a, b []string) {
	l.t.Helper()
	var got []string
	for _, r := range l.rows(thread) {
		if r.Event.RunID != runID {
			l.t.Fatalf("seq %d belongs to run %s, want %s", r.Seq, r.Event.RunID, runID)
		}
		got = append(got, l.describe(r.Event))
	}
	ok := len(got) == len(prefix)+len(a)+len(b) && slices.Equal(got[:len(prefix)], prefix)
	if ok {
		i, j := 0, 0
		for _, g := range got[len(prefix):] {
			switch {
			case i < len(a) && g == a[i]:
				i++
			case j < len(b) && g == b[j]:
				j++
			default:
				ok = false
			}
		}
	}
	if !ok {
		l.t.Fatalf("stored log of %s:\n  %s\nwant %v then a merge of\n  %v\nand\n  %v", thread,
			strings.Join(got, "\n  "), prefix, a, b)
	}
}
