package instanceai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// gatedLog is a memory store whose appends, fenced or not, can be held:
// once armed, the next append waits (held receives) until open is called,
// so that what the test queues meanwhile forms the drain's next batch. It
// can also fail appends, as a database that is down does, and counts the
// appends refused for stale tokens.
type gatedLog struct {
	*memory.Store
	armed   atomic.Bool
	held    chan struct{}
	gate    chan struct{}
	failing atomic.Bool
	refused atomic.Int64
}

func newGatedLog(store *memory.Store) *gatedLog {
	return &gatedLog{Store: store, held: make(chan struct{}, 1), gate: make(chan struct{})}
}

// arm makes the next append wait for open.
func (g *gatedLog) arm() {
	g.gate = make(chan struct{})
	g.armed.Store(true)
}

func (g *gatedLog) open() { close(g.gate) }

func (g *gatedLog) wait() error {
	if g.armed.CompareAndSwap(true, false) {
		g.held <- struct{}{}
		<-g.gate
	}
	if g.failing.Load() {
		return errors.New("database is down")
	}
	return nil
}

func (g *gatedLog) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	if err := g.wait(); err != nil {
		return 0, err
	}
	return g.Store.AppendEncoded(ctx, thread, events, data)
}

func (g *gatedLog) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	if err := g.wait(); err != nil {
		return 0, err
	}
	first, err := g.Store.AppendFenced(ctx, thread, events, data, fences)
	if errors.Is(err, instanceai.ErrStaleFence) {
		g.refused.Add(1)
	}
	return first, err
}

// fencedReports records the writer's OnRunFenced calls.
type fencedReports struct {
	mu    sync.Mutex
	calls []string
}

func (f *fencedReports) report(thread, run, agent string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, thread+"/"+run+"/"+agent)
}

