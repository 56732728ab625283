package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/records"
)

// stamp is t as the SQL backends return it (UTC, microseconds), or now for
// a zero t.
func stamp(t time.Time) time.Time {
	if t.IsZero() {
		return now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// noteRun records a run-start or run-finish in the thread's run index.
func (t *thread) noteRun(ev *instanceai.Event, seq int64) {
	if ev.Type != instanceai.TypeRunStart && ev.Type != instanceai.TypeRunFinish {
		return
	}
	b := t.runs[ev.RunID]
	if b == nil {
		b = &runBounds{}
		t.runs[ev.RunID] = b
	}
	if ev.Type == instanceai.TypeRunFinish {
		b.finished = true
	} else if b.startSeq == 0 {
		b.startSeq = seq
	}
}

// AddMessage implements instanceai.MessageStore. A zero CreatedAt means now.
func (s *Store) AddMessage(ctx context.Context, m instanceai.Message) error {
	err := records.Message(m)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("memory: add message %q to thread %q: %w", m.ID, m.ThreadID, err)
	}
	m.CreatedAt = stamp(m.CreatedAt)
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	t := s.threads[m.ThreadID]
	if t == nil {
		return notFound("add message to", m.ThreadID)
	}
	if _, dup := s.messageIDs[m.ID]; dup {
		return fmt.Errorf("memory: add message %q to thread %q: a message with this id exists", m.ID, m.ThreadID)
	}
	s.messageIDs[m.ID] = m.ThreadID
	m.Attachments = slices.Clone(m.Attachments)
	t.messages = append(t.messages, m)
	return nil
}

// ListMessages implements instanceai.MessageStore: oldest first, equal
// timestamps in insertion order. A missing thread is ErrNotFound.
func (s *Store) ListMessages(_ context.Context, threadID string) ([]instanceai.Message, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	t := s.threads[threadID]
	if t == nil {
		s.mu.Unlock()
		return nil, notFound("list messages of", threadID)
	}
	// Kept in insertion order, so a stable sort by time breaks ties by it.
	out := slices.Clone(t.messages)
	s.mu.Unlock()
	slices.SortStableFunc(out, func(a, b instanceai.Message) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// MessageHeads implements instanceai.MessageStore.
func (s *Store) MessageHeads(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := s.ListMessages(ctx, threadID)
	for i := range out {
		out[i].Size, out[i].Content = len(out[i].Content), ""
		if a := out[i].Attachments; len(a) > 0 {
			// As the SQL stores count it: the attachments' JSON.
			enc, _ := records.EncodeAttachments(a)
			out[i].Size += len(enc)
			out[i].Attachments = nil
		}
	}
	return out, err
}

// MessagesByID implements instanceai.MessageStore.
func (s *Store) MessagesByID(ctx context.Context, threadID string, ids []string) ([]instanceai.Message, error) {
	out, err := s.ListMessages(ctx, threadID)
	return slices.DeleteFunc(out, func(m instanceai.Message) bool { return !slices.Contains(ids, m.ID) }), err
}

// AddConfirmation implements instanceai.ConfirmationStore. A zero CreatedAt
// means now.
func (s *Store) AddConfirmation(ctx context.Context, c instanceai.Confirmation) error {
	status, err := records.Confirmation(c)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("memory: add confirmation %q to thread %q: %w", c.RequestID, c.ThreadID, err)
	}
	c.Status = status
	c.CreatedAt = stamp(c.CreatedAt)
	fence := c.Fence
	c.Fence = 0 // checked, not kept
	// Copied, so that the caller's buffer cannot change the stored request.
	c.Request = json.RawMessage(string(c.Request))
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.threads[c.ThreadID] == nil {
		return notFound("add confirmation to", c.ThreadID)
	}
	if fence != 0 {
		if stale := s.claims.StaleFences(c.ThreadID, []int64{fence}); len(stale) > 0 {
			return fmt.Errorf("memory: add confirmation %q to thread %q: %w", c.RequestID, c.ThreadID,
				&instanceai.StaleFenceError{Tokens: stale})
		}
	}
	if _, dup := s.confirmations[c.RequestID]; dup {
		return fmt.Errorf("memory: add confirmation %q to thread %q: a confirmation with this request id exists", c.RequestID, c.ThreadID)
	}
	s.added++
	s.confirmations[c.RequestID] = &confirmation{Confirmation: c, added: s.added}
	return nil
}

// GetConfirmation implements instanceai.ConfirmationStore.
func (s *Store) GetConfirmation(_ context.Context, requestID string) (instanceai.Confirmation, error) {
	if err := s.lock(); err != nil {
		return instanceai.Confirmation{}, err
	}
	defer s.mu.Unlock()
	c := s.confirmations[requestID]
	if c == nil {
		return instanceai.Confirmation{}, fmt.Errorf("memory: get confirmation %q: %w", requestID, instanceai.ErrNotFound)
	}
	// Cloned, so that a reader's changes to the bytes cannot reach the store.
	out := c.Confirmation
	out.Request = slices.Clone(out.Request)
	out.Answer = slices.Clone(out.Answer)
	return out, nil
}

// AnswerConfirmation implements instanceai.ConfirmationStore; the check and
// the change happen under one lock, so exactly one of two answers wins.
func (s *Store) AnswerConfirmation(ctx context.Context, requestID, status string, answer json.RawMessage) error {
	err := records.Answer(status, answer)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		if err := s.lock(); err != nil {
			return err
		}
		switch c := s.confirmations[requestID]; {
		case c == nil:
			err = instanceai.ErrNotFound
		case c.Status != instanceai.ConfirmationPending:
			err = instanceai.ErrAlreadyAnswered
		default:
			c.Status = status
			c.Answer = nil
			if len(answer) > 0 {
				c.Answer = slices.Clone(answer)
			}
			c.AnsweredAt = now()
		}
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("memory: answer confirmation %q: %w", requestID, err)
	}
	return nil
}

// PendingConfirmations implements instanceai.ConfirmationStore: oldest
// first, equal timestamps in insertion order. A missing thread is
// ErrNotFound.
func (s *Store) PendingConfirmations(_ context.Context, threadID string) ([]instanceai.Confirmation, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	if s.threads[threadID] == nil {
		s.mu.Unlock()
		return nil, notFound("pending confirmations of", threadID)
	}
	var pending []confirmation
	for _, c := range s.confirmations {
		if c.ThreadID == threadID && c.Status == instanceai.ConfirmationPending {
			pending = append(pending, *c)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(pending, func(a, b confirmation) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.added, b.added))
	})
	var out []instanceai.Confirmation
	for _, c := range pending {
		c.Request = slices.Clone(c.Request)
		out = append(out, c.Confirmation)
	}
	return out, nil
}

