package instanceai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/internal/tracing"
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

// Controller sends a control message to the other instances.
type Controller interface {
	SendControl(Control)
}

// Control kinds.
const (
	ControlCancel = "cancel"
	ControlAnswer = "answer"
	ControlDelete = "delete"
)

// Control asks the instance that runs a thread's work to act on it: the
// database is the source of truth (the answer is stored, the thread is
// deleted), the message only makes the owner act at once.
type Control struct {
	Kind      string `json:"k"`
	ThreadID  string `json:"t"`
	RequestID string `json:"q,omitempty"`
	Reason    string `json:"r,omitempty"`
}

type noControl struct{}

func (noControl) SendControl(Control) {}

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

// StartRequest is what starts a run.
type StartRequest struct {
	ThreadID string
	UserID   string
	Message  string
	// Attachments are the files sent with Message (checked by the surface
	// that took them: see CheckDeliverable); Chat stores them with it.
	Attachments []Attachment
	// Tools are tools the client offers the run and executes itself (AG-UI
	// input.tools): the agent may call them and leave the result to the
	// client.
	Tools []ToolSpec
	// ToolResult, when set, is the client's result for a call to one of its
	// tools left open by the thread's previous run: the run continues from
	// it. Start stores it as that call's tool-result, under the previous
	// run, before the new run's run-start.
	ToolResult *ClientToolResult
	// AgentName picks one of the agent's named upstreams (an n8n webhook,
	// say); "" is the default one.
	AgentName string
	// History, when not nil, is the conversation before Message as the
	// client holds it (AG-UI input.messages): agents send it to their model
	// instead of the thread's stored conversation.
	History []HistoryMessage
	// Context is what the client's UI shares about its state (AG-UI
	// input.context, e.g. CopilotKit's useCopilotReadable): LLM agents show
	// it to their model.
	Context []ContextItem
	// State and ForwardedProps are AG-UI input.state and
	// input.forwardedProps as the client sent them (nil when it did not),
	// for an agent that passes them on to an upstream AG-UI agent.
	State          json.RawMessage
	ForwardedProps json.RawMessage
	// RunID, when set, is the run's id instead of a fresh one: a client's
	// own run id, so that a retry finds the run again. It follows the
	// thread id rule (ValidThreadID); that no run of the thread has it yet
	// is the caller's to check.
	RunID string
	// Work, when set, does the run instead of the registry's agent: an
	// operation that is not a chat (a builder's generate, say) on the same
	// run machinery. A run it suspends is not resumed after a restart.
	Work Agent
	// WorkName names what Work does ("builder", "publish") where runs are
	// counted by agent.
	WorkName string
	// Trace is the span of the request that starts the run (Core.Chat
	// takes it from its context): the run's span is its child.
	Trace trace.SpanContext
}

// agentLabel names what does the run, for RunObserver: the named upstream,
// the work's name, or "" for the registry's default agent.
func (req *StartRequest) agentLabel() string {
	if req.Work != nil {
		if req.WorkName != "" {
			return req.WorkName
		}
		return "work"
	}
	return req.AgentName
}

// ContextItem is one piece of client context.
type ContextItem struct {
	Description string
	Value       string
}

// ToolSpec is a tool the client offers a run.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the tool's JSON Schema, as the client sent it.
	Parameters json.RawMessage
}

// ClientToolResult is a client's result for a call to one of its tools.
type ClientToolResult struct {
	// RunID and AgentID are the run and agent that made the call.
	RunID      string
	AgentID    string
	ToolCallID string
	ToolName   string
	// Content is the result as the client sent it (text).
	Content string
}

// ResultJSON is the content as a tool-result's result: the content itself
// when it is JSON, else the content as a JSON string.
func (c *ClientToolResult) ResultJSON() json.RawMessage {
	if json.Valid([]byte(c.Content)) {
		return json.RawMessage(c.Content)
	}
	b, _ := json.Marshal(c.Content)
	return b
}

// NamedAgent is implemented by agents with several named upstreams (n8n
// webhooks, say): StartRequest.AgentName must be one of Names.
type NamedAgent interface {
	Names() []string
}

// UnknownAgentError is returned by Start for an AgentName the agent does
// not have.
type UnknownAgentError struct {
	Name  string
	Known []string
}