func (f *fencedReports) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// A batch that mixes events of a claim another instance took with others
// loses the taken claim's events only: they are stored nowhere and
// published to nobody, deltas included, the claim is reported once, and
// the rest of the batch is stored at once. Whatever is queued under the
// claim later is dropped too, and so is its open segment.
func TestWriterDropsTheEventsOfATakenClaim(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	claim, err := store.ClaimThread(ctx, "t", "r", "inst-a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	agentToken, err := store.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "bg"}, "inst-a", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	log := newGatedLog(store)
	var reports fencedReports
	e := newEnv(t, log, instanceai.WriterConfig{IdleFlush: time.Hour, OnRunFenced: reports.report})
	e.store = store
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()
	run := instanceai.NewFence("r", "", claim.Fence)
	agent := instanceai.NewFence("r", "bg", agentToken)
	queue := func(f *instanceai.Fence, events ...instanceai.Event) {
		t.Helper()
		for _, x := range events {
			if err := instanceai.EnqueueFenced(e.writer, "t", x, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	sync := func() {
		t.Helper()
		if err := e.writer.Sync(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	queue(run, ev(instanceai.TypeRunStart, "r", "orch", &instanceai.RunStart{MessageID: "m"}))
	sync()

	// The drain holds another run's event in the log while the run's
	// claim is taken and the next batch is queued.
	log.arm()
	queue(nil, call("q", "other", "q1"))
	<-log.held
	if _, won, err := store.TakeRun(ctx, "t", "r", "inst-b", time.Minute); err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	queue(run, delta(instanceai.TypeTextDelta, "r", "orch", "s1", "lost "), call("r", "orch", "c1"),
		delta(instanceai.TypeTextDelta, "r", "orch", "s2", "open"))
	queue(agent, call("r", "bg", "bg1"))
	queue(nil, ev(instanceai.TypeThreadTitleUpdated, "r", "system", &instanceai.ThreadTitle{Title: "renamed"}))
	log.open()
	sync()
	expectLog(t, e.logShape(t), "run-start[orch]", "tool-call[other]", "tool-call[bg]", "thread-title-updated[system]")
	if got := reports.get(); !slices.Equal(got, []string{"t/r/"}) {
		t.Fatalf("OnRunFenced calls = %v, want the run's claim once", got)
	}

	// Later events of the claim go nowhere either, and its open segment
	// is not flushed at the close.
	queue(run, call("r", "orch", "c2"), finish("r", "orch"))
	queue(agent, call("r", "bg", "bg2"))
	sync()
	if err := e.writer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectLog(t, e.logShape(t), "run-start[orch]", "tool-call[other]", "tool-call[bg]", "thread-title-updated[system]",
		"tool-call[bg]")
	if got := reports.get(); len(got) != 1 {
		t.Fatalf("OnRunFenced calls = %v, want one", got)
	}
	var published []string
	nctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	for {
		frames, err := sub.Next(nctx)
		if err != nil || len(frames) == 0 {
			break
		}
		for _, f := range frames {
			published = append(published, string(f.Event.Type)+"["+f.Event.AgentID+"]")
		}
		if len(published) >= 5 {
			break
		}
	}
	want := []string{"run-start[orch]", "tool-call[other]", "tool-call[bg]", "thread-title-updated[system]", "tool-call[bg]"}
	if !slices.Equal(published, want) {
		t.Fatalf("published %v, want %v: nothing of the taken claim, not even its deltas", published, want)
	}
}

// A run failed by a storage outage keeps its ending to store once the log
// is back; if another instance took the run and settled it meanwhile, the
// log refuses the ending, which is dropped, with one line in the log, and
// the run's claim is not released from here.
func TestKeptEndingRefusedAfterATakeover(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	claim, err := store.ClaimThread(ctx, "t", "r", "inst-a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	log := newGatedLog(store)
	var logs bytes.Buffer
	var logsMu sync.Mutex
	e := newEnv(t, log, instanceai.WriterConfig{IdleFlush: time.Hour, Retries: 1, RetryBackoff: time.Millisecond,
		MaxBackoff: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logsMu, &logs}, nil))})
	e.store = store
	var released atomic.Int32
	instanceai.OnRunFinished(e.writer, func(string, string, int64) { released.Add(1) })
	run := instanceai.NewFence("r", "", claim.Fence)
	if err := instanceai.EnqueueFenced(e.writer, "t", ev(instanceai.TypeRunStart, "r", "orch", &instanceai.RunStart{MessageID: "m"}), run); err != nil {
		t.Fatal(err)
	}
	if err := e.writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()

	// The outage outlasts the retry budget: the run ends live, its ending
	// kept.
	log.failing.Store(true)
	if err := instanceai.EnqueueFenced(e.writer, "t", call("r", "orch", "c1"), run); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	live, err := sub.Next(nctx)
	if err != nil || len(live) != 2 || live[1].Event.Type != instanceai.TypeRunFinish || live[1].Seq != 0 {
		t.Fatalf("published live %+v, %v; want the id-less error and run-finish", live, err)
	}

	// Meanwhile another instance took the run, to settle it.
	taken, won, err := store.TakeRun(ctx, "t", "r", "inst-b", time.Minute)
	if err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}

	// The log is back: the kept ending is refused and dropped (the
	// settlement is not in the log yet, so only the token tells).
	log.failing.Store(false)
	waitUntil(t, "the kept ending was tried against the log", func() bool { return log.refused.Load() > 0 })
	settlement := ev(instanceai.TypeRunFinish, "r", "orch", &instanceai.RunFinish{Status: instanceai.RunInterrupted, Reason: instanceai.ReasonCrashed})
	settlement.UserID = ""
	if _, err := store.AppendFenced(ctx, "t", []instanceai.Event{settlement}, [][]byte{encoded(t, settlement)}, []int64{taken}); err != nil {
		t.Fatal(err)
	}
	if err := instanceai.EnqueueFenced(e.writer, "t", call("q", "other", "q1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	expectLog(t, e.logShape(t), "run-start[orch]", "run-finish[orch]", "tool-call[other]")
	rows, err := store.ReadAfter(ctx, "t", 1, 1)
	if err != nil || rows[0].Event.Payload.(*instanceai.RunFinish).Reason != instanceai.ReasonCrashed {
		t.Fatalf("the run's one run-finish is %+v, %v; want the settlement's", rows, err)
	}
	if released.Load() != 0 {
		t.Fatal("a refused ending released the run's claim")
	}
	logsMu.Lock()
	text := logs.String()
	logsMu.Unlock()
	if n := strings.Count(text, "another instance settled this run"); n != 1 {
		t.Fatalf("the drop was logged %d times, want once:\n%s", n, text)
	}
}

// lockedWriter serialises writes to a buffer the test reads.
type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// A run whose lease ran out while this instance could not renew it (its
// heartbeat is not running here) is settled by another instance; the
// first write the run attempts afterwards is refused, and the run stops
// there: nothing of it follows the settlement, and it writes no
// run-finish of its own.
func TestARunTakenOverStopsAtItsNextWrite(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	step := make(chan struct{})
	emitted := make(chan struct{})
	stopped := make(chan error, 1)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if err := run.Emit(toolCall("c1")); err != nil {
			return err
		}
		close(emitted)
		select {
		case <-step:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := emitAll(run, textDelta("s", "after "), textDelta("s", "the take"), toolCall("c2"))
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return err
	})
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 20 * time.Millisecond}, "th")
	run := a.start("th", "work")
	<-emitted
	a.sync("th")
	waitUntil(t, "inst-a's lease ran out", func() bool {
		row, err := store.ActiveRun(ctx, "th")
		return err == nil && row.Free(time.Now())
	})
	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	if n, err := b.core.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired on inst-b = %d, %v; want the run settled", n, err)
	}
	b.sync("th")
	settled := []string{"run-start @orch", "tool-call:c1 @orch",
		"tool-interrupted:c1=Interrupted by a process restart — effect unverified; verify before retrying. @orch",
		"run-finish:interrupted:crash_interrupted @orch"}
	a.expectLog("th", run.ID, settled...)

	close(step)
	select {
	case cause := <-stopped:
		if !strings.Contains(cause.Error(), "taken over by another instance") {
			t.Fatalf("the run stopped with %v, want the lease lost", cause)
		}
	case <-time.After(waitFor):
		t.Fatal("the run went on after its write was refused")
	}
	a.settle(run)
	if a.core.Runs().Active("th") != nil {
		t.Fatal("the taken run is still active here")
	}
	if err := run.Emit(toolCall("c3")); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("Emit after the refusal: %v, want ErrRunFinished", err)
	}
	a.sync("th")
	a.expectLog("th", run.ID, settled...)
	// Whoever waits for the run's events to be stored learns they were
	// not, and why.
	sctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	var ns *instanceai.NotStoredError
	if err := run.Sync(sctx); !errors.As(err, &ns) || ns.Fate != instanceai.FateTakenOver {
		t.Fatalf("Sync of the taken run: %v, want its events not stored for run_taken_over", err)
	}
}

