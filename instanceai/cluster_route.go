package instanceai

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// followTimeout bounds one Follow: a bus that does not confirm by then
// follows the topics at its next connection, and the head check reads
// what they missed meanwhile.
const followTimeout = 5 * time.Second

// busRouter keeps a bus that routes by topic (see RoutedBus) following
// exactly the threads the hub watches, and tells who waits for a follow
// when the bus confirmed it.
type busRouter struct {
	bus    RoutedBus
	hub    *Hub
	heads  *headCheck
	logger *slog.Logger

	mu sync.Mutex
	// reroute holds the threads whose following may have to change (see
	// Hub.NotifyWatch); wake signals the router's goroutine.
	reroute map[string]bool
	wake    chan struct{}
	// following is what the bus follows; the router's goroutine alone
	// uses it.
	following map[string]bool
	// confirmed are the threads whose follow the bus confirmed, and
	// awaiting the AwaitFollow calls waiting for one.
	confirmed map[string]bool
	awaiting  map[string][]chan struct{}
}

// newBusRouter returns a router of bus that the hub tells of each thread
// whose watch may have changed.
func newBusRouter(bus RoutedBus, hub *Hub, heads *headCheck, logger *slog.Logger) *busRouter {
	r := &busRouter{bus: bus, hub: hub, heads: heads, logger: logger,
		reroute: map[string]bool{}, wake: make(chan struct{}, 1), following: map[string]bool{},
		confirmed: map[string]bool{}, awaiting: map[string][]chan struct{}{}}
	hub.NotifyWatch(r.watchChanged)
	return r
}

// awaitFollow waits until the bus confirmed that it follows the thread,
// or ctx ends.
func (r *busRouter) awaitFollow(ctx context.Context, threadID string) error {
	r.mu.Lock()
	if r.confirmed[threadID] {
		r.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	r.awaiting[threadID] = append(r.awaiting[threadID], w)
	r.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		r.mu.Lock()
		r.awaiting[threadID] = slices.DeleteFunc(r.awaiting[threadID], func(x chan struct{}) bool { return x == w })
		if len(r.awaiting[threadID]) == 0 {
			delete(r.awaiting, threadID)
		}
		r.mu.Unlock()
		return ctx.Err()
	}
}

// follows reports whether the bus confirmed that it follows the thread.
func (r *busRouter) follows(threadID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmed[threadID]
}

// watchChanged is the hub's word that a thread's Watched may have changed.
func (r *busRouter) watchChanged(threadID string) {
	r.mu.Lock()
	r.reroute[threadID] = true
	r.mu.Unlock()
	notify(r.wake)
}

// run keeps the bus following exactly the threads the hub watches, until
// ctx ends. A thread is followed from its first subscriber here until its
// state leaves the hub. Once the bus confirms a follow, the head check
// reads the thread's log head: what was committed between the
// subscriber's replay and the follow reaches it from the log, and every
// later frame over the bus.
func (r *busRouter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		threads := r.reroute
		r.reroute = map[string]bool{}
		r.mu.Unlock()
		var add, drop []string
		for t := range threads {
			switch want := r.hub.Watched(t); {
			case want && !r.following[t]:
				add = append(add, t)
				r.following[t] = true
			case !want && r.following[t]:
				drop = append(drop, t)
				delete(r.following, t)
			}
		}
		if len(drop) > 0 {
			r.mu.Lock()
			for _, t := range drop {
				delete(r.confirmed, t)
			}
			r.mu.Unlock()
			if err := r.bus.Unfollow(ctx, drop...); err != nil && ctx.Err() == nil {
				r.logger.Debug("bus unfollow failed", "threads", len(drop), "err", err)
			}
		}
		if len(add) == 0 {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, followTimeout)
		err := r.bus.Follow(fctx, add...)
		cancel()
		if err != nil {
			// The bus follows them at its next connection, whose
			// state(true) runs the head check of every thread, and the
			// periodic head check covers the wait; they are tried again
			// meanwhile, so that Follows comes true.
			if ctx.Err() == nil {
				r.logger.Debug("bus follow not confirmed", "threads", len(add), "err", err)
			}
			r.mu.Lock()
			for _, t := range add {
				delete(r.following, t)
				r.reroute[t] = true
			}
			r.mu.Unlock()
			time.AfterFunc(retryInterval, func() {
				notify(r.wake)
			})
			continue
		}
		// The head check is asked before the waiters are woken: whoever
		// AwaitFollow lets through finds its thread's check requested.
		r.heads.request(add...)
		r.mu.Lock()
		for _, t := range add {
			if r.following[t] {
				r.confirmed[t] = true
				for _, w := range r.awaiting[t] {
					close(w)
				}
				delete(r.awaiting, t)
			}
		}
		r.mu.Unlock()
	}
}
