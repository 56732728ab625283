package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Answer kinds accepted by the confirm endpoint.
const (
	AnswerApproval  = "approval"
	AnswerQuestions = "questions"
	AnswerText      = "text"
)

// ConfirmationCancelled marks a confirmation whose run ended unanswered.
const ConfirmationCancelled = "cancelled"

// QuestionAnswer answers one question of a questions-style confirmation
// (n8n's shape).
type QuestionAnswer struct {
	QuestionID      string   `json:"questionId"`
	SelectedOptions []string `json:"selectedOptions"`
	CustomText      string   `json:"customText,omitempty"`
	Skipped         bool     `json:"skipped,omitempty"`
}

// Answer is a person's answer to a confirmation request: the seed's
// {approved, userInput?} or n8n's kind union for approval, questions and
// text input.
type Answer struct {
	Kind      string           `json:"kind,omitempty"`
	Approved  bool             `json:"approved"`
	UserInput string           `json:"userInput,omitempty"`
	Scope     string           `json:"scope,omitempty"`
	Answers   []QuestionAnswer `json:"answers,omitempty"`
}

// ErrConfirmationClosed is returned for an answer to a confirmation whose
// run is no longer waiting for it.
var ErrConfirmationClosed = errors.New("confirmation is no longer awaited")

// ConfirmationExpiredError is Answer's refusal of an answer other than a
// denial to a confirmation past its expiry (RunsConfig.Expired).
type ConfirmationExpiredError struct {
	RequestID string
	At        string
}

func (e *ConfirmationExpiredError) Error() string {
	return fmt.Sprintf("confirmation %q expired at %s: it can only be denied", e.RequestID, e.At)
}

// confirmations are the confirmation requests of the runs: where they
// are stored, when an answer comes too late, and the runs of this process
// that wait for an answer, by request id (each answer goes to its run's
// channel).
type confirmations struct {
	store ConfirmationStore // nil: agents cannot ask for approval
	// expired reports whether a pending confirmation may now only be
	// denied (see RunsConfig.Expired); nil: none expire.
	expired func(c *Confirmation, now time.Time) (at string, expired bool)

	mu      sync.Mutex
	waiters map[string]chan Answer
}

// await opens a wait for the request's answer.
func (c *confirmations) await(requestID string) chan Answer {
	wait := make(chan Answer, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters[requestID] = wait
	return wait
}

func (c *confirmations) stopWaiting(requestID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiters, requestID)
}

// waiter returns the wait for the request's answer, nil when none is open.
func (c *confirmations) waiter(requestID string) chan Answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiters[requestID]
}

// awaited returns the requests waited for here.
func (c *confirmations) awaited() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.waiters))
	for id := range c.waiters {
		ids = append(ids, id)
	}
	return ids
}

