// Package external is the producer domain of the publish API: runs that
// a producer outside Threadline (a worker in any language) drives. It
// keeps the registry of those runs on this instance, their appends'
// order, and the producer's lease, and offers the external agent
// (--agent external), whose runs wait for a producer to attach.
//
// Appends are idempotent, as Durable Streams' producers are: each carries
// a producer id, an epoch and the sequence number of its first event.
// Events already stored are acknowledged again and not stored twice, a
// gap is refused with the sequence expected, and a producer of an older
// epoch is fenced off.
//
// A run belongs to the instance that started it: its producer appends
// there, and a producer silent longer than its lease is taken for gone
// (the run ends in error, as a crashed agent's would).
//
// The package speaks in domain errors (errors.go); the HTTP surface
// (server/publishapi) decodes requests and answers them.
package external

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// DefaultLease is how long a run waits for its producer's next request.
const DefaultLease = 30 * time.Second

// Producers is the registry of the runs producers drive on this instance.
type Producers struct {
	lease time.Duration

	mu   sync.Mutex
	runs map[string]*Producer
}

// NewProducers returns a registry whose runs wait lease for their
// producer's next request (DefaultLease when 0).
func NewProducers(lease time.Duration) *Producers {
	if lease <= 0 {
		lease = DefaultLease
	}
	return &Producers{lease: lease, runs: map[string]*Producer{}}
}

// Lease is how long a run waits for its producer's next request.
func (ps *Producers) Lease() time.Duration { return ps.lease }

// Start begins a run that the caller's producer drives: begin starts it
// with work as its agent (a chat's or a bare run, as the caller chooses).
// A start retried with the runId of a run that a producer drives here
// already (its answer was lost) finds that run: again is then set.
func (ps *Producers) Start(runID string, begin func(work instanceai.Agent) (*instanceai.Run, error)) (p *Producer, again bool, err error) {
	p = newProducer(ps.lease)
	p.presence.markAttached()
	run, err := begin(instanceai.AgentFunc(p.drive))
	var active *instanceai.RunActiveError
	if errors.As(err, &active) && runID != "" && active.RunID == runID {
		if p := ps.get(runID); p != nil {
			return p, true, nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	p.run = run
	ps.track(p)
	return p, false, nil
}

// Find returns the producer of run runID of thread threadID on this
// instance, or *RunNotFoundError.
func (ps *Producers) Find(threadID, runID string) (*Producer, error) {
	p := ps.get(runID)
	if p == nil || p.run.ThreadID != threadID {
		return nil, &RunNotFoundError{ThreadID: threadID, RunID: runID}
	}
	return p, nil
}

// Agent returns the external agent (--agent external): a run it is given
// (a chat's) waits up to startTimeout for a producer to attach to it (its
// first request, Producer.Hold), and is then the producer's to drive.
func (ps *Producers) Agent(startTimeout time.Duration) instanceai.Agent {
	return instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		p := newProducer(ps.lease)
		p.run = run
		ps.track(p)
		t := time.NewTimer(startTimeout)
		defer t.Stop()
		select {
		case <-p.presence.attached:
			return p.drive(ctx, run)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return &instanceai.ProviderError{Code: "producer_missing",
				Message: "no producer attached to the run within " + startTimeout.String()}
		}
	})
}

// track registers p as its run's producer until a lease after the run
// ends: meanwhile the producer's late requests are told the run is over,
// and why.
func (ps *Producers) track(p *Producer) {
	ps.mu.Lock()
	ps.runs[p.run.ID] = p
	ps.mu.Unlock()
	go func() {
		<-p.run.Done()
		time.AfterFunc(ps.lease, func() {
			ps.mu.Lock()
			delete(ps.runs, p.run.ID)
			ps.mu.Unlock()
		})
	}()
}

func (ps *Producers) get(runID string) *Producer {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.runs[runID]
}
