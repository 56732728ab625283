// Package builderapi serves the N8N Builder's standard REST API: generate,
// modify and iterate a workflow as an SSE stream (each a run on the core,
// rendered by mapping.InstanceToBuilder), validate a workflow, the
// iteration and feedback history, and projects with their workflow files
// and versions (builder.Store). Everything is owned per user, like
// threads.
package builderapi

import (
	"log/slog"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/ssestream"
)

// Config tunes the builder API.
type Config struct {
	// MaxBody is the request body limit in bytes; larger bodies get 413.
	MaxBody int64
	// Heartbeat is the pause between `: ping` comments on a stream.
	Heartbeat time.Duration
	// OperationTimeout bounds one generate, modify or iterate (the seed's
	// 45 s for LLM operations).
	OperationTimeout time.Duration
	Logger           *slog.Logger
}

// DefaultOperationTimeout is the seed's timeout for LLM operations.
const DefaultOperationTimeout = 45 * time.Second

// API is the builder's HTTP surface.
type API struct {
	core     *instanceai.Core
	store    builder.Store
	builder  op.Builder
	validate op.Validator
	cfg      Config
	activity op.Activity
}

// Tasks returns the builder's agents with the operations and steps each
// is working on in this process (for /status).
func (a *API) Tasks() map[string]int { return a.activity.Tasks() }

// New returns the API over the core, keeping its projects and history in
// store, building with b and validating with v.
func New(core *instanceai.Core, store builder.Store, b op.Builder, v op.Validator, cfg Config) *API {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpjson.DefaultMaxBody
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = ssestream.DefaultHeartbeat
	}
	if cfg.OperationTimeout <= 0 {
		cfg.OperationTimeout = DefaultOperationTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &API{core: core, store: store, builder: b, validate: v, cfg: cfg}
}

// Register mounts the routes on r (which authenticates the caller).
func (a *API) Register(r *mux.Router) {
	a.registerOperations(r)
	a.registerProjects(r)
}
