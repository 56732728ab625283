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
	"sync/atomic"
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
type Runs struct {
	writer   *Writer
	agent    Agent
	confirms ConfirmationStore
	log      *slog.Logger
	now      func() time.Time
	expired  func(c *Confirmation, now time.Time) (string, bool)
	limits   Limits
	obs      Observer
	claims   RunClaims
	agentsDB AgentClaims // nil when Claims keeps no agent rows
	index    RunIndex
	// liveUntil is when, in Unix nanoseconds, this instance's text stops
	// going out live unless its leases are renewed (0: no limit); see
	// LiveHeld.
	liveUntil atomic.Int64
	// peers, when set, lists the live instances (the store's registry):
	// see leaveToPeer.
	peers func(ctx context.Context) ([]Instance, error)
	// born is when this process's registry began: runs whose owner last
	// renewed their lease before it may have streamed text its hub never
	// heard.
	born time.Time
	// heard, when set, says whether this instance heard the run's live
	// frames from its start (the bus routes by thread): see leaveToPeer.
	heard func(threadID, runID string) bool
	// liveText, when set, gives the text this instance's hub passed on of
	// a run's open segments (see openText).
	liveText func(threadID, runID string) ([]Event, []int64)
	// fenced is set when the claims are the store's, so that writes carry
	// their tokens (see RunsConfig.Claims).
	fenced   bool
	instance string
	lease    time.Duration
	control  Controller

	mu         sync.Mutex
	active     map[string]*Run              // by thread id
	background map[string][]*BackgroundTask // running tasks by thread id
	ended      endedAgents                  // ended tasks whose rows are still held (see letGoAgent)
	waiters    map[string]chan Answer       // open confirmations by request id
	// strays are rows this instance owns with no live run behind them, by
	// how many heartbeats in a row they were seen so (see Maintain).
	strays map[heldRow]int
	// deleting counts the deletions under way per thread: a run does not
	// start on a thread while one is (see beginDelete).
	deleting map[string]int
	threads  ThreadReader
	// draining refuses new runs (see Drain).
	draining bool
	wg       sync.WaitGroup
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
	m := &Runs{writer: writer, agent: agent, confirms: cfg.Confirmations, log: cfg.Logger, now: cfg.Now, obs: cfg.Observer, fenced: fenced,
		claims: cfg.Claims, index: cfg.Index, instance: cfg.Instance, lease: cfg.Lease, control: cfg.Control,
		active: map[string]*Run{}, background: map[string][]*BackgroundTask{}, waiters: map[string]chan Answer{},
		strays: map[heldRow]int{}, deleting: map[string]int{}, threads: cfg.Threads, expired: cfg.Expired, limits: cfg.Limits, born: time.Now()}
	m.agentsDB, _ = cfg.Claims.(AgentClaims)
	writer.onRunFinished(m.runFinished)
	return m
}

