// Package claims is the SQL behind instanceai.RunClaims and
// instanceai.AgentClaims, shared by the SQLite and PostgreSQL backends: the
// active_runs table with one row per thread that has an active run, and
// the background_agents table with one row per background agent at work.
//
// The two databases differ in their clock, which each backend passes in as
// SQL: PostgreSQL leases are set and compared with the database's now(), so
// instances on hosts whose clocks disagree still agree on when a lease ran
// out; SQLite is a file on one machine, whose processes share one clock, so
// its leases are epoch milliseconds from the process.
//
// They also differ in where fencing tokens come from (migration 007):
// PostgreSQL's claim_fences sequence, which a claim's own statement calls,
// or SQLite's one-row counter, which a claim bumps in its own transaction.
package claims

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

// Dialect is how one database spells the claims statements.
type Dialect struct {
	// Name prefixes errors ("postgres", "sqlite").
	Name string
	// Rebind turns ? placeholders into the database's.
	Rebind func(string) string
	// Now is the SQL for the lease clock's current time, with its
	// parameters; Expiry the SQL for "now + ttl", with its parameter.
	Now    func() (sql string, args []any)
	Expiry func(ttl time.Duration) (sql string, arg any)
	// IsForeignKeyViolation recognises a claim on a thread that does not
	// exist.
	IsForeignKeyViolation func(error) bool
	// FenceSQL, when set, is the SQL of a fresh fencing token that a
	// claim's own statement evaluates (PostgreSQL's nextval: it takes no
	// lock and is never rolled back, so no two claims get one token).
	// When it is "", NextFence hands the token out instead, inside the
	// claim's transaction.
	FenceSQL  string
	NextFence func(ctx context.Context, tx *sql.Tx) (int64, error)
	// ShareLock locks the run's row that an agent's claim is checked
	// against for the claim's duration (PostgreSQL's FOR SHARE), so that
	// no take of the run slips in between; "" where writes are serial.
	ShareLock string
}

// Table implements instanceai.RunClaims on one database.
type Table struct {
	d Dialect
	// w takes the statements that write, r the reads (SQLite keeps one
	// writer connection apart from its readers; PostgreSQL passes one pool
	// twice).
	w, r *sql.DB
}

var (
	_ instanceai.RunClaims   = (*Table)(nil)
	_ instanceai.AgentClaims = (*Table)(nil)
)

// New returns the claims table of a database.
func New(d Dialect, writer, reader *sql.DB) *Table {
	return &Table{d: d, w: writer, r: reader}
}

func (t *Table) q(s string) string { return t.d.Rebind(s) }

const columns = `thread_id, run_id, owner_id, suspended, lease_expires, fence, cancel_reason`

func (t *Table) scan(row interface{ Scan(...any) error }) (instanceai.ActiveRun, error) {
	var a instanceai.ActiveRun
	var suspended any
	var lease any
	if err := row.Scan(&a.ThreadID, &a.RunID, &a.Owner, &suspended, &lease, &a.Fence, &a.CancelReason); err != nil {
		return a, err
	}
	switch v := suspended.(type) {
	case bool:
		a.Suspended = v
	case int64:
		a.Suspended = v != 0
	}
	var err error
	a.LeaseExpires, err = leaseTime(lease)
	return a, err
}

// leaseTime reads a lease_expires value: a timestamp (PostgreSQL) or epoch
// milliseconds (SQLite).
func leaseTime(lease any) (time.Time, error) {
	switch v := lease.(type) {
	case time.Time:
		return v.UTC(), nil
	case int64:
		return time.UnixMilli(v).UTC(), nil
	}
	return time.Time{}, storeerr.Errorf("unexpected lease_expires value %T", lease)
}

func (t *Table) wrap(op, threadID string, err error) error {
	if err == nil {
		return nil
	}
	return storeerr.Errorf("%s: %s thread %q: %w", t.d.Name, op, threadID, err)
}

