package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/records"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

// AddMessage implements instanceai.MessageStore. A zero CreatedAt means now.
func (s *Store) AddMessage(ctx context.Context, m instanceai.Message) error {
	err := records.Message(m)
	var atts string
	if err == nil {
		atts, err = records.EncodeAttachments(m.Attachments)
	}
	if err == nil {
		at := m.CreatedAt
		if at.IsZero() {
			at = time.Now()
		}
		// The EXISTS tells a missing thread apart without parsing the
		// foreign-key error; the key still guards against a concurrent delete.
		var res sql.Result
		res, err = s.wdb.ExecContext(ctx,
			`INSERT INTO messages (id, thread_id, run_id, role, content, attachments, created_at)
			 SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM threads WHERE id = ?)`,
			m.ID, m.ThreadID, m.RunID, m.Role, m.Content, atts, formatTime(at), m.ThreadID)
		if err == nil {
			err = sqllog.MustAffect(res)
		}
	}
	if err != nil {
		return storeerr.Errorf("sqlite: add message %q to thread %q: %w", m.ID, m.ThreadID, err)
	}
	return nil
}

// ListMessages implements instanceai.MessageStore: oldest first, equal
// timestamps in insertion order. A missing thread is ErrNotFound.
func (s *Store) ListMessages(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := s.listMessages(ctx, threadID)
	if err != nil {
		return nil, storeerr.Errorf("sqlite: list messages of thread %q: %w", threadID, err)
	}
	return out, nil
}

// MessageHeads implements instanceai.MessageStore.
func (s *Store) MessageHeads(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := s.queryMessages(ctx, threadID, `octet_length(content) + octet_length(attachments)`, "", nil)
	if err != nil {
		return nil, storeerr.Errorf("sqlite: list message heads of thread %q: %w", threadID, err)
	}
	return out, nil
}

// MessagesByID implements instanceai.MessageStore.
func (s *Store) MessagesByID(ctx context.Context, threadID string, ids []string) ([]instanceai.Message, error) {
	if len(ids) == 0 {
		return nil, s.ThreadExists(ctx, threadID)
	}
	in := strings.Repeat("?, ", len(ids)-1) + "?"
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	out, err := s.queryMessages(ctx, threadID, "content", " AND id IN ("+in+")", args)
	if err != nil {
		return nil, storeerr.Errorf("sqlite: read messages of thread %q: %w", threadID, err)
	}
	return out, nil
}

func (s *Store) listMessages(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	return s.queryMessages(ctx, threadID, "content", "", nil)
}

