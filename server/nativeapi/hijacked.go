package nativeapi

import (
	"context"
	"sync"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/internal/follow"
	"github.com/threadline/threadline/ssestream"
)

// streams tracks the hijacked streams, which net/http no longer knows of,
// so that Shutdown can end them and wait for them.
type streams struct {
	mu     sync.Mutex
	open   map[*follow.Hijacked]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (ss *streams) add(h *follow.Hijacked) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	if ss.open == nil {
		ss.open = map[*follow.Hijacked]struct{}{}
	}
	ss.open[h] = struct{}{}
	ss.wg.Add(1)
	return true
}

func (ss *streams) remove(h *follow.Hijacked) {
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
	open := make([]*follow.Hijacked, 0, len(a.streams.open))
	for h := range a.streams.open {
		open = append(open, h)
	}
	a.streams.mu.Unlock()
	for _, h := range open {
		h.Stop()
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
		h.Close() // its runner's write fails, and it ends
	}
	return ctx.Err()
}

// serveHijacked starts the stream on a hijacked connection and returns;
// the stream goes on without the handler (see follow.Hijacked), which
// keeps an idle stream's memory small.
func (a *API) serveHijacked(ctx context.Context, s *ssestream.Stream, threadID string, after int64, filter func(*instanceai.Delivery) bool) {
	loop := a.loop(ctx, s, threadID, after, filter)
	var h *follow.Hijacked
	h = loop.Hijack(s, func(err error) {
		a.streamEnded(threadID, loop.Feed, err)
		a.streams.remove(h)
	})
	a.restore(loop.Feed, threadID, h.Context)
	if !a.streams.add(h) {
		h.Abandon()
		return
	}
	h.Start()
}
