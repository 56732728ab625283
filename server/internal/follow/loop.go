package follow

import (
	"context"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// Loop moves what a thread's feed delivers to a stream's writer: each batch
// to Send, a heartbeat to Ping when nothing came for Heartbeat. It runs in
// the caller's goroutine (Run), or on a connection taken over from
// net/http without a goroutine of its own while idle (Hijack).
type Loop struct {
	Feed      *instanceai.Feed
	Heartbeat time.Duration
	// Send writes a batch and flushes it; Ping writes a heartbeat. An
	// error of either ends the loop (as a WriteError).
	Send func(batch []instanceai.Delivery) error
	Ping func() error
	// Reopen, when set, is asked for a feed to go on with when the feed
	// fails with err (it closes the old one); nil ends the loop with err.
	Reopen func(err error) *instanceai.Feed
	// Done, when set, ends the loop once it reports true.
	Done func() bool
}

// WriteError is a loop's end by its writer: Send or Ping failed.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "stream write: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Run serves the loop until Done, a write fails (a *WriteError) or the
// feed fails (its error, ctx's included) and is not reopened.
func (l *Loop) Run(ctx context.Context) error {
	ping := time.NewTicker(l.Heartbeat)
	defer ping.Stop()
	for !l.done() {
		batch, err := l.Feed.Next(ctx, ping.C)
		if err != nil {
			if l.reopen(err) {
				continue
			}
			return err
		}
		if err := l.write(batch, true); err != nil {
			return err
		}
		ping.Reset(l.Heartbeat)
	}
	return nil
}

func (l *Loop) done() bool { return l.Done != nil && l.Done() }

// reopen swaps the feed for the one Reopen gives after err; false when
// there is none.
func (l *Loop) reopen(err error) bool {
	if l.Reopen == nil {
		return false
	}
	f := l.Reopen(err)
	if f == nil {
		return false
	}
	l.Feed = f
	return true
}

// write sends a batch, or a heartbeat when there is none and one is due.
func (l *Loop) write(batch []instanceai.Delivery, pingDue bool) error {
	var err error
	switch {
	case batch != nil:
		err = l.Send(batch)
	case pingDue:
		err = l.Ping()
	}
	if err != nil {
		return &WriteError{Err: err}
	}
	return nil
}
