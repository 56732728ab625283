package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// One test per guarantee that Hub documents.

// statusFrame is an id-less frame tagged with text.
func statusFrame(t *testing.T, seq int64, tag string) instanceai.Frame {
	t.Helper()
	ev := &instanceai.Event{Type: instanceai.TypeToolCall, RunID: "r", AgentID: "a",
		Payload: &instanceai.ToolCall{ToolCallID: tag, ToolName: "n", Args: []byte(`{}`)}}
	f, err := instanceai.NewFrame(seq, ev)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func tagOf(f instanceai.Frame) string { return f.Event.Payload.(*instanceai.ToolCall).ToolCallID }

// collect reads n frames from sub.
func collect(t *testing.T, sub *instanceai.Subscription, n int) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var tags []string
	for len(tags) < n {
		frames, err := sub.Next(ctx)
		if err != nil {
			return tags, err
		}
		for _, f := range frames {
			tags = append(tags, tagOf(f))
		}
	}
	return tags, nil
}

// Concurrent publishers: every subscriber gets each batch whole and in
// its order, all subscribers in the same order; subscribers that come and
// go meanwhile disturb nothing.
func TestHubConcurrentPublishKeepsBatchesWholeAndOrdered(t *testing.T) {
	const publishers, batches, size = 4, 50, 3
	h := instanceai.NewHub(publishers * batches * size)
	subs := []*instanceai.Subscription{}
	for range 2 {
		s, _ := h.Subscribe("t")
		defer s.Close()
		subs = append(subs, s)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() { // churn
		for {
			select {
			case <-done:
				return
			default:
			}
			s, _ := h.Subscribe("t")
			s.Close()
		}
	})
	results := make([][]string, len(subs))
	errs := make([]error, len(subs))
	var readers sync.WaitGroup
	for i, s := range subs {
		readers.Go(func() { results[i], errs[i] = collect(t, s, publishers*batches*size) })
	}
	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Go(func() {
			for b := range batches {
				var batch []instanceai.Frame
				for k := range size {
					batch = append(batch, statusFrame(t, 0, fmt.Sprintf("p%d-b%03d-f%d", p, b, k)))
				}
				h.Publish("t", batch)
			}
		})
	}
	pubs.Wait()
	readers.Wait()
	close(done)
	wg.Wait()
	for i := range subs {
		if errs[i] != nil {
			t.Fatalf("subscriber %d: %v", i, errs[i])
		}
	}
	if !slices.Equal(results[0], results[1]) {
		t.Fatal("two subscribers of one thread saw different orders")
	}
	next := make([]int, publishers)
	got := results[0]
	for i := 0; i < len(got); i += size {
		var p, b int
		if _, err := fmt.Sscanf(got[i], "p%d-b%03d-f0", &p, &b); err != nil {
			t.Fatalf("frame %d is %s, not the first of a batch", i, got[i])
		}
		if b != next[p] {
			t.Fatalf("publisher %d's batch %d arrived where %d was due", p, b, next[p])
		}
		next[p]++
		for k := 1; k < size; k++ {
			if want := fmt.Sprintf("p%d-b%03d-f%d", p, b, k); got[i+k] != want {
				t.Fatalf("batch split: frame %d is %s, want %s", i+k, got[i+k], want)
			}
		}
	}
}