// The settlement of a run takes the rows of its background agents that
// still work in the log: the instance that ran them, cut off past their
// leases, has its next write of them refused and stops them without
// their agent-completed, so the settlement's is the only one.
func TestSettlementFencesTheRunsBackgroundAgents(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	step := make(chan struct{})
	done := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			defer close(done)
			select {
			case <-step:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			if err := a.Emit(toolCall("late")); err != nil {
				return "", err
			}
			<-ctx.Done()
			return "", ctx.Err()
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 20 * time.Millisecond}, "th")
	run := a.start("th", "work")
	waitUntil(t, "the helper works", func() bool { return len(a.core.Runs().Status(ctx, "th").BackgroundTasks) == 1 })
	helper := a.core.Runs().Status(ctx, "th").BackgroundTasks[0].AgentID
	a.name(helper, "helper")
	a.sync("th")
	waitUntil(t, "inst-a's leases ran out", func() bool {
		expired, err := store.ExpiredAgents(ctx)
		row, rerr := store.ActiveRun(ctx, "th")
		return err == nil && len(expired) == 1 && rerr == nil && row.Free(time.Now())
	})
	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	if n, err := b.core.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired on inst-b = %d, %v; want the run settled", n, err)
	}
	b.sync("th")
	settled := []string{"run-start @orch", "agent-spawned:helper @helper",
		"agent-completed:helper:error::interrupted by a process restart @helper",
		"run-finish:interrupted:crash_interrupted @orch"}
	a.expectLog("th", run.ID, settled...)
	if expired, err := store.ExpiredAgents(ctx); err != nil || len(expired) != 0 {
		t.Fatalf("agent rows after the settlement: %+v, %v; want none", expired, err)
	}

	close(step)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the helper went on after its write was refused")
	}
	waitUntil(t, "the helper is gone from inst-a", func() bool { return len(a.core.Runs().Status(ctx, "th").BackgroundTasks) == 0 })
	a.sync("th")
	a.expectLog("th", run.ID, settled...)
}

