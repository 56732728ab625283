// Package memory is an in-process instanceai.Bus. It joins several cores
// in one process as if they were instances on a network (tests,
// benchmarks, a single binary running more than one core), and it lets
// tests cut and restore a bus's connection at will, so that the core's
// reconnect and log-resync paths run without a real server.
package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// ErrClosed is returned by Publish and Listen once the bus is closed.
var ErrClosed = errors.New("memory bus: closed")

// ErrDisconnected is the error a lost connection reports through Listen's
// state callback, and what Publish returns while the bus is Down.
var ErrDisconnected = errors.New("memory bus: disconnected")

// Network joins the buses made from it: a payload published on any of them
// reaches every listener of every one of them, its publisher's own
// included. The network orders all publishes, so every listener sees the
// same sequence, which is more than a Bus promises (only one publisher's
// order) and never less.
type Network struct {
	// mu guards the state of every bus and listener of the network, so
	// that one publish reaches all listeners atomically and in one order.
	mu    sync.Mutex
	buses []*Bus
}

// NewNetwork returns an empty network.
func NewNetwork() *Network { return &Network{} }

// New returns a bus on a network of its own: its listeners hear only its
// own publishes, which is all a single core needs.
func New() *Bus { return NewNetwork().Bus() }

// Bus returns a new member of the network.
func (n *Network) Bus() *Bus {
	b := &Bus{net: n, done: make(chan struct{})}
	n.mu.Lock()
	n.buses = append(n.buses, b)
	n.mu.Unlock()
	return b
}

// Bus is one member of a Network, standing for one instance's connection.
// The zero value is not usable; get one from New or Network.Bus.
type Bus struct {
	net  *Network
	done chan struct{} // closed by Close, ends every Listen

	// Guarded by net.mu.
	sinks  []*sink
	down   bool
	closed bool
	// topics are what PublishTo delivers to b's listeners.
	topics map[string]bool
}

// sink is one running Listen: the payloads and state changes it has yet
// to hand to its callbacks, in order. Guarded by the network's mu.
type sink struct {
	// connected says whether publishes reach this listener now; it is
	// false from a cut until the listener has taken the cut in.
	connected bool
	queue     []item
	wake      chan struct{} // capacity 1: "queue is not empty"
}

type itemKind uint8

const (
	itemPayload itemKind = iota
	itemLost             // report state(false, ErrDisconnected)
	itemBack             // reconnect (unless down) and report state(true, nil)
)

type item struct {
	kind    itemKind
	payload []byte
}

func (s *sink) push(it item) {
	s.queue = append(s.queue, it)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Publish implements instanceai.Bus. Every listener gets its own copy of
// payload, so neither the publisher nor another listener can change what a
// listener holds. Listeners never slow Publish down: their queues grow
// without bound, as a network that never drops would need.
func (b *Bus) Publish(ctx context.Context, payload []byte) error {
	return b.send(ctx, payload, func(*Bus) bool { return true })
}

// PublishTo implements instanceai.RoutedBus: Publish, to the listeners of
// the buses that follow topic.
func (b *Bus) PublishTo(ctx context.Context, topic string, payload []byte) error {
	return b.send(ctx, payload, func(m *Bus) bool { return m.topics[topic] })
}

// send hands payload to the listeners of the network's buses that to
// picks (called with n.mu held).
func (b *Bus) send(ctx context.Context, payload []byte, to func(*Bus) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory bus: publish: %w", err)
	}
	n := b.net
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case b.closed:
		return ErrClosed
	case b.down:
		return fmt.Errorf("memory bus: publish: %w", ErrDisconnected)
	}
	for _, m := range n.buses {
		if !to(m) {
			continue
		}
		for _, s := range m.sinks {
			if s.connected {
				s.push(item{kind: itemPayload, payload: slices.Clone(payload)})
			}
		}
	}
	return nil
}

