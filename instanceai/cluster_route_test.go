package instanceai

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/bus/memory"
)

// gatedBus is a memory bus whose Follow waits for the test to open gate
// before it follows: the window in which a thread's frames are committed
// and published while the instance that just got a subscriber for it
// does not receive them yet.
type gatedBus struct {
	*memory.Bus
	gate chan struct{}
}

func (b *gatedBus) Follow(ctx context.Context, topics ...string) error {
	select {
	case <-b.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Bus.Follow(ctx, topics...)
}

// sharedLog is the log the instances of a test share: rows appended by
// the test, read by their head checks.
type sharedLog struct {
	rowsLog
	mu   sync.Mutex
	rows map[string][]StoredEvent
}

func newSharedLog() *sharedLog { return &sharedLog{rows: map[string][]StoredEvent{}} }

// add stores frames of thread as committed rows.
func (l *sharedLog) add(thread string, frames ...Frame) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range frames {
		l.rows[thread] = append(l.rows[thread], StoredEvent{Seq: f.Seq, Event: *f.Event, Data: f.Data})
	}
}

func (l *sharedLog) ReadAfter(ctx context.Context, thread string, after int64, limit int) ([]StoredEvent, error) {
	l.mu.Lock()
	rows := slices.Clone(l.rows[thread])
	l.mu.Unlock()
	return rowsLog(rows).ReadAfter(ctx, thread, after, limit)
}

func (l *sharedLog) Heads(_ context.Context, ids []string) (map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for _, id := range ids {
		if rows := l.rows[id]; len(rows) > 0 {
			out[id] = rows[len(rows)-1].Seq
		}
	}
	return out, nil
}

// startCluster runs a cluster named instance on bus, feeding a hub of its
// own, with the head check on log only when asked (PollInterval an hour).
func startCluster(t *testing.T, instance string, bus Bus, log EventLog) (*Cluster, *Hub) {
	t.Helper()
	c, hub := runClusterWith(t, bus, ClusterConfig{Instance: instance, Log: log, PollInterval: time.Hour})
	waitFor(t, instance+"'s bus", c.Up)
	return c, hub
}

// seqsOf takes frames from sub until it holds n distinct seqs, and
// returns them in the order they first came (a frame may come twice, from
// the bus and from a head check: subscribers drop the second by its seq).
func seqsOf(t *testing.T, sub *Subscription, n int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seqs []int64
	for len(seqs) < n {
		frames, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after seqs %v: %v", seqs, err)
		}
		for _, f := range frames {
			if !slices.Contains(seqs, f.Seq) {
				seqs = append(seqs, f.Seq)
			}
		}
	}
	return seqs
}

// An instance follows on the bus exactly the threads with a subscriber
// there, from the first one until the thread's state leaves its hub; a
// thread it does not serve never reaches it.
func TestClusterRoutesFramesToTheThreadsSubscribers(t *testing.T) {
	net := memory.NewNetwork()
	busA, busB := net.Bus(), net.Bus()
	log := newSharedLog()
	a, _ := startCluster(t, "a", busA, log)
	b, hubB := startCluster(t, "b", busB, log)
	// The thread exists with one event: a head check finds it.
	first := toolFrame(t, 1)
	log.add("served", first)
	if !a.Routed() || !b.Routed() {
		t.Fatal("a cluster on a routed bus does not route")
	}

	sub, _ := hubB.Subscribe("served")
	waitFor(t, "b following its subscriber's thread", func() bool {
		return slices.Equal(busB.Following(), []string{"served"})
	})
	second := toolFrame(t, 2)
	log.add("served", second)
	a.Publish("other", []Frame{toolFrame(t, 1)})
	a.Publish("served", []Frame{first, second})
	if got := seqsOf(t, sub, 2); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("b's subscriber got %v, want 1 2", got)
	}
	// Published before "served" by the same instance: had it reached b,
	// b's hub would hold it by now.
	if hubB.Committed("other") != 0 || hubB.Topics() != 1 {
		t.Fatalf("b heard a thread it does not serve: %d topics, other at %d", hubB.Topics(), hubB.Committed("other"))
	}
	if len(busA.Following()) != 0 {
		t.Fatalf("a follows %v while nobody there subscribes", busA.Following())
	}

	// The subscriber leaves; the thread's state stays (and is followed)
	// until the hub lets go of it.
	sub.Close()
	if !hubB.Watched("served") || !slices.Equal(busB.Following(), []string{"served"}) {
		t.Fatal("the thread was unfollowed while its state was still in the hub")
	}
	if n := hubB.Evict(0); n != 1 {
		t.Fatalf("evicted %d threads, want 1", n)
	}
	waitFor(t, "b unfollowing the evicted thread", func() bool { return len(busB.Following()) == 0 })

	// A stream about to open has the thread followed first, and waits
	// for the bus to confirm it. (The thread exists: the head check that
	// follows the confirmation would end a gone one.)
	log.add("soon", toolFrame(t, 1))
	hubB.Watch("soon")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.AwaitFollow(ctx, "soon"); err != nil {
		t.Fatal(err)
	}
	if !b.Follows("soon") || !slices.Equal(busB.Following(), []string{"soon"}) {
		t.Fatalf("after AwaitFollow, b follows %v", busB.Following())
	}
}

// Frames committed while a new follow is on its way (the subscriber has
// replayed the log, the bus does not deliver the thread yet) reach the
// subscriber from the log as soon as the follow is confirmed, not a head
// check period later (an hour here).
func TestClusterFollowLosesNoFrameAtItsEdge(t *testing.T) {
	net := memory.NewNetwork()
	log := newSharedLog()
	a, _ := startCluster(t, "a", net.Bus(), log)
	gated := &gatedBus{Bus: net.Bus(), gate: make(chan struct{})}
	_, hubB := startCluster(t, "b", gated, log)

	sub, _ := hubB.Subscribe("t")
	var frames []Frame
	for seq := int64(1); seq <= 3; seq++ {
		frames = append(frames, toolFrame(t, seq))
	}
	log.add("t", frames...)
	a.Publish("t", frames) // lost to b: it follows nothing yet
	close(gated.gate)
	if got := seqsOf(t, sub, 3); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("b's subscriber got %v, want 1 2 3", got)
	}
	// A later frame arrives over the bus: a live delta, which no head
	// check reads from the log.
	a.Publish("t", []Frame{mustFrame(t, 0, &Event{Type: TypeTextDelta, RunID: "r", AgentID: "a",
		Payload: &Text{Text: "live"}})})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		frames, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the live delta: %v", err)
		}
		if slices.ContainsFunc(frames, func(f Frame) bool { return f.Event.Type == TypeTextDelta }) {
			break
		}
	}
}

// With Broadcast, every thread reaches every instance, as for a bus that
// does not route.
func TestClusterBroadcastReachesEveryInstance(t *testing.T) {
	net := memory.NewNetwork()
	hubA, hubB := NewHub(64), NewHub(64)
	cfg := ClusterConfig{Broadcast: true, PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	cfg.Instance = "a"
	a := NewCluster(net.Bus(), hubA, cfg)
	cfg.Instance = "b"
	b := NewCluster(net.Bus(), hubB, cfg)
	if a.Routed() {
		t.Fatal("a broadcasting cluster routes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	go func() { _ = b.Run(ctx) }()
	waitFor(t, "both buses", func() bool { return a.Up() && b.Up() })
	a.Publish("nobody-subscribes", []Frame{toolFrame(t, 1)})
	waitFor(t, "b's hub hearing a thread nobody there serves", func() bool { return hubB.Committed("nobody-subscribes") == 1 })
}
