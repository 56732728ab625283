package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/bus"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/tracing"
	"github.com/threadline/threadline/internal/version"
	"github.com/threadline/threadline/metrics"
	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/builderapi"
	"github.com/threadline/threadline/server/connlimit"
	"github.com/threadline/threadline/server/copilotkitapi"
	"github.com/threadline/threadline/server/cors"
	"github.com/threadline/threadline/server/guard"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/storage"
	"github.com/threadline/threadline/workflow/catalog"
)

// DefaultMaxConnections is --max-connections' default: room for thousands
// of followed streams, under the usual descriptor limits of a service.
const DefaultMaxConnections = 10000

// defaultStore is the embedded SQLite file a fresh checkout writes to.
const defaultStore = "sqlite:data/threadline.db"

type serveConfig struct {
	addr            string
	store           string
	agent           string
	scriptDelay     time.Duration
	maxBody         int64
	chatMaxBody     int64
	subscriberQueue int
	queueBytes      int
	historyBytes    int
	copilotkitPath  string
	checkpointBytes int
	limits          instanceai.Limits
	checkpointEvery time.Duration
	heartbeat       time.Duration
	shutdownTimeout time.Duration
	drainTimeout    time.Duration
	logLevel        string
	logFormat       string
	tokens          string
	publishTokens   string
	publishLease    time.Duration
	tokensFile      string
	jwt             jwtConfig
	insecureNoAuth  bool
	queryToken      bool
	allowedOrigins  string
	allowedHosts    string
	timeouts        server.Timeouts
	connections     connlimit.Limits
	agents          agentConfig
	bus             string
	instance        string
	lease           time.Duration
	leaseRenew      time.Duration
	logPoll         time.Duration
	busRouting      string
	catalog         string
	builderTimeout  time.Duration
	pprofAddr       string
	otlpEndpoint    string
	retention       retentionConfig
}