// Follow implements instanceai.RoutedBus. A follow takes effect at once;
// it fails while b is Down or closed, with the topics kept for when it is
// Up.
func (b *Bus) Follow(ctx context.Context, topics ...string) error {
	n := b.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if b.topics == nil {
		b.topics = map[string]bool{}
	}
	for _, t := range topics {
		b.topics[t] = true
	}
	switch {
	case b.closed:
		return ErrClosed
	case b.down:
		return fmt.Errorf("memory bus: follow: %w", ErrDisconnected)
	}
	return ctx.Err()
}

// Unfollow implements instanceai.RoutedBus.
func (b *Bus) Unfollow(ctx context.Context, topics ...string) error {
	n := b.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range topics {
		delete(b.topics, t)
	}
	if b.closed {
		return ErrClosed
	}
	return nil
}

// Following returns the topics b follows, for tests.
func (b *Bus) Following() []string {
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	return slices.Sorted(maps.Keys(b.topics))
}

// MaxPayload implements instanceai.Bus: there is no limit.
func (b *Bus) MaxPayload() int { return 0 }

// Disconnect breaks b's listener connections as a server-side kill would,
// and lets them reconnect at once. Payloads published before the call are
// still delivered; then each Listen reports state(false, ErrDisconnected)
// and state(true, nil); whatever is published between the call and that
// second report is lost to b's listeners, and what is published after it
// arrives. b's publishing is not affected, nor are other buses. A bus that
// is Down has nothing to disconnect.
func (b *Bus) Disconnect() {
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	for _, s := range b.sinks {
		if s.connected {
			s.connected = false
			s.push(item{kind: itemLost})
			s.push(item{kind: itemBack})
		}
	}
}

// Down cuts b off the network until Up: each Listen reports
// state(false, ErrDisconnected) after the payloads published before the
// call, nothing published meanwhile (by any bus) reaches b's listeners,
// and b's Publish fails with ErrDisconnected. A test can so tell exactly
// what b missed. Down on a bus that is down does nothing.
func (b *Bus) Down() {
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	if b.closed || b.down {
		return
	}
	b.down = true
	for _, s := range b.sinks {
		if s.connected {
			s.connected = false
			s.push(item{kind: itemLost})
		}
	}
}

// Up ends Down: Publish works again, and each Listen reports
// state(true, nil) and receives what is published after that report.
func (b *Bus) Up() {
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	if !b.down {
		return
	}
	b.down = false
	for _, s := range b.sinks {
		s.push(item{kind: itemBack})
	}
}

// Listen implements instanceai.Bus. It returns nil when ctx ends and
// ErrClosed when the bus is closed. Several Listen calls may run on one
// bus; each gets every payload.
func (b *Bus) Listen(ctx context.Context, deliver func(payload []byte), state func(up bool, err error)) error {
	if ctx.Err() != nil {
		return nil
	}
	n := b.net
	n.mu.Lock()
	if b.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	s := &sink{connected: !b.down, wake: make(chan struct{}, 1)}
	b.sinks = append(b.sinks, s)
	up := s.connected
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		b.sinks = slices.DeleteFunc(b.sinks, func(x *sink) bool { return x == s })
		n.mu.Unlock()
	}()

	if up {
		state(true, nil)
	} else {
		state(false, ErrDisconnected)
	}
	for {
		n.mu.Lock()
		batch := s.queue
		s.queue = nil
		n.mu.Unlock()
		for _, it := range batch {
			// A long backlog must not keep Listen from returning.
			select {
			case <-ctx.Done():
				return nil
			case <-b.done:
				return ErrClosed
			default:
			}
			switch it.kind {
			case itemPayload:
				deliver(it.payload)
			case itemLost:
				state(false, ErrDisconnected)
			case itemBack:
				n.mu.Lock()
				back := !b.down && !s.connected
				if back {
					s.connected = true
				}
				n.mu.Unlock()
				if back {
					state(true, nil)
				}
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-b.done:
			return ErrClosed
		case <-s.wake:
		}
	}
}

// Close implements instanceai.Bus: it takes b off the network and ends its
// listeners. Closing again does nothing.
func (b *Bus) Close() error {
	n := b.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	n.buses = slices.DeleteFunc(n.buses, func(x *Bus) bool { return x == b })
	close(b.done)
	return nil
}
