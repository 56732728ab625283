// Package probe serves the two probes an orchestrator asks an instance:
// GET /livez, whether the process serves HTTP at all, and GET /readyz,
// whether it should be sent traffic. They are apart because the answers
// differ exactly when it matters: a draining instance, or one whose
// database is away, must leave the load balancer (not ready) without being
// restarted (still live), which /health, 503 while draining, cannot say.
package probe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// Paths of the probes.
const (
	LivePath  = "/livez"
	ReadyPath = "/readyz"
)

// DefaultTimeout bounds the checks of one /readyz: under Kubernetes'
// default timeoutSeconds (1), so that a frozen database makes the probe
// answer 503 with its reason rather than time out without one.
const DefaultTimeout = 800 * time.Millisecond

// Check values: "ok", or "error: " and the reason.
const (
	OK          = "ok"
	errorPrefix = "error: "
)

// Config says what /readyz checks.
type Config struct {
	// Store is the store's probe: one cheap query, which also tells
	// whether its migrations are all applied. Nil (a store that is no
	// instanceai.Prober): no store check.
	Store instanceai.Prober
	// Bus reports why the bus between instances does not work (nil when
	// it works); nil when there is no bus, and then no bus check.
	Bus func() error
	// Draining reports whether the instance drains before a shutdown.
	Draining func() bool
	// Timeout bounds the checks (DefaultTimeout when 0).
	Timeout time.Duration
}

// Probes serves /livez and /readyz.
type Probes struct {
	cfg    Config
	prober instanceai.Prober

	// One storage query at a time: probes that come while one runs wait
	// for its answer, so a database that hangs past the timeout (a driver
	// that does not give up on its context) costs one goroutine, not one
	// per probe.
	mu      sync.Mutex
	running chan struct{} // closed when the query in flight answers
	pending []int64
	err     error
}

// New returns the probes of cfg.
func New(cfg Config) *Probes {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Draining == nil {
		cfg.Draining = func() bool { return false }
	}
	p := &Probes{cfg: cfg, prober: cfg.Store}
	return p
}

// Register mounts both probes on r, which must not require a token:
// neither carries user data, and the kubelet sends none.
func (p *Probes) Register(r *mux.Router) {
	r.HandleFunc(LivePath, p.live).Methods(http.MethodGet)
	r.HandleFunc(ReadyPath, p.ready).Methods(http.MethodGet)
}

// LiveResponse is /livez's answer.
type LiveResponse struct {
	Status string `json:"status"`
}

// live answers 200 for as long as the server takes requests, draining
// included: nothing here depends on storage or the bus, whose outages a
// restart would not cure.
func (p *Probes) live(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	httpjson.Write(w, http.StatusOK, LiveResponse{Status: "alive"})
}

// ReadyResponse is /readyz's answer: Status "ready" or "unready", and
// each check's result, "ok" or "error: <reason>". Checks are storage,
// migrations, bus (only with a bus) and draining.
type ReadyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// Ready runs the checks, within the timeout.
func (p *Probes) Ready(ctx context.Context) ReadyResponse {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	checks := map[string]string{"storage": OK, "migrations": OK, "draining": OK}
	if p.prober != nil {
		pending, err := p.probeStore(ctx)
		switch {
		case err != nil:
			checks["storage"] = errorPrefix + err.Error()
			checks["migrations"] = errorPrefix + "unknown: the storage did not answer"
		case len(pending) > 0:
			checks["migrations"] = errorPrefix + "not applied: " + versions(pending)
		}
	}
	if p.cfg.Bus != nil {
		checks["bus"] = OK
		if err := p.cfg.Bus(); err != nil {
			checks["bus"] = errorPrefix + err.Error()
		}
	}
	if p.cfg.Draining() {
		checks["draining"] = errorPrefix + "draining before a shutdown: no new runs"
	}
	out := ReadyResponse{Status: "ready", Checks: checks}
	for _, v := range checks {
		if v != OK {
			out.Status = "unready"
		}
	}
	return out
}

func (p *Probes) ready(w http.ResponseWriter, r *http.Request) {
	out := p.Ready(r.Context())
	code := http.StatusOK
	if out.Status != "ready" {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	httpjson.Write(w, code, out)
}

// probeStore returns the answer of the storage query in flight, or of a
// new one, or an error once ctx ends first.
func (p *Probes) probeStore(ctx context.Context) ([]int64, error) {
	p.mu.Lock()
	done := p.running
	if done == nil {
		done = make(chan struct{})
		p.running = done
		// The query's own deadline, not the request's: a probe whose
		// client went away must not fail the answer others wait for.
		timeout := p.cfg.Timeout
		go func() {
			qctx, cancel := context.WithTimeout(context.Background(), timeout)
			pending, err := p.prober.Probe(qctx)
			cancel()
			p.mu.Lock()
			p.pending, p.err, p.running = pending, err, nil
			p.mu.Unlock()
			close(done)
		}()
	}
	p.mu.Unlock()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.pending, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer within %v", p.cfg.Timeout)
	}
}

// versions lists migration versions as their files number them.
func versions(vs []int64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%03d", v)
	}
	return strings.Join(s, ", ")
}
