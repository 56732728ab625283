package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/lib/pq"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/records"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

// orNow is a timestamp parameter: NULL for a zero time, so that the
// statement's COALESCE takes the database's now(), one clock for every
// instance.
func orNow(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Truncate(time.Microsecond)
}

// AddMessage implements instanceai.MessageStore. A zero CreatedAt means the
// database's now().
func (s *Store) AddMessage(ctx context.Context, m instanceai.Message) error {
	err := records.Message(m)
	var atts string
	if err == nil {
		atts, err = records.EncodeAttachments(m.Attachments)
	}
	if err == nil {
		// The EXISTS tells a missing thread apart without parsing the
		// foreign-key error; the key still guards against a concurrent delete.
		var res sql.Result
		res, err = s.db.ExecContext(ctx,
			`INSERT INTO messages (id, thread_id, run_id, role, content, attachments, created_at)
			 SELECT $1, $2, $3, $4, $5, $7, COALESCE($6::timestamptz, now())
			 WHERE EXISTS (SELECT 1 FROM threads WHERE id = $2)`,
			m.ID, m.ThreadID, m.RunID, m.Role, m.Content, orNow(m.CreatedAt), atts)
		if err == nil {
			err = sqllog.MustAffect(res)
		}
	}
	if err != nil {
		return storeerr.Errorf("postgres: add message %q to thread %q: %w", m.ID, m.ThreadID, withCtx(ctx, err))
	}
	return nil
}

type messageRow struct {
	ID        string    `db:"id"`
	ThreadID  string    `db:"thread_id"`
	RunID     string    `db:"run_id"`
	Role      string    `db:"role"`
	Content   string    `db:"content"`
	Attached  string    `db:"attachments"`
	Size      int       `db:"size"`
	CreatedAt time.Time `db:"created_at"`
}

// ListMessages implements instanceai.MessageStore: oldest first, equal
// timestamps in insertion order. A missing thread is ErrNotFound.
func (s *Store) ListMessages(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := s.queryMessages(ctx, threadID, "content, attachments", "")
	if err != nil {
		return nil, storeerr.Errorf("postgres: list messages of thread %q: %w", threadID, withCtx(ctx, err))
	}
	return out, nil
}

// MessageHeads implements instanceai.MessageStore.
func (s *Store) MessageHeads(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := s.queryMessages(ctx, threadID, "'' AS content, '' AS attachments, octet_length(content) + octet_length(attachments) AS size", "")
	if err != nil {
		return nil, storeerr.Errorf("postgres: list message heads of thread %q: %w", threadID, withCtx(ctx, err))
	}
	return out, nil
}

// MessagesByID implements instanceai.MessageStore.
func (s *Store) MessagesByID(ctx context.Context, threadID string, ids []string) ([]instanceai.Message, error) {
	out, err := s.queryMessages(ctx, threadID, "content, attachments", " AND id = ANY($2)", pq.Array(ids))
	if err != nil {
		return nil, storeerr.Errorf("postgres: read messages of thread %q: %w", threadID, withCtx(ctx, err))
	}
	return out, nil
}

// queryMessages lists the thread's messages with the content columns
// given, filtered by where and its arguments ($2 on).
func (s *Store) queryMessages(ctx context.Context, threadID, content, where string, args ...any) ([]instanceai.Message, error) {
	var rows []messageRow
	err := s.db.SelectContext(ctx, &rows,
		`SELECT id, thread_id, run_id, role, `+content+`, created_at FROM messages WHERE thread_id = $1`+where+` ORDER BY created_at, ord`,
		append([]any{threadID}, args...)...)
	if err == nil && len(rows) == 0 {
		err = s.ThreadExists(ctx, threadID)
	}
	if err != nil {
		return nil, err
	}
	var out []instanceai.Message
	for _, r := range rows {
		atts, err := records.DecodeAttachments(r.Attached)
		if err != nil {
			return nil, err
		}
		out = append(out, instanceai.Message{ID: r.ID, ThreadID: r.ThreadID, RunID: r.RunID, Role: r.Role,
			Content: r.Content, Attachments: atts, CreatedAt: r.CreatedAt.UTC(), Size: r.Size})
	}
	return out, nil
}

// AddConfirmation implements instanceai.ConfirmationStore. A zero CreatedAt
// means the database's now().
func (s *Store) AddConfirmation(ctx context.Context, c instanceai.Confirmation) error {
	status, err := records.Confirmation(c)
	if err == nil {
		// The fencing token is read as an append reads it (see
		// appendFencedSQL): a run whose claim was taken cannot leave a
		// request its taker, settling the run, would not close.
		var res sql.Result
		res, err = s.db.ExecContext(ctx,
			`WITH fa AS (SELECT 1 FROM active_runs WHERE thread_id = $2 AND fence = $10::bigint FOR SHARE),
			      fb AS (SELECT 1 FROM background_agents WHERE thread_id = $2 AND fence = $10::bigint FOR SHARE)
			 INSERT INTO confirmations (request_id, thread_id, run_id, agent_id, tool_call_id, owner_id, request, status, created_at)
			 SELECT $1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9::timestamptz, now())
			 WHERE EXISTS (SELECT 1 FROM threads WHERE id = $2)
			   AND ($10::bigint = 0 OR EXISTS (SELECT 1 FROM fa) OR EXISTS (SELECT 1 FROM fb))`,
			c.RequestID, c.ThreadID, c.RunID, c.AgentID, c.ToolCallID, c.OwnerID, string(c.Request), status,
			orNow(c.CreatedAt), c.Fence)
		if err == nil {
			err = sqllog.MustAffect(res)
		}
		if errors.Is(err, instanceai.ErrNotFound) && c.Fence != 0 {
			if terr := s.ThreadExists(ctx, c.ThreadID); terr == nil {
				err = sqllog.CheckFence(ctx, s.Log, c.ThreadID, c.Fence)
			}
		}
	}
	if err != nil {
		return storeerr.Errorf("postgres: add confirmation %q to thread %q: %w", c.RequestID, c.ThreadID, withCtx(ctx, err))
	}
	return nil
}

