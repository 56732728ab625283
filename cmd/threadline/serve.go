package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agent/script"
	"github.com/threadline/threadline/instanceai/httpapi"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/storage"
)

// defaultStore is the embedded SQLite file a fresh checkout writes to.
const defaultStore = "sqlite:data/threadline.db"

type serveConfig struct {
	addr            string
	store           string
	agent           string
	scriptDelay     time.Duration
	maxBody         int64
	subscriberQueue int
	heartbeat       time.Duration
	shutdownTimeout time.Duration
	logLevel        string
}

func serveFlags(out io.Writer) (*envFlags, *serveConfig) {
	c := &serveConfig{}
	f := newEnvFlags("serve", "Run the HTTP server. The storage schema is applied at start.", out)
	f.String(&c.addr, "addr", "THREADLINE_ADDR", "127.0.0.1:8080", "listen address")
	storeFlag(f, &c.store)
	f.String(&c.agent, "agent", "THREADLINE_AGENT", "script", "agent that answers chat messages: script (the deterministic reference agent)")
	f.Duration(&c.scriptDelay, "script-delay", "THREADLINE_SCRIPT_DELAY", 20*time.Millisecond,
		"pause between the reference agent's events (0 = as fast as possible)")
	f.Int64(&c.maxBody, "max-body", "THREADLINE_MAX_BODY", httpapi.DefaultMaxBody, "request body limit in bytes; larger bodies get 413")
	f.Int(&c.subscriberQueue, "subscriber-queue", "THREADLINE_SUBSCRIBER_QUEUE", 8192,
		"frames buffered per SSE subscriber; a subscriber that falls further behind is disconnected and resumes from its cursor")
	f.Duration(&c.heartbeat, "heartbeat", "THREADLINE_HEARTBEAT", 15*time.Second, "pause between `: ping` comments on idle SSE streams")
	f.Duration(&c.shutdownTimeout, "shutdown-timeout", "THREADLINE_SHUTDOWN_TIMEOUT", 10*time.Second,
		"how long a graceful shutdown may take to finish runs and flush open segments")
	f.String(&c.logLevel, "log-level", "THREADLINE_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	return f, c
}

func storeFlag(f *envFlags, p *string) {
	f.String(p, "store", "THREADLINE_STORE", defaultStore,
		"event store: sqlite:PATH (embedded, durable), postgres://USER@HOST:PORT/DB?sslmode=disable, or memory (bounded, lost on restart)")
}

func newLogger(level string, out io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Sprintf("-log-level %q: use debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: l})), nil
}

func newAgent(c *serveConfig) (instanceai.Agent, error) {
	switch c.agent {
	case "script":
		return &script.Agent{Delay: c.scriptDelay}, nil
	default:
		return nil, usageError{fmt.Sprintf("-agent %q: available agents are: script", c.agent)}
	}
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	f, c := serveFlags(stderr)
	if err := f.Parse(args); err != nil {
		return err
	}
	logger, err := newLogger(c.logLevel, stderr)
	if err != nil {
		return err
	}
	agent, err := newAgent(c)
	if err != nil {
		return err
	}
	store, err := storage.Open(ctx, c.store)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storage.Describe(c.store), err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", storage.Describe(c.store), err)
	}

	srv := server.New(store, agent, server.Config{
		MaxBody: c.maxBody, SubscriberQueue: c.subscriberQueue, Heartbeat: c.heartbeat, Logger: logger,
	})
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.addr, err)
	}
	logger.Info("threadline listening", "addr", ln.Addr().String(), "store", storage.Describe(c.store), "agent", c.agent)
	return srv.Serve(ctx, ln, c.shutdownTimeout)
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEnvFlags("migrate", "Apply the storage schema and exit.", stderr)
	var spec string
	storeFlag(f, &spec)
	if err := f.Parse(args); err != nil {
		return err
	}
	store, err := storage.Open(ctx, spec)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storage.Describe(spec), err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", storage.Describe(spec), err)
	}
	fmt.Fprintf(stdout, "schema is up to date on %s\n", storage.Describe(spec))
	return nil
}
