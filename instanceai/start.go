package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/internal/tracing"
)

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