// Instance returns this process's instance id.
func (m *Runs) Instance() string { return m.instance }

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
	if req.RunID != "" && !ValidThreadID(req.RunID) {
		return nil, &InvalidRunIDError{RunID: req.RunID}
	}
	if req.Work == nil {
		if err := m.CheckAgent(req.AgentName); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	if r := m.active[req.ThreadID]; r != nil {
		m.mu.Unlock()
		return r, &RunActiveError{ThreadID: req.ThreadID, RunID: r.ID}
	}
	if m.draining {
		m.mu.Unlock()
		return nil, ErrDraining
	}
	if m.deleting[req.ThreadID] > 0 {
		m.mu.Unlock()
		return nil, &ThreadNotFoundError{ThreadID: req.ThreadID}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	id := req.RunID
	if id == "" {
		id = NewID("run_")
	}
	// The run outlives its request, so its context is not the request's;
	// its span still continues the request's trace.
	agentName := req.agentLabel()
	if agentName == "" {
		agentName = "default"
	}
	ctx, span := tracing.Start(trace.ContextWithSpanContext(ctx, req.Trace), "run",
		attribute.String("thread.id", req.ThreadID), attribute.String("run.id", id), attribute.String("agent", agentName))
	r := &Run{
		ID: id, StartRequest: req, span: span,
		runs: m, ctx: ctx, cancel: cancel, done: make(chan struct{}), started: time.Now(), fence: newFence(id, "", 0),
		rules: newRunRules(OrchestratorAgentID(id)),
	}
	r.fence.span = span.SpanContext()
	r.AgentID = OrchestratorAgentID(r.ID)
	m.active[req.ThreadID] = r
	m.wg.Add(1)
	m.mu.Unlock()

	if holder, err := m.claim(r); err != nil {
		m.release(r)
		m.wg.Done()
		cancel(err)
		endSpan(span, "not_started", true)
		if errors.Is(err, ErrNotFound) {
			return nil, &ThreadNotFoundError{ThreadID: req.ThreadID}
		}
		return holder, err
	}
	m.mu.Lock()
	r.claimed = true
	m.mu.Unlock()
	// abort undoes a start that failed before its run-start was queued.
	abort := func(err error) {
		m.release(r)
		m.releaseClaim(r.ThreadID, r.ID, r.fence.token())
		m.wg.Done()
		cancel(err)
		endSpan(span, "not_started", true)
	}
	// The caller found the thread before Start, but a deletion may have
	// run in between, and another user may have created a thread with the
	// same id since. The run is registered now, so a deletion that begins
	// from here on cancels it; one that ended before is seen here.
	if err := m.checkThread(req); err != nil {
		abort(err)
		return nil, err
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
			return nil, fmt.Errorf("store the client's tool result: %w", err)
		}
	}

	if err := r.emitStart(); err != nil {
		abort(err)
		// A deletion that began after the check cancelled the run before
		// its run-start: the thread is gone, or about to be (and may have
		// been created again since, by the same user's next chat).
		if m.hitByDelete(r) {
			return nil, &ThreadNotFoundError{ThreadID: req.ThreadID}
		}
		if cerr := m.checkThread(req); errors.Is(cerr, ErrNotFound) {
			return nil, cerr
		}
		if errors.Is(err, ErrRunFinished) {
			// Stopped before it began: its claim was lost (the store did
			// not answer the renewal in time). Nothing of it was written;
			// the client may simply try again.
			return nil, fmt.Errorf("start run: %w", ErrStartLost)
		}
		return nil, fmt.Errorf("start run: %w", err)
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
	m.mu.Lock()
	m.deleting[threadID]++
	if r := m.active[threadID]; r != nil {
		r.deleted = true
	}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.deleting[threadID]--; m.deleting[threadID] <= 0 {
			delete(m.deleting, threadID)
		}
	}
}

// hitByDelete reports whether a deletion of r's thread began while r was
// registered.
func (m *Runs) hitByDelete(r *Run) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return r.deleted
}

// Gone stops a run whose events the log refused as not found: its thread
// was deleted under it (by another instance, or before the run's start
// could see it), and maybe created again by someone else. The run and its
// background agents stop at once and write nothing more; the writer drops
// what they still queue.
func (m *Runs) Gone(threadID, runID string) {
	m.mu.Lock()
	var tasks []*BackgroundTask
	for _, t := range m.background[threadID] {
		if t.RunID == runID {
			tasks = append(tasks, t)
		}
	}
	r := m.active[threadID]
	m.mu.Unlock()
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
	m.release(r)
	m.releaseClaim(threadID, runID, r.fence.token())
	r.cancel(errThreadGone)
}

// Active returns the thread's active run, if any.
func (m *Runs) Active(threadID string) *Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active[threadID]
}

