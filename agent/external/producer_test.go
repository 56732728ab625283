package external_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

const waitFor = 10 * time.Second

// harness is a core on a memory store whose agent is the external one.
type harness struct {
	t     *testing.T
	store *memory.Store
	core  *instanceai.Core
	ps    *external.Producers
}

func newHarness(t *testing.T, lease, startTimeout time.Duration) *harness {
	t.Helper()
	store := memory.New()
	ps := external.NewProducers(lease)
	core := instanceai.NewCore(store, ps.Agent(startTimeout), instanceai.CoreConfig{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = core.Shutdown(ctx)
	})
	return &harness{t: t, store: store, core: core, ps: ps}
}

// chat starts a run of the external agent on thread.
func (h *harness) chat(thread string, req instanceai.StartRequest) (*instanceai.Run, error) {
	h.t.Helper()
	th, err := h.core.OpenThread(context.Background(), thread, "u")
	if err != nil {
		h.t.Fatal(err)
	}
	req.ThreadID, req.UserID = thread, "u"
	if req.Message == "" {
		req.Message = "go"
	}
	return h.core.Chat(context.Background(), th, req)
}

// start begins a run its producer drives, as the publish API's start
// does.
func (h *harness) start(thread, runID string) (*external.Producer, bool) {
	h.t.Helper()
	p, again, err := h.ps.Start(runID, func(work instanceai.Agent) (*instanceai.Run, error) {
		return h.chat(thread, instanceai.StartRequest{RunID: runID, Work: work, WorkName: "publish"})
	})
	if err != nil {
		h.t.Fatalf("start: %v", err)
	}
	return p, again
}

// finished waits for the run's end and returns its run-finish.
func (h *harness) finished(run *instanceai.Run) *instanceai.RunFinish {
	h.t.Helper()
	select {
	case <-run.Done():
	case <-time.After(waitFor):
		h.t.Fatalf("run %s did not end", run.ID)
	}
	if err := run.Sync(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	for _, ev := range h.events(run) {
		if f, ok := ev.Payload.(*instanceai.RunFinish); ok && ev.AgentID == run.AgentID {
			return f
		}
	}
	h.t.Fatalf("run %s has no run-finish", run.ID)
	return nil
}

func (h *harness) events(run *instanceai.Run) []instanceai.Event {
	h.t.Helper()
	rows, err := h.store.ReadAfter(context.Background(), run.ThreadID, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []instanceai.Event
	for _, r := range rows {
		if r.Event.RunID == run.ID {
			out = append(out, r.Event)
		}
	}
	return out
}

func delta(text string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeTextDelta, Payload: &instanceai.Text{Text: text}}
}

func checked(t *testing.T, p *external.Producer, evs ...instanceai.Event) []instanceai.Event {
	t.Helper()
	out := make([]instanceai.Event, len(evs))
	for i, ev := range evs {
		var err error
		if out[i], err = p.Check(ev); err != nil {
			t.Fatalf("check %s: %v", ev.Type, err)
		}
	}
	return out
}

// An append's events are stored once whatever the retries, in order; a
// gap, another producer and an old epoch take nothing, and every answer
// says where the producer goes on from.
func TestAppendsAreIdempotentAndFenced(t *testing.T) {
	h := newHarness(t, time.Minute, time.Minute)
	p, _ := h.start("t", "")
	steps := []struct {
		name      string
		id        string
		epoch     int64
		seq       int64
		texts     []string
		stored    int
		dupes     int
		want      error
		next      int64
		wantBlock string
	}{
		{name: "first", id: "w", texts: []string{"a", "b"}, stored: 2, next: 2},
		{name: "retry", id: "w", texts: []string{"a", "b"}, dupes: 2, next: 2},
		{name: "retry with more", id: "w", seq: 1, texts: []string{"b", "c"}, stored: 1, dupes: 1, next: 3},
		{name: "gap", id: "w", seq: 9, texts: []string{"x"}, want: external.ErrSequenceGap, next: 3},
		{name: "another producer", id: "v", seq: 3, texts: []string{"x"}, want: external.ErrProducerConflict, next: 3},
		{name: "restart", id: "w", epoch: 1, texts: []string{"d"}, stored: 1, next: 1},
		{name: "zombie", id: "w", seq: 3, texts: []string{"x"}, want: external.ErrProducerFenced, next: 1},
	}
	for _, s := range steps {
		var evs []instanceai.Event
		for _, text := range s.texts {
			evs = append(evs, delta(text))
		}
		got, err := p.Append(s.id, s.epoch, s.seq, checked(t, p, evs...))
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
		if got.NextSeq != s.next || got.Stored != s.stored || got.Duplicates != s.dupes || got.Durable {
			t.Fatalf("%s: %+v, want next %d, stored %d, duplicates %d, nothing durable", s.name, got, s.next, s.stored, s.dupes)
		}
		if p.NextSeq() != s.next {
			t.Fatalf("%s: NextSeq %d", s.name, p.NextSeq())
		}
	}
	call := instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "search", Args: json.RawMessage(`{}`)}}
	if got, err := p.Append("w", 1, 1, checked(t, p, call)); err != nil || !got.Durable {
		t.Fatalf("a tool call: %+v %v, want it durable", got, err)
	}
	if got, err := p.Append("w", 1, 1, checked(t, p, call)); err != nil || got.Duplicates != 1 || !got.Durable {
		t.Fatalf("the tool call again: %+v %v, want a durable duplicate", got, err)
	}
	p.Finish(nil)
	if f := h.finished(p.Run()); f.Status != instanceai.RunCompleted {
		t.Fatalf("run-finish %+v", f)
	}
	var text strings.Builder
	for _, ev := range h.events(p.Run()) {
		if ev.Type == instanceai.TypeTextBlock {
			text.WriteString(ev.Payload.(*instanceai.Text).Text)
		}
	}
	if text.String() != "abcd" {
		t.Fatalf("the run's text is %q, want each event once", text.String())
	}
	if _, err := p.Append("w", 1, 2, checked(t, p, delta("late"))); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("an append after the finish: %v", err)
	}
	if err := p.Over(); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("Over = %v", err)
	}
}

