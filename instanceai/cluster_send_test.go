package instanceai

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// The messages of one thread's frames go out as one, up to the bus's
// limit, each thread's in order; control messages keep their place, and
// nothing moves across them.
func TestClusterCoalescesABurst(t *testing.T) {
	c := NewCluster(&scriptedBus{limit: 2000}, NewHub(8), ClusterConfig{Instance: "me"})
	msg := func(thread string, seqs ...int64) busMessage {
		m := busMessage{Thread: thread}
		for _, s := range seqs {
			m.Frames = append(m.Frames, busFrame{Seq: s, Event: json.RawMessage(`{"x":"` + string(make([]byte, 200)) + `"}`)})
		}
		return m
	}
	ctl := busMessage{Thread: "a", Ctl: &Control{Kind: ControlCancel, ThreadID: "a"}}
	resync := busMessage{Thread: "b", Resync: true}
	out := c.sender.coalesce([]busMessage{msg("a", 1), msg("a", 2), msg("a", 3), msg("b", 1), msg("a", 4), ctl, msg("a", 5),
		msg("a", 6, 7, 8, 9, 10, 11), msg("a", 12), msg("b", 2), resync, msg("b", 3)})
	var got [][]int64
	for _, m := range out {
		var seqs []int64
		for _, f := range m.Frames {
			seqs = append(seqs, f.Seq)
		}
		got = append(got, seqs)
	}
	// a's frames gather in its first message, past b's (the threads are
	// independent), but not across the control.
	want := [][]int64{{1, 2, 3, 4}, {1}, nil, {5}, {6, 7, 8, 9, 10, 11}, {12}, {2}, nil, {3}}
	if len(got) != len(want) {
		t.Fatalf("coalesced into %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("coalesced into %v, want %v", got, want)
		}
	}
	for _, m := range out {
		if data, _ := json.Marshal(m); len(data) > 2000 {
			t.Fatalf("a coalesced message of %d bytes exceeds the limit", len(data))
		}
	}
}

// A bus that hangs does not hold up the writer's publishes to the local
// hub; what could not be published is announced once the bus takes
// messages again, as a resync notice for its thread.
func TestClusterPublishNeverWaitsForTheBus(t *testing.T) {
	bus := &scriptedBus{}
	c, hub := runCluster(t, bus)
	sub, _ := hub.Subscribe("t")
	defer sub.Close()
	hang := make(chan struct{})
	bus.set(true, hang)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			c.Publish("t", []Frame{toolFrame(t, int64(i+1))})
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish waited for a hanging bus")
	}
	frames, err := sub.Next(context.Background())
	if err != nil || len(frames) == 0 || frames[0].Seq != 1 {
		t.Fatalf("the local hub did not get the frames at once: %d, %v", len(frames), err)
	}
	close(hang) // the publish under way fails; the rest is not tried
	waitFor(t, "the thread marked for a resync notice", func() bool {
		c.sender.mu.Lock()
		defer c.sender.mu.Unlock()
		return c.sender.dirty["t"] && len(c.sender.queue) == 0
	})
	bus.set(false, nil)
	waitFor(t, "the resync notice", func() bool {
		for _, m := range bus.sent() {
			if m.Resync && m.Thread == "t" {
				return true
			}
		}
		return false
	})
	c.Publish("t", []Frame{toolFrame(t, 51)})
	waitFor(t, "frames published again", func() bool {
		sent := bus.sent()
		return len(sent) > 0 && len(sent[len(sent)-1].Frames) == 1 && sent[len(sent)-1].Frames[0].Seq == 51
	})
	for _, m := range bus.sent() {
		for _, f := range m.Frames {
			if f.Seq <= 50 && f.Seq > 1 && !m.Resync {
				// Frames queued while failing are not sent late, out of
				// their place among newer ones: the notice covers them.
				t.Fatalf("frame %d was sent after the bus failed", f.Seq)
			}
		}
	}
}

// While deltas are held (a process paused past its leases), the sender
// drops the queued deltas and keeps every other frame.
func TestClusterHoldsQueuedDeltas(t *testing.T) {
	bus := &scriptedBus{}
	hub := NewHub(8)
	c := NewCluster(bus, hub, ClusterConfig{Instance: "me", Logger: slog.New(slog.DiscardHandler)})
	var held atomic.Bool
	c.HoldDeltas(held.Load)
	delta := mustFrame(t, 0, &Event{Type: TypeTextDelta, RunID: "r", AgentID: "a", ResponseID: "s", Payload: &Text{Text: "late"}})
	held.Store(true)
	c.Publish("t", []Frame{delta, toolFrame(t, 1)})
	c.Publish("u", []Frame{delta})
	if _, snap := hub.Subscribe("u"); len(snap.Open) != 1 {
		t.Fatalf("before the sender ran, a subscriber of u is handed %+v, want the open segment", snap.Open)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.sender.run(ctx) }()
	waitFor(t, "the tool call sent", func() bool { return len(bus.sent()) == 1 })
	// The dropped delta's segment is withheld: no later subscriber here
	// and no settlement written here gets its text.
	if _, snap := hub.Subscribe("u"); len(snap.Open) != 0 {
		t.Fatalf("a subscriber of u is handed %+v, text the bus never carried", snap.Open)
	}
	if open, _ := hub.LiveText("u", "r"); len(open) != 0 {
		t.Fatalf("a settlement here would write %+v, text the bus never carried", open)
	}
	held.Store(false)
	c.Publish("u", []Frame{delta})
	waitFor(t, "the delta sent once held no more", func() bool { return len(bus.sent()) == 2 })
	cancel()
	<-done
	sent := bus.sent()
	if m := sent[0]; m.Thread != "t" || len(m.Frames) != 1 || m.Frames[0].Seq != 1 {
		t.Fatalf("sent while held: %+v, want only t's tool call", m)
	}
	if m := sent[1]; m.Thread != "u" || len(m.Frames) != 1 || m.Frames[0].Seq != 0 {
		t.Fatalf("sent after: %+v, want u's delta", m)
	}
}