func (e *UnknownAgentError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown agent %q: this server's agent has no named agents", e.Name)
	}
	return fmt.Sprintf("unknown agent %q: known agents are %s", e.Name, strings.Join(e.Known, ", "))
}

// CheckAgent returns an *UnknownAgentError unless name is "" (the default
// agent) or one of the agent's names (NamedAgent): what Start would refuse,
// for a caller to check before it creates anything.
func (m *Runs) CheckAgent(name string) error {
	if name == "" {
		return nil
	}
	var known []string
	if named, ok := m.agent.(NamedAgent); ok {
		known = named.Names()
	}
	if !slices.Contains(known, name) {
		return &UnknownAgentError{Name: name, Known: known}
	}
	return nil
}

// Start begins a run on the thread unless one is active (ErrRunActive, with
// the active run returned). The run-start event is queued before Start
// returns, so a client that subscribes afterwards sees the whole run.
func (m *Runs) Start(req StartRequest) (*Run, error) { return m.start(req, nil) }

// start is Start with a prelude that runs once the run-start is queued and
// before the agent begins, so that what it queues (the chat's title) sits
// between the run-start and the agent's first event, never after the
// run-finish of an agent that is quick.
func (m *Runs) start(req StartRequest, prelude func(*Run)) (*Run, error) {
	r, err := m.register(req)
	if err != nil {
		return r, err
	}
	if holder, err := m.claimFor(r); err != nil {
		return holder, err
	}
	if err := m.begin(r); err != nil {
		return nil, err
	}
	if prelude != nil {
		prelude(r)
	}
	agent := m.agent
	if req.Work != nil {
		agent = req.Work
	}
	go m.execute(r, func(ctx context.Context) error { return agent.Run(ctx, r) })
	return r, nil
}

// register checks the request and makes its run the thread's active run
// here, unless the thread has one (returned, with ErrRunActive), a drain
// began, or a deletion of the thread is under way.
func (m *Runs) register(req StartRequest) (*Run, error) {
	if req.RunID != "" && !ValidThreadID(req.RunID) {
		return nil, &InvalidRunIDError{RunID: req.RunID}
	}
	if req.Work == nil {
		if err := m.CheckAgent(req.AgentName); err != nil {
			return nil, err
		}
	}
	return m.table.admit(req.ThreadID, func() *Run {
		id := req.RunID
		if id == "" {
			id = NewID("run_")
		}
		// The run outlives its request, so its context is not the
		// request's; its span still continues the request's trace.
		ctx, cancel := context.WithCancelCause(context.Background())
		agentName := req.agentLabel()
		if agentName == "" {
			agentName = "default"
		}
		ctx, span := tracing.Start(trace.ContextWithSpanContext(ctx, req.Trace), "run",
			attribute.String("thread.id", req.ThreadID), attribute.String("run.id", id), attribute.String("agent", agentName))
		r := &Run{
			ID: id, StartRequest: req, AgentID: OrchestratorAgentID(id), span: span,
			runs: m, ctx: ctx, cancel: cancel, done: make(chan struct{}), fence: newFence(id, "", 0),
			doorState: doorState{started: time.Now(), rules: newRunRules(OrchestratorAgentID(id))},
		}
		r.fence.span = span.SpanContext()
		m.running.Add(1)
		return r
	})
}

// endUnbegun ends a registered run that did not begin, once it left the
// table: its context and span end with err.
func (m *Runs) endUnbegun(r *Run, err error) {
	m.running.Done()
	r.cancel(err)
	endSpan(r.span, "not_started", true)
}

// claimFor claims the thread's row for a registered run. When another run
// holds the thread, it returns that run and ErrRunActive; on any error the
// run leaves the table.
func (m *Runs) claimFor(r *Run) (*Run, error) {
	holder, err := m.claim(r)
	if err != nil {
		m.table.remove(r)
		m.endUnbegun(r, err)
		if errors.Is(err, ErrNotFound) {
			return nil, &ThreadNotFoundError{ThreadID: r.ThreadID}
		}
		return holder, err
	}
	m.table.markClaimed(r)
	return nil, nil
}

