// Package server wires the core, the storage backend, the agent and the HTTP
// APIs into one application, so the command and the end-to-end tests build
// exactly the same thing.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/internal/proc"
	"github.com/threadline/threadline/internal/tracing"
	"github.com/threadline/threadline/internal/version"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/metrics"
	"github.com/threadline/threadline/server/accesslog"
	"github.com/threadline/threadline/server/aguiapi"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/builderapi"
	"github.com/threadline/threadline/server/connlimit"
	"github.com/threadline/threadline/server/console"
	"github.com/threadline/threadline/server/copilotkitapi"
	"github.com/threadline/threadline/server/cors"
	"github.com/threadline/threadline/server/guard"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/server/httpmetrics"
	"github.com/threadline/threadline/server/nativeapi"
	"github.com/threadline/threadline/server/openapi"
	"github.com/threadline/threadline/server/probe"
	"github.com/threadline/threadline/server/publishapi"
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/catalog"
	"github.com/threadline/threadline/workflow/validate"
)

// DefaultHistoryMaxBytes is what Config.HistoryMaxBytes is when 0.
const DefaultHistoryMaxBytes = history.DefaultMaxBytes

// Config is the application's configuration beyond the store and agent.
type Config struct {
	MaxBody int64
	// ChatMaxBody is the body limit of the requests that start a run with
	// a user message, which may carry files (0: httpjson.DefaultChatMaxBody).
	ChatMaxBody     int64
	SubscriberQueue int
	// SubscriberQueueBytes bounds a subscriber's queue in bytes (0: the
	// hub's default).
	SubscriberQueueBytes int
	// Hub, when set, is the hub the core fans live frames out through;
	// nil makes one of SubscriberQueue frames. Pass one to publish to it
	// or subscribe to it directly, as tests do.
	Hub *instanceai.Hub
	// HistoryMaxBytes bounds what one /messages page or AG-UI snapshot of
	// a conversation holds past its newest message (0: the default).
	HistoryMaxBytes int
	Heartbeat       time.Duration
	// StreamWriteTimeout is how long one write to a native or AG-UI event
	// stream may wait for a client that does not read before the stream
	// is closed (0: ssestream.DefaultWriteTimeout).
	StreamWriteTimeout time.Duration
	Writer             instanceai.WriterConfig
	// Limits bound the events producers hand in (zero: the defaults).
	Limits instanceai.Limits
	// Auth authenticates the API's callers; nil (or no tokens) is
	// single-user mode, where every request acts as auth.LocalUser.
	Auth   *auth.Authenticator
	Logger *slog.Logger
	// AllowedOrigins are the browser origins CORS admits ("*" for any);
	// none means no CORS headers. They are also the origins besides the
	// server's own whose requests may change state (see server/guard).
	AllowedOrigins []string
	// CheckHost refuses requests whose Host is not a loopback name or one
	// of AllowedHosts (DNS rebinding): for single-user mode, where nothing
	// else stops a page on another site from reaching the server through
	// a browser on this machine.
	CheckHost    bool
	AllowedHosts []string
	// AgentName names the agent on /health and /status; an agent with
	// named upstreams (instanceai.NamedAgent) is listed by those names.
	AgentName string
	// CopilotKitPath is where CopilotKit's runtime protocol is served
	// (copilotkitapi.DefaultBase when "").
	CopilotKitPath string
	// Producers is the registry of the runs external producers drive
	// through the publish API, shared with the external agent (one with
	// external.DefaultLease when nil).
	Producers *external.Producers
	// LLMHealth, when set, serves GET /llm/health (the openai agent's
	// probe of its model server); without it /llm/health answers 503,
	// naming AgentName as an agent without an LLM.
	LLMHealth http.Handler
	// MCPStatus, when set, reports the MCP servers of the agent's tools
	// on /status as mcp_servers.
	MCPStatus func() any
	// Metrics collects the server's measurements; nil makes a fresh set.
	// Pass one to let the agent report to it too.
	Metrics *metrics.Metrics
	// Bus carries live frames and control messages between the instances
	// that share the store; nil when this process is alone.
	Bus instanceai.Bus
	// Instance names this process among them (a random id when empty).
	Instance string
	// Lease is how long a run stays claimed without a heartbeat, and
	// LeaseRenew how often the heartbeat renews it and the sweep looks for
	// runs of dead instances (defaults 10 s and 2 s).
	Lease      time.Duration
	LeaseRenew time.Duration
	// PollInterval is how often the head check reads the log's head of the
	// threads streamed here that went quiet, to deliver what the bus lost
	// (default 1 s; see instanceai.Cluster).
	PollInterval time.Duration
	// BusBroadcast sends every thread's frames to every instance instead
	// of to those that serve the thread (see instanceai.ClusterConfig).
	BusBroadcast bool
	// Catalog, when set, is n8n's node catalog the builder validates
	// workflows against (node types, versions, required parameters).
	Catalog *catalog.Catalog
	// BuilderTimeout bounds one builder operation (default 45 s).
	BuilderTimeout time.Duration
	// Tracing gives every request a server span (see internal/tracing,
	// whose Setup must have installed the tracer provider). Off, the
	// handler is not wrapped at all.
	Tracing bool
}

