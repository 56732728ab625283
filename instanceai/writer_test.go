package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/storage/memory"
)

type env struct {
	store  *memory.Store
	hub    *instanceai.Hub
	writer *instanceai.Writer
}

func newEnv(t *testing.T, log instanceai.EventLog, cfg instanceai.WriterConfig) *env {
	t.Helper()
	store := memory.New()
	if log == nil {
		log = store
	}
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(1 << 16)
	e := &env{store: store, hub: hub, writer: instanceai.NewWriter(log, hub, cfg)}
	t.Cleanup(func() { _ = e.writer.Close(context.Background()) })
	return e
}

func ev(typ instanceai.EventType, run, agent string, p instanceai.Payload) instanceai.Event {
	return instanceai.Event{Type: typ, RunID: run, AgentID: agent, TS: 1, Payload: p}
}

func delta(typ instanceai.EventType, run, agent, resp, text string) instanceai.Event {
	e := ev(typ, run, agent, &instanceai.Text{Text: text})
	e.ResponseID = resp
	return e
}

func call(run, agent, id string) instanceai.Event {
	return ev(instanceai.TypeToolCall, run, agent, &instanceai.ToolCall{ToolCallID: id, ToolName: "x", Args: json.RawMessage(`{}`)})
}

func finish(run, agent string) instanceai.Event {
	return ev(instanceai.TypeRunFinish, run, agent, &instanceai.RunFinish{Status: instanceai.RunCompleted})
}

func (e *env) send(t *testing.T, events ...instanceai.Event) {
	t.Helper()
	for _, x := range events {
		if err := e.writer.Enqueue("t", x); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
}

// logShape renders the stored log as "type[agent]:text" entries.
func (e *env) logShape(t *testing.T) []string {
	t.Helper()
	rows, err := e.store.ReadAfter(context.Background(), "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, r := range rows {
		if r.Seq != int64(i+1) {
			t.Fatalf("seq %d at position %d", r.Seq, i)
		}
		s := string(r.Event.Type) + "[" + r.Event.AgentID + "]"
		if p, ok := r.Event.Payload.(*instanceai.Text); ok {
			s += ":" + r.Event.ResponseID + ":" + p.Text
		}
		out = append(out, s)
	}
	return out
}

func expectLog(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCoalescingRules(t *testing.T) {
	const tr, td, rd = instanceai.TypeTextDelta, instanceai.TypeTextDelta, instanceai.TypeReasoningDelta
	cases := []struct {
		name   string
		events []instanceai.Event
		want   []string
	}{
		{
			name:   "next structural event of the same agent closes the segment",
			events: []instanceai.Event{delta(td, "r", "a", "s1", "hel"), delta(td, "r", "a", "s1", "lo"), call("r", "a", "c1")},
			want:   []string{"text-block[a]:s1:hello", "tool-call[a]"},
		},
		{
			name:   "another agent's structural event leaves it open",
			events: []instanceai.Event{delta(td, "r", "a", "s1", "hi"), call("r", "b", "c1")},
			want:   []string{"tool-call[b]"},
		},
		{
			name: "run-finish closes every agent of the run, not other runs",
			events: []instanceai.Event{delta(td, "r", "a", "s1", "A"), delta(td, "r", "b", "s2", "B"),
				delta(td, "q", "c", "s3", "C"), finish("r", "a")},
			want: []string{"text-block[a]:s1:A", "text-block[b]:s2:B", "run-finish[a]"},
		},
		{
			name:   "a new responseId closes the previous segment",
			events: []instanceai.Event{delta(td, "r", "a", "s1", "one"), delta(td, "r", "a", "s2", "two"), call("r", "a", "c")},
			want:   []string{"text-block[a]:s1:one", "text-block[a]:s2:two", "tool-call[a]"},
		},
		{
			name:   "reasoning is written before text when both close",
			events: []instanceai.Event{delta(tr, "r", "a", "s1", "answer"), delta(rd, "r", "a", "s2", "thought"), call("r", "a", "c")},
			want:   []string{"reasoning-block[a]:s2:thought", "text-block[a]:s1:answer", "tool-call[a]"},
		},
		{
			name: "ephemeral status is never stored and does not close segments",
			events: []instanceai.Event{delta(td, "r", "a", "s1", "x"),
				ev(instanceai.TypeStatus, "r", "a", &instanceai.Status{Message: "working"}), delta(td, "r", "a", "s1", "y"), call("r", "a", "c")},
			want: []string{"text-block[a]:s1:xy", "tool-call[a]"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil, instanceai.WriterConfig{IdleFlush: time.Hour})
			e.send(t, c.events...)
			expectLog(t, e.logShape(t), c.want...)
		})
	}
}

func TestIdleFlushClosesSegments(t *testing.T) {
	e := newEnv(t, nil, instanceai.WriterConfig{IdleFlush: 30 * time.Millisecond})
	e.send(t, delta(instanceai.TypeTextDelta, "r", "a", "s1", "quiet"))
	deadline := time.Now().Add(5 * time.Second)
	for len(e.logShape(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("segment was not flushed after the idle period")
		}
		time.Sleep(10 * time.Millisecond)
	}
	expectLog(t, e.logShape(t), "text-block[a]:s1:quiet")
}

func TestCloseFlushesOpenSegments(t *testing.T) {
	e := newEnv(t, nil, instanceai.WriterConfig{IdleFlush: time.Hour})
	e.send(t, delta(instanceai.TypeReasoningDelta, "r", "a", "s1", "why"), delta(instanceai.TypeTextDelta, "r", "a", "s2", "what"))
	if err := e.writer.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectLog(t, e.logShape(t), "reasoning-block[a]:s1:why", "text-block[a]:s2:what")
	if err := e.writer.Enqueue("t", call("r", "a", "c")); !errors.Is(err, instanceai.ErrWriterClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}
}

// countingLog counts appends and can fail the first n of them.
type countingLog struct {
	instanceai.EventLog
	appends atomic.Int64
	failing atomic.Int64
}

// AppendEncoded is the writer's way into the log.
func (c *countingLog) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	c.appends.Add(1)
	if c.failing.Add(-1) >= 0 {
		return 0, errors.New("database is down")
	}
	return c.EventLog.AppendEncoded(ctx, thread, events, data)
}