// begin queues what opens a claimed run: the client's tool result it
// continues from, if any, then its run-start. A run that cannot begin is
// unregistered and its row released; one stopped while it started
// finishes at once.
func (m *Runs) begin(r *Run) error {
	req := r.StartRequest
	// abort undoes a start that failed before its run-start was queued.
	abort := func(err error) {
		m.table.remove(r)
		m.releaseClaim(r.ThreadID, r.ID, r.fence.token())
		m.endUnbegun(r, err)
	}
	// The caller found the thread before Start, but a deletion may have
	// run in between, and another user may have created a thread with the
	// same id since. The run is registered now, so a deletion that begins
	// from here on cancels it; one that ended before is seen here.
	if err := m.checkThread(req); err != nil {
		abort(err)
		return err
	}

	if tr := req.ToolResult; tr != nil {
		// The result belongs to the call's own run, so that the log folds
		// the call and its result into the same agent tree; it is written
		// under the new run's claim, the one that holds the thread now.
		ev := Event{Type: TypeToolResult, RunID: tr.RunID, AgentID: tr.AgentID, UserID: req.UserID, TS: m.now().UnixMilli(),
			Payload: &ToolResult{ToolCallID: tr.ToolCallID, Result: tr.ResultJSON()}}
		err := ev.Validate()
		if err == nil {
			err = m.writer.enqueue(req.ThreadID, ev, r.fence)
		}
		if err != nil {
			abort(err)
			return fmt.Errorf("store the client's tool result: %w", err)
		}
	}

	if err := r.emitStart(); err != nil {
		abort(err)
		// A deletion that began after the check cancelled the run before
		// its run-start: the thread is gone, or about to be (and may have
		// been created again since, by the same user's next chat).
		if m.table.deletedWhileRegistered(r) {
			return &ThreadNotFoundError{ThreadID: req.ThreadID}
		}
		if cerr := m.checkThread(req); errors.Is(cerr, ErrNotFound) {
			return cerr
		}
		if errors.Is(err, ErrRunFinished) {
			// Stopped before it began: its claim was lost (the store did
			// not answer the renewal in time). Nothing of it was written;
			// the client may simply try again.
			return fmt.Errorf("start run: %w", ErrStartLost)
		}
		return fmt.Errorf("start run: %w", err)
	}
	m.log.Info("run started", "thread", req.ThreadID, "run", r.ID, "user", req.UserID)
	if ro, ok := m.obs.(RunObserver); ok {
		ro.RunStarted(req.agentLabel())
	}
	r.mu.Lock()
	stopped := r.stopPending
	r.mu.Unlock()
	if stopped != "" {
		// Cancelled while it was starting: it ends at once, run-start then
		// run-finish, and the agent sees its context cancelled.
		r.stop(stopped)
	}
	return nil
}

// checkThread reports a thread that is gone, or that another user owns
// now, as *ThreadNotFoundError.
func (m *Runs) checkThread(req StartRequest) error {
	if m.threads == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	t, err := m.threads.GetThread(ctx, req.ThreadID)
	switch {
	case errors.Is(err, ErrNotFound), err == nil && req.UserID != "" && t.OwnerID != req.UserID:
		return &ThreadNotFoundError{ThreadID: req.ThreadID}
	case err != nil:
		return fmt.Errorf("start run: read thread %q: %w", req.ThreadID, err)
	}
	return nil
}

// beginDelete marks the thread as being deleted until the returned func
// is called: Start refuses it meanwhile (*ThreadNotFoundError), so that no
// run registers between the deletion's cancel and the store's delete,
// where it would outlive its thread.
func (m *Runs) beginDelete(threadID string) (end func()) {
	return m.table.beginDelete(threadID)
}

// workOf returns, at one moment, the thread's active run here and its
// background agents here that match.
func (m *Runs) workOf(threadID string, match func(*BackgroundTask) bool) (*Run, []*BackgroundTask) {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	return m.table.byThread[threadID], m.background.matching(threadID, match)
}