func serveFlags(out io.Writer) (*envFlags, *serveConfig) {
	c := &serveConfig{}
	f := newEnvFlags("serve", "Run the HTTP server. The storage schema is applied at start.", out)
	f.String(&c.addr, "addr", "THREADLINE_ADDR", "127.0.0.1:8080", "listen address")
	storeFlag(f, &c.store)
	f.String(&c.agent, "agent", "THREADLINE_AGENT", "script", "agent that answers chat messages: "+agentNames)
	f.Duration(&c.scriptDelay, "script-delay", "THREADLINE_SCRIPT_DELAY", 20*time.Millisecond,
		"pause between the reference agent's events (0 = as fast as possible)")
	f.Int64(&c.maxBody, "max-body", "THREADLINE_MAX_BODY", httpjson.DefaultMaxBody, "request body limit in bytes; larger bodies get 413")
	f.Int64(&c.chatMaxBody, "max-chat-body", "THREADLINE_MAX_CHAT_BODY", httpjson.DefaultChatMaxBody,
		"body limit in bytes of the requests that start a run with a user message, which may carry files (/run-agent, CopilotKit's runs, the native chat); larger bodies get 413")
	f.Int(&c.subscriberQueue, "subscriber-queue", "THREADLINE_SUBSCRIBER_QUEUE", 8192,
		"frames an SSE subscriber may fall behind; past that its queued token deltas are merged, and one still that far behind is disconnected and resumes from its cursor")
	f.Int(&c.queueBytes, "subscriber-queue-bytes", "THREADLINE_SUBSCRIBER_QUEUE_BYTES", instanceai.DefaultQueueBytes,
		"bytes of frames an SSE subscriber may fall behind, beside --subscriber-queue: one that far behind is disconnected and resumes from its cursor")
	f.Int(&c.historyBytes, "history-max-bytes", "THREADLINE_HISTORY_MAX_BYTES", server.DefaultHistoryMaxBytes,
		"bytes a /messages page or an AG-UI rejoin's MESSAGES_SNAPSHOT holds past its newest message; older messages are read with ?before=olderCursor")
	f.String(&c.copilotkitPath, "copilotkit-path", "THREADLINE_COPILOTKIT_PATH", copilotkitapi.DefaultBase,
		"where CopilotKit's runtime protocol is served: a CopilotKit frontend's runtimeUrl is this server's URL with this path")
	f.Int(&c.limits.MaxEventBytes, "max-event-bytes", "THREADLINE_MAX_EVENT_BYTES", instanceai.DefaultMaxEventBytes,
		"the largest event a producer may hand in, as stored (its JSON): a larger one is refused with event_too_large (an agent's run then ends with that error; the publish API answers 413)")
	f.Int(&c.limits.MaxSegmentBytes, "max-segment-bytes", "THREADLINE_MAX_SEGMENT_BYTES", instanceai.DefaultMaxSegmentBytes,
		"the longest one streamed message (or reasoning) may grow, as stored (JSON-escaped): the run whose message crosses it ends with segment_too_large, the text up to it kept; at most --max-event-bytes less 64 KiB")
	f.Int(&c.checkpointBytes, "checkpoint-bytes", "THREADLINE_CHECKPOINT_BYTES", instanceai.DefaultCheckpointBytes,
		"store the text of a reply still streaming once this many bytes of it are not stored, so that a crash loses at most that much (SQLite and PostgreSQL; 0 = not by size)")
	f.Duration(&c.checkpointEvery, "checkpoint-interval", "THREADLINE_CHECKPOINT_INTERVAL", instanceai.DefaultCheckpointInterval,
		"store the text of a reply still streaming once the oldest of it has waited this long (0 = not by age)")
	f.Duration(&c.heartbeat, "heartbeat", "THREADLINE_HEARTBEAT", 15*time.Second, "pause between \": ping\" comments on idle SSE streams")
	f.Duration(&c.drainTimeout, "drain-timeout", "THREADLINE_DRAIN_TIMEOUT", 20*time.Second,
		"on SIGINT/SIGTERM, how long to keep serving while refusing new runs (503) so the runs working here finish; a second signal stops at once; 0 = no drain")
	f.Duration(&c.shutdownTimeout, "shutdown-timeout", "THREADLINE_SHUTDOWN_TIMEOUT", 10*time.Second,
		"after the drain, how long the shutdown may take to cancel the remaining runs and flush open segments")
	f.String(&c.logLevel, "log-level", "THREADLINE_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	f.String(&c.logFormat, "log-format", "THREADLINE_LOG_FORMAT", "text", "log format: text (key=value lines) or json (one JSON object per line)")
	f.Secret(&c.tokens, "tokens", "THREADLINE_TOKENS",
		"bearer tokens and their users, token1=alice,token2=bob (prefer the variable or --tokens-file: "+
			"a command line is visible to other local users); none configured = single-user mode, no authentication")
	f.Secret(&c.publishTokens, "publish-tokens", "THREADLINE_PUBLISH_TOKENS",
		"bearer tokens that may only publish (the publish API, /publish/…), token=user,…: a producer's secret cannot read its user's threads, and API tokens cannot publish")
	f.Duration(&c.publishLease, "publish-lease", "THREADLINE_PUBLISH_LEASE", external.DefaultLease,
		"how long a run driven through the publish API waits for its producer's next request before it ends in error (producer_gone)")
	f.String(&c.tokensFile, "tokens-file", "THREADLINE_TOKENS_FILE", "",
		"file of bearer tokens: one \"token user\" or \"token=user\" per line; lines starting with # are comments; re-read on SIGHUP")
	jwtFlags(f, &c.jwt)
	f.Bool(&c.queryToken, "query-token", "THREADLINE_QUERY_TOKEN", false,
		"also accept the bearer token (a static token or a JWT) as ?access_token= on GET requests, for browser EventSource clients, which cannot send headers (a token in a URL may end up in proxy logs)")
	f.Bool(&c.insecureNoAuth, "insecure-no-auth", "THREADLINE_INSECURE_NO_AUTH", false,
		"allow serving a non-loopback address without authentication")
	f.String(&c.allowedOrigins, "allowed-origins", "THREADLINE_ALLOWED_ORIGINS", "",
		"browser origins allowed by CORS, comma-separated (https://app.example.com,http://localhost:3000; * for any); none by default")
	f.String(&c.allowedHosts, "allowed-hosts", "THREADLINE_ALLOWED_HOSTS", "",
		"without tokens, host names besides localhost, 127.0.0.1 and [::1] that requests may address, comma-separated (* for any); refuses DNS rebinding")
	f.Duration(&c.timeouts.ReadHeader, "read-header-timeout", "THREADLINE_READ_HEADER_TIMEOUT", server.DefaultReadHeaderTimeout,
		"how long a client may take to send a request's headers")
	f.Duration(&c.timeouts.Body, "body-timeout", "THREADLINE_BODY_TIMEOUT", server.DefaultBodyTimeout,
		"how long a client may take to send a request's body (408, then the connection closes); the stream that answers it is not bounded")
	f.Duration(&c.timeouts.Idle, "idle-timeout", "THREADLINE_IDLE_TIMEOUT", server.DefaultIdleTimeout,
		"how long a keep-alive connection may wait for its next request; open event streams are not idle")
	f.Int(&c.connections.Total, "max-connections", "THREADLINE_MAX_CONNECTIONS", DefaultMaxConnections,
		"connections held at once, event streams included; over it a new connection is answered 503 and closed (0 = no cap)")
	f.Int(&c.connections.PerIP, "max-connections-per-ip", "THREADLINE_MAX_CONNECTIONS_PER_IP", 0,
		"connections held at once from one client IP (0 = no cap; behind a reverse proxy every client has the proxy's IP)")
	f.String(&c.bus, "bus", "THREADLINE_BUS", "memory",
		"live transport between instances on one database: memory (one process), redis://HOST:PORT/DB[?channel=NAME], "+
			"or postgres (LISTEN/NOTIFY on the --store database)")
	f.String(&c.busRouting, "bus-routing", "THREADLINE_BUS_ROUTING", "thread",
		"where the bus sends a thread's live frames: thread (to the instances that serve the thread: its streams' instances) "+
			"or broadcast (to every instance; for a rolling upgrade from a build that does not route)")
	f.String(&c.instance, "instance-id", "THREADLINE_INSTANCE_ID", "", "this instance's id in run claims and logs (default: host name, pid and a random suffix)")
	f.Duration(&c.lease, "lease", "THREADLINE_LEASE", instanceai.DefaultLease,
		"how long a run stays claimed by its instance without a heartbeat; a run whose instance died is settled about this long after")
	f.Duration(&c.leaseRenew, "lease-renew", "THREADLINE_LEASE_RENEW", server.DefaultLeaseRenew,
		"how often the heartbeat renews this instance's leases and sweeps the runs of dead instances (keep it well under --lease)")
	f.Duration(&c.logPoll, "log-poll", "THREADLINE_LOG_POLL", instanceai.DefaultPollInterval,
		"with a bus: how often an instance reads the log's head of the threads it streams that went quiet, to deliver what the bus lost")
	f.String(&c.catalog, "n8n-catalog", "THREADLINE_N8N_CATALOG", "",
		"n8n's node catalog for the builder's validation (node types, versions, required parameters): a nodes.json file, "+
			"a node_modules directory holding n8n-nodes-base and @n8n/n8n-nodes-langchain, or a running n8n's URL (http://localhost:5678); none = structural checks only")
	f.Duration(&c.builderTimeout, "builder-timeout", "THREADLINE_BUILDER_TIMEOUT", builderapi.DefaultOperationTimeout,
		"how long one builder operation (generate, modify, iterate) may take")
	f.String(&c.pprofAddr, "pprof-addr", "THREADLINE_PPROF_ADDR", "",
		"serve Go's profiler (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060; none = off")
	f.String(&c.otlpEndpoint, "otlp-endpoint", "THREADLINE_OTLP_ENDPOINT", "",
		"send OpenTelemetry traces over OTLP/HTTP to this collector, e.g. http://localhost:4318 (the standard OTEL_EXPORTER_OTLP_* variables are honoured too); none = tracing off")
	retentionFlags(f, &c.retention, true)
	agentFlags(f, &c.agents)
	return f, c
}

// loadCatalog reads n8n's node catalog from where --n8n-catalog points.
func loadCatalog(ctx context.Context, where string) (*catalog.Catalog, error) {
	switch {
	case where == "":
		return nil, nil
	case strings.HasPrefix(where, "http://") || strings.HasPrefix(where, "https://"):
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return catalog.Fetch(ctx, where)
	}
	info, err := os.Stat(where)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return catalog.LoadDir(where)
	}
	return catalog.LoadFile(where)
}

