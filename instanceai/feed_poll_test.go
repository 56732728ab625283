package instanceai_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// A polled feed replays the log, then reports nothing instead of waiting,
// and calls Wake once the live tail has something: frames, or the end of
// its subscription.
func TestFeedPoll(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(4)
	writer := instanceai.NewWriter(store, hub, instanceai.WriterConfig{IdleFlush: time.Hour})
	t.Cleanup(func() { _ = writer.Close(ctx) })
	call := toolCall("c1")
	call.RunID, call.AgentID, call.UserID, call.TS = "r", "a", "u", 1
	if err := writer.Enqueue("t", call); err != nil {
		t.Fatal(err)
	}
	if err := writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}

	var wakes atomic.Int32
	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	feed.Wake = func() { wakes.Add(1) }
	out, err := feed.Poll(ctx)
	if err != nil || len(out) != 1 || out[0].ID != 1 {
		t.Fatalf("replay: %+v, %v", out, err)
	}
	if out, err := feed.Poll(ctx); out != nil || err != nil {
		t.Fatalf("an idle feed: %+v, %v", out, err)
	}
	if wakes.Load() != 0 {
		t.Fatal("woken with nothing published")
	}

	delta := textDelta("x", "hi")
	delta.RunID, delta.AgentID = "r", "a"
	fr, err := instanceai.NewFrame(0, &delta)
	if err != nil {
		t.Fatal(err)
	}
	hub.Publish("t", []instanceai.Frame{fr})
	hub.Publish("t", []instanceai.Frame{fr})
	if n := wakes.Load(); n != 1 {
		t.Fatalf("woken %d times for two publishes before a poll, want once", n)
	}
	if out, err := feed.Poll(ctx); err != nil || len(out) != 2 || out[0].ID != 0 {
		t.Fatalf("live: %+v, %v", out, err)
	}
	if out, err := feed.Poll(ctx); out != nil || err != nil {
		t.Fatalf("idle again: %+v, %v", out, err)
	}

	// A full queue behind (of frames that cannot be merged, unlike deltas):
	// the next batch drops the subscriber, and it is told.
	status := instanceai.Event{Type: instanceai.TypeStatus, RunID: "r", AgentID: "a", Payload: &instanceai.Status{Message: "busy"}}
	st, err := instanceai.NewFrame(0, &status)
	if err != nil {
		t.Fatal(err)
	}
	hub.Publish("t", []instanceai.Frame{st, st, st, st})
	if n := wakes.Load(); n != 2 {
		t.Fatalf("the batch woke the feed %d times in all, want 2", n)
	}
	hub.Publish("t", []instanceai.Frame{st})
	if n := wakes.Load(); n != 2 {
		t.Fatalf("the drop woke the feed %d times in all, want 2 (it was woken and has not polled)", n)
	}
	if _, err := feed.Poll(ctx); !errors.Is(err, instanceai.ErrSubscriberDropped) {
		t.Fatalf("after the drop: %v", err)
	}
}