type confirmationRow struct {
	RequestID  string         `db:"request_id"`
	ThreadID   string         `db:"thread_id"`
	RunID      string         `db:"run_id"`
	AgentID    string         `db:"agent_id"`
	ToolCallID string         `db:"tool_call_id"`
	OwnerID    string         `db:"owner_id"`
	Request    string         `db:"request"`
	Status     string         `db:"status"`
	Answer     sql.NullString `db:"answer"`
	CreatedAt  time.Time      `db:"created_at"`
	AnsweredAt sql.NullTime   `db:"answered_at"`
}

const confirmationColumns = `request_id, thread_id, run_id, agent_id, tool_call_id, owner_id, request, status, answer, created_at, answered_at`

func (r confirmationRow) confirmation() instanceai.Confirmation {
	c := instanceai.Confirmation{RequestID: r.RequestID, ThreadID: r.ThreadID, RunID: r.RunID, AgentID: r.AgentID,
		ToolCallID: r.ToolCallID, OwnerID: r.OwnerID, Request: json.RawMessage(r.Request), Status: r.Status,
		CreatedAt: r.CreatedAt.UTC()}
	if r.Answer.Valid {
		c.Answer = json.RawMessage(r.Answer.String)
	}
	if r.AnsweredAt.Valid {
		c.AnsweredAt = r.AnsweredAt.Time.UTC()
	}
	return c
}

// GetConfirmation implements instanceai.ConfirmationStore.
func (s *Store) GetConfirmation(ctx context.Context, requestID string) (instanceai.Confirmation, error) {
	var r confirmationRow
	err := s.db.GetContext(ctx, &r, `SELECT `+confirmationColumns+` FROM confirmations WHERE request_id = $1`, requestID)
	if errors.Is(err, sql.ErrNoRows) {
		err = instanceai.ErrNotFound
	}
	if err != nil {
		return instanceai.Confirmation{}, storeerr.Errorf("postgres: get confirmation %q: %w", requestID, withCtx(ctx, err))
	}
	return r.confirmation(), nil
}

// AnswerConfirmation implements instanceai.ConfirmationStore. The UPDATE
// only matches a pending row: of two concurrent answers, the second waits
// for the first's row lock, re-checks the condition on the new row version
// and matches nothing. The same statement tells "absent" from "answered".
func (s *Store) AnswerConfirmation(ctx context.Context, requestID, status string, answer json.RawMessage) error {
	err := records.Answer(status, answer)
	if err == nil {
		var value any // NULL for no answer
		if len(answer) > 0 {
			value = string(answer)
		}
		var updated, exists bool
		err = s.db.QueryRowContext(ctx,
			`WITH updated AS (
			     UPDATE confirmations SET status = $2, answer = $3, answered_at = now()
			     WHERE request_id = $1 AND status = $4
			     RETURNING 1)
			 SELECT EXISTS (SELECT 1 FROM updated), EXISTS (SELECT 1 FROM confirmations WHERE request_id = $1)`,
			requestID, status, value, instanceai.ConfirmationPending).Scan(&updated, &exists)
		switch {
		case err != nil:
		case !exists:
			err = instanceai.ErrNotFound
		case !updated:
			err = instanceai.ErrAlreadyAnswered
		}
	}
	if err != nil {
		return storeerr.Errorf("postgres: answer confirmation %q: %w", requestID, withCtx(ctx, err))
	}
	return nil
}

// PendingConfirmations implements instanceai.ConfirmationStore: oldest
// first, equal timestamps in insertion order. A missing thread is
// ErrNotFound.
func (s *Store) PendingConfirmations(ctx context.Context, threadID string) ([]instanceai.Confirmation, error) {
	var rows []confirmationRow
	err := s.db.SelectContext(ctx, &rows,
		`SELECT `+confirmationColumns+` FROM confirmations WHERE thread_id = $1 AND status = $2 ORDER BY created_at, ord`,
		threadID, instanceai.ConfirmationPending)
	if err == nil && len(rows) == 0 {
		err = s.ThreadExists(ctx, threadID)
	}
	if err != nil {
		return nil, storeerr.Errorf("postgres: pending confirmations of thread %q: %w", threadID, withCtx(ctx, err))
	}
	var out []instanceai.Confirmation
	for _, r := range rows {
		out = append(out, r.confirmation())
	}
	return out, nil
}