// Count returns the number of active runs.
func (m *Runs) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.active)
}

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
	asked, askErr := m.claims.RequestCancel(ctx, threadID, reason)
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
		row, err := m.claims.ActiveRun(ctx, threadID)
		switch {
		case err == nil:
			ref = &Run{ID: row.RunID, StartRequest: StartRequest{ThreadID: threadID}}
			if row.Free(m.now()) {
				if err := m.settleFree(ctx, row, reason); err != nil {
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
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.background[threadID]) > 0
}

// waitCancelled waits until no row of the thread carries a cancel request
// (the work let go of them), or ctx ends; it reports which.
func (m *Runs) waitCancelled(ctx context.Context, threadID string) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pending, err := m.claims.CancelPending(ctx, threadID)
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
	m.mu.Lock()
	tasks := append([]*BackgroundTask(nil), m.background[threadID]...)
	m.mu.Unlock()
	for _, t := range tasks {
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
	m.mu.Lock()
	m.draining = true
	m.mu.Unlock()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		n := m.working()
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
func (m *Runs) Draining() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.draining
}

// working counts the runs and background agents still at work here.
func (m *Runs) working() int {
	m.mu.Lock()
	runs := make([]*Run, 0, len(m.active))
	for _, r := range m.active {
		runs = append(runs, r)
	}
	n := 0
	for _, ts := range m.background {
		n += len(ts)
	}
	m.mu.Unlock()
	// A run's own lock is taken with the registry's released, as
	// everywhere else.
	for _, r := range runs {
		r.mu.Lock()
		if r.asked == 0 {
			n++
		}
		r.mu.Unlock()
	}
	return n
}

// Shutdown cancels every active run (reason service_shutdown) and waits for
// their agents to return, or ctx to end.
func (m *Runs) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	runs := make([]*Run, 0, len(m.active))
	for _, r := range m.active {
		runs = append(runs, r)
	}
	var tasks []*BackgroundTask
	for _, ts := range m.background {
		tasks = append(tasks, ts...)
	}
	m.mu.Unlock()
	for _, t := range tasks {
		t.cancel(cancelled{ReasonServiceShutdown})
	}
	for _, r := range runs {
		r.mu.Lock()
		// A run that waits for a person whose request is out; one that
		// stored its suspension but has not queued the request yet is
		// stopped like a working one: nobody could answer it.
		waiting := r.asked > 0
		r.mu.Unlock()
		if waiting && m.agentResumes() {
			// Waiting for a person: keep it suspended, owned by no process,
			// for whichever instance gets the answer.
			r.cancel(errSuspendedAtShutdown)
			m.release(r)
			if err := m.claims.DisownRun(context.Background(), r.ThreadID, r.ID, r.fence.token()); err != nil {
				m.log.Error("could not hand over a suspended run", "thread", r.ThreadID, "run", r.ID, "err", err)
			}
			continue
		}
		r.stop(ReasonServiceShutdown)
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
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
	m.release(r)
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

func (m *Runs) release(r *Run) {
	m.mu.Lock()
	if m.active[r.ThreadID] == r {
		delete(m.active, r.ThreadID)
	}
	m.mu.Unlock()
}

func (m *Runs) execute(r *Run, body func(ctx context.Context) error) {
	defer m.wg.Done()
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
	return ok && m.confirms != nil
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
	// claimed is set (under Runs.mu) once the run holds its thread's row:
	// from then on the heartbeat expects to renew it.
	claimed bool
	// disowned is set while the run waits for a person with its row
	// owned by no process (see markSuspended).
	disowned bool
	// deleted is set (under Runs.mu) when a deletion of the thread begins
	// while the run is registered.
	deleted bool
	// fence holds the token of the run's claim (0 until it is claimed),
	// which its events are written under.
	fence *fence

	mu       sync.Mutex
	finished bool // the orchestrator's run-finish is queued
	// begun is set once the run-start is queued; a stop before that is
	// stopPending's, which Start carries out right after it.
	begun       bool
	stopPending string
	// rules are what the run's door checks events against (its agents
	// and open tool calls); meter measures its open segments, names
	// names those that came without a responseId.
	rules *runRules
	meter segmentMeter
	names segmentNamer
	// live background agents, with the token holders their events are
	// written under: their events are accepted after the orchestrator's
	// run-finish, until their agent-completed.
	liveAgents map[string]*fence
	suspended  int      // confirmations being waited for
	awaiting   []string // their request ids
	// asked counts those whose confirmation-request is queued: a client
	// can answer them.
	asked   int
	usage   []TokenUsage
	started time.Time // for the time-to-first-text measurement
	// span runs from the run's start to its run-finish.
	span    trace.Span
	sawText bool
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
	m.mu.Lock()
	r.enqueueLocked(Event{Type: TypeRunFinish, AgentID: r.AgentID, TS: now,
		Payload: &RunFinish{Status: status, Reason: reason, Usage: slices.Clone(r.usage)}}, r.fence)
	if m.active[r.ThreadID] == r {
		delete(m.active, r.ThreadID)
	}
	r.unshareClaimLocked()
	m.mu.Unlock()
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
// Runs.mu are held.
func (r *Run) unshareClaimLocked() {
	for _, t := range r.runs.background[r.ThreadID] {
		if t.RunID == r.ID && t.fence == r.fence && !t.refused {
			t.fence = newFence(r.ID, t.AgentID, 0)
			if r.liveAgents[t.AgentID] != nil {
				r.liveAgents[t.AgentID] = t.fence
			}
		}
	}
}

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
