// Package bustest is the contract every instanceai.Bus transport passes:
// one suite, run by each transport's own tests, so that the core can rely
// on the same behaviour from memory, Redis and PostgreSQL alike.
//
// The suite waits for conditions with deadlines and never sleeps to let
// something happen, so a slow machine makes it slower, not flaky.
package bustest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/threadline/threadline/instanceai"
)

// Opener returns two buses on one channel, as two instances sharing a
// database would hold them, isolated from the buses of every other call
// (a channel of their own, say). It may register cleanups on t; the suite
// closes both buses.
type Opener func(t *testing.T) (a, b instanceai.Bus)

// Killer cuts b's listener connection from the server side, as a server
// restart or a network failure would, while b's Listen is connected. It
// returns once the connection is cut, not once it is back; it must leave
// every other connection, a's listener included, alone.
type Killer func(t *testing.T, b instanceai.Bus)

const (
	// waitFor bounds every wait for a single thing to happen.
	waitFor = 10 * time.Second
	// bulkWait bounds the wait for thousands of payloads on a slow,
	// race-instrumented machine.
	bulkWait = 60 * time.Second
	// numbered is how many payloads each publisher sends in the ordering
	// test: enough to expose a transport that reorders under load.
	numbered = 2000
	// noLimit is the largest payload tested on a bus without a limit.
	noLimit = 1 << 20
	// maxStreamed bounds the payloads streamed across the kills.
	maxStreamed = 100_000
)

// Run runs the contract suite. Subtests run in parallel, each on its own
// pair from open.
//
// It checks that both listeners receive the payloads of both publishers,
// each publisher's in order, without loss or duplicates while connected;
// that payloads up to MaxPayload (1 MiB on a bus without a limit) arrive
// byte-exact and that a larger one is refused and never delivered; that a
// killed listener reports state(false, err), then state(true, nil), and
// receives what is published after that, without duplicates or reordering
// across the gap, while the other listener stays connected; that Listen
// returns nil when its context ends, and can be called again; that Close
// ends Listen with an error, makes Publish fail and may be repeated; and
// that Publish with a done context fails. On a RoutedBus, it checks that
// a topic's payloads reach its followers only, in order with the rest,
// and that the topics a listener follows survive its reconnection; on a
// BatchBus, that a batch arrives in order, each payload where it goes.
// Throughout, the callbacks of one
// Listen never run concurrently nor after Listen returned, and state
// carries an error exactly when the bus is down.
//
// The suite's payloads are UTF-8 text without NUL bytes, which is what a
// text transport such as NOTIFY carries and what the core sends; a
// transport that carries any bytes checks that in its own tests.
func Run(t *testing.T, open Opener, kill Killer) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b instanceai.Bus, kill Killer)
	}{
		{"EveryListenerGetsEveryPublisherInOrder", testOrder},
		{"PayloadsArriveByteExact", testByteExact},
		{"OversizePayloadIsRefused", testOversize},
		{"ReconnectsAfterKill", testReconnect},
		{"ListenReturnsWhenContextEnds", testContextEnds},
		{"CloseEndsListenAndPublish", testClose},
		{"PublishWithDoneContextFails", testDoneContext},
		{"TopicsReachTheirFollowersOnly", testTopicsRoute},
		{"TopicsSurviveReconnect", testTopicsSurviveReconnect},
		{"BatchesKeepTheirOrder", testBatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := open(t)
			t.Cleanup(func() {
				for name, bus := range map[string]instanceai.Bus{"a": a, "b": b} {
					if err := bus.Close(); err != nil {
						t.Errorf("Close %s: %v", name, err)
					}
				}
			})
			tc.fn(t, a, b, kill)
		})
	}
}

