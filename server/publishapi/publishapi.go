// Package publishapi lets an agent that runs outside Threadline (a worker
// in any language) stream a run into a thread over HTTP: it starts the
// run, appends native Instance AI events to it, asks for approvals and
// finishes it, and Threadline stores, orders and serves them as it does a
// built-in agent's.
//
// The producer domain (the registry of the runs producers drive, their
// idempotent appends, epochs and leases, the external agent) is
// agent/external's; this package decodes the requests, routes them, and
// answers the domain's errors in HTTP (errors.go).
package publishapi

import (
	"errors"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// Prefix is where the publish API is served.
const Prefix = "/publish"

// Config configures the API.
type Config struct {
	// MaxBody bounds a JSON append (httpjson.DefaultMaxBody when 0); an
	// NDJSON append bounds each line by it instead.
	MaxBody int64
	// Producers is the registry of the runs producers drive here, shared
	// with the external agent (external.NewProducers(external.DefaultLease)
	// when nil).
	Producers *external.Producers
}

// API serves the publish routes.
type API struct {
	core *instanceai.Core
	cfg  Config
	ps   *external.Producers
}

// New returns the API.
func New(core *instanceai.Core, cfg Config) *API {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpjson.DefaultMaxBody
	}
	if cfg.Producers == nil {
		cfg.Producers = external.NewProducers(external.DefaultLease)
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

// lookup finds the caller's run that a producer drives on this instance.
func (a *API) lookup(r *http.Request) (*external.Producer, error) {
	vars := mux.Vars(r)
	ctx := r.Context()
	if _, err := a.core.Thread(ctx, vars["threadId"], userFrom(r)); err != nil {
		return nil, err
	}
	p, err := a.ps.Find(vars["threadId"], vars["runId"])
	if errors.Is(err, external.ErrRunNotFound) {
		row, aerr := a.core.ClaimedRun(ctx, vars["threadId"])
		if aerr == nil && row.RunID == vars["runId"] && row.Owner != "" && row.Owner != a.core.Instance() {
			// A load balancer sent the producer to an instance that does
			// not hold its run: it is to try the one that does.
			err = &external.RunOnAnotherInstanceError{ThreadID: vars["threadId"], RunID: vars["runId"], Instance: row.Owner}
		}
	}
	return p, producerError(err)
}
