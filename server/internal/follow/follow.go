// Package follow serves a thread's feed to a stream: one loop (Loop) that
// moves what the feed delivers to a writer, in the handler's goroutine or
// on a hijacked connection without a goroutine while idle (Hijacked). The
// native event stream serves the thread on it; Stream is the live part of
// the streams that render one run of a thread in another dialect (AG-UI's
// /run-agent and rejoin, the builder's operations): the run's events
// mapped and written until the mapper's terminal event.
package follow

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpmetrics"
	"github.com/threadline/threadline/ssestream"
)

// Mapper renders one run's Instance AI events as a dialect's events E.
type Mapper[E any] interface {
	Push(ev instanceai.Event) []E
	// Close returns the events that end a stream cut short by err.
	Close(err error) []E
	// Finished reports whether the terminal event was returned.
	Finished() bool
}

// Stream is one stream's parts: where it reads, what it maps, how it
// writes. Write sends events with id (the seq of the event they were
// mapped from, 0 for none) on the last of them.
type Stream[E any] struct {
	Core      *instanceai.Core
	ThreadID  string
	RunID     string
	Mapper    Mapper[E]
	Out       *ssestream.Stream
	Write     func(id int64, events []E) error
	Heartbeat time.Duration
	Log       *slog.Logger
	// Feed, when set, is the feed to read, opened (and subscribed, see
	// instanceai.Feed.Subscribe) before the run started; else Run opens
	// one after the cursor.
	Feed *instanceai.Feed
}

// Run follows the run from after until the mapper's terminal event. gone
// reports that the client went away first (a failed write, or the
// request's end), so the caller may act for a run nobody watches; a source
// failure or an eviction reset ends the stream with the mapper's Close and
// is not gone.
func (s Stream[E]) Run(ctx context.Context, after int64) (gone bool) {
	// The replays of the request's stream are counted under its surface.
	replayed := httpmetrics.ReplayCounter(ctx)
	feed := s.Feed
	if feed == nil {
		s.Core.Follow(ctx, s.ThreadID)
		feed = s.Core.Feed(s.ThreadID, after)
	}
	if feed.Replayed == nil {
		feed.Replayed = replayed
	}
	loop := &Loop{Feed: feed, Heartbeat: s.Heartbeat, Send: s.send, Ping: s.ping, Done: s.Mapper.Finished}
	loop.Reopen = func(err error) *instanceai.Feed {
		if ctx.Err() != nil || !errors.Is(err, instanceai.ErrSubscriberDropped) {
			return nil
		}
		// Fell behind the live tail: the log has every durable event, so
		// pick up again from the cursor.
		last := loop.Feed.Last()
		loop.Feed.Close()
		f := s.Core.Feed(s.ThreadID, last)
		f.Replayed = replayed
		return f
	}
	err := loop.Run(ctx)
	loop.Feed.Close()
	var over streamOver
	switch {
	case err == nil:
		return false
	case errors.As(err, &over):
		return over.gone
	case ctx.Err() != nil:
		return true
	}
	s.Log.Warn("stream source failed", "err", err)
	return s.Write(0, s.Mapper.Close(err)) != nil || s.Out.Flush() != nil
}

// streamOver ends a stream from its writer: gone when the client went
// away, else the stream was written to its end.
type streamOver struct{ gone bool }

func (streamOver) Error() string { return "stream over" }

// send writes the run's events of a batch and flushes them.
func (s Stream[E]) send(batch []instanceai.Delivery) error {
	for _, d := range batch {
		if d.Reset != nil {
			// The events between the cursor and the rest are gone, or
			// the cursor is beyond the log: no sequence of the dialect
			// can bridge that, so the run's stream ends here.
			s.Log.Warn("stream reset", "reason", d.Reset.Reason, "cursor", d.Reset.LastEventID, "next", d.Reset.NextEventID)
			if s.Write(0, s.Mapper.Close(d.Reset)) == nil {
				_ = s.Out.Flush()
			}
			return streamOver{}
		}
		if d.Event == nil || d.Event.RunID != s.RunID {
			continue
		}
		if err := s.Write(d.ID, s.Mapper.Push(*d.Event)); err != nil {
			return streamOver{gone: true}
		}
	}
	if err := s.Out.Flush(); err != nil {
		return streamOver{gone: !s.Mapper.Finished()}
	}
	return nil
}

func (s Stream[E]) ping() error {
	if err := s.Out.Ping(); err != nil {
		return streamOver{gone: true}
	}
	return nil
}