// AppendFenced counts and fails as AppendEncoded does.
func (c *countingLog) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	c.appends.Add(1)
	if c.failing.Add(-1) >= 0 {
		return 0, errors.New("database is down")
	}
	return c.EventLog.AppendFenced(ctx, thread, events, data, fences)
}

func TestPublishesOnlyAfterCommitWithSeqs(t *testing.T) {
	e := newEnv(t, nil, instanceai.WriterConfig{IdleFlush: time.Hour})
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()
	e.send(t, delta(instanceai.TypeTextDelta, "r", "a", "s", "hi"), call("r", "a", "c1"), finish("r", "a"))
	frames, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range frames {
		got = append(got, fmt.Sprintf("%s@%d hidden=%v", f.Event.Type, f.Seq, f.Hidden))
	}
	want := []string{"text-delta@0 hidden=false", "text-block@1 hidden=true", "tool-call@2 hidden=false", "run-finish@3 hidden=false"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("frames = %v, want %v", got, want)
	}
}

// While the instance may have lost its claims (LiveHeld), deltas go out
// to no one; what they carry still reaches the log and the subscribers in
// their block. Once it holds them again, deltas go out again, and the
// first of them, past what was held, is a gap at the hub, which keeps the
// rest of the segment for its block.
func TestDeltasAreHeldWhileTheClaimsMayBeLost(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	e := newEnv(t, nil, instanceai.WriterConfig{IdleFlush: time.Hour, LiveHeld: held.Load})
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()
	e.send(t, delta(instanceai.TypeTextDelta, "r", "a", "s", "hel"), delta(instanceai.TypeTextDelta, "r", "a", "s", "lo"))
	held.Store(false)
	e.send(t, delta(instanceai.TypeTextDelta, "r", "a", "s", " world"), call("r", "a", "c1"))
	e.send(t, delta(instanceai.TypeTextDelta, "r", "a", "s2", "again"), call("r", "a", "c2"))
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for len(got) < 5 {
		frames, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		for _, f := range frames {
			got = append(got, fmt.Sprintf("%s@%d:%s", f.Event.Type, f.Seq, textOf(f.Event)))
		}
	}
	want := []string{"text-block@1:hello world", "tool-call@2:", "text-delta@0:again", "text-block@3:again", "tool-call@4:"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
	expectLog(t, e.logShape(t), "text-block[a]:s:hello world", "tool-call[a]", "text-block[a]:s2:again", "tool-call[a]")
}

// textOf is an event's text, "" for one without.
func textOf(ev *instanceai.Event) string {
	if p, ok := ev.Payload.(*instanceai.Text); ok {
		return p.Text
	}
	return ""
}

func TestBatchIsOneAppend(t *testing.T) {
	store := memory.New()
	counting := &countingLog{EventLog: store}
	e := newEnv(t, counting, instanceai.WriterConfig{IdleFlush: time.Hour})
	e.store = store
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	var batch []instanceai.Event
	for i := range 100 {
		batch = append(batch, call("r", "a", fmt.Sprint(i)))
	}
	// Enqueued faster than a drain pass, so they are persisted in few appends.
	e.send(t, batch...)
	if n := counting.appends.Load(); n < 1 || n > 100 {
		t.Fatalf("appends = %d", n)
	}
	if got := len(e.logShape(t)); got != 100 {
		t.Fatalf("stored %d events, want 100", got)
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	store := memory.New()
	counting := &countingLog{EventLog: store}
	counting.failing.Store(3)
	e := newEnv(t, counting, instanceai.WriterConfig{IdleFlush: time.Hour, RetryBackoff: time.Millisecond})
	e.store = store
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	e.send(t, call("r", "a", "c1"))
	expectLog(t, e.logShape(t), "tool-call[a]")
	if n := counting.appends.Load(); n != 4 {
		t.Fatalf("appends = %d, want 3 failures + 1 success", n)
	}
}

func TestRetryBudgetFailsTheRunVisibly(t *testing.T) {
	store := memory.New()
	counting := &countingLog{EventLog: store}
	counting.failing.Store(1000)
	var mu sync.Mutex
	var failed []string
	var appendsAtFailure int64
	e := newEnv(t, counting, instanceai.WriterConfig{IdleFlush: time.Hour, Retries: 2, RetryBackoff: time.Millisecond, MaxBackoff: time.Hour,
		OnRunFailed: func(thread, run string, err error) {
			mu.Lock()
			failed = append(failed, thread+"/"+run)
			// Read here: the writer goes on to try storing the failed
			// run's ending, later, with appends of its own.
			appendsAtFailure = counting.appends.Load()
			mu.Unlock()
		}})
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()
	e.send(t, call("r", "a", "c1"), call("r", "a", "c2"))
	frames, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || frames[0].Event.Type != instanceai.TypeError || frames[1].Event.Type != instanceai.TypeRunFinish ||
		frames[1].Event.Payload.(*instanceai.RunFinish).Status != instanceai.RunError || frames[0].Seq != 0 {
		t.Fatalf("published %+v", frames)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 1 || failed[0] != "t/r" {
		t.Fatalf("OnRunFailed calls = %v", failed)
	}
	if appendsAtFailure != 3 {
		t.Fatalf("appends when the run failed = %d, want 1 + 2 retries", appendsAtFailure)
	}
}

// outageEnv is a writer of thread "t" in store, reached through log,
// that gives up on an append after one retry, and a count of the times it
// released run "r" (its run-finish committed).
func outageEnv(t *testing.T, store *memory.Store, log instanceai.EventLog) (*env, *atomic.Int32) {
	t.Helper()
	e := newEnv(t, log, instanceai.WriterConfig{IdleFlush: time.Hour, Retries: 1, RetryBackoff: time.Millisecond,
		MaxBackoff: 5 * time.Millisecond})
	e.store = store
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	finished := new(atomic.Int32)
	instanceai.OnRunFinished(e.writer, func(thread, run string, _ int64) {
		if thread == "t" && run == "r" {
			finished.Add(1)
		}
	})
	return e, finished
}

// A run failed by a storage outage ends in the log too once the log answers
// again: the same error and run-finish bytes its live clients were sent,
// published as echoes (see Frame.Echo), with the run's claim released; and the
// hub drops the run's open segment, so no later subscriber gets its text.
func TestAFailedRunsEndingIsStoredOnceTheLogIsBack(t *testing.T) {
	store := memory.New()
	counting := &countingLog{EventLog: store}
	e, finished := outageEnv(t, store, counting)
	sub, _ := e.hub.Subscribe("t")
	defer sub.Close()
	e.send(t, ev(instanceai.TypeRunStart, "r", "a", &instanceai.RunStart{MessageID: "m"}), delta(instanceai.TypeTextDelta, "r", "a", "s", "half a sent"))
	if _, err := sub.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The outage: longer than the retry budget, then over.
	counting.failing.Store(4)
	e.send(t, call("r", "a", "c1"))
	live, err := sub.Next(context.Background())
	if err != nil || len(live) != 2 || live[1].Event.Type != instanceai.TypeRunFinish || live[0].Seq != 0 {
		t.Fatalf("published live %+v, %v", live, err)
	}
	if _, snap := e.hub.Subscribe("t"); len(snap.Open) != 0 {
		t.Fatalf("a later subscriber gets the failed run's open text: %+v", snap.Open)
	}
	stored, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 || !stored[0].Echo || !stored[1].Echo || stored[0].Seq != 2 || stored[1].Seq != 3 {
		t.Fatalf("the stored endings were published as %+v, want two echoes at seqs 2 and 3", stored)
	}
	rows, err := store.ReadAfter(context.Background(), "t", 1, 0)
	if err != nil || len(rows) != 2 {
		t.Fatalf("the log after the run-start: %+v, %v", rows, err)
	}
	for i, row := range rows {
		data, err := json.Marshal(&row.Event)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(live[i].Data) {
			t.Fatalf("stored ending %d is\n%s\nbut clients were sent\n%s", i, data, live[i].Data)
		}
	}
	if rows[1].Event.Payload.(*instanceai.RunFinish).Reason != "storage_unavailable" {
		t.Fatalf("stored run-finish %+v", rows[1].Event.Payload)
	}
	if finished.Load() != 1 {
		t.Fatalf("the stored run-finish released the run %d times, want once", finished.Load())
	}
}

// lostAnswerLog stores the first append it is told to lose and answers it
// with an error, as a database whose connection is reset after the COMMIT
// does; then it fails the next failing appends without storing them.
type lostAnswerLog struct {
	instanceai.EventLog
	lose    atomic.Bool
	failing atomic.Int64
}

func (l *lostAnswerLog) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	return l.append(func() (int64, error) { return l.EventLog.AppendEncoded(ctx, thread, events, data) })
}

func (l *lostAnswerLog) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	return l.append(func() (int64, error) { return l.EventLog.AppendFenced(ctx, thread, events, data, fences) })
}

// NextSeq fails while appends fail, as a log that cannot be reached does:
// the writer cannot look whether a lost append landed.
func (l *lostAnswerLog) NextSeq(ctx context.Context, thread string) (int64, error) {
	if l.failing.Load() > 0 {
		return 0, errors.New("dial: connection reset by peer")
	}
	return l.EventLog.NextSeq(ctx, thread)
}

// append loses or fails the append that store makes, as the log is told.
func (l *lostAnswerLog) append(store func() (int64, error)) (int64, error) {
	if l.lose.CompareAndSwap(true, false) {
		if _, err := store(); err != nil {
			return 0, err
		}
		return 0, errors.New("read: connection reset by peer")
	}
	if l.failing.Add(-1) >= 0 {
		return 0, errors.New("dial: connection reset by peer")
	}
	return store()
}

// An append whose answer was lost had been stored: the run ended in the
// log with its own run-finish. Once the log answers again, the writer
// finds that run-finish and drops the ending it kept for the run, so the
// run has one ending; the rows it did not know it committed are published
// and the run's claim is released.
func TestAnAppendWhoseAnswerWasLostEndsTheRunOnce(t *testing.T) {
	e, lossy, finished, sub := startedBehindLostAnswers(t)
	lossy.lose.Store(true)
	lossy.failing.Store(2) // the retry, and the ending's first try
	// One event, so the lost append is one batch whatever the writer's
	// timing: a run-finish the log holds although its append seemed to fail.
	e.send(t, finish("r", "a"))
	got := publishedUntil(t, sub, func(last string) bool { return last == "run-finish@2" })
	// Live: the ending the outage seemed to force; then the rows the log
	// holds.
	if want := "error@0 run-finish@0 run-finish@2"; strings.Join(got, " ") != want {
		t.Fatalf("published %v, want %s", got, want)
	}
	expectLog(t, e.logShape(t), "run-start[a]", "run-finish[a]")
	if finished.Load() != 1 {
		t.Fatalf("the run's claim was released %d times, want once", finished.Load())
	}
}

// An append whose answer was lost had been stored, and the log answers
// again before the writer tries it a second time: the writer finds the
// batch at the log's end and takes it as committed, so it is stored and
// published once (before, the retry stored it a second time).
func TestALostAnswerWhoseAppendLandedIsNotAppendedAgain(t *testing.T) {
	e, lossy, finished, sub := startedBehindLostAnswers(t)
	lossy.lose.Store(true)
	e.send(t, finish("r", "a"))
	got := publishedUntil(t, sub, func(last string) bool { return last == "run-finish@2" })
	if want := "run-finish@2"; strings.Join(got, " ") != want {
		t.Fatalf("published %v, want %s", got, want)
	}
	expectLog(t, e.logShape(t), "run-start[a]", "run-finish[a]")
	if finished.Load() != 1 {
		t.Fatalf("the run's claim was released %d times, want once", finished.Load())
	}
}

// startedBehindLostAnswers starts run r on thread t in a writer whose log
// can lose answers (none lost yet), subscribed, its run-start published.
func startedBehindLostAnswers(t *testing.T) (*env, *lostAnswerLog, *atomic.Int32, *instanceai.Subscription) {
	t.Helper()
	store := memory.New()
	lossy := &lostAnswerLog{EventLog: store}
	e, finished := outageEnv(t, store, lossy)
	sub, _ := e.hub.Subscribe("t")
	t.Cleanup(sub.Close)
	e.send(t, ev(instanceai.TypeRunStart, "r", "a", &instanceai.RunStart{MessageID: "m"}))
	if _, err := sub.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e, lossy, finished, sub
}

// publishedUntil reads the subscription's frames, as "type@seq", until
// done says the last one ends what the test waits for.
func publishedUntil(t *testing.T, sub *instanceai.Subscription, done func(last string) bool) []string {
	t.Helper()
	var got []string
	nctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for len(got) == 0 || !done(got[len(got)-1]) {
		frames, err := sub.Next(nctx)
		if err != nil {
			t.Fatalf("published %v, then %v", got, err)
		}
		for _, f := range frames {
			got = append(got, fmt.Sprintf("%s@%d", f.Event.Type, f.Seq))
		}
	}
	return got
}

// indexedLog is a log wrapper that also lists a run's events, as every
// built-in store does (instanceai.RunIndex), from the store underneath.
type indexedLog struct {
	instanceai.EventLog
	index instanceai.RunIndex
}

func (l indexedLog) RunEvents(ctx context.Context, thread, run string) ([]instanceai.StoredEvent, error) {
	return l.index.RunEvents(ctx, thread, run)
}

func (l indexedLog) UnfinishedRuns(ctx context.Context) ([]instanceai.RunRef, error) {
	return l.index.UnfinishedRuns(ctx)
}

// A run whose run-start was in the batch the outage failed has nothing in
// the log: its ending, live and stored, begins with its run-start, so the
// log never ends a run it did not start. Where the append that seemed to
// fail had stored the run-start (its answer lost), the ending is stored
// without it: the run starts once.
func TestARunStartedInAFailedBatchEndsWithItsStart(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("answer lost=%v", lost), func(t *testing.T) {
			store := memory.New()
			lossy := &lostAnswerLog{EventLog: store}
			e, finished := outageEnv(t, store, indexedLog{EventLog: lossy, index: store})
			sub, _ := e.hub.Subscribe("t")
			defer sub.Close()
			lossy.lose.Store(lost)
			lossy.failing.Store(3) // the retries, and the ending's first try
			e.send(t, ev(instanceai.TypeRunStart, "r", "a", &instanceai.RunStart{MessageID: "m"}), call("r", "a", "c1"))
			got := publishedUntil(t, sub, func(last string) bool {
				return strings.HasPrefix(last, "run-finish@") && !strings.HasSuffix(last, "@0") // the stored ending
			})
			want := "run-start@0 error@0 run-finish@0 run-start@1 error@2 run-finish@3"
			shape := []string{"run-start[a]", "error[orchestrator-r]", "run-finish[orchestrator-r]"}
			// The lost append held the tool-call too when the writer took
			// both events in one batch; when it drained the run-start
			// alone, the lost append held only the run-start, the
			// tool-call failed in the next batch, and the log is the one
			// above: either way the run starts once.
			if lost && strings.Join(got, " ") != want {
				want = "run-start@0 error@0 run-finish@0 run-start@1 tool-call@2 error@3 run-finish@4"
				shape = []string{"run-start[a]", "tool-call[a]", "error[orchestrator-r]", "run-finish[orchestrator-r]"}
			}
			if strings.Join(got, " ") != want {
				t.Fatalf("published %v, want %s", got, want)
			}
			expectLog(t, e.logShape(t), shape...)
			if finished.Load() != 1 {
				t.Fatalf("the run's claim was released %d times, want once", finished.Load())
			}
		})
	}
}