// loadAuth reads the configured static tokens and sets up JWT
// verification. Errors name the list entry or file line at fault, never a
// token.
func loadAuth(ctx context.Context, c *serveConfig, logger *slog.Logger) (*auth.Authenticator, []auth.Entry, error) {
	entries, err := staticTokens(c)
	if err != nil {
		return nil, nil, usageError{err.Error()}
	}
	a, err := auth.New(entries)
	if err != nil {
		return nil, nil, usageError{err.Error()}
	}
	v, err := newJWTVerifier(ctx, c.jwt, logger)
	if err != nil {
		return nil, nil, err
	}
	if v != nil {
		a.UseJWT(v)
	}
	return a, entries, nil
}

// staticTokens reads --tokens, --tokens-file and --publish-tokens: at
// start, and again at each SIGHUP.
func staticTokens(c *serveConfig) ([]auth.Entry, error) {
	entries, err := auth.ParseList(c.tokens, "--tokens (THREADLINE_TOKENS)")
	if err != nil {
		return nil, err
	}
	if c.tokensFile != "" {
		f, err := os.Open(c.tokensFile)
		if err != nil {
			return nil, fmt.Errorf("--tokens-file: %w", err)
		}
		defer f.Close()
		more, err := auth.ParseFile(f, c.tokensFile)
		if err != nil {
			return nil, err
		}
		entries = append(entries, more...)
	}
	publishers, err := auth.ParseList(c.publishTokens, "--publish-tokens (THREADLINE_PUBLISH_TOKENS)")
	if err != nil {
		return nil, err
	}
	for i := range publishers {
		publishers[i].Scope = auth.ScopePublish
	}
	return append(entries, publishers...), nil
}

