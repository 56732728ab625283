package memory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/bus/memory"
	"github.com/threadline/threadline/instanceai"
)

var _ instanceai.Bus = (*memory.Bus)(nil)

func TestContract(t *testing.T) {
	bustest.Run(t,
		func(t *testing.T) (a, b instanceai.Bus) {
			net := memory.NewNetwork()
			return net.Bus(), net.Bus()
		},
		func(t *testing.T, b instanceai.Bus) { b.(*memory.Bus).Disconnect() })
}

// events records one Listen's calls in one list, so that tests can check
// how payloads and state changes interleave.
type events struct {
	mu      sync.Mutex
	list    []string
	changed chan struct{}
	done    chan error
	cancel  context.CancelFunc
}

func listen(t *testing.T, b *memory.Bus) *events {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &events{changed: make(chan struct{}, 1), done: make(chan error, 1), cancel: cancel}
	note := func(s string) {
		e.mu.Lock()
		e.list = append(e.list, s)
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
	}
	go func() {
		e.done <- b.Listen(ctx,
			func(p []byte) { note(string(p)) },
			func(up bool, err error) {
				switch {
				case up:
					note("up")
				case errors.Is(err, memory.ErrDisconnected):
					note("down")
				default:
					note("down: " + err.Error())
				}
			})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Error("Listen did not return")
		}
	})
	return e
}

// waitLen waits until n calls are recorded and returns them.
func (e *events) waitLen(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		e.mu.Lock()
		got := append([]string(nil), e.list...)
		e.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-e.changed:
		case <-deadline:
			t.Fatalf("want %d calls, have %v", n, got)
		}
	}
}

func equal(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("calls %q, want %q", got, want)
		}
	}
}

func publish(t *testing.T, b *memory.Bus, p string) {
	t.Helper()
	if err := b.Publish(context.Background(), []byte(p)); err != nil {
		t.Fatalf("Publish %q: %v", p, err)
	}
}

// TestDownLosesExactlyWhatIsPublishedMeanwhile is what core tests rely on:
// payloads before Down arrive, those between Down and Up do not, those
// after the reconnection does.
func TestDownLosesExactlyWhatIsPublishedMeanwhile(t *testing.T) {
	net := memory.NewNetwork()
	a, b := net.Bus(), net.Bus()
	e := listen(t, b)
	equal(t, e.waitLen(t, 1), "up")

	publish(t, a, "before")
	b.Down()
	publish(t, a, "while down")
	if err := b.Publish(context.Background(), []byte("from b while down")); !errors.Is(err, memory.ErrDisconnected) {
		t.Errorf("Publish while down: %v, want ErrDisconnected", err)
	}
	b.Down() // again: nothing more to report
	equal(t, e.waitLen(t, 3), "up", "before", "down")

	b.Up()
	b.Up() // again: nothing more to report
	equal(t, e.waitLen(t, 4), "up", "before", "down", "up")
	publish(t, a, "after")
	publish(t, b, "from b after")
	equal(t, e.waitLen(t, 6), "up", "before", "down", "up", "after", "from b after")
}

func TestDisconnect(t *testing.T) {
	net := memory.NewNetwork()
	a, b := net.Bus(), net.Bus()
	eb := listen(t, b)
	ea := listen(t, a)
	equal(t, eb.waitLen(t, 1), "up")
	equal(t, ea.waitLen(t, 1), "up")

	publish(t, a, "before")
	b.Disconnect()
	publish(t, b, "b publishes on") // Disconnect cuts listening only
	got := eb.waitLen(t, 4)
	equal(t, got[:4], "up", "before", "down", "up")
	publish(t, a, "after")
	got = eb.waitLen(t, 5)
	if last := got[len(got)-1]; last != "after" {
		t.Errorf("b's calls %q; want them to end with the payload published after the reconnection", got)
	}
	equal(t, ea.waitLen(t, 4), "up", "before", "b publishes on", "after")
}

// TestListenWhileDown: a Listen that starts on a bus that is down reports
// the loss first and connects on Up.
func TestListenWhileDown(t *testing.T) {
	b := memory.New()
	b.Down()
	e := listen(t, b)
	equal(t, e.waitLen(t, 1), "down")
	b.Up()
	equal(t, e.waitLen(t, 2), "down", "up")
	publish(t, b, "own")
	equal(t, e.waitLen(t, 3), "down", "up", "own")
}

// TestListenersOwnTheirPayloads: each listener gets its own copy, so one
// that changes its payload cannot change another's.
func TestListenersOwnTheirPayloads(t *testing.T) {
	b := memory.New()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	ups := make(chan struct{}, 2)
	state := func(up bool, _ error) {
		if up {
			ups <- struct{}{}
		}
	}
	changed := make(chan struct{})
	seen := make(chan string, 1)
	wg.Go(func() {
		_ = b.Listen(ctx, func(p []byte) {
			p[0] = 'X'
			close(changed)
		}, state)
	})
	wg.Go(func() {
		_ = b.Listen(ctx, func(p []byte) {
			<-changed // the other listener has written into its payload
			seen <- string(p)
		}, state)
	})
	<-ups
	<-ups
	publish(t, b, "payload")
	select {
	case got := <-seen:
		if got != "payload" {
			t.Errorf("second listener got %q, want %q: the listeners share one slice", got, "payload")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("payload not delivered")
	}
}