// encoded is the event's JSON.
func encoded(t *testing.T, e instanceai.Event) []byte {
	t.Helper()
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A checkpoint piece refused for its claim's stale token stops the claim
// as a refused append does: the piece is not stored, the claim is reported
// once, and its open segment and later events go nowhere; the pieces
// stored before stay, for the taker's settlement.
func TestRefusedCheckpointStopsTheClaim(t *testing.T) {
	for _, st := range checkpointStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			store := openCheckpointStore(t, st.spec(t))
			cs := store.(instanceai.CheckpointStore)
			claim, err := store.ClaimThread(ctx, "t", "r", "inst-a", -time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var reports fencedReports
			w := instanceai.NewWriter(store, instanceai.NewHub(0), instanceai.WriterConfig{
				IdleFlush: time.Hour, CheckpointBytes: 10, CheckpointInterval: -1, OnRunFenced: reports.report})
			defer w.Close(ctx)
			run := instanceai.NewFence("r", "", claim.Fence)
			emit := func(e instanceai.Event) {
				t.Helper()
				e.RunID, e.AgentID, e.UserID, e.TS = "r", instanceai.OrchestratorAgentID("r"), "u", 1
				if err := instanceai.EnqueueFenced(w, "t", e, run); err != nil {
					t.Fatal(err)
				}
				if err := w.Sync(ctx, "t"); err != nil {
					t.Fatal(err)
				}
			}
			emit(instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}})
			emit(instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "resp", Payload: &instanceai.Text{Text: "stored in a piece"}})
			if pieces, err := cs.RunCheckpoints(ctx, "t", "r"); err != nil || len(pieces) != 1 {
				t.Fatalf("pieces before the take: %+v, %v; want one", pieces, err)
			}
			if _, won, err := store.TakeRun(ctx, "t", "r", "inst-b", time.Minute); err != nil || !won {
				t.Fatalf("TakeRun = %v, %v", won, err)
			}
			emit(instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "resp", Payload: &instanceai.Text{Text: "refused in its piece"}})
			if got := reports.get(); !slices.Equal(got, []string{"t/r/"}) {
				t.Fatalf("OnRunFenced calls = %v, want the run's claim once", got)
			}
			emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "x", Args: []byte(`{}`)}})
			emit(instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}})
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			pieces, err := cs.RunCheckpoints(ctx, "t", "r")
			if err != nil || len(pieces) != 1 || pieces[0].Text != "stored in a piece" {
				t.Fatalf("pieces after the refusal: %+v, %v; want the one stored before the take", pieces, err)
			}
			rows, err := store.ReadAfter(ctx, "t", 0, 0)
			if err != nil || len(rows) != 1 || rows[0].Event.Type != instanceai.TypeRunStart {
				t.Fatalf("the log holds %+v, %v; want the run-start only", rows, err)
			}
			if got := reports.get(); len(got) != 1 {
				t.Fatalf("OnRunFenced calls = %v, want one", got)
			}
		})
	}
}

// A confirmation request of a run another instance took is refused: it is
// not stored, the run stops here without a run-finish, and Confirm
// returns at once.
func TestConfirmationOfATakenRunIsRefused(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	taken := make(chan struct{})
	confirmed := make(chan error, 1)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		<-taken
		_, err := run.Confirm(ctx, "", instanceai.ConfirmationRequest{RequestID: "cr1", ToolCallID: "c1", ToolName: "tool",
			Args: []byte(`{}`), Severity: instanceai.SeverityWarning, Message: "Go on?"})
		confirmed <- err
		return err
	})
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 20 * time.Millisecond}, "th")
	run := a.start("th", "work")
	a.sync("th")
	waitUntil(t, "inst-a's lease ran out", func() bool {
		row, err := store.ActiveRun(ctx, "th")
		return err == nil && row.Free(time.Now())
	})
	if _, won, err := store.TakeRun(ctx, "th", run.ID, "inst-b", time.Minute); err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	close(taken)
	select {
	case err := <-confirmed:
		if err == nil || !strings.Contains(err.Error(), "taken over by another instance") {
			t.Fatalf("Confirm = %v, want the lease lost", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Confirm waited for an answer to a request it could not store")
	}
	a.settle(run)
	if _, err := store.GetConfirmation(ctx, "cr1"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the refused request: %v, want ErrNotFound", err)
	}
	a.expectLog("th", run.ID, "run-start @orch")
	if a.core.Runs().Active("th") != nil {
		t.Fatal("the taken run is still active here")
	}
}

// noAgentRows is a store whose background agents cannot claim rows.
type noAgentRows struct{ *memory.Store }

func (noAgentRows) ClaimAgent(context.Context, instanceai.AgentRef, string, time.Duration, int64) (int64, error) {
	return 0, errors.New("database is down")
}

// slowAgentRows is a store whose ClaimAgent waits for go before it claims.
type slowAgentRows struct {
	*memory.Store
	entered, goOn chan struct{}
}

func (s slowAgentRows) ClaimAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration, runFence int64) (int64, error) {
	close(s.entered)
	<-s.goOn
	return s.Store.ClaimAgent(ctx, ref, owner, ttl, runFence)
}

