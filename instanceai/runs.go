package instanceai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ErrRunActive is returned when a thread already has an active run.
var ErrRunActive = errors.New("a run is already active on this thread")

// ErrDraining is returned by Start once Drain began: the process is about
// to stop and takes no new runs, so the client retries (on another
// instance, behind a load balancer).
var ErrDraining = errors.New("this instance is shutting down and takes no new runs")

// ErrShuttingDown is the cancellation cause of requests ended by a server
// shutdown, so handlers can tell it from a client that went away.
var ErrShuttingDown = errors.New("server is shutting down")

// ErrRunFinished is returned by Emit once the run has finished: nothing an
// agent emits after the run-finish is written.
var ErrRunFinished = errors.New("run has finished")

// ErrStartLost is a start whose run was stopped before its run-start was
// written, its claim on the thread lost meanwhile: nothing was stored,
// and a retry may start it.
var ErrStartLost = errors.New("the run lost its claim on the thread before it began")

// Agent produces the events of a run. Run-start and run-finish belong to the
// registry: the agent emits what happens in between and returns. Returning
// an error (a *ProviderError for upstream failures) ends the run with an
// error event and run-finish{error}. Agents must honour ctx: cancel means
// stop now.
type Agent interface {
	Run(ctx context.Context, run *Run) error
}

// AgentFunc adapts a function to Agent.
type AgentFunc func(ctx context.Context, run *Run) error

// Run calls f.
func (f AgentFunc) Run(ctx context.Context, run *Run) error { return f(ctx, run) }

// ProviderError is an agent failure with the details the error event carries.
type ProviderError struct {
	Message    string
	Code       string
	Provider   string
	StatusCode int
	Details    string
}

func (e *ProviderError) Error() string { return e.Message }

// NewID returns a random identifier with the given prefix.
func NewID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// RunsConfig configures the run registry.
type RunsConfig struct {
	// Confirmations stores confirmation requests and answers (required for
	// agents that ask for approval).
	Confirmations ConfirmationStore
	Logger        *slog.Logger
	// Now is the clock (tests may fix it).
	Now func() time.Time
	// Observer is told about first text and tool-call durations (nil:
	// none).
	Observer Observer
	// Index reads runs from the log, for settling the runs of dead
	// instances (nil: Confirmations, when it is one).
	Index RunIndex
	// Claims keeps each thread's active-run row (the store, so that the
	// rule holds across processes); nil means Confirmations when it is
	// one, else a table in this process's memory. The writer's appends
	// carry the claims' fencing tokens unless they come from that table,
	// whose tokens the log does not know: explicit claims must be the
	// log's.
	Claims RunClaims
	// Instance names this process among those sharing the database (a
	// random id when empty).
	Instance string
	// Lease is how long a run stays claimed without a heartbeat (default
	// 10 s); Maintain renews it.
	Lease time.Duration
	// Control reaches the other instances (nil: this process is alone).
	Control Controller
	// Threads is read when a run starts, to check that its thread still
	// exists and is its user's (nil: Confirmations, when it is one; no
	// check when neither is).
	Threads ThreadReader
	// Expired reports whether a pending confirmation may now only be
	// denied, and from when (an upstream AG-UI interrupt's expiresAt,
	// which the core does not read itself); Answer then refuses any other
	// answer with *ConfirmationExpiredError. Nil: confirmations never
	// expire.
	Expired func(c *Confirmation, now time.Time) (at string, expired bool)
	// Limits bound the events agents emit (zero: the defaults).
	Limits Limits
}

// ThreadReader reads a thread's record.
type ThreadReader interface {
	GetThread(ctx context.Context, id string) (Thread, error)
}

// errThreadGone stops a run whose thread was deleted under it.
var errThreadGone = errors.New("the run's thread was deleted")

// DefaultLease is how long a run's claim lasts without a heartbeat.
const DefaultLease = 10 * time.Second

// Runs is the registry of active runs: one per thread, cancel, shutdown.
// Its parts keep their own state under their own locks: the runs active
// here (table), this instance's claims and their fencing (leases), the
// confirmation requests and the runs waiting for their answer
// (confirmations), and the background agents (background).
type Runs struct {
	writer  *Writer
	agent   Agent
	log     *slog.Logger
	now     func() time.Time
	limits  Limits
	obs     Observer
	index   RunIndex
	threads ThreadReader
	control Controller

	table         runTable
	leases        leases
	confirmations confirmations
	background    backgroundAgents
	// running counts the goroutines of runs and background agents, for
	// Shutdown to wait for.
	running sync.WaitGroup
}

// NewRuns returns a registry that runs agent and writes through writer.
func NewRuns(writer *Writer, agent Agent, cfg RunsConfig) *Runs {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.Claims == nil {
		cfg.Claims, _ = cfg.Confirmations.(RunClaims)
	}
	fenced := cfg.Claims != nil
	writer.useFences(fenced)
	if cfg.Claims == nil {
		cfg.Claims = NewLocalClaims()
	}
	if cfg.Index == nil {
		cfg.Index, _ = cfg.Confirmations.(RunIndex)
	}
	if cfg.Instance == "" {
		cfg.Instance = NewID("inst_")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Control == nil {
		cfg.Control = noControl{}
	}
	if cfg.Threads == nil {
		cfg.Threads, _ = cfg.Confirmations.(ThreadReader)
	}
	cfg.Limits.defaults()
	m := &Runs{writer: writer, agent: agent, log: cfg.Logger, now: cfg.Now, limits: cfg.Limits, obs: cfg.Observer,
		index: cfg.Index, threads: cfg.Threads, control: cfg.Control, table: newRunTable(), background: newBackgroundAgents(),
		confirmations: confirmations{store: cfg.Confirmations, expired: cfg.Expired, waiters: map[string]chan Answer{}}}
	m.leases.claims, m.leases.fenced = cfg.Claims, fenced
	m.leases.agentRows, _ = cfg.Claims.(AgentClaims)
	m.leases.instance, m.leases.ttl, m.leases.startedAt = cfg.Instance, cfg.Lease, time.Now()
	writer.onRunFinished(m.runFinished)
	return m
}

// Instance returns this process's instance id.
func (m *Runs) Instance() string { return m.leases.instance }

// workOf returns, at one moment, the thread's active run here and its
// background agents here that match.
func (m *Runs) workOf(threadID string, match func(*BackgroundTask) bool) (*Run, []*BackgroundTask) {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	return m.table.byThread[threadID], m.background.matching(threadID, match)
}

// Active returns the thread's active run, if any.
func (m *Runs) Active(threadID string) *Run { return m.table.get(threadID) }

// Count returns the number of active runs.
func (m *Runs) Count() int { return m.table.count() }

// allWork returns, at one moment, the runs and the background agents at
// work here.
func (m *Runs) allWork() ([]*Run, []*BackgroundTask) {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	return m.table.allLocked(), m.background.all()
}

// agentResumes reports whether the agent can continue runs suspended
// across a restart.
func (m *Runs) agentResumes() bool {
	_, ok := m.agent.(Resumer)
	return ok && m.confirmations.store != nil
}
