// Package bustest is the contract every instanceai.Bus passes, as
// storagetest is for stores: delivery to every listener in publish order,
// payloads byte-exact up to the limit, refusal beyond it, and a reported
// reconnect after the server cut the listener's connection.
package bustest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/threadline/threadline/instanceai"
)

// Opener returns two buses on one channel, as two instances would have.
type Opener func(t *testing.T) (a, b instanceai.Bus)

// Killer cuts b's listener connection from the server's side.
type Killer func(t *testing.T, b instanceai.Bus)

// listener records what one Listen delivers and the states it reports.
type listener struct {
	mu     sync.Mutex
	got    [][]byte
	states []bool
	cancel context.CancelFunc
	done   chan error
}

func listen(t *testing.T, b instanceai.Bus) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cancel: cancel, done: make(chan error, 1)}
	go func() {
		l.done <- b.Listen(ctx, func(p []byte) {
			l.mu.Lock()
			l.got = append(l.got, append([]byte(nil), p...))
			l.mu.Unlock()
		}, func(up bool, _ error) {
			l.mu.Lock()
			l.states = append(l.states, up)
			l.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(10 * time.Second):
			t.Error("Listen did not return after its context ended")
		}
	})
	return l
}

func (l *listener) snapshot() ([][]byte, []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.got...), append([]bool(nil), l.states...)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *listener) up() bool {
	_, st := l.snapshot()
	return len(st) > 0 && st[len(st)-1]
}

// Run runs the contract.
func Run(t *testing.T, open Opener, kill Killer) {
	ctx := context.Background()
	t.Run("EveryListenerInOrder", func(t *testing.T) {
		a, b := open(t)
		la, lb := listen(t, a), listen(t, b)
		eventually(t, "both listeners report up", func() bool { return la.up() && lb.up() })
		const n = 2000
		for i := range n {
			pub := a
			if i%2 == 1 {
				pub = b
			}
			if err := pub.Publish(ctx, []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		for name, l := range map[string]*listener{"a": la, "b": lb} {
			eventually(t, fmt.Sprintf("%s got all %d payloads", name, n), func() bool {
				got, _ := l.snapshot()
				return len(got) >= n
			})
			got, _ := l.snapshot()
			last := map[int]int{0: -2, 1: -1}
			for _, p := range got {
				i, err := strconv.Atoi(string(p))
				if err != nil {
					t.Fatalf("%s got %q", name, p)
				}
				if i <= last[i%2] {
					t.Fatalf("%s: payload %d after %d from the same publisher", name, i, last[i%2])
				}
				last[i%2] = i
			}
		}
	})
	t.Run("LargestPayloadExactAndLargerRefused", func(t *testing.T) {
		a, b := open(t)
		lb := listen(t, b)
		eventually(t, "listener up", lb.up)
		size := a.MaxPayload()
		if size == 0 {
			size = 1 << 20
		}
		big := bytes.Repeat([]byte(`{"k":"välue\n"}`), size/16+1)[:size]
		for !utf8.Valid(big) {
			big = big[:len(big)-1]
		}
		if err := a.Publish(ctx, big); err != nil {
			t.Fatalf("publish %d bytes: %v", len(big), err)
		}
		if a.MaxPayload() > 0 {
			if err := a.Publish(ctx, make([]byte, a.MaxPayload()+1)); err == nil {
				t.Fatal("a payload over MaxPayload was accepted")
			}
		}
		if err := a.Publish(ctx, []byte("after")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "both payloads arrive", func() bool { got, _ := lb.snapshot(); return len(got) >= 2 })
		got, _ := lb.snapshot()
		if !bytes.Equal(got[0], big) || string(got[1]) != "after" || len(got) != 2 {
			t.Fatalf("got %d payloads, first %d bytes (want %d), second %q", len(got), len(got[0]), len(big), got[len(got)-1])
		}
	})
	t.Run("ReconnectIsReported", func(t *testing.T) {
		a, b := open(t)
		lb := listen(t, b)
		eventually(t, "listener up", lb.up)
		kill(t, b)
		eventually(t, "the loss and then the reconnection are reported", func() bool {
			_, st := lb.snapshot()
			for i := 1; i < len(st)-1; i++ {
				if !st[i] && st[i+1] {
					return true
				}
			}
			return false
		})
		eventually(t, "a payload published after the reconnect arrives", func() bool {
			if err := a.Publish(ctx, []byte("again")); err != nil {
				t.Fatal(err)
			}
			got, _ := lb.snapshot()
			return len(got) > 0 && string(got[len(got)-1]) == "again"
		})
	})
	t.Run("PublishAfterCloseFails", func(t *testing.T) {
		a, _ := open(t)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Publish(ctx, []byte("x")); err == nil {
			t.Fatal("Publish after Close succeeded")
		}
	})
}