// A cancel does not wait for the orchestrator: when it finishes the run
// while a background agent is still claiming its row, the claim finds the
// run's row gone (its run-finish gave it up) and is refused as stale. No
// instance took the run, so none settles the agent: it works on without a
// token, and its agent-completed is stored.
func TestAnAgentClaimedAfterItsRunWasCancelledCompletes(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	claims := slowAgentRows{Store: store, entered: make(chan struct{}), goOn: make(chan struct{})}
	writer, runs, step := helperRun(t, store, claims)
	run, err := runs.Start(instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	<-claims.entered
	if _, _, err := runs.Cancel("th", "user_cancelled"); err != nil {
		t.Fatal(err)
	}
	if err := writer.Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ActiveRun(ctx, "th"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the cancelled run's row: %v, want it released", err)
	}
	close(claims.goOn)
	<-run.Done()
	close(step)
	waitUntil(t, "the helper completed", func() bool { return len(runs.Status(ctx, "th").BackgroundTasks) == 0 })
	if err := writer.Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	rows, types := logTypes(t, store, "th")
	// The cancel reached the agent too: its open call is settled, and it
	// ends cancelled.
	want := []string{"run-start", "agent-spawned", "run-finish", "tool-call", "tool-result", "agent-completed"}
	if !slices.Equal(types, want) {
		t.Fatalf("log = %v, want %v", types, want)
	}
	if c := rows[len(rows)-1].Event.Payload.(*instanceai.AgentCompleted); c.Status != instanceai.RunCancelled {
		t.Fatalf("agent-completed %+v, want cancelled", c)
	}
}

// helperRun sets up thread "th" and a registry whose agent spawns a
// helper that waits for step, then emits a tool call and completes; the
// claims are claims.
func helperRun(t *testing.T, store *memory.Store, claims interface {
	instanceai.RunClaims
	instanceai.AgentClaims
}) (*instanceai.Writer, *instanceai.Runs, chan struct{}) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	step := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			<-step
			return "done", a.Emit(toolCall("after"))
		})
		return err
	})
	writer := instanceai.NewWriter(store, instanceai.NewHub(64), instanceai.WriterConfig{IdleFlush: time.Hour})
	t.Cleanup(func() { _ = writer.Close(ctx) })
	runs := instanceai.NewRuns(writer, agent, instanceai.RunsConfig{Claims: claims, Confirmations: store, Index: store,
		Instance: "inst", Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = runs.Shutdown(ctx) })
	return writer, runs, step
}