// testOrder: both buses publish numbered payloads at once; each listener
// must see all of them, each publisher's in its order.
func testOrder(t *testing.T, a, b instanceai.Bus, _ Killer) {
	ra, rb := Listen(t, "a's listener", a), Listen(t, "b's listener", b)
	ra.WaitUp(t)
	rb.WaitUp(t)

	var wg sync.WaitGroup
	for _, p := range []struct {
		name string
		bus  instanceai.Bus
	}{{"a", a}, {"b", b}} {
		wg.Go(func() {
			// One buffer for every publish: a transport must copy what
			// it keeps once Publish returns.
			var buf []byte
			for i := range numbered {
				buf = fmt.Appendf(buf[:0], "%s %06d", p.name, i)
				if err := publish(p.bus, buf); err != nil {
					t.Errorf("%s: Publish %d: %v", p.name, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, r := range []*Listener{ra, rb} {
		r.wait(t, bulkWait, fmt.Sprintf("%d payloads", 2*numbered), func() bool {
			return len(r.payloads) >= 2*numbered
		})
		r.mu.Lock()
		next := map[string]int{"a": 0, "b": 0}
		for i, p := range r.payloads {
			name, num, ok := parseNumbered(p)
			if !ok || num != next[name] {
				t.Errorf("%s: payload %d is %.40q; want %q or %q next", r.name, i, p,
					fmt.Sprintf("a %06d", next["a"]), fmt.Sprintf("b %06d", next["b"]))
				break
			}
			next[name]++
		}
		if n := len(r.payloads); n != 2*numbered {
			t.Errorf("%s: %d payloads, want %d", r.name, n, 2*numbered)
		}
		if len(r.states) != 1 {
			t.Errorf("%s: state calls %v, want one state(true, nil): nothing was cut", r.name, r.states)
		}
		r.mu.Unlock()
	}
}

func parseNumbered(p []byte) (name string, num int, ok bool) {
	name, digits, ok := strings.Cut(string(p), " ")
	if !ok || (name != "a" && name != "b") || len(digits) != 6 {
		return "", 0, false
	}
	num, err := strconv.Atoi(digits)
	return name, num, err == nil
}

// testByteExact: payloads from empty to the limit, full of multi-byte
// characters, control characters, quotes and backslashes, come out as
// they went in.
func testByteExact(t *testing.T, a, b instanceai.Bus, _ Killer) {
	limit := a.MaxPayload()
	if limit < 0 || (limit > 0 && limit < 1024) {
		t.Fatalf("MaxPayload = %d; want 0 (no limit) or at least 1024, room for the core's messages", limit)
	}
	if lb := b.MaxPayload(); lb != limit {
		t.Fatalf("MaxPayload: a says %d, b says %d", limit, lb)
	}
	if limit == 0 {
		limit = noLimit
	}
	var sizes []int
	for _, n := range []int{0, 1, 2, 3, 4, 5, 100, 1000, 4095, 4096, 7999, 8000, 65536, limit - 1, limit} {
		if n <= limit && (len(sizes) == 0 || n > sizes[len(sizes)-1]) {
			sizes = append(sizes, n)
		}
	}
	ra, rb := Listen(t, "a's listener", a), Listen(t, "b's listener", b)
	ra.WaitUp(t)
	rb.WaitUp(t)

	var want [][]byte
	for i, pub := range []instanceai.Bus{a, b} {
		for _, n := range sizes {
			p := text(n, uint64(100*i+n))
			want = append(want, bytes.Clone(p))
			if err := publish(pub, p); err != nil {
				t.Fatalf("Publish %d bytes: %v", n, err)
			}
			clear(p) // the transport must not still be reading it
		}
		// The next publisher starts only once this one's payloads are
		// in, since order holds only per publisher.
		for _, r := range []*Listener{ra, rb} {
			r.wait(t, waitFor, fmt.Sprintf("%d payloads", len(want)), func() bool {
				return len(r.payloads) >= len(want)
			})
		}
	}
	for _, r := range []*Listener{ra, rb} {
		r.mu.Lock()
		got := r.payloads
		r.mu.Unlock()
		if len(got) != len(want) {
			t.Errorf("%s: %d payloads, want %d", r.name, len(got), len(want))
		}
		for i := range min(len(got), len(want)) {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s: payload %d (%d bytes) arrived as %d bytes, %s",
					r.name, i, len(want[i]), len(got[i]), firstDifference(got[i], want[i]))
			}
		}
	}
}

func firstDifference(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d: %#x, want %#x", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// testOversize: a payload one byte over MaxPayload is refused, reaches
// nobody, and the bus goes on working.
func testOversize(t *testing.T, a, b instanceai.Bus, _ Killer) {
	limit := a.MaxPayload()
	if limit == 0 {
		t.Skip("MaxPayload is 0: no limit to exceed")
	}
	ra, rb := Listen(t, "a's listener", a), Listen(t, "b's listener", b)
	ra.WaitUp(t)
	rb.WaitUp(t)
	if err := publish(a, text(limit+1, 1)); err == nil {
		t.Errorf("Publish of %d bytes (MaxPayload %d) succeeded; want an error", limit+1, limit)
	}
	// a's next payload comes after the refused one, were it sent.
	marker := []byte("after the refused payload")
	if err := publish(a, marker); err != nil {
		t.Fatalf("Publish after a refused payload: %v", err)
	}
	for _, r := range []*Listener{ra, rb} {
		r.wait(t, waitFor, "the marker", func() bool { return len(r.payloads) >= 1 })
		r.mu.Lock()
		if got := r.payloads[0]; !bytes.Equal(got, marker) {
			t.Errorf("%s: first payload has %d bytes, want the %q marker: the refused payload was delivered", r.name, len(got), marker)
		}
		r.mu.Unlock()
	}
}

// testReconnect kills b's listener twice while a streams numbered
// payloads. Each kill must be reported and followed by a reconnection
// after which payloads arrive again; across the gap b may miss payloads
// but must never see one twice or out of order; a's listener must not
// notice anything.
func testReconnect(t *testing.T, a, b instanceai.Bus, kill Killer) {
	ra, rb := Listen(t, "a's listener", a), Listen(t, "b's listener", b)
	ra.WaitUp(t)
	rb.WaitUp(t)

	// The stream waits for a's listener to get each payload before it
	// sends the next, which bounds its rate by the round trip.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopStream := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopStream()
	var streamed atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			if i == maxStreamed {
				<-stop // enough: a fast bus would fill memory
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Appendf(nil, "s %06d", i)
			if err := publish(a, p); err != nil {
				t.Errorf("stream: Publish %d: %v", i, err)
				return
			}
			if err := ra.await(waitFor, fmt.Sprintf("streamed payload %d", i), func() bool {
				return lastStreamed(ra.payloads) == i
			}); err != nil {
				t.Error(err)
				return
			}
			streamed.Store(int64(i + 1))
		}
	})

	for round := 1; round <= 2; round++ {
		rb.mu.Lock()
		mark := len(rb.states)
		rb.mu.Unlock()
		kill(t, b)
		rb.WaitLoss(t, mark)
		rb.WaitBack(t, mark)
		// Reconnected: what both publish now must reach both listeners.
		for _, pub := range []struct {
			name string
			bus  instanceai.Bus
		}{{"a", a}, {"b", b}} {
			p := fmt.Appendf(nil, "%s after kill %d", pub.name, round)
			if err := publish(pub.bus, p); err != nil {
				t.Fatalf("Publish from %s after kill %d: %v", pub.name, round, err)
			}
			for _, r := range []*Listener{ra, rb} {
				r.wait(t, waitFor, fmt.Sprintf("%q", p), func() bool { return contains(r.payloads, p) })
			}
		}
	}
	// Let the stream run past the reconnection, then stop it.
	if from := streamed.Load(); from+3 < maxStreamed {
		ra.wait(t, waitFor, "the stream to go on", func() bool { return int64(lastStreamed(ra.payloads)) > from+3 })
	}
	stopStream()

	for _, r := range []*Listener{ra, rb} {
		r.mu.Lock()
		prev := -1
		for _, p := range r.payloads {
			n, ok := streamNumber(p)
			if !ok {
				continue
			}
			if n <= prev {
				t.Errorf("%s: streamed payload %d after %d: duplicated or reordered across a reconnection", r.name, n, prev)
				break
			}
			if r == ra && n != prev+1 {
				t.Errorf("%s: streamed payload %d after %d: a's listener was never cut, yet lost payloads", r.name, n, prev)
				break
			}
			prev = n
		}
		r.mu.Unlock()
	}
	ra.mu.Lock()
	if len(ra.states) != 1 {
		t.Errorf("a's listener: state calls %v; want only the first state(true, nil): the kill must cut b's listener alone", ra.states)
	}
	ra.mu.Unlock()
}

// lostAfter is the index of the first state(false) at or after mark, or -1.
func lostAfter(states []State, mark int) int {
	for i := mark; i < len(states); i++ {
		if !states[i].Up {
			return i
		}
	}
	return -1
}

func streamNumber(p []byte) (int, bool) {
	digits, ok := bytes.CutPrefix(p, []byte("s "))
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(digits))
	return n, err == nil
}

func lastStreamed(payloads [][]byte) int {
	for i := len(payloads) - 1; i >= 0; i-- {
		if n, ok := streamNumber(payloads[i]); ok {
			return n
		}
	}
	return -1
}

func contains(payloads [][]byte, p []byte) bool {
	for _, q := range payloads {
		if bytes.Equal(q, p) {
			return true
		}
	}
	return false
}

// testContextEnds: Listen returns nil when its context ends, whether it
// was done before the call or ends while connected, and Listen may be
// called again on the same bus.
func testContextEnds(t *testing.T, a, b instanceai.Bus, _ Killer) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(ctx, func([]byte) {
			t.Error("Listen with a done context delivered a payload")
		}, func(bool, error) {})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Listen with a done context returned %v, want nil", err)
		}
	case <-time.After(waitFor):
		t.Fatalf("Listen with a done context did not return within %v", waitFor)
	}

	ra := Listen(t, "a's listener", a)
	first := Listen(t, "b's first listener", b)
	ra.WaitUp(t)
	first.WaitUp(t)
	first.stop(t)
	if err := first.result(); err != nil {
		t.Errorf("Listen returned %v when its context ended, want nil", err)
	}

	second := Listen(t, "b's second listener", b)
	second.WaitUp(t)
	p := []byte("for the second listener")
	if err := publish(a, p); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	second.wait(t, waitFor, fmt.Sprintf("%q", p), func() bool { return contains(second.payloads, p) })
	ra.wait(t, waitFor, fmt.Sprintf("%q", p), func() bool { return contains(ra.payloads, p) })
	first.mu.Lock()
	if len(first.payloads) != 0 {
		t.Errorf("b's first listener got %d payloads after its Listen returned", len(first.payloads))
	}
	first.mu.Unlock()
}

