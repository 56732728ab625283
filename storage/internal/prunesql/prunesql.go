// Package prunesql is retention.Store on SQL tables, shared by the SQLite
// and PostgreSQL backends. A pruned thread's rows go with its threads row
// through ON DELETE CASCADE, the path DeleteThread takes; this package
// counts them first, in the same transaction, to report what went.
package prunesql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/threadline/threadline/retention"
)

// Dialect is what one database does differently.
type Dialect struct {
	// Name prefixes errors ("sqlite", "postgres").
	Name string
	// Rebind turns ? placeholders into the database's.
	Rebind func(string) string
	// Time is a time as the threads table's updated_at compares with it.
	Time func(time.Time) any
	// LockRows is the clause that locks the threads rows a deleting
	// transaction reads (" FOR UPDATE" on PostgreSQL), so that no append
	// moves them until it commits; "" where a write transaction holds the
	// database's only write lock from its BEGIN (SQLite).
	LockRows string
	// Size returns the log's size in bytes where that is cheap, 0 where
	// it is not.
	Size func(ctx context.Context, db *sql.DB) (int64, error)
}

// Pruner implements retention.Store on one database.
type Pruner struct {
	d Dialect
	// w takes the deleting transactions, r the reads (SQLite keeps one
	// writer connection apart from its readers).
	w, r *sql.DB
}

var _ retention.Store = (*Pruner)(nil)

// New returns the pruner of a database.
func New(d Dialect, writer, reader *sql.DB) *Pruner { return &Pruner{d: d, w: writer, r: reader} }

func (p *Pruner) q(s string) string { return p.d.Rebind(s) }

func (p *Pruner) fail(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", p.d.Name, fmt.Sprintf(format, args...), err)
}

// idle is the condition that a thread (alias t) is idle since before a
// cutoff (its one parameter) and has no work: no claim row (an active or
// suspended run, a background agent at work) and no pending confirmation.
// The claim tables' primary keys and the confirmations index serve the
// lookups.
const idle = `t.updated_at < ?
	AND NOT EXISTS (SELECT 1 FROM active_runs a WHERE a.thread_id = t.id)
	AND NOT EXISTS (SELECT 1 FROM background_agents b WHERE b.thread_id = t.id)
	AND NOT EXISTS (SELECT 1 FROM confirmations c WHERE c.thread_id = t.id AND c.status = 'pending')`

// eventCount is a thread's number of events, from its counter and its
// oldest seq: a log's seqs are contiguous (trimming takes the oldest
// first), so this reads two index entries instead of every row.
const eventCount = `COALESCE(t.last_seq - (SELECT MIN(e.seq) FROM events e WHERE e.thread_id = t.id) + 1, 0)`

// otherRows counts a thread's rows in the tables other than events.
const otherRows = `1 + (SELECT COUNT(*) FROM messages m WHERE m.thread_id = t.id)
	+ (SELECT COUNT(*) FROM confirmations c WHERE c.thread_id = t.id)
	+ (SELECT COUNT(*) FROM segment_checkpoints k WHERE k.thread_id = t.id)`

// IdleThreads implements retention.Store.
func (p *Pruner) IdleThreads(ctx context.Context, cutoff time.Time, after string, limit int) ([]retention.Candidate, error) {
	rows, err := p.r.QueryContext(ctx, p.q(`SELECT t.id, `+eventCount+`, `+otherRows+`
		FROM threads t WHERE t.id > ? AND `+idle+` ORDER BY t.id LIMIT ?`),
		after, p.d.Time(cutoff), limit)
	if err != nil {
		return nil, p.fail(err, "list idle threads")
	}
	defer rows.Close()
	var out []retention.Candidate
	for rows.Next() {
		var c retention.Candidate
		var other int64
		if err := rows.Scan(&c.ID, &c.Events, &other); err != nil {
			return nil, p.fail(err, "list idle threads")
		}
		c.Rows = c.Events + other
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, p.fail(err, "list idle threads")
	}
	return out, nil
}

// in returns "?, ?, …" for ids and the ids as arguments.
func in(ids []string) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return "?" + strings.Repeat(", ?", len(ids)-1), args
}

// perTable are the tables a thread's rows are in besides threads, and
// the column that names the thread.
var perTable = []string{retention.Events, retention.Messages, retention.Confirmations, retention.Checkpoints}

// queryer is the reader pool or a transaction.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// count counts the rows of the threads, by table, threads included.
func (p *Pruner) count(ctx context.Context, q queryer, ids []string) (retention.Counts, error) {
	list, args := in(ids)
	out := retention.Counts{}
	var n int64
	if err := q.QueryRowContext(ctx, p.q(`SELECT COUNT(*) FROM threads WHERE id IN (`+list+`)`), args...).Scan(&n); err != nil {
		return nil, err
	}
	out[retention.Threads] = n
	for _, table := range perTable {
		if err := q.QueryRowContext(ctx, p.q(`SELECT COUNT(*) FROM `+table+` WHERE thread_id IN (`+list+`)`), args...).Scan(&n); err != nil {
			return nil, err
		}
		out[table] = n
	}
	return out, nil
}