// querier is what a claim's statement runs on: the writer pool, or the
// transaction that hands out its token.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// fenced runs stmt, a statement that gives a row a fresh fencing token,
// with the token's SQL and arguments: the dialect's FenceSQL on the writer
// pool, or a placeholder for NextFence's token, both in one transaction.
// An error from stmt rolls that transaction back and is returned as it is.
func (t *Table) fenced(ctx context.Context, stmt func(q querier, fence string, fenceArgs []any) error) (err error) {
	if t.d.FenceSQL != "" {
		return stmt(t.w, t.d.FenceSQL, nil)
	}
	tx, err := t.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	token, err := t.d.NextFence(ctx, tx)
	if err != nil {
		return storeerr.Errorf("hand out a fencing token: %w", err)
	}
	if err := stmt(tx, "?", []any{token}); err != nil {
		return err
	}
	return tx.Commit()
}

// mustFence returns a *instanceai.StaleFenceError for fence when res
// changed no row: no row of the caller's run holds its token.
func mustFence(res sql.Result, fence int64) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return &instanceai.StaleFenceError{Tokens: []int64{fence}}
	}
	return nil
}

// ClaimThread implements instanceai.RunClaims.
func (t *Table) ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (instanceai.ActiveRun, error) {
	exp, expArg := t.d.Expiry(ttl)
	// The INSERT makes the row only if the thread has none; otherwise the
	// existing row is read and reported. It can vanish in between (its run
	// finished): then the loop tries again.
	for range 3 {
		var row instanceai.ActiveRun
		err := t.fenced(ctx, func(q querier, fence string, fenceArgs []any) error {
			var err error
			row, err = t.scan(q.QueryRowContext(ctx, t.q(
				`INSERT INTO active_runs (thread_id, run_id, owner_id, suspended, lease_expires, fence)
				 VALUES (?, ?, ?, false, `+exp+`, `+fence+`)
				 ON CONFLICT (thread_id) DO NOTHING RETURNING `+columns),
				append([]any{threadID, runID, owner, expArg}, fenceArgs...)...))
			return err
		})
		if err == nil {
			return row, nil
		}
		if t.d.IsForeignKeyViolation(err) {
			return instanceai.ActiveRun{}, t.wrap("claim", threadID, instanceai.ErrNotFound)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return instanceai.ActiveRun{}, t.wrap("claim", threadID, err)
		}
		held, err := t.ActiveRun(ctx, threadID)
		if err == nil {
			return held, instanceai.ErrRunActive
		}
		if !errors.Is(err, instanceai.ErrNotFound) {
			return instanceai.ActiveRun{}, err
		}
	}
	return instanceai.ActiveRun{}, t.wrap("claim", threadID, errors.New("its active run kept changing, giving up"))
}

// ActiveRun implements instanceai.RunClaims.
func (t *Table) ActiveRun(ctx context.Context, threadID string) (instanceai.ActiveRun, error) {
	row, err := t.scan(t.r.QueryRowContext(ctx, t.q(`SELECT `+columns+` FROM active_runs WHERE thread_id = ?`), threadID))
	if errors.Is(err, sql.ErrNoRows) {
		err = instanceai.ErrNotFound
	}
	return row, t.wrap("read the active run of", threadID, err)
}

