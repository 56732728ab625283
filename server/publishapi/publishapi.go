// Package publishapi lets an agent that runs outside Threadline (a worker
// in any language) stream a run into a thread over HTTP: it starts the
// run, appends native Instance AI events to it, asks for approvals and
// finishes it, and Threadline stores, orders and serves them as it does a
// built-in agent's.
//
// Appends are idempotent, as Durable Streams' producers are: each carries
// a producer id, an epoch and the sequence number of its first event
// (Producer-Id, Producer-Epoch, Producer-Seq). Events already stored are
// acknowledged again and not stored twice, a gap is refused with the
// sequence expected, and a producer of an older epoch is fenced off.
//
// A run belongs to the instance that started it: its producer appends
// there, and a producer silent longer than its lease is taken for gone
// (the run ends in error, as a crashed agent's would).
package publishapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// Prefix is where the publish API is served.
const Prefix = "/publish"

// DefaultLease is how long a run waits for its producer's next request.
const DefaultLease = 30 * time.Second

// Config configures the API.
type Config struct {
	// MaxBody bounds a JSON append (httpjson.DefaultMaxBody when 0); an
	// NDJSON append bounds each line by it instead.
	MaxBody int64
	// Producers is the registry of the runs producers drive here, shared
	// with the external agent (NewProducers(DefaultLease) when nil).
	Producers *Producers
}

// API serves the publish routes.
type API struct {
	core *instanceai.Core
	cfg  Config
	ps   *Producers
}

// New returns the API.
func New(core *instanceai.Core, cfg Config) *API {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpjson.DefaultMaxBody
	}
	if cfg.Producers == nil {
		cfg.Producers = NewProducers(DefaultLease)
	}
	return &API{core: core, cfg: cfg, ps: cfg.Producers}
}

// Register mounts the routes on the router of authenticated routes.
func (a *API) Register(authed *mux.Router) {
	p := Prefix + "/threads/{threadId}/runs"
	authed.HandleFunc(p, a.start).Methods(http.MethodPost)
	authed.HandleFunc(p+"/{runId}/attach", a.attach).Methods(http.MethodPost)
	authed.HandleFunc(p+"/{runId}/events", a.appendEvents).Methods(http.MethodPost)
	authed.HandleFunc(p+"/{runId}/confirm", a.confirm).Methods(http.MethodPost)
	authed.HandleFunc(p+"/{runId}/finish", a.finish).Methods(http.MethodPost)
}

// Producers is the registry of the runs producers drive on this instance.
type Producers struct {
	lease time.Duration

	mu   sync.Mutex
	runs map[string]*producer
}

// NewProducers returns a registry whose runs wait lease for their
// producer's next request (DefaultLease when 0).
func NewProducers(lease time.Duration) *Producers {
	if lease <= 0 {
		lease = DefaultLease
	}
	return &Producers{lease: lease, runs: map[string]*producer{}}
}

func (ps *Producers) newProducer() *producer {
	return &producer{lease: ps.lease, seen: make(chan struct{}, 1), finish: make(chan error, 1), attached: make(chan struct{})}
}

// track registers p as its run's producer until a lease after the run
// ends: meanwhile the producer's late requests are told the run is over,
// and why.
func (ps *Producers) track(p *producer) {
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

func (ps *Producers) get(runID string) *producer {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.runs[runID]
}

// Agent returns the external agent (--agent external): a run it is given
// (a chat's) waits up to startTimeout for a producer to attach to it
// through the publish API, and is then the producer's to drive.
func (ps *Producers) Agent(startTimeout time.Duration) instanceai.Agent {
	return instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		p := ps.newProducer()
		p.run = run
		ps.track(p)
		t := time.NewTimer(startTimeout)
		defer t.Stop()
		select {
		case <-p.attached:
			return p.Run(ctx, run)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return &instanceai.ProviderError{Code: "producer_missing",
				Message: "no producer attached to the run within " + startTimeout.String()}
		}
	})
}

// producer is a run that a producer drives: the state of its appends, and
// what the run's agent (producer.Run) waits on.
type producer struct {
	run   *instanceai.Run
	lease time.Duration

	// mu serialises appends: the sequence is the run's.
	mu    sync.Mutex
	id    string
	epoch int64
	next  int64
	// segments are the responseIds given to the producer's deltas that
	// came without one, by agent and kind (see segmentID).
	segments map[segmentKey]segment

	// busy counts requests under way (an open NDJSON append, a long-poll
	// for an answer): while one is, the producer is there.
	busy int
	// cancelled is set when the run's cancel ended it: later appends are
	// refused as cancelled, not only as finished.
	cancelled bool
	seen      chan struct{}
	finish    chan error
	once      sync.Once
	// attached is closed by the producer's first request; a run the
	// external agent was given waits for it.
	attached chan struct{}
	attach   sync.Once
}

