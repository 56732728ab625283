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

// A reconnection of the bus listener forgets the runs heard before it.
func TestClusterReconnectionForgetsHeardRuns(t *testing.T) {
	hub := NewHub(8)
	c := NewCluster(&scriptedBus{}, hub, ClusterConfig{Instance: "me", Logger: slog.New(slog.DiscardHandler)})
	hub.Watch("t")
	hub.Publish("t", []Frame{mustFrame(t, 1, &Event{Type: TypeRunStart, RunID: "r", AgentID: "a", Payload: &RunStart{MessageID: "m"}})})
	c.state(true, nil)
	hub.Publish("t", []Frame{mustFrame(t, 2, &Event{Type: TypeRunStart, RunID: "r2", AgentID: "a", Payload: &RunStart{MessageID: "m"}})})
	c.state(true, nil) // still up: nothing was missed
	if hub.HeardRun("t", "r") || !hub.HeardRun("t", "r2") {
		t.Fatalf("heard r %v, r2 %v after connecting; want false, true", hub.HeardRun("t", "r"), hub.HeardRun("t", "r2"))
	}
	c.state(false, errors.New("gone"))
	c.state(true, nil)
	if hub.HeardRun("t", "r2") {
		t.Fatal("a run heard before the listener reconnected still counts as heard")
	}
}
