package bustest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/faultproxy"
)

// Outage is how a networked transport's tests stage outages for
// RunOutages: a bus that reaches its server through a fault proxy the
// suite can silence or take down.
type Outage struct {
	// Open returns two buses on one channel of their own: proxied reaches
	// its server through p, direct does not (the publisher the outage
	// must not stop). It may register cleanups on t, closing the buses
	// among them.
	Open func(t *testing.T) (proxied, direct instanceai.Bus, p *faultproxy.Proxy)
	// QuickCheck makes b's listener check a quiet connection after quiet
	// and give it answer to respond, so that a silent one is noticed soon.
	QuickCheck func(b instanceai.Bus, quiet, answer time.Duration)
	// SilenceLoss is part of the error the listener reports when a silent
	// connection fails that check.
	SilenceLoss string
}

// RunOutages checks that a listener notices a connection that went silent
// (a partition, which tells neither end) by itself, reports the loss and
// listens again on a new connection; and that while the server is
// unreachable it keeps reporting the loss and retrying, Publish fails, and
// both work again once the server is back.
func RunOutages(t *testing.T, o Outage) {
	t.Run("SilentConnectionIsNoticed", func(t *testing.T) { testSilence(t, o) })
	t.Run("ListenOutlastsAnOutage", func(t *testing.T) { testOutage(t, o) })
}

func testSilence(t *testing.T, o Outage) {
	b, pub, proxy := o.Open(t)
	o.QuickCheck(b, 100*time.Millisecond, 300*time.Millisecond)

	l := Listen(t, "listener", b)
	l.WaitUp(t)
	mark := len(l.States())
	proxy.Silence()
	if err := l.WaitLoss(t, mark); err == nil || !strings.Contains(err.Error(), o.SilenceLoss) {
		t.Errorf("loss reported as %v; want one about %q", err, o.SilenceLoss)
	}
	l.WaitBack(t, mark)
	p := []byte("after the silence")
	if err := pub.Publish(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	l.WaitPayload(t, p)
}

func testOutage(t *testing.T, o Outage) {
	b, pub, proxy := o.Open(t)

	l := Listen(t, "listener", b)
	l.WaitUp(t)
	mark := len(l.States())
	proxy.Down()
	l.WaitLoss(t, mark)
	failed := len(l.States())
	l.WaitLoss(t, failed) // a retry fails too before the server is back
	if err := b.Publish(context.Background(), []byte("while cut off")); err == nil {
		t.Error("Publish through a cut-off proxy succeeded")
	}
	proxy.Heal()
	l.WaitBack(t, mark)
	p := []byte("after the outage")
	if err := pub.Publish(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	l.WaitPayload(t, p)
	own := []byte("own, after the outage")
	if err := b.Publish(context.Background(), own); err != nil {
		t.Errorf("Publish after the outage: %v", err)
	}
	l.WaitPayload(t, own)
}