// testClose: Close ends a running Listen with an error, after which
// Publish and Listen fail at once and Close may be called again; the
// other bus is not affected.
func testClose(t *testing.T, a, b instanceai.Bus, _ Killer) {
	ra, rb := Listen(t, "a's listener", a), Listen(t, "b's listener", b)
	ra.WaitUp(t)
	rb.WaitUp(t)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-rb.done:
		if rb.result() == nil {
			t.Error("Listen returned nil after Close; want an error, as its context did not end")
		}
	case <-time.After(waitFor):
		t.Fatalf("Listen did not return within %v of Close", waitFor)
	}
	if err := publish(b, []byte("after Close")); err == nil {
		t.Error("Publish after Close succeeded; want an error")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(context.Background(), func([]byte) {}, func(bool, error) {})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Listen after Close returned nil; want an error")
		}
	case <-time.After(waitFor):
		t.Fatalf("Listen after Close did not return within %v", waitFor)
	}

	p := []byte("a goes on")
	if err := publish(a, p); err != nil {
		t.Fatalf("a's Publish after b's Close: %v", err)
	}
	ra.wait(t, waitFor, fmt.Sprintf("%q", p), func() bool { return contains(ra.payloads, p) })
}

// testDoneContext: Publish with a done context fails and sends nothing.
func testDoneContext(t *testing.T, a, b instanceai.Bus, _ Killer) {
	rb := Listen(t, "b's listener", b)
	rb.WaitUp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Publish(ctx, []byte("cancelled")); err == nil {
		t.Error("Publish with a done context succeeded; want an error")
	}
	p := []byte("live")
	if err := publish(a, p); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	rb.wait(t, waitFor, fmt.Sprintf("%q", p), func() bool { return len(rb.payloads) >= 1 })
	rb.mu.Lock()
	if got := rb.payloads[0]; !bytes.Equal(got, p) {
		t.Errorf("first payload %q, want %q: the one published with a done context was sent", got, p)
	}
	rb.mu.Unlock()
}

