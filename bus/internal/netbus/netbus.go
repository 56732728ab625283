// Package netbus is what the networked buses (PostgreSQL, Redis) do alike
// around their transports: refuse work once closed and payloads over their
// limit, run listener sessions in the reconnect loop with one backoff, and
// close once.
package netbus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/threadline/threadline/bus/internal/relisten"
)

// Backoff is the wait before a listener connects again: it doubles from
// 100 ms to 2 s while connecting fails.
var Backoff = relisten.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}

// Base is the transport-independent part of a bus. Its methods are safe
// for concurrent use.
type Base struct {
	maxPayload  int
	errClosed   error // what Publish and Listen return once closed
	errTooLarge error // wrapped by Publish for a payload over maxPayload
	done        chan struct{}
	once        sync.Once
}

// New returns an open Base for payloads up to maxPayload bytes, with the
// bus's own errors.
func New(maxPayload int, errClosed, errTooLarge error) *Base {
	return &Base{maxPayload: maxPayload, errClosed: errClosed, errTooLarge: errTooLarge, done: make(chan struct{})}
}

// Done is closed by Close.
func (b *Base) Done() <-chan struct{} { return b.done }

// CheckPublish is what Publish checks before the transport: the closed
// error once closed, the too-large one (with both sizes) for a payload
// over the limit.
func (b *Base) CheckPublish(payload []byte) error {
	select {
	case <-b.done:
		return b.errClosed
	default:
	}
	if len(payload) > b.maxPayload {
		return fmt.Errorf("%w: %d bytes, the limit is %d", b.errTooLarge, len(payload), b.maxPayload)
	}
	return nil
}

// Listen runs session in the reconnect loop (relisten.Run with Backoff): it
// returns nil when ctx ends and the closed error once closed. session's
// context also ends at Close, which is what interrupts a session blocked on
// its connection.
func (b *Base) Listen(ctx context.Context, session func(ctx context.Context) (connected bool, err error), state func(up bool, err error)) error {
	return relisten.Run(ctx, b.done, b.errClosed, Backoff, session, state)
}

// Close ends every Listen, then calls release, the first time only, and
// returns its error; closing again returns nil.
func (b *Base) Close(release func() error) error {
	var err error
	b.once.Do(func() {
		close(b.done)
		err = release()
	})
	return err
}