// Gone stops a run whose events the log refused as not found: its thread
// was deleted under it (by another instance, or before the run's start
// could see it), and maybe created again by someone else. The run and its
// background agents stop at once and write nothing more; the writer drops
// what they still queue.
func (m *Runs) Gone(threadID, runID string) {
	r, tasks := m.workOf(threadID, func(t *BackgroundTask) bool { return t.RunID == runID })
	for _, t := range tasks {
		t.cancel(errThreadGone)
	}
	if r == nil || r.ID != runID {
		return
	}
	m.log.Warn("stopping a run whose thread is gone", "thread", threadID, "run", runID)
	// Out of the registry before its agent can return, so that whoever
	// waits for the run's end finds the thread free.
	r.mu.Lock()
	r.finished = true
	r.mu.Unlock()
	m.table.remove(r)
	m.releaseClaim(threadID, runID, r.fence.token())
	r.cancel(errThreadGone)
}

// Active returns the thread's active run, if any.
func (m *Runs) Active(threadID string) *Run { return m.table.get(threadID) }

// Count returns the number of active runs.
func (m *Runs) Count() int { return m.table.count() }

// ControlOutcome says what a request that steers a run (a cancel, an
// answer) came to.
type ControlOutcome string

const (
	// Applied: the request took effect. For a cancel, none of the
	// thread's work runs any more: it was stopped here, or by the instance
	// that ran it within the wait, or settled here (no live process held
	// it), or nothing was running. For an answer, the run took it and
	// went on.
	Applied ControlOutcome = "applied"
	// Accepted: the request is recorded in the database, but the
	// instance that runs the work has not acted on it within the wait; it
	// does at its next lease renewal at the latest.
	Accepted ControlOutcome = "accepted"
)

// Cancel stops the thread's active run and its background agents, if any,
// wherever they run. It is idempotent. A run of this process is finished
// (cancelled) before it returns; each background agent ends with
// agent-completed{status:"cancelled"} as soon as it stops. Work another
// instance runs is asked to stop in the database, where its owner reads
// the request with its next lease renewal (the bus tells it at once when
// it can), and Cancel waits (a few seconds at most) until every row of the
// thread's work let go: then the outcome is Applied, otherwise
// Accepted. A run no live process holds (suspended on a
// confirmation, or left by a dead instance) is taken and settled here. An
// error means the request could not be recorded, and no work of the
// thread was stopped here: the cancel may not happen.
func (m *Runs) Cancel(threadID, reason string) (*Run, ControlOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteCancelWait)
	defer cancel()
	asked, askErr := m.leases.claims.RequestCancel(ctx, threadID, reason)
	m.control.SendControl(Control{Kind: ControlCancel, ThreadID: threadID, Reason: reason})
	local := m.cancelLocal(threadID, reason)
	stoppedHere := local != nil || m.hasBackground(threadID)
	ref := local
	if askErr != nil {
		if !stoppedHere {
			return nil, "", fmt.Errorf("cancel: record the request: %w", askErr)
		}
		m.log.Warn("cancel: could not record the request; stopped what runs here", "thread", threadID, "err", askErr)
		return ref, Applied, nil
	}
	if !asked && !stoppedHere {
		return nil, Applied, nil // nothing runs
	}
	if local == nil {
		row, err := m.leases.claims.ActiveRun(ctx, threadID)
		switch {
		case err == nil:
			ref = &Run{ID: row.RunID, StartRequest: StartRequest{ThreadID: threadID}}
			if row.Free(m.now()) {
				if err := m.settleUnheld(ctx, row, reason); err != nil {
					m.log.Error("could not cancel a run no process holds", "thread", threadID, "run", row.RunID, "err", err)
				}
			}
		case !errors.Is(err, ErrNotFound):
			m.log.Error("cancel: could not read the thread's active run", "thread", threadID, "err", err)
		}
	}
	if m.waitCancelled(ctx, threadID) {
		return ref, Applied, nil
	}
	return ref, Accepted, nil
}

// hasBackground reports whether background agents of the thread work here.
func (m *Runs) hasBackground(threadID string) bool {
	return m.background.any(threadID, func(*BackgroundTask) bool { return true })
}

// waitCancelled waits until no row of the thread carries a cancel request
// (the work let go of them), or ctx ends; it reports which.
func (m *Runs) waitCancelled(ctx context.Context, threadID string) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pending, err := m.leases.claims.CancelPending(ctx, threadID)
		if err == nil && !pending {
			return true
		}
		select {
		case <-ctx.Done():
			m.log.Warn("a cancelled run's instance did not let go of it in time; it stops it at its next lease renewal",
				"thread", threadID)
			return false
		case <-tick.C:
		}
	}
}

