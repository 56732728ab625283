// Package healthcache shares an agent's health probe among the callers of
// its public /llm/health: the answer of the last probe is served while it
// is young, and callers that come while a probe runs wait for it, so
// however many clients poll the endpoint, the upstream gets at most one
// probe per TTL.
package healthcache

import (
	"sync"
	"time"
)

// DefaultTTL is how long an answer is served before the next caller
// probes again.
const DefaultTTL = 5 * time.Second

// Cache keeps the last answer of a probe. Its zero value is ready to use;
// it is safe for concurrent use.
type Cache[T any] struct {
	mu     sync.Mutex
	at     time.Time // when the kept answer's probe ended; zero for none
	answer T
	// running is closed when the probe under way ends; nil for none.
	running chan struct{}
}

// Get returns an answer at most ttl old, running probe when there is none:
// a caller that finds a probe under way waits for its answer. probe runs
// on the caller's goroutine but for all callers, so it must not depend on
// one caller's request (its context, say): the callers that share it may
// go before it ends. A probe that panics leaves no answer, and its waiters
// probe again.
func (c *Cache[T]) Get(ttl time.Duration, probe func() T) T {
	c.mu.Lock()
	for {
		if !c.at.IsZero() && time.Since(c.at) < ttl {
			answer := c.answer
			c.mu.Unlock()
			return answer
		}
		if c.running == nil {
			break
		}
		done := c.running
		c.mu.Unlock()
		<-done
		c.mu.Lock()
	}
	done := make(chan struct{})
	c.running = done
	c.mu.Unlock()
	ended := false
	defer func() {
		c.mu.Lock()
		if ended {
			c.at = time.Now()
		}
		c.running = nil
		c.mu.Unlock()
		close(done)
	}()
	answer := probe()
	c.mu.Lock()
	c.answer, ended = answer, true
	c.mu.Unlock()
	return answer
}