// The metrics take the HTTP side's measurements.
var _ httpmetrics.Recorder = (*metrics.Metrics)(nil)

// DefaultLeaseRenew is how often a run's lease is renewed.
const DefaultLeaseRenew = 2 * time.Second

// Server is the wired application.
type Server struct {
	// Core is the engine, for the command and the tests: the surfaces
	// were each given it, and its parts are its own.
	*instanceai.Core
	// Metrics are served at /metrics; agents report to them too (the n8n
	// bridge's capture counts).
	Metrics *metrics.Metrics

	handler http.Handler
	// router holds the routes, for Routes.
	router *mux.Router
	logger *slog.Logger
	// streams is the base context of every request; cancelling it ends the
	// open SSE streams at shutdown.
	streams     context.Context
	stopStreams context.CancelFunc
	// native serves the native event streams, which Shutdown ends too:
	// they outlive their requests (see nativeapi's hijacked streams).
	native *nativeapi.API

	leaseRenew time.Duration
}

// New wires an application on store with agent.
func New(store instanceai.Store, agent instanceai.Agent, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	s := &Server{logger: cfg.Logger, Metrics: cfg.Metrics}
	if cfg.LeaseRenew <= 0 {
		cfg.LeaseRenew = DefaultLeaseRenew
	}
	s.leaseRenew = cfg.LeaseRenew
	s.Core = instanceai.NewCore(store, agent, instanceai.CoreConfig{SubscriberQueue: cfg.SubscriberQueue, SubscriberQueueBytes: cfg.SubscriberQueueBytes, Hub: cfg.Hub, Writer: cfg.Writer, Limits: cfg.Limits,
		Bus: cfg.Bus, Instance: cfg.Instance, Lease: cfg.Lease, PollInterval: cfg.PollInterval, BusBroadcast: cfg.BusBroadcast, Logger: cfg.Logger, Observer: s.Metrics,
		Expired: interruptExpired})
	s.Metrics.Gauges(s.Subscribers, s.ActiveRuns)
	s.Metrics.DefaultAgent(cfg.AgentName)

	// No path cleaning: mux would answer a path with dot segments
	// ("..%2F", "/./") with a 301 to the cleaned one, keeping the method
	// and the query, so a DELETE …/versions/..%2F..%2Fx.json?confirm=true
	// followed by a client would delete another resource. Uncleaned, such
	// a path reaches the handlers, whose name and id rules refuse it.
	router := mux.NewRouter().SkipClean(true)
	// Routes that act for a user are registered on authed; routes that need
	// no caller (a health check, say) go on router itself.
	authed := router.NewRoute().Subrouter()
	guardCfg := guard.Config{CheckHost: cfg.CheckHost, AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins,
		AnyHostPaths: []string{probe.LivePath, probe.ReadyPath}}
	if cfg.CopilotKitPath == "" {
		cfg.CopilotKitPath = copilotkitapi.DefaultBase
	}
	cfg.Auth.LogTo(cfg.Logger)
	authed.Use(cfg.Auth.Middleware, auth.Gate(routeNeed(cfg.CopilotKitPath)), guard.Requests(guardCfg))
	if cfg.ChatMaxBody <= 0 {
		cfg.ChatMaxBody = httpjson.DefaultChatMaxBody
	}
	s.native = nativeapi.New(s.Core, nativeapi.Config{MaxBody: cfg.MaxBody, ChatMaxBody: cfg.ChatMaxBody, Heartbeat: cfg.Heartbeat, Logger: cfg.Logger,
		MessagesMaxBytes: cfg.HistoryMaxBytes, WriteTimeout: cfg.StreamWriteTimeout})
	s.native.Register(authed)
	publishapi.New(s.Core, publishapi.Config{MaxBody: cfg.MaxBody, Producers: cfg.Producers}).Register(authed)
	var agents []string
	if named, ok := agent.(instanceai.NamedAgent); ok {
		agents = named.Names()
	} else if cfg.AgentName != "" {
		agents = []string{cfg.AgentName}
	}
	// Metrics carry no user data, but tool names and traffic shape are
	// the operator's business: they sit behind the same tokens as the API.
	authed.Handle("/metrics", s.Metrics.Handler()).Methods(http.MethodGet)
	var tasks func() map[string]int
	if bstore, ok := store.(builder.Store); ok {
		// The agent's builder side, if it has one; without it the
		// operations answer 501 and the projects still work.
		b, _ := agent.(op.Builder)
		opts := validate.Options{Catalog: cfg.Catalog}
		check := func(doc []byte) (any, []workflow.ErrorDetail) {
			r := validate.Validate(doc, opts)
			return r, r.Errors
		}
		bapi := builderapi.New(s.Core, bstore, b, check, builderapi.Config{MaxBody: cfg.MaxBody, Heartbeat: cfg.Heartbeat,
			OperationTimeout: cfg.BuilderTimeout, Logger: cfg.Logger})
		bapi.Register(authed)
		tasks = bapi.Tasks
	} else {
		cfg.Logger.Warn("the store keeps no builder data; the builder API is off")
	}
	var agentStatus func() map[string]string
	if r, ok := agent.(interface{ Reachability() map[string]string }); ok {
		agentStatus = r.Reachability
	}
	runs := aguiapi.New(s.Core, aguiapi.Config{
		MaxBody: cfg.ChatMaxBody, Heartbeat: cfg.Heartbeat, Agents: agents, AllowedOrigins: cfg.AllowedOrigins, Logger: cfg.Logger,
		AgentName: cfg.AgentName, LLMHealth: cfg.LLMHealth, Tasks: tasks, HistoryMaxBytes: cfg.HistoryMaxBytes, AgentStatus: agentStatus,
		MCPStatus: cfg.MCPStatus, WriteTimeout: cfg.StreamWriteTimeout,
	})
	runs.Register(authed, router)
	var named []string
	if n, ok := agent.(instanceai.NamedAgent); ok {
		named = n.Names()
	}
	copilotkitapi.New(s.Core, runs, copilotkitapi.Config{Base: cfg.CopilotKitPath, Version: version.String(), MaxBody: cfg.ChatMaxBody,
		Agent: cfg.AgentName, Named: named}).Register(authed)
	// The probes are public, like /health: an orchestrator sends no token.
	var busCheck func() error
	if s.Clustered() {
		busCheck = s.BusHealth
	}
	prober, _ := store.(instanceai.Prober)
	probe.New(probe.Config{Store: prober, Bus: busCheck, Draining: s.Draining}).Register(router)
	// The API's description is public, like /health: clients read it
	// before they have a token.
	router.Handle(openapi.Path, openapi.Handler(version.String())).Methods(http.MethodGet)
	// The console's files are public: they carry no user data, and the
	// page's API calls carry the user's token.
	console.Register(router)
	// Only the root router gets these: the authed subrouter matches every
	// path, so a handler of its own would shadow the public routes
	// registered after it.
	s.router = router
	router.NotFoundHandler = unmatched(router)
	router.MethodNotAllowedHandler = router.NotFoundHandler
	// The metrics name a request by its route's template, which only the
	// router knows: it hands it out through Route, after matching.
	copilotBase := cfg.CopilotKitPath
	if copilotBase == "" {
		copilotBase = copilotkitapi.DefaultBase
	}
	router.Use(httpmetrics.Route(surfaces(copilotBase)))
	if cfg.Tracing {
		router.Use(routeSpan)
	}
	s.handler = accesslog.Middleware(cfg.Logger, httpmetrics.Middleware(s.Metrics,
		cors.Middleware(cfg.AllowedOrigins, guard.Hosts(guardCfg, router))))
	if cfg.Tracing {
		s.handler = tracing.Handler(s.handler)
	}
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	return s
}