// publish publishes with a deadline, as the core does.
func publish(bus instanceai.Bus, p []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return bus.Publish(ctx, p)
}

// text returns n bytes of valid UTF-8 without NUL (what a text transport
// such as NOTIFY carries, and what the core's JSON is), mixing one- to
// four-byte characters, control characters, quotes and backslashes.
func text(n int, seed uint64) []byte {
	palette := []rune{'a', 'Z', '0', ' ', '"', '\\', '\'', '\n', '\r', '\t', '\x01', '\x1f', '\x7f',
		'é', 'ß', 'Ω', '€', '中', '\u2028', '\ufeff', '\ufffd', '😀', '\U0010ffff'}
	rng := rand.New(rand.NewPCG(seed, 0x6275737465737421))
	p := make([]byte, 0, n)
	for len(p) < n {
		r := palette[rng.IntN(len(palette))]
		if len(p)+utf8.RuneLen(r) > n {
			r = 'x'
		}
		p = utf8.AppendRune(p, r)
	}
	return p
}

// Listener runs one Listen and keeps what it reports, checking as it goes
// that the callbacks never overlap, never run after Listen returned, and
// pass an error exactly with a loss. Transports' own tests use it too.
// Its fields are guarded by mu; conditions passed to wait run under it.
type Listener struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{} // closed when Listen has returned

	busy atomic.Bool // a callback is running

	mu sync.Mutex
	// changed is closed, and replaced, whenever a callback ran or Listen
	// returned: every waiter wakes, however many there are.
	changed  chan struct{}
	payloads [][]byte
	states   []State
	problems []string
	returned bool
	err      error
}