// An event the run's door refuses is named by its place in the append;
// what came before it is stored, and the run goes on.
func TestAppendNamesTheRefusedEvent(t *testing.T) {
	h := newHarness(t, time.Minute, time.Minute)
	p, _ := h.start("t", "")
	orphan := instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: "nope", Result: json.RawMessage(`1`)}}
	got, err := p.Append("w", 0, 0, checked(t, p, delta("a"), orphan, delta("b")))
	var refused *external.RefusedError
	var rule *instanceai.RuleError
	if !errors.As(err, &refused) || refused.Index != 1 || !errors.As(err, &rule) || rule.Rule != instanceai.RuleUnknownToolCall {
		t.Fatalf("Append = %v, want event 1 refused for %s", err, instanceai.RuleUnknownToolCall)
	}
	if got.Stored != 1 || got.NextSeq != 1 {
		t.Fatalf("%+v, want the event before it stored", got)
	}
	if got, err := p.Append("w", 0, 1, checked(t, p, delta("b"))); err != nil || got.NextSeq != 2 {
		t.Fatalf("the run goes on: %+v %v", got, err)
	}
}

// The run's start, finish and confirmation requests are not a producer's
// to append.
func TestCheckRefusesWhatIsNotAppended(t *testing.T) {
	h := newHarness(t, time.Minute, time.Minute)
	p, _ := h.start("t", "")
	for _, typ := range []instanceai.EventType{instanceai.TypeRunStart, instanceai.TypeRunFinish, instanceai.TypeConfirmRequest} {
		if _, err := p.Check(instanceai.Event{Type: typ}); !errors.Is(err, external.ErrNotAppendable) {
			t.Fatalf("%s: %v", typ, err)
		}
	}
	ev, err := p.Check(instanceai.Event{Type: instanceai.TypeTextDelta, UserID: "mallory", TS: 1, Payload: &instanceai.Text{Text: "x"}})
	if err != nil || ev.RunID != p.Run().ID || ev.UserID != "u" || ev.TS == 1 || ev.AgentID != p.Run().AgentID {
		t.Fatalf("the checked event %+v (%v): want it stamped as the run's", ev, err)
	}
	if _, err := p.Check(instanceai.Event{Type: "nope"}); err == nil {
		t.Fatal("an unknown type passed the check")
	}
}

