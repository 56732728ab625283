package instanceai

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

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
	// and open tool calls); meter measures its open segments, names
	// names those that came without a responseId.
	rules *runRules
	meter segmentMeter
	names segmentNamer
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