// reloadTokens reads the static tokens again and swaps them in. A file
// that does not parse (or leaves no way to authenticate) keeps the
// current tokens; either way the outcome is logged, without any token.
func reloadTokens(c *serveConfig, a *auth.Authenticator, logger *slog.Logger) error {
	entries, err := staticTokens(c)
	if err == nil {
		err = a.Reload(entries) // checked as at start: no token twice
	}
	if err != nil {
		logger.Error("SIGHUP: tokens not reloaded; the current tokens stay in use", "err", err)
		return err
	}
	logger.Info("SIGHUP: tokens reloaded", "tokens", len(entries), "users", a.Users())
	warnWeak(logger, entries)
	return nil
}

// reloadOnHangup reloads the static tokens at each SIGHUP until stop is
// called. Requests under way, open event streams among them, keep going:
// a token is checked when its request begins.
func reloadOnHangup(c *serveConfig, a *auth.Authenticator, logger *slog.Logger) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				_ = reloadTokens(c, a, logger)
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// logAuth says at start how callers are authenticated.
func logAuth(logger *slog.Logger, a *auth.Authenticator, entries []auth.Entry, addr string) {
	if !a.Enabled() {
		logger.Warn("running without authentication: every request acts as user "+auth.LocalUser,
			"loopback", auth.IsLoopback(addr))
		return
	}
	logger.Info("authentication: bearer tokens", "tokens", len(entries), "users", a.Users(), "jwt", a.JWT())
	warnWeak(logger, entries)
}

// warnWeak warns of the short static tokens, naming where each is
// configured.
func warnWeak(logger *slog.Logger, entries []auth.Entry) {
	for _, e := range entries {
		if len(e.Token) < auth.WeakTokenLength {
			logger.Warn(fmt.Sprintf("a token is shorter than %d characters; use a long random one", auth.WeakTokenLength),
				"at", e.Source)
		}
	}
}

func storeFlag(f *envFlags, p *string) {
	f.String(p, "store", "THREADLINE_STORE", defaultStore,
		"event store: sqlite:PATH (embedded, durable), postgres://USER@HOST:PORT/DB?sslmode=disable, or memory (bounded, lost on restart)")
}