// A start retried with its runId finds the run it began; Find finds a run
// by thread and id, and nothing else.
func TestStartAgainAndFind(t *testing.T) {
	h := newHarness(t, time.Minute, time.Minute)
	p, again := h.start("t", "run-1")
	if again || p.Run().ID != "run-1" {
		t.Fatalf("start: %s again=%v", p.Run().ID, again)
	}
	if q, again := h.start("t", "run-1"); !again || q != p {
		t.Fatalf("the retried start found %p again=%v, want %p", q, again, p)
	}
	if q, err := h.ps.Find("t", "run-1"); err != nil || q != p {
		t.Fatalf("Find = %p %v", q, err)
	}
	for _, c := range [][2]string{{"t", "run-2"}, {"other", "run-1"}} {
		_, err := h.ps.Find(c[0], c[1])
		var missing *external.RunNotFoundError
		if !errors.Is(err, external.ErrRunNotFound) || !errors.As(err, &missing) || missing.ThreadID != c[0] || missing.RunID != c[1] {
			t.Fatalf("Find(%s, %s) = %v", c[0], c[1], err)
		}
	}
	// Another start on the busy thread is the core's refusal.
	_, _, err := h.ps.Start("", func(work instanceai.Agent) (*instanceai.Run, error) {
		return h.chat("t", instanceai.StartRequest{Work: work})
	})
	var active *instanceai.RunActiveError
	if !errors.As(err, &active) {
		t.Fatalf("a second start: %v", err)
	}
}

// A producer silent for its lease is taken for gone; a request under way
// keeps it there however long it lasts.
func TestLease(t *testing.T) {
	const lease = 150 * time.Millisecond
	h := newHarness(t, lease, time.Minute)
	p, _ := h.start("held", "")
	release := p.Hold()
	time.Sleep(4 * lease)
	select {
	case <-p.Run().Done():
		t.Fatal("the run ended while its producer's request was under way")
	default:
	}
	began := time.Now()
	release()
	f := h.finished(p.Run())
	if f.Status != instanceai.RunError || !strings.Contains(errorText(h, p.Run()), "producer_gone") {
		t.Fatalf("run-finish %+v, want the producer taken for gone", f)
	}
	if d := time.Since(began); d < lease {
		t.Fatalf("the run ended %v after the request, before its lease", d)
	}

	// Touches keep a producer there too.
	q, _ := h.start("touched", "")
	for range 6 {
		time.Sleep(lease / 3)
		q.Touch()
	}
	select {
	case <-q.Run().Done():
		t.Fatal("the run ended while its producer kept touching it")
	default:
	}
	q.Finish(nil)
	if f := h.finished(q.Run()); f.Status != instanceai.RunCompleted {
		t.Fatalf("run-finish %+v", f)
	}
}

func errorText(h *harness, run *instanceai.Run) string {
	var out []string
	for _, ev := range h.events(run) {
		if e, ok := ev.Payload.(*instanceai.ErrorPayload); ok {
			out = append(out, e.Code+": "+e.Content)
		}
	}
	return strings.Join(out, "; ")
}

// The external agent's run waits for a producer to attach (its first
// request), and ends with producer_missing when none comes in time.
func TestExternalAgentWaitsForItsProducer(t *testing.T) {
	h := newHarness(t, time.Minute, 200*time.Millisecond)
	run, err := h.chat("missing", instanceai.StartRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f := h.finished(run); f.Status != instanceai.RunError || !strings.Contains(errorText(h, run), "producer_missing") {
		t.Fatalf("run-finish %+v, errors %q: want producer_missing", f, errorText(h, run))
	}

	run, err = h.chat("attached", instanceai.StartRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The agent registers the run as it begins.
	var p *external.Producer
	for deadline := time.Now().Add(waitFor); p == nil; time.Sleep(5 * time.Millisecond) {
		if p, err = h.ps.Find("attached", run.ID); err != nil && time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	p.Hold()()
	time.Sleep(400 * time.Millisecond) // past the start timeout
	if got, err := p.Append("w", 0, 0, checked(t, p, delta("hi"))); err != nil || got.Stored != 1 {
		t.Fatalf("append: %+v %v", got, err)
	}
	p.Finish(&instanceai.ProviderError{Code: "producer_error", Message: "it broke"})
	if f := h.finished(run); f.Status != instanceai.RunError || !strings.Contains(errorText(h, run), "it broke") {
		t.Fatalf("run-finish %+v, errors %q: want the producer's error", f, errorText(h, run))
	}
}

// A cancel ends the run: the producer's appends are refused as cancelled.
func TestCancelReachesTheProducer(t *testing.T) {
	h := newHarness(t, time.Minute, time.Minute)
	p, _ := h.start("t", "")
	if _, err := h.core.Cancel("t"); err != nil {
		t.Fatal(err)
	}
	if f := h.finished(p.Run()); f.Status != instanceai.RunCancelled {
		t.Fatalf("run-finish %+v", f)
	}
	if _, err := p.Append("w", 0, 0, checked(t, p, delta("x"))); !errors.Is(err, external.ErrRunCancelled) &&
		!errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("an append after the cancel: %v", err)
	}
	if err := p.Over(); !errors.Is(err, external.ErrRunCancelled) {
		t.Fatalf("Over = %v, want cancelled", err)
	}
}
