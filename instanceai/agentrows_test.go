package instanceai_test

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/faultproxy"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/storage/memory"
	"github.com/threadline/threadline/storage/postgres"
)

// outageWait bounds the waits of the tests that cut a store off its
// PostgreSQL: generous, as they reconnect on a busy machine.
const outageWait = time.Minute

// pgBehindProxy is a fresh PostgreSQL schema with thread "t", reached by
// store through a fault proxy, and by direct, which no fault touches, to
// look at what the database holds.
type pgBehindProxy struct {
	proxy  *faultproxy.Proxy
	store  *postgres.Store
	direct *postgres.Store
}

func newPGBehindProxy(t *testing.T) *pgBehindProxy {
	t.Helper()
	ctx := context.Background()
	dsn := testpg.FreshDSN(t)
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("TEST_DATABASE_URL must be a postgres:// URL to put a proxy in the way (%q): %v", dsn, err)
	}
	proxy, err := faultproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	viaProxy := *u
	viaProxy.Host = proxy.Addr()
	open := func(dsn string) *postgres.Store {
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	p := &pgBehindProxy{proxy: proxy, store: open(viaProxy.String()), direct: open(dsn)}
	if err := p.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	return p
}

// core starts a Core of instance inst-a over store, whose heartbeat runs
// every 20 ms. Its lease is long: no sweep settles anything of it while a
// test runs, so what gets settled is its own doing.
func (p *pgBehindProxy) core(t *testing.T, store instanceai.Store, agent instanceai.Agent) *instanceai.Core {
	t.Helper()
	core := instanceai.NewCore(store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: time.Hour,
		Writer: instanceai.WriterConfig{IdleFlush: time.Hour, Retries: 1, RetryBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	core.Start(20 * time.Millisecond)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), outageWait)
		defer cancel()
		// The database is back by now: the shutdown stores what it must.
		p.proxy.Heal()
		_ = core.Shutdown(ctx)
	})
	return core
}

// waitFor waits until cond holds, or fails the test naming what.
func (p *pgBehindProxy) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(outageWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// agentRows returns the rows the database holds of the run's agents.
func (p *pgBehindProxy) agentRows(t *testing.T, runID string) []instanceai.AgentClaim {
	t.Helper()
	rows, err := p.direct.RunAgents(context.Background(), "t", runID)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// runLog renders the run's stored events, as expectLog does, with the
// orchestrator as "orch" and every other agent as "helper".
func (p *pgBehindProxy) runLog(t *testing.T, runID string) []string {
	t.Helper()
	rows, err := p.direct.RunEvents(context.Background(), "t", runID)
	if err != nil {
		t.Fatal(err)
	}
	l := &lifecycle{t: t, agents: map[string]string{}}
	var out []string
	for _, r := range rows {
		if r.Event.AgentID != instanceai.OrchestratorAgentID(runID) {
			l.name(r.Event.AgentID, "helper")
		}
		out = append(out, l.describe(r.Event))
	}
	return out
}

// cutAtCompletion is the store, which cuts its own link to the database as
// soon as it has stored an agent-completed: the next statement, the
// release of the agent's row, meets the cut.
type cutAtCompletion struct {
	*postgres.Store
	cut  func()
	once sync.Once
}

func (c *cutAtCompletion) AppendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	first, err := c.Store.AppendFenced(ctx, threadID, events, data, fences)
	c.cutAfter(events, err)
	return first, err
}

func (c *cutAtCompletion) AppendEncoded(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte) (int64, error) {
	first, err := c.Store.AppendEncoded(ctx, threadID, events, data)
	c.cutAfter(events, err)
	return first, err
}

func (c *cutAtCompletion) cutAfter(events []instanceai.Event, err error) {
	if err != nil {
		return
	}
	for _, ev := range events {
		if ev.Type == instanceai.TypeAgentCompleted {
			c.once.Do(c.cut)
		}
	}
}

// A background agent's agent-completed is stored, and at that moment its
// instance's link to PostgreSQL is cut: the release of the agent's row
// meets the cut. The instance stops renewing the row and tries the
// release again at every heartbeat; once the link is back, the row goes,
// and the log holds the agent's agent-completed once.
func TestAnAgentsRowIsReleasedOnceTheDatabaseIsBack(t *testing.T) {
	ctx := context.Background()
	p := newPGBehindProxy(t)
	cuts := make(chan struct{})
	store := &cutAtCompletion{Store: p.store, cut: func() { p.proxy.Cut(); close(cuts) }}
	calling, finish := make(chan struct{}), make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			err := a.Emit(toolCall("h1"))
			close(calling)
			if err != nil {
				return "", err
			}
			<-finish
			return "done", a.Emit(toolResult("h1", `1`))
		})
		if err == nil {
			<-calling
		}
		return err
	})
	core := p.core(t, store, agent)
	run, err := core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	// The run's own row goes with its run-finish, before the cut.
	p.waitFor(t, "the run's run-finish is stored and its row released", func() bool {
		_, err := p.direct.ActiveRun(ctx, "t")
		return errors.Is(err, instanceai.ErrNotFound)
	})
	close(finish)
	<-cuts
	p.waitFor(t, "the agent ended here", func() bool { return len(core.Status(ctx, "t").BackgroundTasks) == 0 })
	if rows := p.agentRows(t, run.ID); len(rows) != 1 {
		t.Fatalf("the agent's row right after its release met the cut: %+v; want it still there", rows)
	}

	p.proxy.Heal()
	p.waitFor(t, "the agent's row is released", func() bool { return len(p.agentRows(t, run.ID)) == 0 })
	expectLog(t, p.runLog(t, run.ID),
		"run-start @orch",
		"agent-spawned:helper @helper",
		"tool-call:h1 @helper",
		"run-finish:completed: @orch",
		"tool-result:h1=1 @helper",
		"agent-completed:helper:completed:done: @helper")
}