// batchRecorder is a Publisher that records the size of every batch.
type batchRecorder struct {
	mu      sync.Mutex
	batches []int
	frames  int
}

func (r *batchRecorder) Publish(_ string, frames []instanceai.Frame) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, len(frames))
	r.frames += len(frames)
}

// A producer that outruns the drain leaves a backlog: it is published in
// passes that fit a subscriber's queue, and coalesced as if it had come in
// one pass, even when Close finds it still queued.
func TestBacklogIsPublishedInBoundedPasses(t *testing.T) {
	for _, closing := range []bool{false, true} {
		t.Run(fmt.Sprintf("close=%v", closing), func(t *testing.T) {
			const deltas = 10 * instanceai.MaxDrainPass
			store := memory.New()
			if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
				t.Fatal(err)
			}
			rec := &batchRecorder{}
			w := instanceai.NewWriter(store, rec, instanceai.WriterConfig{IdleFlush: time.Hour})
			var text strings.Builder
			for i := range deltas {
				chunk := fmt.Sprintf("chunk %d. ", i)
				text.WriteString(chunk)
				if err := w.Enqueue("t", delta(instanceai.TypeTextDelta, "r", "a", "s", chunk)); err != nil {
					t.Fatal(err)
				}
			}
			if !closing {
				if err := w.Enqueue("t", finish("r", "a")); err != nil {
					t.Fatal(err)
				}
				if err := w.Sync(context.Background(), "t"); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			e := &env{store: store}
			want := []string{"text-block[a]:s:" + text.String()}
			if !closing {
				want = append(want, "run-finish[a]")
			}
			expectLog(t, e.logShape(t), want...)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if want := deltas + len(want); rec.frames != want {
				t.Fatalf("published %d frames, want %d", rec.frames, want)
			}
			for i, n := range rec.batches {
				// A pass's events, plus the blocks it closes.
				if n > instanceai.MaxDrainPass+1 {
					t.Fatalf("batch %d has %d frames, over a pass of %d events", i, n, instanceai.MaxDrainPass)
				}
			}
		})
	}
}