// cancelLocal stops what this process runs of the thread: its background
// agents and its active run. It returns the run it stopped, if any.
func (m *Runs) cancelLocal(threadID, reason string) *Run {
	for _, t := range m.background.ofThread(threadID) {
		t.cancel(cancelled{reason})
	}
	r := m.Active(threadID)
	if r == nil {
		return nil
	}
	r.stop(reason)
	return r
}

// drainPoll is how often Drain looks whether the runs are done.
const drainPoll = 50 * time.Millisecond

// Drain refuses new runs (Start gives ErrDraining) and waits until the
// runs working on this instance are done, or ctx ends: runs suspended on
// a confirmation do not count, since Shutdown hands them over, but
// background agents do. It returns how many are still working. A rolling
// restart drains each instance, so runs finish instead of being cancelled.
func (m *Runs) Drain(ctx context.Context) int {
	m.table.drain()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		n := m.atWork()
		if n == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
	}
}

// Draining reports whether Drain began.
func (m *Runs) Draining() bool { return m.table.isDraining() }

// allWork returns, at one moment, the runs and the background agents at
// work here.
func (m *Runs) allWork() ([]*Run, []*BackgroundTask) {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	return m.table.allLocked(), m.background.all()
}

// atWork counts the runs and background agents still at work here.
func (m *Runs) atWork() int {
	runs, tasks := m.allWork()
	n := len(tasks)
	// A run's own lock is taken with the table's released, as everywhere
	// else.
	for _, r := range runs {
		r.mu.Lock()
		if r.waiting.asked == 0 {
			n++
		}
		r.mu.Unlock()
	}
	return n
}

