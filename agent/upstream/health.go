package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/threadline/threadline/agent/internal/endpoint"
)

// UpstreamHealth is one upstream's line in /llm/health.
type UpstreamHealth struct {
	Name string `json:"name"`
	// URL is the endpoint without credentials or query.
	URL       string `json:"url"`
	Reachable bool   `json:"reachable"`
	// StatusCode is the HTTP status of the probe (any answer means the
	// server is up: an AG-UI endpoint answers only POSTs properly).
	StatusCode     int      `json:"statusCode,omitempty"`
	ResponseTimeMS *float64 `json:"responseTimeMs,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// Health is the body of /llm/health for this agent.
type Health struct {
	// Status is available (every upstream answered), degraded (some did)
	// or unavailable (none did; the answer is 503).
	Status    string           `json:"status"`
	Agent     string           `json:"agent"`
	Upstreams []UpstreamHealth `json:"upstreams"`
	Timestamp string           `json:"timestamp"`
}

// Upstream states, as Reachability reports them.
const (
	StateReady       = "ready"
	StateUnreachable = "unreachable"
	StateUnknown     = "unknown"
)

// reachability keeps what the last request or probe found of each
// upstream.
type reachability struct {
	mu    sync.Mutex
	state map[string]string
}

func (r *reachability) set(name string, reachable bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == nil {
		r.state = map[string]string{}
	}
	r.state[name] = StateUnreachable
	if reachable {
		r.state[name] = StateReady
	}
}

// Reachability reports each upstream as the last run's request or health
// probe found it: ready (it answered HTTP), unreachable (it could not be
// reached in time), unknown (not asked yet). /status shows it.
func (a *Agent) Reachability() map[string]string {
	a.seen.mu.Lock()
	defer a.seen.mu.Unlock()
	out := make(map[string]string, len(a.upstreams))
	for _, u := range a.upstreams {
		out[u.Name] = StateUnknown
		if s := a.seen.state[u.Name]; s != "" {
			out[u.Name] = s
		}
	}
	return out
}

// Probe asks every upstream at once whether it answers HTTP: a GET of its
// URL with the configured headers, within the health timeout.
func (a *Agent) Probe(ctx context.Context) Health {
	h := Health{Agent: "ag-ui", Upstreams: make([]UpstreamHealth, len(a.upstreams))}
	var wg sync.WaitGroup
	for i, up := range a.upstreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Upstreams[i] = a.probe(ctx, up)
		}()
	}
	wg.Wait()
	up := 0
	for _, u := range h.Upstreams {
		if u.Reachable {
			up++
		}
	}
	switch up {
	case len(h.Upstreams):
		h.Status = "available"
	case 0:
		h.Status = "unavailable"
	default:
		h.Status = "degraded"
	}
	h.Timestamp = time.Now().UTC().Format(time.RFC3339)
	return h
}

func (a *Agent) probe(ctx context.Context, up Upstream) UpstreamHealth {
	out := UpstreamHealth{Name: up.Name, URL: endpoint.Redact(up.URL)}
	ctx, cancel := context.WithTimeout(ctx, a.healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
	if err != nil {
		out.Error = scrub(err.Error(), up.URL)
		return out
	}
	for k, vs := range a.conn.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	started := time.Now()
	resp, err := a.conn.Client.Do(req)
	a.seen.set(up.Name, err == nil)
	if err != nil {
		out.Error = scrub(err.Error(), up.URL)
		return out
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	ms := float64(time.Since(started).Microseconds()) / 1000
	out.Reachable, out.StatusCode, out.ResponseTimeMS = true, resp.StatusCode, &ms
	return out
}

// HealthHandler serves GET /llm/health: each upstream's reachability, 503
// when none answers. The endpoint is public and each answer is a request
// to every upstream, so the answer is that of a probe at most
// Config.HealthCacheTTL old (its timestamp says when it ran), and requests
// that come while a probe runs wait for it, as the openai agent's do.
func (a *Agent) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// On a context of its own: the requests that share the probe may
		// go before it ends.
		h := a.health.Get(a.healthTTL, func() Health { return a.Probe(context.Background()) })
		status := http.StatusOK
		if h.Status == "unavailable" {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(h)
		}
	})
}