// recorder is a Publisher that keeps every frame the writer publishes.
type recorder struct {
	mu     sync.Mutex
	frames []instanceai.Frame
}

func (r *recorder) Publish(_ string, frames []instanceai.Frame) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = append(r.frames, frames...)
}

// live returns the events a live connection is sent: the frames but the
// blocks, which go out on replay only.
func (r *recorder) live() []instanceai.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []instanceai.Event
	for _, f := range r.frames {
		if t := f.Event.Type; t != instanceai.TypeTextBlock && t != instanceai.TypeReasoningBlock {
			out = append(out, *f.Event)
		}
	}
	return out
}

// A segment that goes on after a silence closed it is stored as two blocks
// under two responseIds, the second one's live deltas carrying it too, so
// that a client keying text by responseId holds the whole text, live and
// on replay, and n8n's fold of either is the same.
func TestASegmentThatGoesOnAfterASilenceKeepsBothParts(t *testing.T) {
	store := memory.New()
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w := instanceai.NewWriter(store, rec, instanceai.WriterConfig{IdleFlush: 20 * time.Millisecond})
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	e := &env{store: store, writer: w}
	const td = instanceai.TypeTextDelta
	start := ev(instanceai.TypeRunStart, "r", "a", &instanceai.RunStart{MessageID: "m"})
	e.send(t, start, delta(td, "r", "a", "s1", "first "), delta(td, "r", "a", "s1", "part"))
	waitUntil(t, "the silence closed the segment", func() bool { return len(e.logShape(t)) == 2 })
	e.send(t, delta(td, "r", "a", "s1", " and "), delta(td, "r", "a", "s1", "the rest"))
	waitUntil(t, "the silence closed the second part", func() bool { return len(e.logShape(t)) == 3 })
	e.send(t, delta(td, "r", "a", "s1", "; a third"), finish("r", "a"))
	expectLog(t, e.logShape(t), "run-start[a]", "text-block[a]:s1:first part", "text-block[a]:s1:2: and the rest",
		"text-block[a]:s1:3:; a third", "run-finish[a]")

	var live []string
	for _, x := range rec.live() {
		if x.Type == td {
			live = append(live, x.ResponseID)
		}
	}
	if want := []string{"s1", "s1", "s1:2", "s1:2", "s1:3"}; !slices.Equal(live, want) {
		t.Fatalf("live deltas' responseIds %v, want %v", live, want)
	}
	rows, _ := store.ReadAfter(context.Background(), "t", 0, 0)
	var stored []instanceai.Event
	for _, r := range rows {
		stored = append(stored, r.Event)
	}
	replayed, streamed := agenttree.Fold(stored), agenttree.Fold(rec.live())
	if replayed.TextContent != "first part and the rest; a third" || streamed.TextContent != replayed.TextContent {
		t.Fatalf("replayed text %q, live text %q", replayed.TextContent, streamed.TextContent)
	}
	if !reflect.DeepEqual(replayed.Timeline, streamed.Timeline) {
		t.Fatalf("replayed timeline %+v, live %+v", replayed.Timeline, streamed.Timeline)
	}
}