// Shutdown cancels every active run (reason service_shutdown) and waits for
// their agents to return, or ctx to end.
func (m *Runs) Shutdown(ctx context.Context) error {
	runs, tasks := m.allWork()
	for _, t := range tasks {
		t.cancel(cancelled{ReasonServiceShutdown})
	}
	for _, r := range runs {
		r.mu.Lock()
		// A run that waits for a person whose request is out; one that
		// stored its suspension but has not queued the request yet is
		// stopped like a working one: nobody could answer it.
		waiting := r.waiting.asked > 0
		r.mu.Unlock()
		if waiting && m.agentResumes() {
			// Waiting for a person: keep it suspended, owned by no process,
			// for whichever instance gets the answer.
			r.cancel(errSuspendedAtShutdown)
			m.table.remove(r)
			if err := m.leases.claims.DisownRun(context.Background(), r.ThreadID, r.ID, r.fence.token()); err != nil {
				m.log.Error("could not hand over a suspended run", "thread", r.ThreadID, "run", r.ID, "err", err)
			}
			continue
		}
		r.stop(ReasonServiceShutdown)
	}
	done := make(chan struct{})
	go func() { m.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fail ends a run whose events could not be stored; the writer has already
// published its error and run-finish live. Its background agents stop too
// (see failAgents).
func (m *Runs) Fail(threadID, runID string, err error) {
	m.failAgents(threadID, runID, "", err)
	r := m.Active(threadID)
	if r == nil || r.ID != runID {
		return
	}
	r.cancel(err)
	r.mu.Lock()
	was := r.finished
	r.finished = true
	r.mu.Unlock()
	m.table.remove(r)
	// The writer queued its run-finish{error, storage_unavailable}.
	if ro, ok := m.obs.(RunObserver); ok && !was {
		ro.RunFinished(r.agentLabel(), RunError)
	}
}

// cancelled is the cause a run's context is cancelled with; it carries the
// run-finish reason, so whichever of the canceller and the run's own
// goroutine finishes the run first records the same reason.
type cancelled struct{ reason string }

func (c cancelled) Error() string { return "run cancelled: " + c.reason }

// IsCancelled reports whether err is a run's cancellation, as Emit returns
// it while a cancel is under way.
func IsCancelled(err error) bool {
	var c cancelled
	return errors.As(err, &c)
}

// stop cancels the run's context and finishes it as cancelled, unless
// another instance took it meanwhile.
func (r *Run) stop(reason string) {
	r.mu.Lock()
	if !r.begun {
		// Its run-start is not queued yet: a run-finish now would precede
		// it. Start finishes the run as soon as it has queued it.
		if r.stopPending == "" {
			r.stopPending = reason
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	if !r.retake() {
		return
	}
	r.cancel(cancelled{reason})
	r.runs.closeAwaited(r)
	r.finish(RunCancelled, reason)
}

func (m *Runs) execute(r *Run, body func(ctx context.Context) error) {
	defer m.running.Done()
	defer close(r.done)
	// A run left suspended or taken over ends here without a run-finish;
	// a finished run's span has ended already, and ending it again does
	// nothing.
	defer endSpan(r.span, "suspended", false)
	err := m.callAgent(r, body)
	switch {
	case errors.Is(context.Cause(r.ctx), errSuspendedAtShutdown), errors.Is(context.Cause(r.ctx), errLeaseLost):
		// Left suspended on purpose, or taken over by another instance: no
		// run-finish from here.
	case r.ctx.Err() != nil:
		// Cancelled, or failed by the writer (then already finished).
		var c cancelled
		if errors.As(context.Cause(r.ctx), &c) {
			r.finish(RunCancelled, c.reason)
		}
	case err != nil:
		m.log.Warn("agent failed", "thread", r.ThreadID, "run", r.ID, "err", err)
		payload := &ErrorPayload{Content: err.Error()}
		var (
			pe    *ProviderError
			rule  *RuleError
			limit *LimitError
		)
		switch {
		case errors.As(err, &pe):
			payload = &ErrorPayload{Content: pe.Message, StatusCode: pe.StatusCode, Code: pe.Code,
				Provider: pe.Provider, TechnicalDetails: pe.Details}
		case errors.As(err, &rule):
			// The agent emitted what the log does not take: its run ends
			// with the rule named, whoever the agent was.
			payload.Code, payload.TechnicalDetails = CodeRuleBroken, rule.Rule
		case errors.As(err, &limit):
			payload.Code = limit.Code
		}
		_ = r.Emit(Event{Type: TypeError, Payload: payload})
		r.finish(RunError, err.Error())
	default:
		r.finish(RunCompleted, "")
	}
}

// agentResumes reports whether the agent can continue runs suspended
// across a restart.
func (m *Runs) agentResumes() bool {
	_, ok := m.agent.(Resumer)
	return ok && m.confirmations.store != nil
}

// callAgent runs the agent, turning a panic into an error.
func (m *Runs) callAgent(r *Run, body func(ctx context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			m.log.Error("agent panicked", "thread", r.ThreadID, "run", r.ID, "panic", p)
			err = fmt.Errorf("agent failed unexpectedly: %v", p)
		}
	}()
	return body(r.ctx)
}

// Run is one active run: what agents emit through.
type Run struct {
	ID string
	// StartRequest is what started the run: its thread, user, message,
	// client tools, tool result, agent name, history and context. A run
	// resumed after a restart has its thread and user only.
	StartRequest
	// AgentID is the orchestrator's agent id (orchestrator-<runId>).
	AgentID string

	runs   *Runs
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	// fence holds the token of the run's claim (0 until it is claimed),
	// which its events are written under.
	fence *fence
	// marks are the run table's, under its lock.
	marks tableMarks

	mu sync.Mutex
	// stopPending is a stop asked before the run-start was queued, which
	// Start carries out right after it.
	stopPending string
	doorState
	waiting personWait
	usage   []TokenUsage
	// span runs from the run's start to its run-finish.
	span trace.Span
}

// doorState is what the run's door (its Emit) keeps, under the run's lock.
type doorState struct {
	finished bool // the orchestrator's run-finish is queued
	// begun is set once the run-start is queued.
	begun bool
	// rules are what the run's door checks events against (its agents
	// and open tool calls); meter measures its open segments.
	rules *runRules
	meter segmentMeter
	// live background agents, with the token holders their events are
	// written under: their events are accepted after the orchestrator's
	// run-finish, until their agent-completed.
	liveAgents map[string]*fence
	started    time.Time // for the time-to-first-text measurement
	sawText    bool
}

// personWait is what the run knows of the confirmations it waits for,
// under the run's lock.
type personWait struct {
	suspended int      // confirmations being waited for
	awaiting  []string // their request ids
	// asked counts those whose confirmation-request is queued: a client
	// can answer them.
	asked int
	// disowned is set while the run waits for a person with its row
	// owned by no process (see Runs.disownWhileWaiting).
	disowned bool
}

// Sync waits until everything queued for the run's thread so far is in the
// log: an agent that reads the thread's conversation from storage calls it
// first, so that the previous run's last events and a client's tool result
// queued at Start are there to read. It reports an event of the run that
// the writer dropped instead of storing (*NotStoredError, or
// *ThreadNotFoundError for a thread deleted under the run), so that
// nobody is told of events in the log that are not there; a run whose
// events are dropped has ended, or is another instance's.
func (r *Run) Sync(ctx context.Context) error {
	if err := r.runs.writer.Sync(ctx, r.ThreadID); err != nil {
		return err
	}
	return r.fence.lostWith()
}

// NotStored is why the writer dropped an event of the run instead of
// storing it (nil: it dropped none so far): its run was taken over by
// another instance, failed by the store, or its thread deleted.
func (r *Run) NotStored() error { return r.fence.lostWith() }

// AddUsage adds the tokens a model call spent to the run's total, which its
// run-finish carries. Calls for the same provider and model are summed.
func (r *Run) AddUsage(u TokenUsage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.usage {
		if r.usage[i].Provider == u.Provider && r.usage[i].Model == u.Model {
			r.usage[i].InputTokens += u.InputTokens
			r.usage[i].OutputTokens += u.OutputTokens
			r.usage[i].TotalTokens += u.TotalTokens
			return
		}
	}
	r.usage = append(r.usage, u)
}

// Done is closed when the run's agent has returned.
func (r *Run) Done() <-chan struct{} { return r.done }

// finish closes what the run leaves open (its calls and agents; see
// closeOpenLocked) and emits run-finish, once.
func (r *Run) finish(status, reason string) {
	r.mu.Lock()
	finished := r.finishLocked(status, reason)
	r.mu.Unlock()
	if finished {
		r.afterFinish(status, reason)
	}
}

// finishLocked is the part of finish under the run's lock: it reports
// whether it queued the run-finish (false: the run had finished). The
// caller, once it let go of the lock, calls afterFinish.
func (r *Run) finishLocked(status, reason string) bool {
	if r.finished {
		return false
	}
	now := r.runs.now().UnixMilli()
	r.closeOpenLocked(status, now)
	// The run leaves the registry in the same step as its run-finish is
	// queued: a client that sees the run-finish finds the thread free, and
	// a next run's run-start cannot be queued before it.
	m := r.runs
	// Counted before the run-finish is queued: whoever sees it sees the
	// run counted.
	if ro, ok := m.obs.(RunObserver); ok {
		ro.RunFinished(r.agentLabel(), status)
	}
	m.table.mu.Lock()
	r.enqueueLocked(Event{Type: TypeRunFinish, AgentID: r.AgentID, TS: now,
		Payload: &RunFinish{Status: status, Reason: reason, Usage: slices.Clone(r.usage)}}, r.fence)
	m.table.removeLocked(r)
	r.unshareClaimLocked()
	m.table.mu.Unlock()
	r.finished = true
	return true
}

// afterFinish is what follows a run's finish outside its lock: its span
// ends, and the log says so.
func (r *Run) afterFinish(status, reason string) {
	endSpan(r.span, status, status == RunError)
	r.runs.log.Info("run finished", "thread", r.ThreadID, "run", r.ID, "status", status, "reason", reason,
		"took", time.Since(r.started).Round(time.Millisecond))
}

// unshareClaimLocked gives the run's live background agents that write
// under the run's claim (they could not claim a row of their own) a holder
// of their own with no token: the run's row goes once its run-finish is
// stored, and their later events, refused under its token, would be lost.
// What they queued before commits with or before the run-finish, under the
// run's token. Nothing is left to fence them with from here. r.mu and
// the run table's lock are held.
func (r *Run) unshareClaimLocked() { r.runs.background.unshareClaim(r) }

// endSpan ends a run's span with its status. A failure's reason is not
// recorded: it may quote the upstream's answer, which may quote the
// conversation.
func endSpan(span trace.Span, status string, failed bool) {
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("run.status", status))
	if failed {
		span.SetStatus(codes.Error, "run "+status)
	}
	span.End()
}