// queryMessages lists the thread's messages with the content column
// given (the content, or its size), filtered by where and its args.
func (s *Store) queryMessages(ctx context.Context, threadID, content, where string, args []any) ([]instanceai.Message, error) {
	rows, err := s.rdb.QueryContext(ctx,
		`SELECT id, run_id, role, `+content+`, attachments, created_at FROM messages WHERE thread_id = ?`+where+` ORDER BY created_at, rowid`,
		append([]any{threadID}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	heads := content != "content"
	var out []instanceai.Message
	for rows.Next() {
		m := instanceai.Message{ThreadID: threadID}
		var created, atts string
		dst := any(&m.Content)
		if heads {
			dst = &m.Size
		}
		if err := rows.Scan(&m.ID, &m.RunID, &m.Role, dst, &atts, &created); err != nil {
			return nil, err
		}
		if !heads {
			if m.Attachments, err = records.DecodeAttachments(atts); err != nil {
				return nil, err
			}
		}
		if m.CreatedAt, err = parseTime(created); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if err := s.ThreadExists(ctx, threadID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AddConfirmation implements instanceai.ConfirmationStore. A zero CreatedAt
// means now.
func (s *Store) AddConfirmation(ctx context.Context, c instanceai.Confirmation) error {
	status, err := records.Confirmation(c)
	if err == nil {
		at := c.CreatedAt
		if at.IsZero() {
			at = time.Now()
		}
		// One statement on the one writer: the token is current when it
		// is read, and stays so until the insert is done.
		var res sql.Result
		res, err = s.wdb.ExecContext(ctx,
			`INSERT INTO confirmations (request_id, thread_id, run_id, agent_id, tool_call_id, owner_id, request, status, created_at)
			 SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM threads WHERE id = ?)
			   AND (? = 0 OR EXISTS (SELECT 1 FROM active_runs WHERE thread_id = ? AND fence = ?)
			        OR EXISTS (SELECT 1 FROM background_agents WHERE thread_id = ? AND fence = ?))`,
			c.RequestID, c.ThreadID, c.RunID, c.AgentID, c.ToolCallID, c.OwnerID, string(c.Request), status,
			formatTime(at), c.ThreadID, c.Fence, c.ThreadID, c.Fence, c.ThreadID, c.Fence)
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
		return storeerr.Errorf("sqlite: add confirmation %q to thread %q: %w", c.RequestID, c.ThreadID, err)
	}
	return nil
}

const confirmationColumns = `request_id, thread_id, run_id, agent_id, tool_call_id, owner_id, request, status, answer, created_at, answered_at`

func scanConfirmation(row scanner) (instanceai.Confirmation, error) {
	var c instanceai.Confirmation
	var request, created string
	var answer, answered sql.NullString
	if err := row.Scan(&c.RequestID, &c.ThreadID, &c.RunID, &c.AgentID, &c.ToolCallID, &c.OwnerID,
		&request, &c.Status, &answer, &created, &answered); err != nil {
		return instanceai.Confirmation{}, err
	}
	c.Request = json.RawMessage(request)
	if answer.Valid {
		c.Answer = json.RawMessage(answer.String)
	}
	var err error
	if c.CreatedAt, err = parseTime(created); err != nil {
		return instanceai.Confirmation{}, err
	}
	if answered.Valid {
		if c.AnsweredAt, err = parseTime(answered.String); err != nil {
			return instanceai.Confirmation{}, err
		}
	}
	return c, nil
}

// GetConfirmation implements instanceai.ConfirmationStore.
func (s *Store) GetConfirmation(ctx context.Context, requestID string) (instanceai.Confirmation, error) {
	c, err := scanConfirmation(s.rdb.QueryRowContext(ctx,
		`SELECT `+confirmationColumns+` FROM confirmations WHERE request_id = ?`, requestID))
	if errors.Is(err, sql.ErrNoRows) {
		err = instanceai.ErrNotFound
	}
	if err != nil {
		return instanceai.Confirmation{}, storeerr.Errorf("sqlite: get confirmation %q: %w", requestID, err)
	}
	return c, nil
}

// AnswerConfirmation implements instanceai.ConfirmationStore. The update
// only matches a pending row, so of two answers exactly one changes it; the
// loser learns why in the same write transaction.
func (s *Store) AnswerConfirmation(ctx context.Context, requestID, status string, answer json.RawMessage) error {
	err := records.Answer(status, answer)
	if err == nil {
		err = s.answer(ctx, requestID, status, answer)
	}
	if err != nil {
		return storeerr.Errorf("sqlite: answer confirmation %q: %w", requestID, err)
	}
	return nil
}

func (s *Store) answer(ctx context.Context, requestID, status string, answer json.RawMessage) (err error) {
	var value any // NULL for no answer
	if len(answer) > 0 {
		value = string(answer)
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx,
		`UPDATE confirmations SET status = ?, answer = ?, answered_at = ? WHERE request_id = ? AND status = ?`,
		status, value, formatTime(time.Now()), requestID, instanceai.ConfirmationPending)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM confirmations WHERE request_id = ?`, requestID).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return instanceai.ErrNotFound
		case err != nil:
			return err
		}
		return instanceai.ErrAlreadyAnswered
	}
	return tx.Commit()
}

// PendingConfirmations implements instanceai.ConfirmationStore: oldest
// first, equal timestamps in insertion order. A missing thread is
// ErrNotFound.
func (s *Store) PendingConfirmations(ctx context.Context, threadID string) ([]instanceai.Confirmation, error) {
	out, err := s.pendingConfirmations(ctx, threadID)
	if err != nil {
		return nil, storeerr.Errorf("sqlite: pending confirmations of thread %q: %w", threadID, err)
	}
	return out, nil
}

func (s *Store) pendingConfirmations(ctx context.Context, threadID string) ([]instanceai.Confirmation, error) {
	rows, err := s.rdb.QueryContext(ctx,
		`SELECT `+confirmationColumns+` FROM confirmations WHERE thread_id = ? AND status = ? ORDER BY created_at, rowid`,
		threadID, instanceai.ConfirmationPending)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []instanceai.Confirmation
	for rows.Next() {
		c, err := scanConfirmation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if err := s.ThreadExists(ctx, threadID); err != nil {
			return nil, err
		}
	}
	return out, nil
}
