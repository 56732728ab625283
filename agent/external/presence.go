package external

import (
	"sync"
	"time"
)

// presence is whether a run's producer is there: it attached, and it sent
// a request within the lease or has one under way (an open NDJSON append,
// a long poll for an answer).
type presence struct {
	lease time.Duration

	mu   sync.Mutex
	busy int
	// renewed is signalled by each request's start and end.
	renewed chan struct{}
	// attached is closed by the producer's first request; a run the
	// external agent was given waits for it.
	attached chan struct{}
	attach   sync.Once
}

func newPresence(lease time.Duration) *presence {
	return &presence{lease: lease, renewed: make(chan struct{}, 1), attached: make(chan struct{})}
}

// touch renews the lease.
func (pr *presence) touch() {
	select {
	case pr.renewed <- struct{}{}:
	default:
	}
}

// hold marks a request under way until release; the first attaches the
// producer to its run.
func (pr *presence) hold() (release func()) {
	pr.markAttached()
	pr.mu.Lock()
	pr.busy++
	pr.mu.Unlock()
	pr.touch()
	return func() {
		pr.mu.Lock()
		pr.busy--
		pr.mu.Unlock()
		pr.touch()
	}
}

func (pr *presence) markAttached() { pr.attach.Do(func() { close(pr.attached) }) }

// underWay reports whether a request is under way: the producer is there
// however long it lasts.
func (pr *presence) underWay() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.busy > 0
}