// A subscriber already a full queue behind is dropped at once, loses what
// it had queued, and other subscribers and threads go on.
func TestHubDropsASubscriberAFullQueueBehind(t *testing.T) {
	h := instanceai.NewHub(4)
	slow, _ := h.Subscribe("t")
	reading, _ := h.Subscribe("t")
	other, _ := h.Subscribe("u")
	defer other.Close()
	h.Publish("t", []instanceai.Frame{statusFrame(t, 0, "1"), statusFrame(t, 0, "2"), statusFrame(t, 0, "3")})
	if tags, err := collect(t, reading, 3); err != nil || len(tags) != 3 {
		t.Fatalf("the reading subscriber got %v, %v", tags, err)
	}
	// slow holds 3, less than the queue: it takes the batch (5 queued).
	h.Publish("t", []instanceai.Frame{statusFrame(t, 0, "4"), statusFrame(t, 0, "5")})
	if tags, err := collect(t, reading, 2); err != nil || !slices.Equal(tags, []string{"4", "5"}) {
		t.Fatalf("the reading subscriber got %v, %v", tags, err)
	}
	// Now slow is a full queue behind: the next batch drops it.
	h.Publish("t", []instanceai.Frame{statusFrame(t, 0, "6")})
	if _, err := slow.Next(context.Background()); !errors.Is(err, instanceai.ErrSubscriberDropped) {
		t.Fatalf("slow subscriber: %v, want ErrSubscriberDropped (its queued frames are gone)", err)
	}
	if tags, err := collect(t, reading, 1); err != nil || tags[0] != "6" {
		t.Fatalf("the reading subscriber got %v, %v", tags, err)
	}
	h.Publish("u", []instanceai.Frame{statusFrame(t, 0, "x")})
	if tags, err := collect(t, other, 1); err != nil || tags[0] != "x" {
		t.Fatalf("another thread's subscriber got %v, %v", tags, err)
	}
	if n := h.Subscribers(); n != 2 {
		t.Fatalf("subscribers = %d, want 2 (the dropped one removed)", n)
	}
}

// A batch larger than the whole queue reaches every subscriber that keeps
// up, whole: one large commit must not disconnect every fast reader at once
// (and send them all back to the log together).
func TestHubGivesAHealthyReaderABatchLargerThanTheQueue(t *testing.T) {
	const queue, batch = 4, 50
	h := instanceai.NewHub(queue)
	readers := make([]*instanceai.Subscription, 3)
	for i := range readers {
		readers[i], _ = h.Subscribe("t")
	}
	for round := range 3 {
		frames := make([]instanceai.Frame, batch)
		want := make([]string, batch)
		for i := range frames {
			want[i] = fmt.Sprintf("r%d-%d", round, i)
			frames[i] = statusFrame(t, 0, want[i])
		}
		h.Publish("t", frames)
		for n, r := range readers {
			if tags, err := collect(t, r, batch); err != nil || !slices.Equal(tags, want) {
				t.Fatalf("round %d, reader %d got %d frames, %v; want the whole batch of %d", round, n, len(tags), err, batch)
			}
		}
	}
	if n := h.Subscribers(); n != len(readers) {
		t.Fatalf("subscribers = %d, want %d: none of them fell behind", n, len(readers))
	}
}

func TestHubSubscriptionClose(t *testing.T) {
	h := instanceai.NewHub(8)
	sub, _ := h.Subscribe("t")
	h.Publish("t", []instanceai.Frame{statusFrame(t, 0, "queued")})
	sub.Close()
	if _, err := sub.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after Close: %v, want context.Canceled (queued frames discarded)", err)
	}
	h.Publish("t", []instanceai.Frame{statusFrame(t, 0, "after")})
	sub.Close() // again: nothing happens
	if n := h.Subscribers(); n != 0 {
		t.Fatalf("subscribers after Close = %d", n)
	}
}

func TestHubNextWaitsForAPublishOrTheContext(t *testing.T) {
	h := instanceai.NewHub(8)
	sub, _ := h.Subscribe("t")
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing published: %v, want the context's error", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		h.Publish("t", []instanceai.Frame{statusFrame(t, 0, "1"), statusFrame(t, 0, "2")})
	}()
	if tags, err := collect(t, sub, 2); err != nil || !slices.Equal(tags, []string{"1", "2"}) {
		t.Fatalf("Next woken by a publish: %v, %v", tags, err)
	}
}

func TestHubForgetClosesSubscribersAndDropsTheState(t *testing.T) {
	h := instanceai.NewHub(8)
	sub, _ := h.Subscribe("t")
	open, err := instanceai.NewFrame(0, &instanceai.Event{Type: instanceai.TypeTextDelta, RunID: "r", AgentID: "a",
		Payload: &instanceai.Text{Text: "open"}})
	if err != nil {
		t.Fatal(err)
	}
	h.Publish("t", []instanceai.Frame{statusFrame(t, 3, "3"), open})
	if _, snap := h.Subscribe("t"); snap.Committed != 3 || len(snap.Open) != 1 {
		t.Fatalf("snapshot before Forget = %+v", snap)
	}
	h.Forget("t")
	if _, err := sub.Next(context.Background()); !errors.Is(err, instanceai.ErrThreadClosed) {
		t.Fatalf("Next after Forget: %v, want ErrThreadClosed", err)
	}
	if n := h.Subscribers(); n != 0 {
		t.Fatalf("subscribers after Forget = %d", n)
	}
	fresh, snap := h.Subscribe("t")
	defer fresh.Close()
	if snap.Committed != 0 || len(snap.Open) != 0 {
		t.Fatalf("snapshot after Forget = %+v, want nothing", snap)
	}
	h.Publish("t", []instanceai.Frame{statusFrame(t, 1, "again")})
	if tags, err := collect(t, fresh, 1); err != nil || tags[0] != "again" {
		t.Fatalf("a subscriber after Forget got %v, %v", tags, err)
	}
}