// A producer faster than the drain waits once the thread's queue holds
// its room; nothing it sent is lost, and the queue never holds much more.
func TestAProducerFasterThanTheDrainWaitsForRoom(t *testing.T) {
	// Small enough that all of it fits the memory store's log (2 MB);
	// events are many more than the queue's room holds.
	const maxEvent, events = 16 << 10, 16
	store := memory.New()
	release := make(chan struct{})
	log := &blockedLog{EventLog: store, release: release}
	agentDone := make(chan error, 1)
	var emitted atomic.Int64
	big := strings.Repeat("x", maxEvent-2<<10)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		for i := range events {
			if err := run.Emit(instanceai.Event{Type: instanceai.TypeError, Payload: &instanceai.ErrorPayload{Content: big[:len(big)-i]}}); err != nil {
				agentDone <- err
				return err
			}
			emitted.Add(1)
		}
		agentDone <- nil
		return nil
	})
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	core := instanceai.NewCore(storeWithLog{store, log}, agent, instanceai.CoreConfig{
		Limits: instanceai.Limits{MaxEventBytes: maxEvent, MaxSegmentBytes: 1 << 10},
		Writer: instanceai.WriterConfig{IdleFlush: time.Hour}})
	run, err := core.Runs().Start(instanceai.StartRequest{ThreadID: "t", UserID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	// The drain holds one pass in its blocked append; the queue then fills
	// to its room, four of the largest events, and the producer waits.
	room := 4 * maxEvent
	waitUntil(t, "the queue holds its room", func() bool { return instanceai.QueuedBytes(core.Writer(), "t") > room })
	for range 20 {
		if q := instanceai.QueuedBytes(core.Writer(), "t"); q > room+maxEvent+1<<10 {
			t.Fatalf("the queue holds %d bytes, past its room %d and one event", q, room)
		}
		runtime.Gosched()
	}
	if n := emitted.Load(); n >= events {
		t.Fatalf("the producer emitted all %d events while the store was blocked", n)
	}
	close(release)
	if err := <-agentDone; err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := run.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, _ := store.ReadAfter(ctx, "t", 0, 0); len(rows) != events+2 {
		t.Fatalf("stored %d rows, want the run-start, all %d events and the run-finish", len(rows), events)
	}
	_ = core.Runs().Shutdown(ctx)
	_ = core.Writer().Close(ctx)
}

// storeWithLog is a store whose event log is another: the writer appends
// through log, the rest is the store's.
type storeWithLog struct {
	*memory.Store
	log *blockedLog
}

func (s storeWithLog) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	return s.log.AppendEncoded(ctx, thread, events, data)
}

func (s storeWithLog) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	<-s.log.release
	return s.Store.AppendFenced(ctx, thread, events, data, fences)
}

// The writer's own guard: a delta that came past the run's door cannot
// grow a segment past its bound, nor an event over its bound be stored.
func TestTheWriterHoldsNoSegmentOrEventPastItsBound(t *testing.T) {
	e := newEnv(t, nil, instanceai.WriterConfig{IdleFlush: time.Hour, Limits: instanceai.Limits{MaxSegmentBytes: 8, MaxEventBytes: 72 << 10}})
	const td = instanceai.TypeTextDelta
	e.send(t, delta(td, "r", "a", "s1", "12345"), delta(td, "r", "a", "s1", "6789"), delta(td, "r", "a", "s1", "more"),
		ev(instanceai.TypeError, "r", "a", &instanceai.ErrorPayload{Content: strings.Repeat("x", 80<<10)}),
		call("r", "a", "c1"))
	expectLog(t, e.logShape(t), "text-block[a]:s1:12345678", "tool-call[a]")
}
