// Package relisten is the reconnect loop every bus listener shares: run a
// session until its connection fails, report the bus down, wait with
// backoff, and start again, until the caller's context ends or the bus is
// closed.
package relisten

import (
	"context"
	"sync"
	"time"
)

// Backoff bounds the wait between sessions: it doubles from Min to Max
// while sessions fail, and goes back to Min after one that connected.
type Backoff struct{ Min, Max time.Duration }

// Run calls session until ctx ends (it returns nil) or done is closed (it
// returns closed). session gets a context that also ends when done is
// closed, so that Close interrupts a session blocked on its connection; it
// reports whether it got connected and the error that ended it, which goes
// to state(false, err).
func Run(ctx context.Context, done <-chan struct{}, closed error, b Backoff,
	session func(ctx context.Context) (connected bool, err error), state func(up bool, err error)) error {
	isClosed := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	switch {
	case ctx.Err() != nil:
		return nil
	case isClosed():
		return closed
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
			cancel()
		case <-sctx.Done():
		}
	})
	defer func() {
		cancel()
		wg.Wait()
	}()

	wait := b.Min
	for {
		connected, err := session(sctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case isClosed():
			return closed
		}
		state(false, err)
		if connected {
			wait = b.Min
		}
		t := time.NewTimer(wait)
		select {
		case <-sctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, b.Max)
	}
}
