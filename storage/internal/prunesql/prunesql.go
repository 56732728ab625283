// Package prunesql is retention.Store on SQL tables, shared by the SQLite
// and PostgreSQL backends. A pruned thread's rows go with its threads row
// through ON DELETE CASCADE, the path DeleteThread takes; this package
// counts them first, in the same transaction, to report what went.
package prunesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/storage/internal/storeerr"
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
	return storeerr.Errorf("%s: %s: %w", p.d.Name, fmt.Sprintf(format, args...), err)
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

// perTable are the tables a thread's rows are in besides threads.
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
		return nil, nil, storeerr.Errorf("deleted %d threads of the %d locked", n, counts[retention.Threads])
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

var _ retention.Capper = (*Pruner)(nil)

// CrowdedThreads implements retention.Capper, from the partial index of
// run-starts.
func (p *Pruner) CrowdedThreads(ctx context.Context, keep int, after string, limit int) ([]string, error) {
	rows, err := p.r.QueryContext(ctx, p.q(`SELECT thread_id FROM events WHERE type = 'run-start' AND thread_id > ?
		GROUP BY thread_id HAVING COUNT(DISTINCT run_id) > ? ORDER BY thread_id LIMIT ?`), after, keep, limit)
	if err != nil {
		return nil, p.fail(err, "list threads of more than %d runs", keep)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, p.fail(err, "list threads of more than %d runs", keep)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, p.fail(err, "list threads of more than %d runs", keep)
	}
	return out, nil
}

// oldRuns selects the run ids of the thread (first parameter) whose
// run-start precedes the cut (second).
const oldRuns = `SELECT run_id FROM events WHERE thread_id = ? AND type = 'run-start' AND seq < ?`

// openOldRun finds a run before the cut (parameters: thread, cut) that is
// not closed: no run-finish, or a claim row, a background agent or a
// pending confirmation of it.
const openOldRun = `SELECT s.run_id FROM events s WHERE s.thread_id = ? AND s.type = 'run-start' AND s.seq < ? AND (
	NOT EXISTS (SELECT 1 FROM events f WHERE f.thread_id = s.thread_id AND f.run_id = s.run_id AND f.type = 'run-finish')
	OR EXISTS (SELECT 1 FROM active_runs a WHERE a.thread_id = s.thread_id AND a.run_id = s.run_id)
	OR EXISTS (SELECT 1 FROM background_agents b WHERE b.thread_id = s.thread_id AND b.run_id = s.run_id)
	OR EXISTS (SELECT 1 FROM confirmations c WHERE c.thread_id = s.thread_id AND c.run_id = s.run_id AND c.status = 'pending'))
LIMIT 1`

// runTables are the tables whose rows name their run, besides events.
var runTables = []string{retention.Messages, retention.Confirmations, retention.Checkpoints}

// CapRuns implements retention.Capper. Each call first deletes the
// messages, confirmations and checkpoints of the old runs whose run-start
// is still there, then the oldest events before the cut, up to what is
// left of maxRows (one at least). Events of the last old run that follow
// its run-start may be left if a pass stops between two calls: the
// thread then holds no more than keep runs, and a replay still starts
// with the reset of evicted events.
func (p *Pruner) CapRuns(ctx context.Context, id string, keep, maxRows int, dry bool) (retention.Counts, error) {
	out, err := p.capRuns(ctx, id, keep, maxRows, dry)
	if err != nil {
		return nil, p.fail(err, "cap the runs of thread %q", id)
	}
	return out, nil
}

func (p *Pruner) capRuns(ctx context.Context, id string, keep, maxRows int, dry bool) (out retention.Counts, err error) {
	out = retention.Counts{}
	if keep < 1 {
		return out, nil
	}
	// A dry call reads only, on the readers: each DELETE is asked as the
	// COUNT of the rows it would take.
	var q interface {
		queryer
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	} = p.r
	var tx *sql.Tx
	if !dry {
		if tx, err = p.w.BeginTx(ctx, nil); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = tx.Rollback()
			}
		}()
		q = tx
	}
	done := func() error {
		if tx != nil {
			return tx.Commit()
		}
		return nil
	}
	del := func(from string, args ...any) (int64, error) {
		if dry {
			var n int64
			err := q.QueryRowContext(ctx, p.q(`SELECT COUNT(*) FROM `+from), args...).Scan(&n)
			return n, err
		}
		res, err := q.ExecContext(ctx, p.q(`DELETE FROM `+from), args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	// The cut is the run-start of the oldest run kept.
	var cut int64
	err = q.QueryRowContext(ctx, p.q(`SELECT s FROM (SELECT MIN(seq) AS s FROM events WHERE thread_id = ? AND type = 'run-start'
		GROUP BY run_id) x ORDER BY s DESC LIMIT 1 OFFSET ?`), id, keep-1).Scan(&cut)
	if errors.Is(err, sql.ErrNoRows) {
		return out, done()
	}
	if err != nil {
		return nil, err
	}
	var open string
	err = q.QueryRowContext(ctx, p.q(openOldRun), id, cut).Scan(&open)
	if err == nil {
		return out, done() // a run there is not closed: the thread waits
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	var others int64
	for _, table := range runTables {
		n, err := del(table+` WHERE thread_id = ? AND run_id IN (`+oldRuns+`)`, id, id, cut)
		if err != nil {
			return nil, err
		}
		out[table] = n
		others += n
	}
	chunk := max(int64(maxRows)-others, 1)
	if dry {
		chunk = cut // all of them
	}
	if out[retention.Events], err = del(`events WHERE thread_id = ? AND seq < ?
		AND seq < (SELECT MIN(seq) FROM events WHERE thread_id = ?) + ?`, id, cut, id, chunk); err != nil {
		return nil, err
	}
	return out, done()
}