// Confirm publishes a confirmation-request for a tool call and suspends the
// caller until a person answers or ctx ends. The request is stored first,
// so it survives a restart and the status endpoint reports the run as
// suspended meanwhile. agentID "" means the orchestrator.
func (r *Run) Confirm(ctx context.Context, agentID string, req ConfirmationRequest) (Answer, error) {
	m := r.runs
	if m.confirmations.store == nil {
		return Answer{}, errors.New("confirmations need a confirmation store")
	}
	if req.RequestID == "" {
		req.RequestID = NewID("cr_")
	}
	if agentID == "" {
		agentID = r.AgentID
	}
	ev := Event{Type: TypeConfirmRequest, RunID: r.ID, AgentID: agentID, Payload: &req}
	if err := ev.Validate(); err != nil {
		return Answer{}, err
	}
	raw, err := json.Marshal(&req)
	if err != nil {
		return Answer{}, err
	}
	wait := m.confirmations.await(req.RequestID)
	defer m.confirmations.stopWaiting(req.RequestID)
	if err := m.confirmations.store.AddConfirmation(ctx, Confirmation{
		RequestID: req.RequestID, ThreadID: r.ThreadID, RunID: r.ID, AgentID: agentID, ToolCallID: req.ToolCallID,
		OwnerID: r.UserID, Request: raw, Status: ConfirmationPending, CreatedAt: m.now(), Fence: m.fenceOf(r, agentID),
	}); err != nil {
		if errors.Is(err, ErrStaleFence) {
			// Another instance took the run (or this agent) and settles
			// it: the request was not stored, and nothing more is written.
			m.Fenced(r.ThreadID, r.ID, r.liveAgentID(agentID))
			return Answer{}, errLeaseLost
		}
		return Answer{}, fmt.Errorf("store confirmation: %w", err)
	}
	// The suspension is stored before the request goes out, and the run
	// disowned only once the request is in the log (see disownWhileWaiting): a
	// process that dies before then leaves a run its lease expires on, which
	// the sweep settles, and never a run that waits for a request nobody
	// was sent.
	r.mu.Lock()
	r.waiting.suspended++
	first := r.waiting.suspended == 1
	r.waiting.awaiting = append(r.waiting.awaiting, req.RequestID)
	r.mu.Unlock()
	if first {
		m.markSuspended(r, true)
	}
	defer func() {
		r.mu.Lock()
		r.waiting.suspended--
		last := r.waiting.suspended == 0
		r.waiting.awaiting = slices.DeleteFunc(r.waiting.awaiting, func(id string) bool { return id == req.RequestID })
		r.mu.Unlock()
		if last && ctx.Err() == nil {
			m.markSuspended(r, false)
		}
	}()
	// Only once the request is queued is it on its way to a client: a
	// shutdown hands over a run that waits so, and stops one that has not
	// asked yet. emitQuestion counts it in the step that queues it, not
	// after (a shutdown in between stopped the run and closed a question
	// a client may already hold) nor at the hand-over below, which waits
	// for the log.
	if err := r.emit(ev, emitQuestion); err != nil {
		m.closeConfirmation(req.RequestID)
		return Answer{}, err
	}
	defer func() {
		r.mu.Lock()
		r.waiting.asked--
		r.mu.Unlock()
	}()
	if first {
		m.disownWhileWaiting(ctx, r)
	}
	select {
	case a := <-wait:
		if !r.retake() {
			// Another instance took the run while it waited (it got the
			// answer, or a cancel) and goes on with it.
			return Answer{}, errLeaseLost
		}
		return a, nil
	case <-ctx.Done():
		cause := context.Cause(ctx)
		if !errors.Is(cause, errSuspendedAtShutdown) && !errors.Is(cause, errLeaseLost) {
			m.closeConfirmation(req.RequestID)
		}
		return Answer{}, cause
	}
}

// fenceOf is the token a confirmation of the run's agent is stored under:
// a live background agent's claim's, else the run's; none when the
// registry's claims are not the store's.
func (m *Runs) fenceOf(r *Run, agentID string) int64 {
	if !m.leases.fenced {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holderLocked(agentID).token()
}

// liveAgentID is agentID when it is a live background agent of the run
// with a claim of its own, else "" (the run's claim covers it).
func (r *Run) liveAgentID(agentID string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.liveAgents[agentID]; f != nil && f != r.fence {
		return agentID
	}
	return ""
}

// closeConfirmation marks an unanswered confirmation as cancelled, so that
// it is not reported as pending once its run is gone.
func (m *Runs) closeConfirmation(requestID string) {
	err := m.confirmations.store.AnswerConfirmation(context.Background(), requestID, ConfirmationCancelled, nil)
	if err != nil && !errors.Is(err, ErrAlreadyAnswered) {
		m.log.Warn("could not close confirmation", "request", requestID, "err", err)
	}
}

// markSuspended records in the run's claim whether it waits for a person,
// so that no sweep takes a waiting run for a dead one while its owner's
// heartbeat renews it.
func (m *Runs) markSuspended(r *Run, suspended bool) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	m.logSuspensionUpdate(r, m.leases.claims.SuspendRun(ctx, r.ThreadID, r.ID, r.fence.token(), suspended))
}

