package bustest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// routed returns a and b as routed buses, or skips a transport that does
// not route.
func routed(t *testing.T, a, b instanceai.Bus) (instanceai.RoutedBus, instanceai.RoutedBus) {
	t.Helper()
	ra, okA := a.(instanceai.RoutedBus)
	rb, okB := b.(instanceai.RoutedBus)
	if !okA || !okB {
		t.Skip("the transport does not route by topic")
	}
	return ra, rb
}

func follow(t *testing.T, bus instanceai.RoutedBus, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := bus.Follow(ctx, topics...); err != nil {
		t.Fatalf("Follow %q: %v", topics, err)
	}
}

func publishTo(t *testing.T, bus instanceai.RoutedBus, topic, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := bus.PublishTo(ctx, topic, []byte(payload)); err != nil {
		t.Fatalf("PublishTo %q: %v", topic, err)
	}
}

// got checks that r received exactly want, in order, once its last
// element arrived: payloads one publisher sends, to topics or to all,
// arrive in the order it sent them, so nothing routed elsewhere can still
// be on its way.
func (r *Listener) got(t *testing.T, want ...string) {
	t.Helper()
	r.WaitPayload(t, []byte(want[len(want)-1]))
	var have []string
	for _, p := range r.Payloads() {
		have = append(have, string(p))
	}
	if !slices.Equal(have, want) {
		t.Errorf("%s received %q, want %q", r.name, have, want)
	}
}

// testTopicsRoute: a payload published to a topic reaches the listeners
// that follow it and no other, in order with the payloads published to
// all; after Unfollow (and a later Follow, which the transport confirms
// after it) the topic reaches no one.
func testTopicsRoute(t *testing.T, a, b instanceai.Bus, _ Killer) {
	ra, rb := routed(t, a, b)
	la, lb := Listen(t, "a's listener", a), Listen(t, "b's listener", b)
	la.WaitUp(t)
	lb.WaitUp(t)
	// Topics are thread ids: any text.
	odd := "thread 2/é:{x}*"
	follow(t, ra, "t1", odd)

	publishTo(t, rb, "t3", "t3 from b")
	publishTo(t, rb, "t1", "t1 from b")
	publishTo(t, rb, odd, "odd from b")
	publishTo(t, ra, odd, "odd from a")
	if err := publish(b, []byte("all from b")); err != nil {
		t.Fatal(err)
	}
	la.got(t, "t1 from b", "odd from b", "odd from a", "all from b")
	lb.got(t, "all from b")

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := ra.Unfollow(ctx, "t1"); err != nil {
		t.Fatalf("Unfollow: %v", err)
	}
	follow(t, ra, "barrier")
	publishTo(t, rb, "t1", "t1 after unfollow")
	publishTo(t, rb, odd, "odd again")
	publishTo(t, rb, "barrier", "barrier")
	la.got(t, "t1 from b", "odd from b", "odd from a", "all from b", "odd again", "barrier")
}

// testTopicsSurviveReconnect: the followed topics, those followed while
// the listener was cut off included, are followed again once it reports
// state(true, nil).
func testTopicsSurviveReconnect(t *testing.T, a, b instanceai.Bus, kill Killer) {
	ra, rb := routed(t, a, b)
	lb := Listen(t, "b's listener", b)
	lb.WaitUp(t)
	follow(t, rb, "before")
	since := len(lb.States())
	kill(t, b)
	lb.WaitLoss(t, since)
	// Followed now or at the reconnection, whichever comes first: an
	// error only says which.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	err := rb.Follow(ctx, "during")
	cancel()
	lb.WaitBack(t, since)
	t.Logf("Follow while cut off: %v", err)
	for i, topic := range []string{"before", "during"} {
		publishTo(t, ra, topic, fmt.Sprintf("%s %d", topic, i))
	}
	lb.got(t, "before 0", "during 1")
}

// testBatch: a batch goes out in order, each envelope to its topic's
// followers or to every listener.
func testBatch(t *testing.T, a, b instanceai.Bus, _ Killer) {
	ra, rb := routed(t, a, b)
	batcher, ok := rb.(instanceai.BatchBus)
	if !ok {
		t.Skip("the transport sends no batches")
	}
	la := Listen(t, "a's listener", a)
	la.WaitUp(t)
	follow(t, ra, "t1", "t2")
	var batch []instanceai.Envelope
	var want []string
	for i := range 50 {
		topic := []string{"t1", "t2", "", "t3"}[i%4]
		p := fmt.Sprintf("%d to %q", i, topic)
		batch = append(batch, instanceai.Envelope{Topic: topic, Payload: []byte(p)})
		if topic != "t3" {
			want = append(want, p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := batcher.PublishBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	la.got(t, want...)
	oversize := make([]byte, max(rb.MaxPayload(), noLimit)+1)
	if rb.MaxPayload() > 0 {
		if err := batcher.PublishBatch(ctx, []instanceai.Envelope{{Topic: "t1", Payload: oversize}}); err == nil {
			t.Error("a batch with a payload over MaxPayload was taken")
		}
	}
}