// logTypes returns the thread's stored rows and their types.
func logTypes(t *testing.T, store *memory.Store, thread string) ([]instanceai.StoredEvent, []string) {
	t.Helper()
	rows, err := store.ReadAfter(context.Background(), thread, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, r := range rows {
		types = append(types, string(r.Event.Type))
	}
	return rows, types
}

// A background agent that could not claim a row of its own writes under
// its run's claim while the run lives, and under none once the run's
// run-finish gave its row up: it works on after the finish, and its
// events and its agent-completed are stored.
func TestAnAgentWithoutARowOutlivesItsRunsClaim(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	writer, runs, step := helperRun(t, store, noAgentRows{store})
	run, err := runs.Start(instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	if err := writer.Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ActiveRun(ctx, "th"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("the run's row after its run-finish: %v, want it released", err)
	}
	close(step)
	waitUntil(t, "the helper completed", func() bool { return len(runs.Status(ctx, "th").BackgroundTasks) == 0 })
	if err := writer.Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	_, types := logTypes(t, store, "th")
	// The call it left open gets its outcome before its agent-completed.
	want := []string{"run-start", "agent-spawned", "run-finish", "tool-call", "tool-error", "agent-completed"}
	if !slices.Equal(types, want) {
		t.Fatalf("log = %v, want %v", types, want)
	}
}

// A background agent whose agent-spawned had not reached the log when
// another instance took its run is fenced by the settlement all the same:
// the settlement takes every agent row of the run, not only those the log
// shows, so nothing of the agent lands after the settlement's run-finish.
func TestSettlementFencesAnAgentItsLogDoesNotShow(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	spawn := make(chan struct{})
	step := make(chan struct{})
	done := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		select {
		case <-spawn:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			defer close(done)
			<-step
			if err := a.Emit(toolCall("late")); err != nil {
				return "", err
			}
			return "late result", nil
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	gate := newTypeGate(store, instanceai.TypeAgentSpawned)
	a := newGatedCore(t, gate, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 20 * time.Millisecond})
	run, err := a.Runs().Start(instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Writer().Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	close(spawn)
	gate.waitHeld(t)
	waitUntil(t, "the helper's row is claimed", func() bool {
		agents, err := store.RunAgents(ctx, "th", run.ID)
		return err == nil && len(agents) == 1
	})
	waitUntil(t, "inst-a's run lease ran out", func() bool {
		row, err := store.ActiveRun(ctx, "th")
		return err == nil && row.Free(time.Now())
	})
	// The helper was claimed after the run's last renewal, so its own
	// lease runs out later: no sweep of expired agents takes its row yet.
	agents, err := store.RunAgents(ctx, "th", run.ID)
	if err != nil || len(agents) != 1 {
		t.Fatalf("RunAgents = %+v, %v", agents, err)
	}
	if rows, err := store.RenewAgents(ctx, "inst-a", time.Minute, []int64{agents[0].Fence}); err != nil || len(rows) != 1 {
		t.Fatalf("RenewAgents = %+v, %v", rows, err)
	}
	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	if n, err := b.core.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired on inst-b = %d, %v; want the run settled", n, err)
	}
	b.sync("th")
	settled := []string{"run-start @orch", "run-finish:interrupted:crash_interrupted @orch"}
	b.expectLog("th", run.ID, settled...)

	// inst-a's held batch, and what its helper does next, are refused.
	gate.open()
	close(step)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the helper did not return")
	}
	waitUntil(t, "the helper is gone from inst-a", func() bool { return len(a.Runs().Status(ctx, "th").BackgroundTasks) == 0 })
	if err := a.Writer().Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	b.expectLog("th", run.ID, settled...)
	if agents, err := store.RunAgents(ctx, "th", run.ID); err != nil || len(agents) != 0 {
		t.Fatalf("agent rows after the settlement: %+v, %v; want none", agents, err)
	}
}

// A background agent spawned after another instance took (and settled) its
// run cannot claim a row under the run's stale token: it stops at once,
// and nothing of it is written, neither then nor after its orchestrator
// finishes (which hands agents that share the run's claim a holder of
// their own).
func TestAnAgentSpawnedAfterATakeoverWritesNothing(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	spawn := make(chan struct{})
	step := make(chan struct{})
	done := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		<-spawn
		_, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, a *instanceai.SubAgent) (string, error) {
			defer close(done)
			<-step
			_ = a.Emit(toolCall("late"))
			return "late result", nil
		})
		if err != nil {
			return err
		}
		return nil
	})
	a := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-a", Lease: 20 * time.Millisecond}, "th")
	run := a.start("th", "work")
	a.sync("th")
	waitUntil(t, "inst-a's run lease ran out", func() bool {
		row, err := store.ActiveRun(ctx, "th")
		return err == nil && row.Free(time.Now())
	})
	b := newLifecycleOn(t, store, agent, instanceai.CoreConfig{Instance: "inst-b"})
	if n, err := b.core.Runs().SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired on inst-b = %d, %v; want the run settled", n, err)
	}
	b.sync("th")
	settled := []string{"run-start @orch", "run-finish:interrupted:crash_interrupted @orch"}
	b.expectLog("th", run.ID, settled...)

	close(spawn)
	select {
	case <-run.Done():
	case <-time.After(waitFor):
		t.Fatal("the orchestrator did not return")
	}
	close(step)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the helper did not return")
	}
	waitUntil(t, "the helper is gone from inst-a", func() bool { return len(a.core.Runs().Status(ctx, "th").BackgroundTasks) == 0 })
	a.sync("th")
	b.expectLog("th", run.ID, settled...)
	if agents, err := store.RunAgents(ctx, "th", run.ID); err != nil || len(agents) != 0 {
		t.Fatalf("agent rows = %+v, %v; want none", agents, err)
	}
}