// disownWhileWaiting hands a suspended run the agent can resume to no
// process once its confirmation-request is in the log: whichever instance
// gets the answer (or a cancel) then takes it with a conditional update,
// even after this process died. The waiting goroutine here must retake it
// to go on (see retake). Until the request is stored the run stays owned,
// so that a crash before then is swept like any other: a suspended run with
// no owner is never swept, and one whose request was lost would wait
// forever.
func (m *Runs) disownWhileWaiting(ctx context.Context, r *Run) {
	if !m.agentResumes() {
		return
	}
	if err := r.Sync(ctx); err != nil || context.Cause(r.ctx) != nil {
		// The wait ends (ctx) or the run was stopped, or its write failed
		// (the run's context ends with it): nothing is handed over.
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	r.mu.Lock()
	waiting := r.waiting.suspended > 0
	r.mu.Unlock()
	if !waiting {
		return
	}
	err := m.leases.claims.DisownRun(sctx, r.ThreadID, r.ID, r.fence.token())
	if err == nil {
		r.mu.Lock()
		r.waiting.disowned = true
		r.mu.Unlock()
	}
	m.logSuspensionUpdate(r, err)
}

// logSuspensionUpdate logs a failed update of a waiting run's claim.
func (m *Runs) logSuspensionUpdate(r *Run, err error) {
	switch {
	case errors.Is(err, ErrStaleFence):
		// Taken by another instance: the run's next write is refused, and
		// stops it.
		m.log.Warn("could not record a run's suspension: another instance took the run", "thread", r.ThreadID, "run", r.ID)
	case err != nil:
		m.log.Error("could not record a run's suspension", "thread", r.ThreadID, "run", r.ID, "err", err)
	}
}

// retake makes a disowned run this process's again before it goes on or
// finishes: the take gives it a new token, which what it queued before
// commits with too. When another instance took it first, the run is
// abandoned here and retake reports false.
func (r *Run) retake() bool {
	r.mu.Lock()
	disowned := r.waiting.disowned
	r.mu.Unlock()
	if !disowned {
		return true
	}
	m := r.runs
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	r.fence.mu.Lock()
	token, won, err := m.leases.takeRun(ctx, r.ThreadID, r.ID)
	if won {
		r.fence.v.Store(token)
		r.mu.Lock()
		r.waiting.disowned = false
		r.mu.Unlock()
	}
	r.fence.mu.Unlock()
	if err != nil {
		m.log.Error("could not retake a suspended run", "thread", r.ThreadID, "run", r.ID, "err", err)
	}
	if !won {
		m.stopTakenOver(r, "another instance took the suspended run before it could go on")
		return false
	}
	return true
}

// Answer records a person's answer and hands it to the waiting run,
// wherever it runs: in this process directly, on another instance through
// a control message (the answer is stored first, so the owner reads it
// from the database), and when no live process runs it (suspended across a
// restart, or its instance died) by taking the run and resuming it here.
// An unknown request, one of another user, or one of a thread outside
// ctx's thread limit is ErrNotFound; a second
// answer is ErrAlreadyAnswered; a request whose run stopped waiting (it was
// cancelled, or its agent cannot resume) is ErrConfirmationClosed. It
// returns the request's run id, and whether the run took the answer
// (Applied) or the answer is stored and the instance that runs the run
// takes it at its next lease renewal at the latest (Accepted): it waits a
// few seconds for a run of another instance to go on.
func (m *Runs) Answer(ctx context.Context, userID, requestID string, a Answer) (string, ControlOutcome, error) {
	if m.confirmations.store == nil {
		return "", "", ErrNotFound
	}
	c, err := m.confirmations.store.GetConfirmation(ctx, requestID)
	if err != nil {
		return "", "", err
	}
	if c.OwnerID != userID || !ThreadAllowed(ctx, c.ThreadID) {
		return "", "", ErrNotFound
	}
	switch c.Status {
	case ConfirmationPending:
	case ConfirmationCancelled:
		// Closed by its run's end (a cancel, a sweep), not answered.
		return c.RunID, "", ErrConfirmationClosed
	default:
		return c.RunID, "", ErrAlreadyAnswered
	}
	if a.Approved && m.confirmations.expired != nil {
		if at, gone := m.confirmations.expired(&c, m.now()); gone {
			return c.RunID, "", &ConfirmationExpiredError{RequestID: requestID, At: at}
		}
	}
	outcome, err := m.answer(ctx, &c, a)
	return c.RunID, outcome, err
}

// answer records a pending confirmation's answer and hands it to its run.
func (m *Runs) answer(ctx context.Context, c *Confirmation, a Answer) (ControlOutcome, error) {
	requestID := c.RequestID
	m.table.mu.Lock()
	wait := m.confirmations.waiter(requestID)
	live := m.table.isLocked(c.ThreadID, c.RunID)
	m.table.mu.Unlock()
	remote, free := false, false
	if wait == nil && !live {
		row, err := m.leases.claims.ActiveRun(ctx, c.ThreadID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return "", err
		}
		if err == nil && row.RunID == c.RunID {
			free = row.Free(m.now())
			remote = !free
		}
	}
	if wait == nil && !remote && (!free || !m.agentResumes()) {
		m.closeConfirmation(requestID)
		return "", ErrConfirmationClosed
	}
	status := ConfirmationDenied
	if a.Approved {
		status = ConfirmationApproved
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	if err := m.confirmations.store.AnswerConfirmation(ctx, requestID, status, raw); err != nil {
		if errors.Is(err, ErrAlreadyAnswered) {
			// Closed or answered since it was read: say which.
			if now, gerr := m.confirmations.store.GetConfirmation(ctx, requestID); gerr == nil && now.Status == ConfirmationCancelled {
				return "", ErrConfirmationClosed
			}
		}
		return "", err
	}
	switch {
	case wait != nil:
		select {
		case wait <- a:
		default: // cannot happen: one answer wins the store's compare-and-set
		}
	case remote:
		// The owner reads the stored answer at its next heartbeat, or at
		// once when the bus brings this word.
		m.control.SendControl(Control{Kind: ControlAnswer, ThreadID: c.ThreadID, RequestID: requestID})
		return m.waitAnswered(ctx, c), nil
	default:
		// A process that still waits for it in memory wakes, fails to
		// retake the run and lets go of it.
		m.control.SendControl(Control{Kind: ControlAnswer, ThreadID: c.ThreadID, RequestID: requestID})
		token, won, err := m.leases.takeRun(ctx, c.ThreadID, c.RunID)
		if err != nil {
			return "", err
		}
		if won {
			return Applied, m.resume(c, a, token)
		}
		// Another instance took the run first; the stored answer is what
		// it resumes with.
	}
	return Applied, nil
}

// waitAnswered waits (a few seconds at most) until the run of c, which
// another instance runs, went on from it: its row no longer waits for a
// person, or the run is over.
func (m *Runs) waitAnswered(ctx context.Context, c *Confirmation) ControlOutcome {
	ctx, cancel := context.WithTimeout(ctx, remoteCancelWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		row, err := m.leases.claims.ActiveRun(ctx, c.ThreadID)
		if errors.Is(err, ErrNotFound) || (err == nil && (row.RunID != c.RunID || !row.Suspended)) {
			return Applied
		}
		select {
		case <-ctx.Done():
			return Accepted
		case <-tick.C:
		}
	}
}

// deliverStoredAnswers hands the runs of this process that wait for a
// person the answers stored for them meanwhile: an answer given through
// another instance reaches its run by the bus at once, or by this, the
// heartbeat's look, at the latest.
func (m *Runs) deliverStoredAnswers() {
	for _, id := range m.confirmations.awaited() {
		m.deliverAnswer(id)
	}
}

// Awaited returns the thread's pending confirmations that a run waits for:
// in this process, on another live instance, or suspended with no process
// when the agent can resume it. Oldest first.
func (m *Runs) Awaited(ctx context.Context, threadID string) ([]Confirmation, error) {
	if m.confirmations.store == nil {
		return nil, nil
	}
	pending, err := m.confirmations.store.PendingConfirmations(ctx, threadID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	row, rowErr := m.leases.claims.ActiveRun(ctx, threadID)
	if rowErr != nil && !errors.Is(rowErr, ErrNotFound) {
		return nil, rowErr
	}
	resumes := m.agentResumes()
	now := m.now()
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	var out []Confirmation
	for _, c := range pending {
		waiting := m.confirmations.waiter(c.RequestID) != nil
		live := m.table.isLocked(threadID, c.RunID)
		elsewhere := !live && rowErr == nil && row.RunID == c.RunID && row.Suspended && (!row.Free(now) || resumes)
		if waiting || elsewhere {
			out = append(out, c)
		}
	}
	return out, nil
}

// closeAwaited closes the confirmations a cancelled run waits for, before
// the cancel returns: an answer that arrives afterwards is refused (409)
// instead of being recorded for a run that will never use it.
func (m *Runs) closeAwaited(r *Run) {
	r.mu.Lock()
	ids := slices.Clone(r.waiting.awaiting)
	r.mu.Unlock()
	for _, id := range ids {
		m.confirmations.stopWaiting(id)
		m.closeConfirmation(id)
	}
}
