package instanceai

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func textEv(typ EventType, run, agent, resp, text string) *Event {
	return &Event{Type: typ, RunID: run, AgentID: agent, ResponseID: resp, Payload: &Text{Text: text}}
}

func mustFrame(t *testing.T, seq int64, ev *Event) Frame {
	t.Helper()
	f, err := NewFrame(seq, ev)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestHubSnapshotIsAtomicWithPublish(t *testing.T) {
	h := NewHub(16)
	h.Publish("t", []Frame{
		mustFrame(t, 1, &Event{Type: TypeRunStart, RunID: "r", AgentID: "a", Payload: &RunStart{MessageID: "m"}}),
		mustFrame(t, 0, textEv(TypeReasoningDelta, "r", "a", "x", "think ")),
		mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "y", "hello ")),
		mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "y", "world")),
	})
	sub, snap := h.Subscribe("t")
	defer sub.Close()
	if snap.Committed != 1 {
		t.Fatalf("committed = %d, want 1", snap.Committed)
	}
	if len(snap.Open) != 2 || snap.Open[0].Type != TypeReasoningDelta || snap.Open[1].Payload.(*Text).Text != "hello world" ||
		snap.Open[1].ResponseID != "y" {
		t.Fatalf("open segments = %+v", snap.Open)
	}
	// A block closes its segment; the next subscriber sees it gone.
	h.Publish("t", []Frame{mustFrame(t, 2, textEv(TypeReasoningBlock, "r", "a", "x", "think "))})
	_, snap2 := h.Subscribe("t")
	if snap2.Committed != 2 || len(snap2.Open) != 1 || snap2.Open[0].Type != TypeTextDelta {
		t.Fatalf("after block: %+v", snap2)
	}
	frames, err := sub.Next(context.Background())
	if err != nil || len(frames) != 1 || frames[0].Seq != 2 || !frames[0].Hidden {
		t.Fatalf("queued after subscribe = %+v, %v", frames, err)
	}
}

func TestHubDropsSlowSubscriberWithoutBlocking(t *testing.T) {
	h := NewHub(4)
	slow, _ := h.Subscribe("t")
	fast, _ := h.Subscribe("t")
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= 10; i++ {
			h.Publish("t", []Frame{mustFrame(t, i, &Event{Type: TypeStatus, RunID: "r", AgentID: "a", Payload: &Status{}})})
			frames, err := fast.Next(ctx)
			if err != nil || len(frames) != 1 || frames[0].Seq != i {
				t.Errorf("fast subscriber got %+v, %v", frames, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publishing blocked on a slow subscriber")
	}
	if _, err := slow.Next(ctx); err != ErrSubscriberDropped {
		t.Fatalf("slow subscriber: err = %v, want ErrSubscriberDropped", err)
	}
	if n := h.Subscribers(); n != 1 {
		t.Fatalf("subscribers = %d, want 1 (the slow one removed)", n)
	}
}

func TestHubForgetClosesSubscribers(t *testing.T) {
	h := NewHub(4)
	sub, _ := h.Subscribe("t")
	h.Forget("t")
	if _, err := sub.Next(context.Background()); err != ErrThreadClosed {
		t.Fatalf("err = %v, want ErrThreadClosed", err)
	}
}

// rowsLog is an EventLog that holds the given rows and nothing else.
type rowsLog []StoredEvent

func (l rowsLog) Append(context.Context, string, []Event) (int64, error) { return 0, nil }
func (l rowsLog) AppendEncoded(context.Context, string, []Event, [][]byte) (int64, error) {
	return 0, nil
}
func (l rowsLog) NextSeq(context.Context, string) (int64, error) { return 0, nil }
func (l rowsLog) ReadAfter(_ context.Context, _ string, after int64, limit int) ([]StoredEvent, error) {
	var out []StoredEvent
	for _, r := range l {
		if r.Seq > after && (limit <= 0 || len(out) < limit) {
			out = append(out, r)
		}
	}
	return out, nil
}

func toolFrame(t *testing.T, seq int64) Frame {
	return mustFrame(t, seq, &Event{Type: TypeToolCall, RunID: "r", AgentID: "a",
		Payload: &ToolCall{ToolCallID: "c", ToolName: "n", Args: []byte(`{}`)}})
}

// A writer that cannot store a run's events publishes its ending live
// (error, run-finish, unstored): a later subscriber gets none of the run's
// open text, but the hub keeps it for a settlement, which must write the
// text those clients were sent (Hub.LiveText), until a stored run-finish
// of the run arrives.
func TestHubKeepsTextALiveEndingClosedForTheSettlement(t *testing.T) {
	h := NewHub(16)
	h.Publish("t", []Frame{
		mustFrame(t, 1, &Event{Type: TypeRunStart, RunID: "r", AgentID: "a", Payload: &RunStart{MessageID: "m"}}),
		mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "y", "hello ")),
		mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "y", "world")),
		mustFrame(t, 0, textEv(TypeReasoningDelta, "r", "a", "x", "hmm")),
		mustFrame(t, 0, textEv(TypeTextBlock, "r", "a", "y", "hello world")),
		mustFrame(t, 0, &Event{Type: TypeRunFinish, RunID: "r", AgentID: "a", Payload: &RunFinish{Status: RunError, Reason: "storage_unavailable"}}),
	})
	sub, snap := h.Subscribe("t")
	sub.Close()
	if len(snap.Open) != 0 {
		t.Fatalf("a late subscriber got the text of a run that ended live: %+v", snap.Open)
	}
	open, after := h.LiveText("t", "r")
	var texts []string
	for _, ev := range open {
		texts = append(texts, string(ev.Type)+":"+ev.Payload.(*Text).Text)
	}
	if want := []string{"text-delta:hello world", "reasoning-delta:hmm"}; !slices.Equal(texts, want) || len(after) != 2 {
		t.Fatalf("live text after a live ending = %q (after %v), want %q", texts, after, want)
	}
	if open, _ := h.LiveText("t", "other"); len(open) != 0 {
		t.Fatalf("another run's live text = %+v", open)
	}
	h.Publish("t", []Frame{mustFrame(t, 2, &Event{Type: TypeRunFinish, RunID: "r", AgentID: "a",
		Payload: &RunFinish{Status: RunInterrupted, Reason: ReasonCrashed}})})
	if open, _ := h.LiveText("t", "r"); len(open) != 0 {
		t.Fatalf("live text after the stored run-finish = %+v, want none", open)
	}
}

