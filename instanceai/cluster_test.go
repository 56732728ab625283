package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// scriptedBus is a Bus whose Publish a test controls: it records what it
// takes, fails while failing is set, and hangs while hang is open.
type scriptedBus struct {
	mu        sync.Mutex
	published []busMessage
	failing   bool
	hang      chan struct{}
	limit     int
}

func (b *scriptedBus) Publish(ctx context.Context, payload []byte) error {
	b.mu.Lock()
	hang, failing := b.hang, b.failing
	b.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if failing {
		return errors.New("connection reset")
	}
	var m busMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return err
	}
	b.mu.Lock()
	b.published = append(b.published, m)
	b.mu.Unlock()
	return nil
}

func (b *scriptedBus) MaxPayload() int { return b.limit }
func (b *scriptedBus) Listen(ctx context.Context, _ func([]byte), state func(bool, error)) error {
	state(true, nil)
	<-ctx.Done()
	return nil
}
func (b *scriptedBus) Close() error { return nil }

func (b *scriptedBus) set(failing bool, hang chan struct{}) {
	b.mu.Lock()
	b.failing, b.hang = failing, hang
	b.mu.Unlock()
}

func (b *scriptedBus) sent() []busMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.published)
}

func runCluster(t *testing.T, bus Bus) (*Cluster, *Hub) {
	t.Helper()
	return runClusterWith(t, bus, ClusterConfig{Instance: "me"})
}

// runClusterWith runs a cluster on bus with cfg (a discarding logger
// unless it has one), feeding a hub of its own, until the test ends.
func runClusterWith(t *testing.T, bus Bus, cfg ClusterConfig) (*Cluster, *Hub) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hub := NewHub(64)
	c := NewCluster(bus, hub, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c, hub
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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
	out := c.coalesce([]busMessage{msg("a", 1), msg("a", 2), msg("a", 3), msg("b", 1), msg("a", 4), ctl, msg("a", 5),
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
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.dirty["t"] && len(c.outbound) == 0
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

// The head check publishes into the hub what the log holds past what the
// bus delivered, for threads with subscribers that are quiet, and ends the
// subscribers of a thread the log no longer has.
func TestClusterHeadCheck(t *testing.T) {
	log := rowsLogWithHeads{rows: map[string][]StoredEvent{}}
	for seq := int64(1); seq <= 3; seq++ {
		f := toolFrame(t, seq)
		log.rows["t"] = append(log.rows["t"], StoredEvent{Seq: seq, Event: *f.Event, Data: f.Data})
	}
	hub := NewHub(64)
	c := NewCluster(&scriptedBus{}, hub, ClusterConfig{Instance: "me", Log: log, PollInterval: time.Hour})
	sub, _ := hub.Subscribe("t")
	gone, _ := hub.Subscribe("deleted")
	hub.Publish("t", []Frame{toolFrame(t, 1)})
	if err := c.checkHeads(context.Background(), hub.Behind(0)); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for len(seqs) < 3 {
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			seqs = append(seqs, f.Seq)
		}
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) || hub.Contiguous("t") != 3 {
		t.Fatalf("the subscriber got %v (contiguous %d), want 1 2 3", seqs, hub.Contiguous("t"))
	}
	if _, err := gone.Next(context.Background()); !errors.Is(err, ErrThreadClosed) {
		t.Fatalf("the deleted thread's subscriber: %v, want ErrThreadClosed", err)
	}
}

// rowsLogWithHeads is a log of fixed rows that reads heads.
type rowsLogWithHeads struct {
	rowsLog
	rows map[string][]StoredEvent
}

func (l rowsLogWithHeads) ReadAfter(_ context.Context, thread string, after int64, limit int) ([]StoredEvent, error) {
	return rowsLog(l.rows[thread]).ReadAfter(context.Background(), thread, after, limit)
}

func (l rowsLogWithHeads) ReadRowsAfter(ctx context.Context, thread string, after int64, limit, maxBytes int) ([]StoredRow, error) {
	return rowsLog(l.rows[thread]).ReadRowsAfter(ctx, thread, after, limit, maxBytes)
}

func (l rowsLogWithHeads) ReadPage(ctx context.Context, thread string, q PageQuery) ([]StoredRow, error) {
	return rowsLog(l.rows[thread]).ReadPage(ctx, thread, q)
}

func (l rowsLogWithHeads) Heads(_ context.Context, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, id := range ids {
		if rows, ok := l.rows[id]; ok {
			out[id] = rows[len(rows)-1].Seq
		}
	}
	return out, nil
}

// togglingBus is a bus whose listener connects and drops on command.
type togglingBus struct {
	scriptedBus
	states chan bool
}

func (b *togglingBus) Listen(ctx context.Context, _ func([]byte), state func(bool, error)) error {
	for {
		select {
		case up := <-b.states:
			state(up, errors.New("connection reset"))
		case <-ctx.Done():
			return nil
		}
	}
}

// A cluster has lost its bus only once it had one: before the listener
// first connects nothing was lost, after a drop until it is back the
// instance's live text may reach no other instance (the writer then holds
// its deltas: see NewCore).
func TestClusterLostWhenTheListenerDrops(t *testing.T) {
	bus := &togglingBus{states: make(chan bool)}
	c, _ := runCluster(t, bus)
	if c.Lost() {
		t.Fatal("lost before the first connection")
	}
	for _, step := range []struct {
		up, lost bool
	}{{true, false}, {false, true}, {false, true}, {true, false}} {
		bus.states <- step.up
		waitFor(t, fmt.Sprintf("up=%v", step.up), func() bool { return c.Up() == step.up })
		if c.Lost() != step.lost {
			t.Fatalf("after up=%v: lost %v, want %v", step.up, c.Lost(), step.lost)
		}
	}
}
