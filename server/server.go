// Package server wires the core, the storage backend, the agent and the HTTP
// APIs into one application, so the command and the end-to-end tests build
// exactly the same thing.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agui/aguihttp"
	"github.com/threadline/threadline/auth"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/httpapi"
	"github.com/threadline/threadline/metrics"
)

// Config is the application's configuration beyond the store and agent.
type Config struct {
	MaxBody         int64
	SubscriberQueue int
	Heartbeat       time.Duration
	Writer          instanceai.WriterConfig
	// Auth authenticates the API's callers; nil (or no tokens) is
	// single-user mode, where every request acts as httpapi.LocalUser.
	Auth   *auth.Authenticator
	Logger *slog.Logger
	// AllowedOrigins are the browser origins CORS admits ("*" for any);
	// none means no CORS headers.
	AllowedOrigins []string
	// AgentName names the agent on /health and /status; an agent with
	// named upstreams (instanceai.NamedAgent) is listed by those names.
	AgentName string
	// LLMHealth, when set, serves GET /llm/health (the openai agent's
	// probe of its model server).
	LLMHealth http.Handler
	// Metrics collects the server's measurements; nil makes a fresh set.
	// Pass one to let the agent report to it too.
	Metrics *metrics.Metrics
}

// Server is the wired application.
type Server struct {
	Store  instanceai.Store
	Hub    *instanceai.Hub
	Writer *instanceai.Writer
	Runs   *instanceai.Runs
	// Metrics are served at /metrics; agents report to them too (the n8n
	// bridge's capture counts).
	Metrics *metrics.Metrics

	handler http.Handler
	logger  *slog.Logger
	// streams is the base context of every request; cancelling it ends the
	// open SSE streams at shutdown.
	streams     context.Context
	stopStreams context.CancelFunc
}

// New wires an application on store with agent.
func New(store instanceai.Store, agent instanceai.Agent, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	s := &Server{Store: store, logger: cfg.Logger, Metrics: cfg.Metrics}
	s.Hub = instanceai.NewHub(cfg.SubscriberQueue)
	wcfg := cfg.Writer
	wcfg.Logger = cfg.Logger
	wcfg.Observer = s.Metrics
	wcfg.OnRunFailed = func(threadID, runID string, err error) { s.Runs.Fail(threadID, runID, err) }
	s.Writer = instanceai.NewWriter(store, s.Hub, wcfg)
	s.Runs = instanceai.NewRuns(s.Writer, agent, instanceai.RunsConfig{Logger: cfg.Logger, Confirmations: store, Observer: s.Metrics})
	s.Metrics.Gauges(s.Hub.Subscribers, s.Runs.Count)

	router := mux.NewRouter()
	// Routes that act for a user are registered on authed; routes that need
	// no caller (a health check, say) go on router itself.
	authed := router.NewRoute().Subrouter()
	authed.Use(cfg.Auth.Middleware)
	native := httpapi.New(store, s.Hub, s.Runs, s.Writer, httpapi.Config{
		MaxBody: cfg.MaxBody, Heartbeat: cfg.Heartbeat, Logger: cfg.Logger,
	})
	native.Register(authed)
	var agents []string
	if named, ok := agent.(instanceai.NamedAgent); ok {
		agents = named.Names()
	} else if cfg.AgentName != "" {
		agents = []string{cfg.AgentName}
	}
	// Metrics carry no user data, but tool names and traffic shape are
	// the operator's business: they sit behind the same tokens as the API.
	authed.Handle("/metrics", s.Metrics.Handler()).Methods(http.MethodGet)
	if cfg.LLMHealth != nil {
		router.Handle("/llm/health", cfg.LLMHealth).Methods(http.MethodGet)
	}
	aguihttp.New(store, s.Hub, s.Runs, aguihttp.Config{
		MaxBody: cfg.MaxBody, Heartbeat: cfg.Heartbeat, Agents: agents, AllowedOrigins: cfg.AllowedOrigins, Logger: cfg.Logger,
		RecordMessage: native.RecordMessage,
	}).Register(authed, router)
	authed.Handle("/agui/threads/{threadId}/events", aguihttp.New(store, s.Hub, s.Runs, aguihttp.Config{Heartbeat: cfg.Heartbeat, Logger: cfg.Logger}).Rejoin()).Methods(http.MethodGet)
	// Only the root router gets these: the authed subrouter matches every
	// path, so a handler of its own would shadow the public routes
	// registered after it.
	router.NotFoundHandler = unmatched(router)
	router.MethodNotAllowedHandler = router.NotFoundHandler
	s.handler = aguihttp.CORS(cfg.AllowedOrigins, router)
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	return s
}

// Recover settles the runs a crashed process left open (see Runs.Sweep).
// Call it once at start, before serving.
func (s *Server) Recover(ctx context.Context) error {
	n, err := s.Runs.Sweep(ctx, s.Store)
	if n > 0 {
		s.logger.Info("settled runs left open by a previous process", "runs", n)
	}
	return err
}

// Handler returns the HTTP handler. Requests served by it see their context
// cancelled when Shutdown begins.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		stop := context.AfterFunc(s.streams, func() { cancel(instanceai.ErrShuttingDown) })
		defer stop()
		s.handler.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Serve serves on ln until ctx ends, then shuts down gracefully within
// timeout.
func (s *Server) Serve(ctx context.Context, ln net.Listener, timeout time.Duration) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Stop taking requests while the streams still run, so that the runs'
	// cancellations reach the clients before their streams end.
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	var errs []error
	if err := s.Shutdown(sctx); err != nil {
		errs = append(errs, err)
	}
	if err := <-shut; err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Shutdown cancels active runs (run-finish cancelled, reason
// service_shutdown; runs waiting for approval stay suspended), flushes every
// open segment to the log and then ends the open streams, which by then
// carry each run's last events. It does not close the store.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	if err := s.Runs.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("runs shutdown: %w", err))
	}
	if err := s.Writer.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	s.stopStreams()
	return errors.Join(errs...)
}