// A hub that missed a run's block and run-finish (its bus link was reset
// meanwhile, and no subscriber made it read the log) does not hand a
// later subscriber that run's orchestrator text as open once it sees the
// thread's next run start: one run is active per thread, so that one was
// over. A background agent's text of the old run, which may go on after
// its run's finish, stays open.
func TestHubDropsAnEarlierRunsOpenTextAtTheNextRunStart(t *testing.T) {
	h := NewHub(16)
	orch := OrchestratorAgentID("r1")
	delta := func(agent, text string) Frame {
		f := mustFrame(t, 0, textEv(TypeTextDelta, "r1", agent, "seg-"+agent, text))
		f.After = 1
		return f
	}
	h.Publish("t", []Frame{
		mustFrame(t, 1, &Event{Type: TypeRunStart, RunID: "r1", AgentID: orch, Payload: &RunStart{MessageID: "m"}}),
		delta(orch, "chunk 0. "),
		delta("agent_bg", "working. "),
	})
	// Seqs 2-4 (the block, the run-finish, ...) never arrive here.
	h.Publish("t", []Frame{mustFrame(t, 5, &Event{Type: TypeRunStart, RunID: "r2", AgentID: OrchestratorAgentID("r2"),
		Payload: &RunStart{MessageID: "m2"}})})
	sub, snap := h.Subscribe("t")
	sub.Close()
	if len(snap.Open) != 1 || snap.Open[0].AgentID != "agent_bg" {
		t.Fatalf("open segments after the next run started = %+v; want the background agent's only", snap.Open)
	}
}

// A subscriber that stops taking is dropped once the frames it holds
// reach the byte bound, long before their count would: its queue would
// otherwise keep every large frame alive after the other subscribers let
// go of them. A reader that keeps up is never dropped for it.
func TestHubDropsSubscriberOverItsByteBound(t *testing.T) {
	h := NewHub(1 << 20)
	h.LimitQueueBytes(64 << 10)
	slow, _ := h.Subscribe("t")
	fast, _ := h.Subscribe("t")
	ctx := context.Background()
	big := strings.Repeat("x", 8<<10)
	for i := int64(1); i <= 20; i++ {
		h.Publish("t", []Frame{mustFrame(t, i, &Event{Type: TypeToolResult, RunID: "r", AgentID: "a",
			Payload: &ToolResult{ToolCallID: "c", Result: json.RawMessage(`"` + big + `"`)}})})
		frames, err := fast.Next(ctx)
		if err != nil || len(frames) != 1 || frames[0].Seq != i {
			t.Fatalf("the reader that keeps up got %d frames, %v", len(frames), err)
		}
	}
	if _, err := slow.Next(ctx); err != ErrSubscriberDropped {
		t.Fatalf("20 frames of 8 KB past a 64 KB bound: err = %v, want ErrSubscriberDropped", err)
	}
	if n := h.Subscribers(); n != 1 {
		t.Fatalf("subscribers = %d, want 1", n)
	}
}

// A hub heard a run from its start when its run-start was published live
// there; a run-start it only read from the log (a head check's catch-up)
// does not count, nor one of a thread whose state was started afresh.
func TestHubHeardRun(t *testing.T) {
	hub := NewHub(8)
	start := func(seq int64, run string) Frame {
		return mustFrame(t, seq, &Event{Type: TypeRunStart, RunID: run, AgentID: "a", Payload: &RunStart{MessageID: "m"}})
	}
	hub.Publish("t", []Frame{start(1, "unwatched")})
	hub.Watch("t")
	hub.Publish("t", []Frame{start(2, "live")})
	hub.CaughtUp("t", []Frame{start(3, "caught-up")}, 3)
	for run, want := range map[string]bool{"unwatched": false, "live": true, "caught-up": false} {
		if got := hub.HeardRun("t", run); got != want {
			t.Fatalf("run %s heard %v, want %v", run, got, want)
		}
	}
	if hub.HeardRun("other", "live") {
		t.Fatal("a run counts as heard on another thread")
	}
	hub.Unhear()
	if hub.HeardRun("t", "live") {
		t.Fatal("a run heard before a bus outage still counts as heard")
	}
	hub.Publish("t", []Frame{start(4, "after")})
	hub.Forget("t")
	if hub.HeardRun("t", "after") {
		t.Fatal("a forgotten thread's run still counts as heard")
	}
}