// A subscriber that falls a full queue behind during a burst of token
// deltas gets them merged instead of being dropped: the frames it reads
// fold into exactly the tree a subscriber that kept up folds, the stored
// frames arrive in order with their seqs, and deltas of different segments
// are neither merged nor reordered.
func TestHubMergesTheDeltasOfASubscriberBehind(t *testing.T) {
	const queue = 16
	h := instanceai.NewHub(queue)
	slow, _ := h.Subscribe("t")
	fast, _ := h.Subscribe("t")
	frame := func(seq int64, ev instanceai.Event) instanceai.Frame {
		ev.RunID, ev.UserID, ev.TS = "r", "u", 1767225600000+seq
		f, err := instanceai.NewFrame(seq, &ev)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	delta := func(typ instanceai.EventType, agent, resp, text string) instanceai.Frame {
		return frame(0, instanceai.Event{Type: typ, AgentID: agent, ResponseID: resp, Payload: &instanceai.Text{Text: text}})
	}
	root := "orchestrator-r"
	var published []instanceai.Frame
	publish := func(frames ...instanceai.Frame) {
		h.Publish("t", frames)
		published = append(published, frames...)
		got, err := fast.Next(context.Background())
		if err != nil || len(got) != len(frames) {
			t.Fatalf("the fast subscriber got %d frames, %v; want %d", len(got), err, len(frames))
		}
	}
	publish(frame(1, instanceai.Event{Type: instanceai.TypeRunStart, AgentID: root, Payload: &instanceai.RunStart{MessageID: "m"}}))
	for i := range 40 {
		publish(delta(instanceai.TypeReasoningDelta, root, "resp-1", fmt.Sprintf("think %d. ", i)))
	}
	publish(frame(2, instanceai.Event{Type: instanceai.TypeToolCall, AgentID: root, ResponseID: "resp-1",
		Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "search", Args: []byte(`{"q":"x"}`)}}))
	for i := range 60 {
		// Text of one segment, interrupted twice by another response's
		// text: only runs of the same segment merge.
		resp := "resp-2"
		if i == 20 || i == 21 || i == 45 {
			resp = "resp-3"
		}
		publish(delta(instanceai.TypeTextDelta, root, resp, fmt.Sprintf("w%d ", i)))
	}
	for i := range 50 {
		publish(delta(instanceai.TypeTextDelta, root, "resp-4", fmt.Sprintf("tail%d ", i)))
	}
	publish(frame(3, instanceai.Event{Type: instanceai.TypeRunFinish, AgentID: root, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}}))

	got, err := slow.Next(context.Background())
	if err != nil {
		t.Fatalf("the subscriber behind was dropped: %v", err)
	}
	if len(got) >= len(published) {
		t.Fatalf("it read %d frames of %d published: nothing was merged", len(got), len(published))
	}
	var seqs []int64
	for _, f := range got {
		if f.Seq > 0 {
			seqs = append(seqs, f.Seq)
		}
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Fatalf("stored frames %v, want 1, 2, 3 in order", seqs)
	}
	fold := func(frames []instanceai.Frame) string {
		s := agenttree.New()
		for _, f := range frames {
			var ev instanceai.Event
			if err := json.Unmarshal(f.Data, &ev); err != nil {
				t.Fatal(err)
			}
			s.Apply(ev)
		}
		out, err := json.Marshal(s.Tree())
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if want, have := fold(published), fold(got); want != have {
		t.Fatalf("the merged frames fold differently:\n got: %s\nwant: %s", have, want)
	}
}
