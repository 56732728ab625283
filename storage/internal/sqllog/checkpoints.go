package sqllog

import (
	"context"
	"database/sql"
	"errors"

	"github.com/threadline/threadline/instanceai"
)

var _ instanceai.CheckpointStore = (*Log)(nil)

// AddCheckpoint implements instanceai.CheckpointStore. (The casts type the
// parameters PostgreSQL would otherwise take for text.) The owner condition
// is the append's: a run that outlived its thread's deletion cannot leave
// pieces in a thread another user created with the same id. So is the
// fencing token's, read with the dialect's ShareLock as an append reads
// it: a run whose claim was taken cannot leave pieces its taker, settling
// the run, would not see.
func (l *Log) AddCheckpoint(ctx context.Context, threadID string, c instanceai.Checkpoint) error {
	lock := l.d.ShareLock
	res, err := l.w.ExecContext(ctx, l.q(`WITH
		fa AS (SELECT 1 FROM active_runs WHERE thread_id = ? AND fence = CAST(? AS BIGINT)`+lock+`),
		fb AS (SELECT 1 FROM background_agents WHERE thread_id = ? AND fence = CAST(? AS BIGINT)`+lock+`)
		INSERT INTO segment_checkpoints
		(thread_id, run_id, agent_id, kind, since_seq, piece, response_id, user_id, ts, text)
		SELECT id, ?, ?, ?, CAST(? AS BIGINT), CAST(? AS INTEGER), ?, ?, CAST(? AS BIGINT), ? FROM threads
		WHERE id = ? AND (? = '' OR owner_id = ?)
		  AND (CAST(? AS BIGINT) = 0 OR EXISTS (SELECT 1 FROM fa) OR EXISTS (SELECT 1 FROM fb))
		ON CONFLICT DO NOTHING`),
		threadID, c.Fence, threadID, c.Fence,
		c.RunID, c.AgentID, string(c.Kind), c.Since, c.Piece, c.ResponseID, c.UserID, c.TS, c.Text,
		threadID, c.UserID, c.UserID, c.Fence)
	if err != nil {
		return l.fail(ctx, err, "store a checkpoint of thread %q", threadID)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		// Stored before, or no thread of this user to store it in, or a
		// stale token.
		var one int
		err := l.w.QueryRowContext(ctx, l.q(`SELECT 1 FROM threads WHERE id = ? AND (? = '' OR owner_id = ?)`),
			threadID, c.UserID, c.UserID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return instanceai.ErrNotFound
		}
		if err != nil {
			return l.fail(ctx, err, "store a checkpoint of thread %q", threadID)
		}
		if c.Fence != 0 {
			if err := CheckFence(ctx, l, threadID, c.Fence); err != nil {
				return l.fail(ctx, err, "store a checkpoint of thread %q", threadID)
			}
		}
	}
	return nil
}

// CheckFence returns a *instanceai.StaleFenceError unless a claim row of
// the thread holds fence: why a write under it stored nothing. (A function,
// not a method, so that it is not one of the stores' methods.)
func CheckFence(ctx context.Context, l *Log, threadID string, fence int64) error {
	held, err := l.heldFences(ctx, l.w, threadID, []int64{fence}, "")
	if err != nil {
		return err
	}
	if len(held) == 0 {
		return &instanceai.StaleFenceError{Tokens: []int64{fence}}
	}
	return nil
}

// DeleteCheckpoints implements instanceai.CheckpointStore.
func (l *Log) DeleteCheckpoints(ctx context.Context, threadID, runID, agentID string, kind instanceai.EventType, since int64) error {
	_, err := l.w.ExecContext(ctx, l.q(`DELETE FROM segment_checkpoints
		WHERE thread_id = ? AND run_id = ? AND since_seq = ? AND agent_id = ? AND kind = ?`),
		threadID, runID, since, agentID, string(kind))
	if err != nil {
		return l.fail(ctx, err, "delete a checkpoint of thread %q", threadID)
	}
	return nil
}

// RunCheckpoints implements instanceai.CheckpointStore.
func (l *Log) RunCheckpoints(ctx context.Context, threadID, runID string) ([]instanceai.Checkpoint, error) {
	rows, err := l.r.QueryContext(ctx, l.q(`SELECT agent_id, kind, since_seq, piece, response_id, user_id, ts, text
		FROM segment_checkpoints WHERE thread_id = ? AND run_id = ?
		ORDER BY since_seq, agent_id, kind, piece`), threadID, runID)
	if err != nil {
		return nil, l.fail(ctx, err, "read the checkpoints of thread %q", threadID)
	}
	defer rows.Close()
	var out []instanceai.Checkpoint
	for rows.Next() {
		c := instanceai.Checkpoint{RunID: runID}
		var kind string
		if err := rows.Scan(&c.AgentID, &kind, &c.Since, &c.Piece, &c.ResponseID, &c.UserID, &c.TS, &c.Text); err != nil {
			return nil, l.fail(ctx, err, "read the checkpoints of thread %q", threadID)
		}
		c.Kind = instanceai.EventType(kind)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, l.fail(ctx, err, "read the checkpoints of thread %q", threadID)
	}
	return out, nil
}

// DeleteRunCheckpoints implements instanceai.CheckpointStore.
func (l *Log) DeleteRunCheckpoints(ctx context.Context, threadID, runID, agentID string) error {
	_, err := l.w.ExecContext(ctx, l.q(`DELETE FROM segment_checkpoints
		WHERE thread_id = ? AND run_id = ? AND (? = '' OR agent_id = ?)`), threadID, runID, agentID, agentID)
	if err != nil {
		return l.fail(ctx, err, "delete the checkpoints of thread %q", threadID)
	}
	return nil
}