// ThreadRows implements retention.Store.
func (p *Pruner) ThreadRows(ctx context.Context, ids []string) (retention.Counts, error) {
	if len(ids) == 0 {
		return retention.Counts{}, nil
	}
	out, err := p.count(ctx, p.r, ids)
	if err != nil {
		return nil, p.fail(err, "count the rows of %d threads", len(ids))
	}
	return out, nil
}

// stillIdle returns those of ids that are idle since before cutoff and
// have no work, in tx. It reads twice: once with LockRows, which waits for
// an append under way and holds off the next until COMMIT, and once more
// in a statement of its own, whose fresh snapshot sees a claim or a
// confirmation committed while the first one waited for its locks (a
// claim made later must lock the threads row for its foreign key, and
// waits). SQLite's transaction holds the write lock: both reads agree.
func (p *Pruner) stillIdle(ctx context.Context, tx *sql.Tx, ids []string, cutoff time.Time) ([]string, error) {
	for pass := range 2 {
		lock := ""
		if pass == 0 {
			lock = p.d.LockRows
		}
		list, args := in(ids)
		rows, err := tx.QueryContext(ctx, p.q(`SELECT t.id FROM threads t WHERE t.id IN (`+list+`) AND `+idle+` ORDER BY t.id`+lock),
			append(args, p.d.Time(cutoff))...)
		if err != nil {
			return nil, err
		}
		var kept []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			kept = append(kept, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if ids = kept; len(ids) == 0 {
			return nil, nil
		}
	}
	return ids, nil
}

// PruneThreads implements retention.Store.
func (p *Pruner) PruneThreads(ctx context.Context, ids []string, cutoff time.Time) ([]string, retention.Counts, error) {
	if len(ids) == 0 {
		return nil, retention.Counts{}, nil
	}
	pruned, counts, err := p.prune(ctx, ids, cutoff)
	if err != nil {
		return nil, nil, p.fail(err, "prune %d threads", len(ids))
	}
	return pruned, counts, nil
}

func (p *Pruner) prune(ctx context.Context, ids []string, cutoff time.Time) (pruned []string, counts retention.Counts, err error) {
	tx, err := p.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if pruned, err = p.stillIdle(ctx, tx, ids, cutoff); err != nil || len(pruned) == 0 {
		if err == nil {
			err = tx.Commit()
		}
		return nil, retention.Counts{}, err
	}
	if counts, err = p.count(ctx, tx, pruned); err != nil {
		return nil, nil, err
	}
	list, args := in(pruned)
	res, err := tx.ExecContext(ctx, p.q(`DELETE FROM threads WHERE id IN (`+list+`)`), args...)
	if err != nil {
		return nil, nil, err
	}
	if n, err := res.RowsAffected(); err == nil && n != counts[retention.Threads] {
		return nil, nil, fmt.Errorf("deleted %d threads of the %d locked", n, counts[retention.Threads])
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	return pruned, counts, nil
}

// TrimEvents implements retention.Store.
func (p *Pruner) TrimEvents(ctx context.Context, id string, cutoff time.Time, n int) (int64, error) {
	deleted, err := p.trim(ctx, id, cutoff, n)
	if err != nil {
		return 0, p.fail(err, "trim thread %q", id)
	}
	return deleted, nil
}

func (p *Pruner) trim(ctx context.Context, id string, cutoff time.Time, n int) (deleted int64, err error) {
	if n < 1 {
		return 0, nil
	}
	tx, err := p.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	kept, err := p.stillIdle(ctx, tx, []string{id}, cutoff)
	if err != nil || len(kept) == 0 {
		if err == nil {
			err = tx.Commit()
		}
		return 0, err
	}
	// The oldest n seqs: the primary key (thread_id, seq) serves both the
	// MIN and the range.
	res, err := tx.ExecContext(ctx, p.q(`DELETE FROM events WHERE thread_id = ?
		AND seq < (SELECT MIN(seq) FROM events WHERE thread_id = ?) + ?`), id, id, n)
	if err != nil {
		return 0, err
	}
	if deleted, err = res.RowsAffected(); err != nil {
		return 0, err
	}
	return deleted, tx.Commit()
}

// LogSize implements retention.Store: the events of every thread, each
// counted from its counter and oldest seq (see eventCount), and the bytes
// the dialect can tell.
func (p *Pruner) LogSize(ctx context.Context) (retention.Size, error) {
	var s retention.Size
	if err := p.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(`+eventCount+`), 0) FROM threads t`).Scan(&s.Events); err != nil {
		return s, p.fail(err, "count the log's events")
	}
	if p.d.Size != nil {
		b, err := p.d.Size(ctx, p.r)
		if err != nil {
			return s, p.fail(err, "read the log's size")
		}
		s.Bytes = b
	}
	return s, nil
}