// TakeRun implements instanceai.RunClaims.
func (t *Table) TakeRun(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (int64, bool, error) {
	exp, expArg := t.d.Expiry(ttl)
	now, nowArg := t.d.Now()
	var token int64
	err := t.fenced(ctx, func(q querier, fence string, fenceArgs []any) error {
		args := append(append([]any{owner, expArg}, fenceArgs...), threadID, runID)
		return q.QueryRowContext(ctx, t.q(
			`UPDATE active_runs SET owner_id = ?, lease_expires = `+exp+`, fence = `+fence+`
			 WHERE thread_id = ? AND run_id = ? AND (owner_id = '' OR lease_expires < `+now+`) RETURNING fence`),
			append(args, nowArg...)...).Scan(&token)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.wrap("take the run of", threadID, err)
	}
	return token, true, nil
}

// SuspendRun implements instanceai.RunClaims.
func (t *Table) SuspendRun(ctx context.Context, threadID, runID string, fence int64, suspended bool) error {
	res, err := t.w.ExecContext(ctx, t.q(`UPDATE active_runs SET suspended = ? WHERE thread_id = ? AND run_id = ? AND fence = ?`),
		suspended, threadID, runID, fence)
	if err == nil {
		err = mustFence(res, fence)
	}
	return t.wrap("suspend the run of", threadID, err)
}

// DisownRun implements instanceai.RunClaims.
func (t *Table) DisownRun(ctx context.Context, threadID, runID string, fence int64) error {
	res, err := t.w.ExecContext(ctx, t.q(`UPDATE active_runs SET owner_id = '' WHERE thread_id = ? AND run_id = ? AND fence = ?`),
		threadID, runID, fence)
	if err == nil {
		err = mustFence(res, fence)
	}
	return t.wrap("disown the run of", threadID, err)
}

// ReleaseRun implements instanceai.RunClaims.
func (t *Table) ReleaseRun(ctx context.Context, threadID, runID string, fence int64) error {
	res, err := t.w.ExecContext(ctx, t.q(`DELETE FROM active_runs WHERE thread_id = ? AND run_id = ? AND fence = ?`),
		threadID, runID, fence)
	if err == nil {
		err = mustFence(res, fence)
	}
	return t.wrap("release the run of", threadID, err)
}

// RenewRuns implements instanceai.RunClaims.
func (t *Table) RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.ActiveRun, error) {
	exp, expArg := t.d.Expiry(ttl)
	rows, err := t.w.QueryContext(ctx, t.q(`UPDATE active_runs SET lease_expires = `+exp+` WHERE owner_id = ? RETURNING `+columns),
		expArg, owner)
	if err != nil {
		return nil, storeerr.Errorf("%s: renew the leases of %q: %w", t.d.Name, owner, err)
	}
	defer rows.Close()
	var out []instanceai.ActiveRun
	for rows.Next() {
		row, err := t.scan(rows)
		if err != nil {
			return nil, storeerr.Errorf("%s: renew the leases of %q: %w", t.d.Name, owner, err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("%s: renew the leases of %q: %w", t.d.Name, owner, err)
	}
	return out, nil
}

// ExpiredRuns implements instanceai.RunClaims.
func (t *Table) ExpiredRuns(ctx context.Context) ([]instanceai.ActiveRun, error) {
	now, nowArg := t.d.Now()
	rows, err := t.r.QueryContext(ctx, t.q(`SELECT `+columns+` FROM active_runs a
		WHERE (owner_id <> '' AND lease_expires < `+now+`)
		   OR (owner_id = '' AND NOT suspended)
		   OR (owner_id = '' AND suspended AND lease_expires < `+now+` AND EXISTS (
		       SELECT 1 FROM confirmations c WHERE c.thread_id = a.thread_id AND c.run_id = a.run_id
		       AND c.status IN ('approved', 'denied')))
		ORDER BY lease_expires`), append(slices.Clone(nowArg), nowArg...)...)
	if err != nil {
		return nil, storeerr.Errorf("%s: list expired runs: %w", t.d.Name, err)
	}
	defer rows.Close()
	var out []instanceai.ActiveRun
	for rows.Next() {
		row, err := t.scan(rows)
		if err != nil {
			return nil, storeerr.Errorf("%s: list expired runs: %w", t.d.Name, err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("%s: list expired runs: %w", t.d.Name, err)
	}
	return out, nil
}

// ClaimAgent implements instanceai.AgentClaims.
func (t *Table) ClaimAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration, runFence int64) (int64, error) {
	exp, expArg := t.d.Expiry(ttl)
	var token int64
	err := t.fenced(ctx, func(q querier, fence string, fenceArgs []any) error {
		args := append([]any{ref.ThreadID, ref.AgentID, ref.RunID, owner, expArg}, fenceArgs...)
		// The WHERE is also what SQLite needs to parse an INSERT … SELECT
		// followed by ON CONFLICT.
		where := `WHERE true`
		if runFence != 0 {
			where = `WHERE EXISTS (SELECT 1 FROM active_runs WHERE thread_id = ? AND run_id = ? AND fence = CAST(? AS BIGINT)` + t.d.ShareLock + `)`
			args = append(args, ref.ThreadID, ref.RunID, runFence)
		}
		return q.QueryRowContext(ctx, t.q(
			`INSERT INTO background_agents (thread_id, agent_id, run_id, owner_id, lease_expires, fence)
			 SELECT ?, ?, ?, ?, `+exp+`, `+fence+` `+where+`
			 ON CONFLICT (thread_id, agent_id) DO UPDATE
			 SET owner_id = excluded.owner_id, lease_expires = excluded.lease_expires, fence = excluded.fence
			 RETURNING fence`), args...).Scan(&token)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		err = &instanceai.StaleFenceError{Tokens: []int64{runFence}}
	case err != nil && t.d.IsForeignKeyViolation(err):
		err = instanceai.ErrNotFound
	}
	return token, t.wrap("claim an agent of", ref.ThreadID, err)
}

// RunAgents implements instanceai.AgentClaims.
func (t *Table) RunAgents(ctx context.Context, threadID, runID string) ([]instanceai.AgentClaim, error) {
	rows, err := t.w.QueryContext(ctx, t.q(`SELECT `+agentColumns+`
		FROM background_agents WHERE thread_id = ? AND run_id = ? ORDER BY agent_id`), threadID, runID)
	if err != nil {
		return nil, t.wrap("list the agents of", threadID, err)
	}
	defer rows.Close()
	var out []instanceai.AgentClaim
	for rows.Next() {
		c, err := scanAgent(rows)
		if err != nil {
			return nil, t.wrap("list the agents of", threadID, err)
		}
		out = append(out, c)
	}
	return out, t.wrap("list the agents of", threadID, rows.Err())
}

// ReleaseAgent implements instanceai.AgentClaims.
func (t *Table) ReleaseAgent(ctx context.Context, ref instanceai.AgentRef, fence int64) error {
	res, err := t.w.ExecContext(ctx, t.q(`DELETE FROM background_agents WHERE thread_id = ? AND agent_id = ? AND fence = ?`),
		ref.ThreadID, ref.AgentID, fence)
	if err == nil {
		err = mustFence(res, fence)
	}
	return t.wrap("release an agent of", ref.ThreadID, err)
}

// agentColumns are an AgentClaim's, as scanAgent reads them.
const agentColumns = `thread_id, run_id, agent_id, owner_id, lease_expires, fence, cancel_reason`

func scanAgent(row interface{ Scan(...any) error }) (instanceai.AgentClaim, error) {
	var c instanceai.AgentClaim
	var lease any
	if err := row.Scan(&c.ThreadID, &c.RunID, &c.AgentID, &c.Owner, &lease, &c.Fence, &c.CancelReason); err != nil {
		return c, err
	}
	var err error
	c.LeaseExpires, err = leaseTime(lease)
	return c, err
}

// renewChunk bounds the tokens one renewal statement lists, well within
// both databases' limits on a statement's parameters.
const renewChunk = 500

// RenewAgents implements instanceai.AgentClaims. The rows are matched by
// token as well as owner, so that a row the owner holds for no live agent
// is not kept alive.
func (t *Table) RenewAgents(ctx context.Context, owner string, ttl time.Duration, fences []int64) ([]instanceai.AgentClaim, error) {
	var out []instanceai.AgentClaim
	for chunk := range slices.Chunk(fences, renewChunk) {
		rows, err := t.renewAgents(ctx, owner, ttl, chunk)
		if err != nil {
			return nil, storeerr.Errorf("%s: renew the agent leases of %q: %w", t.d.Name, owner, err)
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (t *Table) renewAgents(ctx context.Context, owner string, ttl time.Duration, fences []int64) ([]instanceai.AgentClaim, error) {
	exp, expArg := t.d.Expiry(ttl)
	args := []any{expArg, owner}
	for _, f := range fences {
		args = append(args, f)
	}
	in := strings.Repeat(", ?", len(fences))[2:]
	rows, err := t.w.QueryContext(ctx, t.q(`UPDATE background_agents SET lease_expires = `+exp+`
		WHERE owner_id = ? AND fence IN (`+in+`) RETURNING `+agentColumns), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []instanceai.AgentClaim
	for rows.Next() {
		c, err := scanAgent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ExpiredAgents implements instanceai.AgentClaims.
func (t *Table) ExpiredAgents(ctx context.Context) ([]instanceai.AgentClaim, error) {
	now, nowArg := t.d.Now()
	rows, err := t.r.QueryContext(ctx, t.q(`SELECT `+agentColumns+`
		FROM background_agents WHERE lease_expires < `+now+` ORDER BY lease_expires`), nowArg...)
	if err != nil {
		return nil, storeerr.Errorf("%s: list expired agents: %w", t.d.Name, err)
	}
	defer rows.Close()
	var out []instanceai.AgentClaim
	for rows.Next() {
		c, err := scanAgent(rows)
		if err != nil {
			return nil, storeerr.Errorf("%s: list expired agents: %w", t.d.Name, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("%s: list expired agents: %w", t.d.Name, err)
	}
	return out, nil
}

// TakeAgent implements instanceai.AgentClaims.
func (t *Table) TakeAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration) (int64, bool, error) {
	exp, expArg := t.d.Expiry(ttl)
	now, nowArg := t.d.Now()
	var token int64
	err := t.fenced(ctx, func(q querier, fence string, fenceArgs []any) error {
		args := append(append([]any{owner, expArg}, fenceArgs...), ref.ThreadID, ref.AgentID)
		return q.QueryRowContext(ctx, t.q(
			`UPDATE background_agents SET owner_id = ?, lease_expires = `+exp+`, fence = `+fence+`
			 WHERE thread_id = ? AND agent_id = ? AND lease_expires < `+now+` RETURNING fence`),
			append(args, nowArg...)...).Scan(&token)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.wrap("take an agent of", ref.ThreadID, err)
	}
	return token, true, nil
}

// RequestCancel implements instanceai.RunClaims: one transaction, so that
// a waiter never sees the run's row asked and an agent's not.
func (t *Table) RequestCancel(ctx context.Context, threadID, reason string) (bool, error) {
	tx, err := t.w.BeginTx(ctx, nil)
	if err != nil {
		return false, t.wrap("ask to cancel the work of", threadID, err)
	}
	defer func() { _ = tx.Rollback() }()
	var n int64
	for _, table := range []string{"active_runs", "background_agents"} {
		res, err := tx.ExecContext(ctx, t.q(`UPDATE `+table+` SET cancel_reason = ? WHERE thread_id = ?`), reason, threadID)
		if err != nil {
			return false, t.wrap("ask to cancel the work of", threadID, err)
		}
		m, err := res.RowsAffected()
		if err != nil {
			return false, t.wrap("ask to cancel the work of", threadID, err)
		}
		n += m
	}
	if err := tx.Commit(); err != nil {
		return false, t.wrap("ask to cancel the work of", threadID, err)
	}
	return n > 0, nil
}

// CancelPending implements instanceai.RunClaims.
func (t *Table) CancelPending(ctx context.Context, threadID string) (bool, error) {
	var one int
	err := t.r.QueryRowContext(ctx, t.q(`SELECT 1 WHERE EXISTS (SELECT 1 FROM active_runs WHERE thread_id = ? AND cancel_reason <> '')
		OR EXISTS (SELECT 1 FROM background_agents WHERE thread_id = ? AND cancel_reason <> '')`), threadID, threadID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, t.wrap("read the cancel requests of", threadID, err)
	}
	return true, nil
}