// UnfinishedRuns implements instanceai.RunIndex: ordered by thread id, then
// by the position of the run's run-start in the log. It reads the run
// index, so it also knows runs whose events were evicted.
func (s *Store) UnfinishedRuns(context.Context) ([]instanceai.RunRef, error) {
	type unfinished struct {
		ref   instanceai.RunRef
		start int64
	}
	var runs []unfinished
	if err := s.lock(); err != nil {
		return nil, err
	}
	for id, t := range s.threads {
		for runID, b := range t.runs {
			if b.startSeq > 0 && !b.finished {
				runs = append(runs, unfinished{instanceai.RunRef{ThreadID: id, RunID: runID}, b.startSeq})
			}
		}
	}
	s.mu.Unlock()
	slices.SortFunc(runs, func(a, b unfinished) int {
		return cmp.Or(cmp.Compare(a.ref.ThreadID, b.ref.ThreadID), cmp.Compare(a.start, b.start))
	})
	var out []instanceai.RunRef
	for _, r := range runs {
		out = append(out, r.ref)
	}
	return out, nil
}

// RunEvents implements instanceai.RunIndex: the run's events still in the
// window. A missing thread is ErrNotFound.
func (s *Store) RunEvents(_ context.Context, threadID, runID string) ([]instanceai.StoredEvent, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	t := s.threads[threadID]
	if t == nil {
		s.mu.Unlock()
		return nil, notFound("read run of", threadID)
	}
	var matched []entry
	for _, e := range t.events {
		if e.runID == runID {
			matched = append(matched, e)
		}
	}
	s.mu.Unlock()
	var out []instanceai.StoredEvent
	for _, e := range matched {
		se := instanceai.StoredEvent{Seq: e.seq, Data: e.data}
		if err := json.Unmarshal(e.data, &se.Event); err != nil {
			return nil, fmt.Errorf("memory: read run %q of thread %q: decode event %d: %w", runID, threadID, e.seq, err)
		}
		out = append(out, se)
	}
	return out, nil
}