func newLogger(level, format string, out io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q: use debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(out, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	}
	return nil, usageError{fmt.Sprintf("--log-format %q: use text or json", format)}
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	f, c := serveFlags(stderr)
	if err := f.Parse(args); err != nil {
		return err
	}
	logger, err := newLogger(c.logLevel, c.logFormat, stderr)
	if err != nil {
		return err
	}
	// Code without a logger of its own (the JSON error helper) logs
	// through the default one: make it this one.
	slog.SetDefault(logger)
	authn, entries, err := loadAuth(ctx, c, logger)
	if err != nil {
		return err
	}
	if c.queryToken {
		authn.AllowQueryToken()
	}
	if err := auth.CheckListen(c.addr, authn, c.insecureNoAuth); err != nil {
		return usageError{err.Error()}
	}
	if err := checkPprofAddr(c.pprofAddr); err != nil {
		return err
	}
	if c.timeouts.ReadHeader <= 0 || c.timeouts.Body <= 0 || c.timeouts.Idle <= 0 {
		return usageError{"--read-header-timeout, --body-timeout and --idle-timeout must be positive"}
	}
	if c.checkpointBytes < 0 || c.checkpointEvery < 0 {
		return usageError{"--checkpoint-bytes and --checkpoint-interval must be 0 (off) or more"}
	}
	if c.limits.MaxEventBytes < 1 || c.limits.MaxSegmentBytes < 1 {
		return usageError{"--max-event-bytes and --max-segment-bytes must be positive"}
	}
	if err := c.limits.Check(); err != nil {
		return usageError{err.Error()}
	}
	if !strings.HasPrefix(c.copilotkitPath, "/") || c.copilotkitPath == "/" || strings.ContainsAny(c.copilotkitPath, "{}?#") {
		return usageError{fmt.Sprintf("--copilotkit-path %q: want a path such as /copilotkit (not the root)", c.copilotkitPath)}
	}
	if c.subscriberQueue < 1 || c.queueBytes < 1 || c.historyBytes < 1 {
		return usageError{"--subscriber-queue, --subscriber-queue-bytes and --history-max-bytes must be positive"}
	}
	if c.connections.Total < 0 || c.connections.PerIP < 0 {
		return usageError{"--max-connections and --max-connections-per-ip must be 0 (no cap) or more"}
	}
	if c.leaseRenew <= 0 || c.lease < 2*c.leaseRenew {
		return usageError{fmt.Sprintf("--lease %v must be at least twice --lease-renew %v", c.lease, c.leaseRenew)}
	}
	if c.busRouting != "thread" && c.busRouting != "broadcast" {
		return usageError{fmt.Sprintf("--bus-routing %q: use thread or broadcast", c.busRouting)}
	}
	if c.logPoll <= 0 {
		return usageError{fmt.Sprintf("--log-poll %v must be positive", c.logPoll)}
	}
	if err := c.retention.check(false); err != nil {
		return err
	}
	if c.instance == "" {
		c.instance = defaultInstanceID()
	}
	traceCfg := tracing.Config{Endpoint: c.otlpEndpoint, Version: version.String(), Instance: c.instance}
	stopTracing, err := tracing.Setup(ctx, traceCfg, os.Getenv)
	if err != nil {
		return usageError{fmt.Sprintf("--otlp-endpoint %q: %v", c.otlpEndpoint, err)}
	}
	defer func() {
		// The spans still batched go out before the process ends.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			logger.Warn("flush traces", "err", err)
		}
	}()
	store, err := storage.Open(ctx, c.store)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storage.Describe(c.store), err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", storage.Describe(c.store), err)
	}

	liveBus, err := bus.Open(ctx, c.bus, c.store)
	if err != nil {
		return usageError{fmt.Sprintf("--bus: %v", err)}
	}
	if liveBus != nil {
		defer liveBus.Close()
	}

	m := metrics.New()
	producers := external.NewProducers(c.publishLease)
	mcp, err := startMCP(ctx, &c.agents, logger)
	if err != nil {
		return err
	}
	if mcp != nil {
		// After the server's shutdown (deferred later, run earlier): the
		// runs' calls end before their servers do.
		defer mcp.Close()
	}
	agent, llmHealth, err := newAgent(c, store, m, producers, mcp, logger)
	if err != nil {
		return err
	}
	nodes, err := loadCatalog(ctx, c.catalog)
	if err != nil {
		return fmt.Errorf("--n8n-catalog %s: %w", c.catalog, err)
	}
	if nodes != nil {
		logger.Info("n8n node catalog loaded", "from", c.catalog, "types", nodes.Len())
	}
	srv := server.New(store, agent, server.Config{
		Writer:  instanceai.WriterConfig{CheckpointBytes: offIfZero(c.checkpointBytes), CheckpointInterval: offIfZero(c.checkpointEvery)},
		Limits:  c.limits,
		MaxBody: c.maxBody, ChatMaxBody: c.chatMaxBody, SubscriberQueue: c.subscriberQueue, SubscriberQueueBytes: c.queueBytes, HistoryMaxBytes: c.historyBytes, CopilotKitPath: c.copilotkitPath, Producers: producers, Heartbeat: c.heartbeat, Auth: authn, Logger: logger,
		AllowedOrigins: cors.ParseOrigins(c.allowedOrigins), AgentName: c.agent, Metrics: m, LLMHealth: llmHealth, MCPStatus: mcpStatus(mcp),
		// Without tokens the server is on loopback and unauthenticated: only
		// the Host check keeps a rebound DNS name from reaching it.
		CheckHost: !authn.Enabled() && !c.insecureNoAuth, AllowedHosts: guard.ParseHosts(c.allowedHosts),
		Bus: liveBus, Instance: c.instance, Lease: c.lease, LeaseRenew: c.leaseRenew, PollInterval: c.logPoll, BusBroadcast: c.busRouting == "broadcast",
		Catalog: nodes, BuilderTimeout: c.builderTimeout, Tracing: traceCfg.Enabled(os.Getenv),
	})
	// Bind first: a process that cannot take its port (another one has
	// it) must leave the runs in the database alone.
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.addr, err)
	}
	joinCtx, cancelJoin := context.WithTimeout(ctx, 30*time.Second)
	err = srv.Join(joinCtx)
	cancelJoin()
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("refusing to start: %w", err)
	}
	sweepCtx, cancelSweep := context.WithTimeout(ctx, time.Minute)
	err = srv.Recover(sweepCtx)
	cancelSweep()
	if err != nil {
		ln.Close()
		return fmt.Errorf("settle interrupted runs: %w", err)
	}
	if c.pprofAddr != "" {
		stopPprof, err := startPprof(c.pprofAddr, logger)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopPprof()
	}
	if c.retention.enabled() {
		stopPrune, err := startRetention(ctx, c, store, srv, logger)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopPrune()
	}
	logAuth(logger, authn, entries, c.addr)
	if authn.Enabled() {
		defer reloadOnHangup(c, authn, logger)()
	}
	logger.Info("threadline listening", "addr", ln.Addr().String(), "store", storage.Describe(c.store), "agent", c.agent,
		"bus", describeBus(c.bus), "instance", c.instance)
	force, stopForce := secondSignal(ctx)
	defer stopForce()
	return srv.Serve(ctx, ln, server.ServeOptions{Drain: c.drainTimeout, Timeout: c.shutdownTimeout, Force: force,
		Timeouts: c.timeouts, Connections: c.connections})
}

