package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// Confirm publishes a confirmation-request for a tool call and suspends the
// caller until a person answers or ctx ends. The request is stored first,
// so it survives a restart and the status endpoint reports the run as
// suspended meanwhile. agentID "" means the orchestrator.
func (r *Run) Confirm(ctx context.Context, agentID string, req ConfirmationRequest) (Answer, error) {
	m := r.runs
	if m.confirms == nil {
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
	wait := make(chan Answer, 1)
	m.mu.Lock()
	m.waiters[req.RequestID] = wait
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiters, req.RequestID)
		m.mu.Unlock()
	}()
	if err := m.confirms.AddConfirmation(ctx, Confirmation{
		RequestID: req.RequestID, ThreadID: r.ThreadID, RunID: r.ID, AgentID: agentID, ToolCallID: req.ToolCallID,
		OwnerID: r.UserID, Request: raw, Status: ConfirmationPending, CreatedAt: m.now(),
	}); err != nil {
		return Answer{}, fmt.Errorf("store confirmation: %w", err)
	}
	if err := r.Emit(ev); err != nil {
		m.closeConfirmation(req.RequestID)
		return Answer{}, err
	}
	r.mu.Lock()
	r.suspended++
	r.awaiting = append(r.awaiting, req.RequestID)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.suspended--
		r.awaiting = slices.DeleteFunc(r.awaiting, func(id string) bool { return id == req.RequestID })
		r.mu.Unlock()
	}()
	select {
	case a := <-wait:
		return a, nil
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), errSuspendedAtShutdown) {
			m.closeConfirmation(req.RequestID)
		}
		return Answer{}, context.Cause(ctx)
	}
}

// closeConfirmation marks an unanswered confirmation as cancelled, so that
// it is not reported as pending once its run is gone.
func (m *Runs) closeConfirmation(requestID string) {
	err := m.confirms.AnswerConfirmation(context.Background(), requestID, ConfirmationCancelled, nil)
	if err != nil && !errors.Is(err, ErrAlreadyAnswered) {
		m.log.Warn("could not close confirmation", "request", requestID, "err", err)
	}
}

// Answer records a person's answer and hands it to the waiting run. An
// unknown request, or one of another user, is ErrNotFound; a second answer
// is ErrAlreadyAnswered; a request whose run stopped waiting (it was
// cancelled, or the server restarted) is ErrConfirmationClosed. It returns
// the request's run id.
func (m *Runs) Answer(ctx context.Context, userID, requestID string, a Answer) (string, error) {
	if m.confirms == nil {
		return "", ErrNotFound
	}
	c, err := m.confirms.GetConfirmation(ctx, requestID)
	if err != nil {
		return "", err
	}
	if c.OwnerID != userID {
		return "", ErrNotFound
	}
	if c.Status != ConfirmationPending {
		return c.RunID, ErrAlreadyAnswered
	}
	m.mu.Lock()
	wait := m.waiters[requestID]
	live := m.active[c.ThreadID] != nil && m.active[c.ThreadID].ID == c.RunID
	m.mu.Unlock()
	if wait == nil && (live || !m.agentResumes()) {
		m.closeConfirmation(requestID)
		return c.RunID, ErrConfirmationClosed
	}
	status := ConfirmationDenied
	if a.Approved {
		status = ConfirmationApproved
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	if err := m.confirms.AnswerConfirmation(ctx, requestID, status, raw); err != nil {
		return c.RunID, err
	}
	if wait == nil {
		// Suspended across a restart: continue the run in this process.
		return c.RunID, m.resume(&c, a)
	}
	select {
	case wait <- a:
	default: // cannot happen: one answer wins the store's compare-and-set
	}
	return c.RunID, nil
}

// Awaited returns the thread's pending confirmations that a run waits for:
// in this process, or suspended across a restart with an agent that can
// resume it. Oldest first.
func (m *Runs) Awaited(ctx context.Context, threadID string) ([]Confirmation, error) {
	if m.confirms == nil {
		return nil, nil
	}
	pending, err := m.confirms.PendingConfirmations(ctx, threadID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	resumes := m.agentResumes()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Confirmation
	for _, c := range pending {
		_, waiting := m.waiters[c.RequestID]
		live := m.active[threadID] != nil && m.active[threadID].ID == c.RunID
		if waiting || (!live && resumes) {
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
	ids := slices.Clone(r.awaiting)
	r.mu.Unlock()
	for _, id := range ids {
		m.mu.Lock()
		delete(m.waiters, id)
		m.mu.Unlock()
		m.closeConfirmation(id)
	}
}