// routeSpan names the request's span by the route that matched.
func routeSpan(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cur := mux.CurrentRoute(r); cur != nil {
			if t, err := cur.GetPathTemplate(); err == nil {
				tracing.SetRoute(r.Context(), r.Method, t)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Start begins the core's work beside the requests: the heartbeat that
// renews this instance's run leases and settles the runs of dead
// instances, and the bus listener. Serve calls it; Shutdown ends it.
// Calling it again does nothing.
func (s *Server) Start() { s.Core.Start(s.leaseRenew) }

// Join records this process among the instances on its store and refuses
// to serve beside live instances on another bus (see Core.Join); an
// instance recorded on this host whose process no longer runs is not live.
// Call it once at start, after binding the listener and before Recover.
func (s *Server) Join(ctx context.Context) error {
	host, _ := os.Hostname()
	return s.Core.Join(ctx, host, os.Getpid(), func(o instanceai.Instance) bool { return proc.Gone(host, o.Host, o.PID) })
}

// Recover settles the runs a crashed process left open (see Core.Sweep).
// Call it once at start, after binding the listener (a process that cannot
// bind must not touch runs) and before serving.
func (s *Server) Recover(ctx context.Context) error {
	n, err := s.Sweep(ctx)
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

// ServeOptions says how Serve stops.
type ServeOptions struct {
	// Drain is how long, once ctx ends, the server keeps serving while it
	// refuses new runs (503 server_draining, /health 503) and lets the
	// runs working here finish; 0 skips the drain.
	Drain time.Duration
	// Timeout bounds the shutdown after the drain: the remaining runs'
	// cancellation, the flush of open segments, the end of the streams.
	Timeout time.Duration
	// Force, when it ends during the drain, cuts the drain short (a second
	// Ctrl-C, say).
	Force context.Context
	// Timeouts bound what a client may hold without sending: its request
	// headers, its request body, an idle keep-alive connection.
	Timeouts Timeouts
	// Connections caps the connections held at once (connlimit); those
	// over a cap are answered 503 and closed.
	Connections connlimit.Limits
}

// Timeouts bound the reads of a connection; 0 takes the default. None
// bounds a response: event streams last as long as their clients follow
// them.
type Timeouts struct {
	// ReadHeader bounds the read of a request's headers (default 10 s).
	ReadHeader time.Duration
	// Body bounds the read of a request's body, from the end of its
	// headers (default 30 s). It is lifted once the body is read, so a
	// run's stream on the same request is not cut.
	Body time.Duration
	// Idle is how long a keep-alive connection may wait for its next
	// request (default 60 s).
	Idle time.Duration
}

// The timeouts' defaults.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
)

func (t Timeouts) withDefaults() Timeouts {
	if t.ReadHeader <= 0 {
		t.ReadHeader = DefaultReadHeaderTimeout
	}
	if t.Body <= 0 {
		t.Body = DefaultBodyTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	return t
}

// Serve serves on ln until ctx ends, then drains and shuts down gracefully
// as opts says.
func (s *Server) Serve(ctx context.Context, ln net.Listener, opts ServeOptions) error {
	s.Start()
	t := opts.Timeouts.withDefaults()
	// No ReadTimeout or WriteTimeout: both run from the start of a request
	// to its end, and a stream is a request that does not end. (A read
	// deadline that passes while a handler streams also cancels the
	// request's context, through the server's background read.)
	srv := &http.Server{Handler: bodyDeadline(t.Body, s.Handler()), ReadHeaderTimeout: t.ReadHeader, IdleTimeout: t.Idle}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(httpmetrics.Listen(connlimit.Listen(ln, opts.Connections), s.Metrics)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if opts.Drain > 0 {
		s.drain(opts)
	}
	s.logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
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

// drain refuses new runs and waits, up to opts.Drain or until opts.Force
// ends, for the runs working here to finish; streams and reads go on
// meanwhile, so clients see them end.
func (s *Server) drain(opts ServeOptions) {
	force := opts.Force
	if force == nil {
		force = context.Background()
	}
	dctx, cancel := context.WithTimeout(force, opts.Drain)
	defer cancel()
	s.logger.Info("draining: no new runs; waiting for the runs working here (signal again to stop now)",
		"runs", s.ActiveRuns(), "up_to", opts.Drain)
	if left := s.Drain(dctx); left > 0 {
		s.logger.Warn("drain ended with runs still working; they are cancelled", "runs", left)
	}
}

// Shutdown shuts the core down (Core.Shutdown: active runs cancelled,
// open segments flushed) and then ends the open streams, which by then
// carry each run's last events. It does not close the store.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.Core.Shutdown(ctx)
	s.stopStreams()
	if serr := s.native.Shutdown(ctx); serr != nil {
		err = errors.Join(err, fmt.Errorf("event streams: %w", serr))
	}
	return err
}

// bodyDeadline gives a request with a body d to send it: the connection's
// read deadline, lifted when the body has been read to its end. A client
// that sends its body slowly, or not at all, then loses its connection
// after d instead of holding it.
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts its read deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	lift func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}

// interruptExpired is the core's expiry of a confirmation: an upstream
// AG-UI agent's interrupt carries its expiresAt in the confirmation's args.
func interruptExpired(c *instanceai.Confirmation, now time.Time) (string, bool) {
	at := mapping.ConfirmationExpiry(c)
	return at, mapping.InterruptExpired(at, now)
}