// startRetention runs the retention passes beside the server until the
// returned stop is called (before the store closes).
func startRetention(ctx context.Context, c *serveConfig, store instanceai.Store, srv *server.Server, logger *slog.Logger) (stop func(), err error) {
	p, err := c.retention.pruner(store, c.store, retention.Config{Logger: logger, Observer: srv.Metrics, Forget: srv.Core.ThreadsPruned})
	if err != nil {
		return nil, err
	}
	logger.Info("retention: passes delete the threads idle for longer than the age (0: none) and the runs past the cap (0: none)",
		"age", c.retention.idle, "keep_runs", c.retention.keepRuns, "every", c.retention.interval)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, c.retention.interval)
	}()
	return func() { cancel(); <-done }, nil
}

// secondSignal returns a context that ends at the first SIGINT or SIGTERM
// after ctx ended: the one that cuts a drain short. stop releases the
// signals once serving is over.
func secondSignal(ctx context.Context) (force context.Context, stop func()) {
	force, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(ch)
		select {
		case <-ch:
			cancel()
		case <-done:
		}
	}()
	return force, func() { close(done); cancel() }
}

// defaultInstanceID names this process uniquely among those sharing a
// database, readably in logs and claims.
func defaultInstanceID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), instanceai.NewID("")[:6])
}

// describeBus is the bus spec fit for a log line.
func describeBus(spec string) string {
	if strings.Contains(spec, "://") {
		return storage.Describe(spec)
	}
	return spec
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEnvFlags("migrate", "Apply the storage schema and exit.", stderr)
	var spec string
	storeFlag(f, &spec)
	if err := f.Parse(args); err != nil {
		return err
	}
	store, err := openMigrated(ctx, spec)
	if err != nil {
		return err
	}
	defer store.Close()
	fmt.Fprintf(stdout, "schema is up to date on %s\n", storage.Describe(spec))
	return nil
}

// openMigrated opens the store spec names and applies its schema; on an
// error nothing is left open.
func openMigrated(ctx context.Context, spec string) (instanceai.Store, error) {
	store, err := storage.Open(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", storage.Describe(spec), err)
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate %s: %w", storage.Describe(spec), err)
	}
	return store, nil
}

// offIfZero turns a flag's 0 (off) into the writer's negative (off; its
// zero takes the default).
func offIfZero[T int | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
