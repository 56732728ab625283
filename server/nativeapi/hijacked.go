package nativeapi

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/ssestream"
)

// hijacked is an event stream on a connection taken over from net/http
// (ssestream.Hijack), served without a goroutine of its own while idle:
// its handler has returned, and a goroutine runs (run) only while there is
// something to do. The hub wakes it when frames are queued (Feed.Poll), a
// timer when a heartbeat is due, the client's connection when it closes,
// Shutdown when the server stops. What an idle stream holds is its feed
// and subscription, this struct, a timer, the connection and the small
// goroutine blocked reading it.
type hijacked struct {
	a        *API
	s        *ssestream.Stream
	feed     *instanceai.Feed
	threadID string
	filter   func(*instanceai.Delivery) bool
	ping     *time.Timer
	// pollCtx bounds the log reads of the poll under way (BeforeLive's
	// too), which the client's going away or the shutdown cancel. It is
	// made per poll rather than per stream: a context that a database
	// read has derived from keeps a map of children afterwards, and one
	// per idle stream adds up.
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
	ended          bool
	// cancelPoll cancels the poll under way, if any.
	cancelPoll context.CancelFunc
}

// streams tracks the hijacked streams, which net/http no longer knows of,
// so that Shutdown can end them and wait for them.
type streams struct {
	mu     sync.Mutex
	open   map[*hijacked]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (ss *streams) add(h *hijacked) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	if ss.open == nil {
		ss.open = map[*hijacked]struct{}{}
	}
	ss.open[h] = struct{}{}
	ss.wg.Add(1)
	return true
}

func (ss *streams) remove(h *hijacked) {
	ss.mu.Lock()
	delete(ss.open, h)
	ss.mu.Unlock()
	ss.wg.Done()
}

// Shutdown ends the event streams that run on connections taken over from
// net/http (http.Server.Shutdown does not wait for those): each sends
// what its subscription has queued, then closes its connection. A stream
// asked for later ends at once. Shutdown waits for them until ctx ends,
// then closes the connections of those left (a client that stopped
// reading) and returns ctx's error.
func (a *API) Shutdown(ctx context.Context) error {
	a.streams.mu.Lock()
	a.streams.closed = true
	open := make([]*hijacked, 0, len(a.streams.open))
	for h := range a.streams.open {
		open = append(open, h)
	}
	a.streams.mu.Unlock()
	for _, h := range open {
		h.stop()
	}
	done := make(chan struct{})
	go func() {
		a.streams.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	for _, h := range open {
		h.s.Close() // its runner's write fails, and it ends
	}
	return ctx.Err()
}

// serveHijacked starts the stream on a hijacked connection and returns;
// the stream goes on without the handler.
func (a *API) serveHijacked(ctx context.Context, s *ssestream.Stream, threadID string, after int64, filter func(*instanceai.Delivery) bool) {
	h := &hijacked{a: a, s: s, feed: a.feed(ctx, threadID, after), threadID: threadID, filter: filter}
	h.feed.BeforeLive = func(handoff instanceai.Handoff) []instanceai.Delivery {
		return a.runSyncFrames(h.pollCtx, threadID, handoff)
	}
	h.feed.Restate = func(runID string, upTo int64) []instanceai.Delivery {
		return a.restate(h.pollCtx, threadID, runID, upTo)
	}
	h.feed.Wake = h.wake
	// Marked running while it is set up: a wake meanwhile (the timer, a
	// Shutdown that found it registered) is noted for the first run
	// rather than starting one on a stream that is not ready.
	h.running = true
	h.ping = time.AfterFunc(a.cfg.Heartbeat, h.heartbeat)
	if !a.streams.add(h) {
		h.ping.Stop()
		s.Close()
		return
	}
	s.WatchClient(h.clientGone)
	go h.run()
}

func (h *hijacked) heartbeat() {
	h.mu.Lock()
	h.pingDue = true
	h.mu.Unlock()
	h.wake()
}

func (h *hijacked) clientGone() {
	h.mu.Lock()
	h.gone = true
	h.cancelPollLocked()
	h.mu.Unlock()
	h.wake()
}

func (h *hijacked) stop() {
	h.mu.Lock()
	h.stopping = true
	h.cancelPollLocked() // a replay under way ends
	h.mu.Unlock()
	h.wake()
}

func (h *hijacked) cancelPollLocked() {
	if h.cancelPoll != nil {
		h.cancelPoll()
	}
}

// poll takes what the feed has, within a context that clientGone and
// stop cancel.
func (h *hijacked) poll() ([]instanceai.Delivery, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.mu.Lock()
	if h.gone || h.stopping {
		cancel()
	}
	h.cancelPoll = cancel
	h.mu.Unlock()
	h.pollCtx = ctx
	batch, err := h.feed.Poll(ctx)
	h.pollCtx = nil
	h.mu.Lock()
	h.cancelPoll = nil
	h.mu.Unlock()
	return batch, err
}

// wake makes sure a goroutine serves the stream: it starts one unless
// one is running, which then looks again before it stops. It never
// blocks: the hub calls it while publishing.
func (h *hijacked) wake() {
	h.mu.Lock()
	if h.ended {
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
func (h *hijacked) run() {
	for {
		h.mu.Lock()
		gone, stopping, pingDue := h.gone, h.stopping, h.pingDue
		h.again, h.pingDue = false, false
		h.mu.Unlock()
		if gone {
			h.end()
			return
		}
		batch, err := h.poll()
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				h.a.cfg.Logger.Info("event stream ended", "thread", h.threadID, "last", h.feed.Last(), "reason", err)
			}
			h.end()
			return
		}
		switch {
		case batch != nil:
			err = h.a.send(h.s, h.threadID, batch, h.filter)
		case pingDue:
			err = h.s.Ping()
		}
		if err != nil {
			h.a.cfg.Logger.Debug("event stream write failed", "thread", h.threadID, "err", err)
			h.end()
			return
		}
		if batch != nil || pingDue {
			h.ping.Reset(h.a.cfg.Heartbeat)
		}
		if batch != nil {
			continue // a replay has more pages; the live tail may have more
		}
		if stopping {
			h.end()
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

// end releases the stream: its subscription, timer and connection.
func (h *hijacked) end() {
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	h.ping.Stop()
	h.feed.Close()
	h.s.Close()
	h.a.streams.remove(h)
}