// agentRowsFail is a memory store on which releasing or taking a
// background agent's row always fails, as over a link to a database that
// does not answer them; renewals still go through.
type agentRowsFail struct{ *memory.Store }

func (agentRowsFail) ReleaseAgent(context.Context, instanceai.AgentRef, int64) error {
	return errors.New("the database does not answer")
}

func (agentRowsFail) TakeAgent(context.Context, instanceai.AgentRef, string, time.Duration) (int64, bool, error) {
	return 0, false, errors.New("the database does not answer")
}

// An instance that cannot release the row of its background agent, which
// completed, keeps trying but no longer renews the row, while its
// heartbeat renews the row of another agent still at work: the ended
// agent's lease runs out, and another instance's sweep takes the row and
// lets it go, writing nothing: the log holds the agent's own
// agent-completed, once.
func TestAnEndedAgentsRowIsNotRenewedAndTheSweepLetsItGo(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	for _, thread := range []string{"t", "busy"} {
		if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: thread, OwnerID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	calling, finish := make(chan struct{}), make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if run.ThreadID == "busy" {
			// At work until the instance shuts down.
			_, err := run.Spawn(instanceai.AgentSpawned{Role: "worker"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			})
			return err
		}
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			close(calling)
			<-finish
			return "done", nil
		})
		if err == nil {
			<-calling
		}
		return err
	})
	a := instanceai.NewCore(agentRowsFail{store}, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 100 * time.Millisecond,
		Writer: instanceai.WriterConfig{IdleFlush: time.Hour}})
	a.Start(5 * time.Millisecond)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		_ = a.Shutdown(sctx)
	})
	if _, err := a.Runs().Start(instanceai.StartRequest{ThreadID: "busy", UserID: "u", Message: "work"}); err != nil {
		t.Fatal(err)
	}
	run, err := a.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	if err := a.Writer().Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	close(finish)
	waitUntil(t, "the agent ended", func() bool { return len(a.Status(ctx, "t").BackgroundTasks) == 0 })
	waitUntil(t, "the ended agent's row ran out while its instance renewed the worker's", func() bool {
		expired, err := store.ExpiredAgents(ctx)
		return err == nil && len(expired) == 1 && expired[0].RunID == run.ID && expired[0].Owner == "inst-a"
	})
	if st := a.Status(ctx, "busy"); len(st.BackgroundTasks) != 1 {
		t.Fatalf("the worker is not at work: %+v", st)
	}

	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	if _, err := b.core.Runs().SweepExpired(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, err := store.RunAgents(ctx, "t", run.ID); err != nil || len(rows) != 0 {
		t.Fatalf("the agent's rows after inst-b's sweep: %+v, %v; want none", rows, err)
	}
	for _, r := range b.rows("t") {
		if r.Event.AgentID != instanceai.OrchestratorAgentID(run.ID) {
			b.name(r.Event.AgentID, "helper")
		}
	}
	b.expectLog("t", run.ID,
		"run-start @orch",
		"agent-spawned:helper @helper",
		"run-finish:completed: @orch",
		"agent-completed:helper:completed:done: @helper")
}