// State is one call of Listen's state callback.
type State struct {
	Up  bool
	Err error
}

func (s State) String() string { return fmt.Sprintf("state(%v, %v)", s.Up, s.Err) }

// Listen starts bus.Listen; a cleanup ends it and reports what the
// callbacks did wrong.
func Listen(t *testing.T, name string, bus instanceai.Bus) *Listener {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Listener{name: name, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go func() {
		err := bus.Listen(ctx, r.deliver, r.state)
		r.mu.Lock()
		r.returned, r.err = true, err
		r.signal()
		r.mu.Unlock()
		close(r.done)
	}()
	t.Cleanup(func() {
		r.stop(t)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.problems {
			t.Errorf("%s: %s", r.name, p)
		}
	})
	return r
}

// signal wakes the waiters; r.mu must be held.
func (r *Listener) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Listener) enter(what string) {
	if !r.busy.CompareAndSwap(false, true) {
		r.problem("%s called while another callback was running", what)
	}
	r.mu.Lock()
	if r.returned {
		r.problems = append(r.problems, what+" called after Listen returned")
	}
	r.mu.Unlock()
}

func (r *Listener) exit() {
	r.busy.Store(false)
	r.mu.Lock()
	r.signal()
	r.mu.Unlock()
}

func (r *Listener) problem(format string, args ...any) {
	r.mu.Lock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *Listener) deliver(p []byte) {
	r.enter("deliver")
	defer r.exit()
	r.mu.Lock()
	// Kept as given: a transport that reuses the slice corrupts it.
	r.payloads = append(r.payloads, p)
	r.mu.Unlock()
}

func (r *Listener) state(up bool, err error) {
	r.enter("state")
	defer r.exit()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case up && err != nil:
		r.problems = append(r.problems, fmt.Sprintf("state(true, %v): an error with up", err))
	case !up && err == nil:
		r.problems = append(r.problems, "state(false, nil): a loss without its error")
	case up && len(r.states) > 0 && r.states[len(r.states)-1].Up:
		r.problems = append(r.problems, "state(true, nil) twice with no loss between")
	}
	r.states = append(r.states, State{up, err})
}

// await waits until cond, run under r.mu, holds; it fails if d passes or
// Listen returns first.
func (r *Listener) await(d time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, returned, err, changed := cond(), r.returned, r.err, r.changed
		r.mu.Unlock()
		switch {
		case ok:
			return nil
		case returned:
			return fmt.Errorf("%s: Listen returned (%v) before %s", r.name, err, what)
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("%s: no %s within %v (%s)", r.name, what, d, r.summary())
		}
	}
}

func (r *Listener) wait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := r.await(d, what, cond); err != nil {
		t.Fatal(err)
	}
}

// WaitUp waits until the listener is connected.
func (r *Listener) WaitUp(t *testing.T) {
	t.Helper()
	r.wait(t, waitFor, "connection", func() bool {
		return len(r.states) > 0 && r.states[len(r.states)-1].Up
	})
}

func (r *Listener) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	states := r.states
	if len(states) > 6 {
		states = states[len(states)-6:]
	}
	return fmt.Sprintf("%d payloads so far, last state calls %v", len(r.payloads), states)
}

// stop ends Listen and waits for it to return.
func (r *Listener) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(waitFor):
		t.Errorf("%s: Listen did not return within %v of its context ending", r.name, waitFor)
	}
}

func (r *Listener) result() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// WaitLoss waits for a state(false, err) at or after the since-th state
// call and returns its error.
func (r *Listener) WaitLoss(t *testing.T, since int) error {
	t.Helper()
	r.wait(t, waitFor, "state(false, err)", func() bool { return lostAfter(r.states, since) >= 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[lostAfter(r.states, since)].Err
}

// WaitBack waits for a state(true, nil) after a state(false, err), both
// at or after the since-th state call.
func (r *Listener) WaitBack(t *testing.T, since int) {
	t.Helper()
	r.wait(t, waitFor, "state(true, nil) after a loss", func() bool {
		i := lostAfter(r.states, since)
		return i >= 0 && r.states[len(r.states)-1].Up && len(r.states)-1 > i
	})
}

// WaitPayload waits until p has been delivered.
func (r *Listener) WaitPayload(t *testing.T, p []byte) {
	t.Helper()
	r.wait(t, waitFor, fmt.Sprintf("%q", p), func() bool { return contains(r.payloads, p) })
}

// States returns the state calls so far.
func (r *Listener) States() []State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// Payloads returns the payloads delivered so far.
func (r *Listener) Payloads() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.payloads)
}
