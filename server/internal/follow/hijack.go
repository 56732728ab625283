package follow

import (
	"context"
	"sync"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/ssestream"
)

// Hijacked is a Loop served on a connection taken over from net/http
// (ssestream.Hijack) without a goroutine of its own while idle: its handler
// has returned, and a goroutine runs only while there is something to do.
// The hub wakes it when frames are queued (Feed.Poll), a timer when a
// heartbeat is due, the client's connection when it closes, Stop when the
// server stops. What an idle stream holds is its feed and subscription,
// this struct, a timer, the connection and the small goroutine blocked
// reading it.
type Hijacked struct {
	loop *Loop
	s    *ssestream.Stream
	// ended is told why the stream ended: nil when the client went away
	// or Stop's queue was sent, else the feed's error or a *WriteError.
	ended func(err error)
	ping  *time.Timer
	// pollCtx bounds the log reads of the poll under way (BeforeLive's
	// too), which the client's going away or Stop cancel. It is made per
	// poll rather than per stream: a context that a database read has
	// derived from keeps a map of children afterwards, and one per idle
	// stream adds up.
	pollCtx context.Context

	mu sync.Mutex
	// running is set while a goroutine serves the stream: only that one
	// touches the feed and writes.
	running bool
	// again is set when the stream is woken while running, so that the
	// runner looks once more before it stops.
	again   bool
	pingDue bool
	// gone: the client went away; the stream ends at once. stopping: the
	// server shuts down; the stream sends what is queued, then ends.
	gone, stopping bool
	over           bool
	// cancelPoll cancels the poll under way, if any.
	cancelPoll context.CancelFunc
}

// Hijack prepares the loop's stream on s, a hijacked connection; Start
// starts it. ended is told why it ended, once its feed, timer and
// connection are released.
func (l *Loop) Hijack(s *ssestream.Stream, ended func(err error)) *Hijacked {
	// Marked running until Start: a wake meanwhile (the hub, a Stop) is
	// noted for the first run rather than starting one on a stream that
	// is not ready.
	h := &Hijacked{loop: l, s: s, ended: ended, running: true}
	l.Feed.Wake = h.wake
	return h
}

// Start starts the stream and returns; the stream goes on without the
// caller.
func (h *Hijacked) Start() {
	h.ping = time.AfterFunc(h.loop.Heartbeat, h.heartbeat)
	h.s.WatchClient(h.clientGone)
	go h.run()
}

// Abandon releases a stream that is not to start: its connection closes.
func (h *Hijacked) Abandon() { h.s.Close() }

// Context is the context of the poll under way, for what the feed calls
// while it polls (BeforeLive, Restate); nil between polls.
func (h *Hijacked) Context() context.Context { return h.pollCtx }

// Stop ends the stream once it has sent what its feed has queued.
func (h *Hijacked) Stop() {
	h.mu.Lock()
	h.stopping = true
	h.cancelPollLocked() // a replay under way ends
	h.mu.Unlock()
	h.wake()
}

// Close closes the stream's connection: its runner's write fails, and it
// ends.
func (h *Hijacked) Close() { h.s.Close() }

func (h *Hijacked) heartbeat() {
	h.mu.Lock()
	h.pingDue = true
	h.mu.Unlock()
	h.wake()
}

func (h *Hijacked) clientGone() {
	h.mu.Lock()
	h.gone = true
	h.cancelPollLocked()
	h.mu.Unlock()
	h.wake()
}

func (h *Hijacked) cancelPollLocked() {
	if h.cancelPoll != nil {
		h.cancelPoll()
	}
}

// poll takes what the feed has, within a context that clientGone and
// Stop cancel.
func (h *Hijacked) poll() ([]instanceai.Delivery, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.mu.Lock()
	if h.gone || h.stopping {
		cancel()
	}
	h.cancelPoll = cancel
	h.mu.Unlock()
	h.pollCtx = ctx
	batch, err := h.loop.Feed.Poll(ctx)
	h.pollCtx = nil
	h.mu.Lock()
	h.cancelPoll = nil
	h.mu.Unlock()
	return batch, err
}

// wake makes sure a goroutine serves the stream: it starts one unless
// one is running, which then looks again before it stops. It never
// blocks: the hub calls it while publishing.
func (h *Hijacked) wake() {
	h.mu.Lock()
	if h.over {
		h.mu.Unlock()
		return
	}
	if h.running {
		h.again = true
		h.mu.Unlock()
		return
	}
	h.running = true
	h.mu.Unlock()
	go h.run()
}

// run serves the stream until there is nothing left to do, then returns
// (or ends the stream). It writes what the feed has; a heartbeat when one
// is due and there was nothing to write.
func (h *Hijacked) run() {
	for {
		h.mu.Lock()
		gone, stopping, pingDue := h.gone, h.stopping, h.pingDue
		h.again, h.pingDue = false, false
		h.mu.Unlock()
		if gone || h.loop.done() {
			h.end(nil)
			return
		}
		batch, err := h.poll()
		if err != nil {
			if h.loop.reopen(err) {
				h.loop.Feed.Wake = h.wake
				continue
			}
			h.end(err)
			return
		}
		if err := h.loop.write(batch, pingDue); err != nil {
			h.end(err)
			return
		}
		if batch != nil || pingDue {
			h.ping.Reset(h.loop.Heartbeat)
		}
		if batch != nil {
			continue // a replay has more pages; the live tail may have more
		}
		if stopping {
			h.end(nil)
			return
		}
		h.mu.Lock()
		if h.again {
			h.mu.Unlock()
			continue
		}
		h.running = false
		h.mu.Unlock()
		return
	}
}

// end releases the stream (its subscription, timer and connection) and
// says why it ended.
func (h *Hijacked) end(err error) {
	h.mu.Lock()
	h.over = true
	h.mu.Unlock()
	h.ping.Stop()
	h.loop.Feed.Close()
	h.s.Close()
	h.ended(err)
}