// Run is the run's agent: it waits for the producer to finish the run,
// for the run's end (a cancel), or for the lease to run out.
func (p *producer) Run(ctx context.Context, _ *instanceai.Run) error {
	t := time.NewTimer(p.lease)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			p.mu.Lock()
			p.cancelled = instanceai.IsCancelled(cause)
			p.mu.Unlock()
			return cause
		case err := <-p.finish:
			return err
		case <-p.seen:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(p.lease)
		case <-t.C:
			p.mu.Lock()
			busy := p.busy > 0
			p.mu.Unlock()
			if busy {
				t.Reset(p.lease)
				continue
			}
			return &instanceai.ProviderError{Code: "producer_gone",
				Message: "the run's producer sent nothing for " + p.lease.String() + ": it is taken for gone"}
		}
	}
}

// touch renews the lease.
func (p *producer) touch() {
	select {
	case p.seen <- struct{}{}:
	default:
	}
}

// hold marks a request under way until release; the first attaches the
// producer to its run.
func (p *producer) hold() (release func()) {
	p.attach.Do(func() { close(p.attached) })
	p.mu.Lock()
	p.busy++
	p.mu.Unlock()
	p.touch()
	return func() {
		p.mu.Lock()
		p.busy--
		p.mu.Unlock()
		p.touch()
	}
}

// lookup finds the caller's run that a producer drives on this instance.
func (a *API) lookup(r *http.Request) (*producer, error) {
	vars := mux.Vars(r)
	ctx := r.Context()
	if _, err := a.core.Thread(ctx, vars["threadId"], userFrom(r)); err != nil {
		return nil, err
	}
	p := a.ps.get(vars["runId"])
	if p == nil || p.run.ThreadID != vars["threadId"] {
		row, err := a.core.ClaimedRun(ctx, vars["threadId"])
		if err == nil && row.RunID == vars["runId"] && row.Owner != "" && row.Owner != a.core.Instance() {
			// A load balancer sent the producer to an instance that does
			// not hold its run: it is to try the one that does.
			return nil, httpjson.NewError(http.StatusConflict, "run_on_another_instance", "runId",
				"run %q of thread %q is driven from another instance (%s): a producer appends to the instance that started its run; route its requests there (by thread or by run)",
				vars["runId"], vars["threadId"], row.Owner)
		}
		return nil, httpjson.NewError(http.StatusNotFound, "run_not_found", "runId",
			"no producer drives a run %q of thread %q: it ended (finished, cancelled, or settled after its instance or producer was gone), never began, or is an agent's",
			vars["runId"], vars["threadId"])
	}
	return p, nil
}

// errCancelled is an append to a run a cancel ended.
var errCancelled = errors.New("the run was cancelled")

// runError turns what Emit or Confirm refused into the answer a producer
// acts on.
func runError(err error) error {
	if errors.Is(err, errCancelled) {
		return httpjson.NewError(http.StatusConflict, "run_cancelled", "runId", "the run was cancelled")
	}
	switch {
	case errors.Is(err, instanceai.ErrRunFinished):
		return httpjson.NewError(http.StatusConflict, "run_finished", "runId", "the run has finished")
	case errors.Is(err, context.Canceled) || instanceai.IsCancelled(err):
		return httpjson.NewError(http.StatusConflict, "run_cancelled", "runId", "the run was cancelled: %v", err)
	}
	return err
}

// segmentKey names an agent's run of text or of reasoning.
type segmentKey struct {
	agent string
	kind  instanceai.EventType
}

// segment is the responseId given to a segment and its last delta's time.
type segment struct {
	id   string
	last time.Time
}

// segmentQuiet is how long a producer's segment may go without a delta
// before its next delta begins another: well within the writer's silence
// that closes a segment (instanceai.WriterConfig.IdleFlush, 3 s), so that
// a block the writer closes for silence is never followed by more text
// under its responseId.
const segmentQuiet = time.Second

// segmentID gives a delta that came without a responseId the one of its
// segment, which runs until the agent's next stored event or a second of
// silence: "{runId}:p:{seq}", seq the producer's sequence number of the
// segment's first delta. Without one, a client holding a segment's deltas
// that is then sent its block (a reconnection after the segment closed, or
// a gap in the deltas) could not tell that the block replaces them, and
// would show the text twice (n8n's reducer appends a block without a
// responseId). Call it with p.mu held.
func (p *producer) segmentID(ev *instanceai.Event) {
	switch ev.Type {
	case instanceai.TypeTextDelta, instanceai.TypeReasoningDelta:
		if ev.ResponseID != "" {
			return
		}
		k := segmentKey{ev.AgentID, ev.Type}
		now := time.Now()
		seg, ok := p.segments[k]
		if !ok || now.Sub(seg.last) > segmentQuiet {
			seg.id = fmt.Sprintf("%s:p:%d", p.run.ID, p.next)
		}
		seg.last = now
		if p.segments == nil {
			p.segments = map[segmentKey]segment{}
		}
		p.segments[k] = seg
		ev.ResponseID = seg.id
	default:
		if instanceai.DurabilityOf(ev.Type) == instanceai.Structural {
			// The writer closes the agent's segments here.
			for k := range p.segments {
				if k.agent == ev.AgentID {
					delete(p.segments, k)
				}
			}
		}
	}
}
