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
package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/threadline/threadline/instanceai"
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

const columns = `thread_id, run_id, owner_id, suspended, lease_expires`

func (t *Table) scan(row interface{ Scan(...any) error }) (instanceai.ActiveRun, error) {
	var a instanceai.ActiveRun
	var suspended any
	var lease any
	if err := row.Scan(&a.ThreadID, &a.RunID, &a.Owner, &suspended, &lease); err != nil {
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
	return time.Time{}, fmt.Errorf("unexpected lease_expires value %T", lease)
}

func (t *Table) wrap(op, threadID string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s thread %q: %w", t.d.Name, op, threadID, err)
}

// ClaimThread implements instanceai.RunClaims.
func (t *Table) ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (instanceai.ActiveRun, error) {
	exp, expArg := t.d.Expiry(ttl)
	// The INSERT makes the row only if the thread has none; otherwise the
	// existing row is read and reported. It can vanish in between (its run
	// finished): then the loop tries again.
	for range 3 {
		row, err := t.scan(t.w.QueryRowContext(ctx, t.q(
			`INSERT INTO active_runs (thread_id, run_id, owner_id, suspended, lease_expires)
			 VALUES (?, ?, ?, false, `+exp+`)
			 ON CONFLICT (thread_id) DO NOTHING RETURNING `+columns),
			threadID, runID, owner, expArg))
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
func (t *Table) TakeRun(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (bool, error) {
	exp, expArg := t.d.Expiry(ttl)
	now, nowArg := t.d.Now()
	res, err := t.w.ExecContext(ctx, t.q(
		`UPDATE active_runs SET owner_id = ?, lease_expires = `+exp+`
		 WHERE thread_id = ? AND run_id = ? AND (owner_id = '' OR lease_expires < `+now+`)`),
		append([]any{owner, expArg, threadID, runID}, nowArg...)...)
	if err != nil {
		return false, t.wrap("take the run of", threadID, err)
	}
	n, err := res.RowsAffected()
	return n == 1, t.wrap("take the run of", threadID, err)
}

// SuspendRun implements instanceai.RunClaims.
func (t *Table) SuspendRun(ctx context.Context, threadID, runID string, suspended bool) error {
	_, err := t.w.ExecContext(ctx, t.q(`UPDATE active_runs SET suspended = ? WHERE thread_id = ? AND run_id = ?`),
		suspended, threadID, runID)
	return t.wrap("suspend the run of", threadID, err)
}

// DisownRun implements instanceai.RunClaims.
func (t *Table) DisownRun(ctx context.Context, threadID, runID, owner string) error {
	_, err := t.w.ExecContext(ctx, t.q(`UPDATE active_runs SET owner_id = '' WHERE thread_id = ? AND run_id = ? AND owner_id = ?`),
		threadID, runID, owner)
	return t.wrap("disown the run of", threadID, err)
}

// ReleaseRun implements instanceai.RunClaims.
func (t *Table) ReleaseRun(ctx context.Context, threadID, runID string) error {
	_, err := t.w.ExecContext(ctx, t.q(`DELETE FROM active_runs WHERE thread_id = ? AND run_id = ?`), threadID, runID)
	return t.wrap("release the run of", threadID, err)
}

// RenewRuns implements instanceai.RunClaims.
func (t *Table) RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.RunRef, error) {
	exp, expArg := t.d.Expiry(ttl)
	rows, err := t.w.QueryContext(ctx, t.q(`UPDATE active_runs SET lease_expires = `+exp+` WHERE owner_id = ? RETURNING thread_id, run_id`),
		expArg, owner)
	if err != nil {
		return nil, fmt.Errorf("%s: renew the leases of %q: %w", t.d.Name, owner, err)
	}
	defer rows.Close()
	var out []instanceai.RunRef
	for rows.Next() {
		var ref instanceai.RunRef
		if err := rows.Scan(&ref.ThreadID, &ref.RunID); err != nil {
			return nil, fmt.Errorf("%s: renew the leases of %q: %w", t.d.Name, owner, err)
		}
		out = append(out, ref)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: renew the leases of %q: %w", t.d.Name, owner, err)
	}
	return out, nil
}

// ExpiredRuns implements instanceai.RunClaims.
func (t *Table) ExpiredRuns(ctx context.Context) ([]instanceai.ActiveRun, error) {
	now, nowArg := t.d.Now()
	rows, err := t.r.QueryContext(ctx, t.q(`SELECT `+columns+` FROM active_runs
		WHERE owner_id <> '' AND lease_expires < `+now+` ORDER BY lease_expires`), nowArg...)
	if err != nil {
		return nil, fmt.Errorf("%s: list expired runs: %w", t.d.Name, err)
	}
	defer rows.Close()
	var out []instanceai.ActiveRun
	for rows.Next() {
		row, err := t.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list expired runs: %w", t.d.Name, err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list expired runs: %w", t.d.Name, err)
	}
	return out, nil
}

// ClaimAgent implements instanceai.AgentClaims.
func (t *Table) ClaimAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration) error {
	exp, expArg := t.d.Expiry(ttl)
	_, err := t.w.ExecContext(ctx, t.q(
		`INSERT INTO background_agents (thread_id, agent_id, run_id, owner_id, lease_expires)
		 VALUES (?, ?, ?, ?, `+exp+`)
		 ON CONFLICT (thread_id, agent_id) DO UPDATE SET owner_id = excluded.owner_id, lease_expires = excluded.lease_expires`),
		ref.ThreadID, ref.AgentID, ref.RunID, owner, expArg)
	if err != nil && t.d.IsForeignKeyViolation(err) {
		err = instanceai.ErrNotFound
	}
	return t.wrap("claim an agent of", ref.ThreadID, err)
}

// ReleaseAgent implements instanceai.AgentClaims.
func (t *Table) ReleaseAgent(ctx context.Context, ref instanceai.AgentRef) error {
	_, err := t.w.ExecContext(ctx, t.q(`DELETE FROM background_agents WHERE thread_id = ? AND agent_id = ?`),
		ref.ThreadID, ref.AgentID)
	return t.wrap("release an agent of", ref.ThreadID, err)
}

// RenewAgents implements instanceai.AgentClaims.
func (t *Table) RenewAgents(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.AgentRef, error) {
	exp, expArg := t.d.Expiry(ttl)
	rows, err := t.w.QueryContext(ctx, t.q(`UPDATE background_agents SET lease_expires = `+exp+`
		WHERE owner_id = ? RETURNING thread_id, run_id, agent_id`), expArg, owner)
	if err != nil {
		return nil, fmt.Errorf("%s: renew the agent leases of %q: %w", t.d.Name, owner, err)
	}
	defer rows.Close()
	var out []instanceai.AgentRef
	for rows.Next() {
		var ref instanceai.AgentRef
		if err := rows.Scan(&ref.ThreadID, &ref.RunID, &ref.AgentID); err != nil {
			return nil, fmt.Errorf("%s: renew the agent leases of %q: %w", t.d.Name, owner, err)
		}
		out = append(out, ref)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: renew the agent leases of %q: %w", t.d.Name, owner, err)
	}
	return out, nil
}

// ExpiredAgents implements instanceai.AgentClaims.
func (t *Table) ExpiredAgents(ctx context.Context) ([]instanceai.AgentClaim, error) {
	now, nowArg := t.d.Now()
	rows, err := t.r.QueryContext(ctx, t.q(`SELECT thread_id, run_id, agent_id, owner_id, lease_expires
		FROM background_agents WHERE lease_expires < `+now+` ORDER BY lease_expires`), nowArg...)
	if err != nil {
		return nil, fmt.Errorf("%s: list expired agents: %w", t.d.Name, err)
	}
	defer rows.Close()
	var out []instanceai.AgentClaim
	for rows.Next() {
		var c instanceai.AgentClaim
		var lease any
		if err := rows.Scan(&c.ThreadID, &c.RunID, &c.AgentID, &c.Owner, &lease); err != nil {
			return nil, fmt.Errorf("%s: list expired agents: %w", t.d.Name, err)
		}
		if c.LeaseExpires, err = leaseTime(lease); err != nil {
			return nil, fmt.Errorf("%s: list expired agents: %w", t.d.Name, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list expired agents: %w", t.d.Name, err)
	}
	return out, nil
}

// TakeAgent implements instanceai.AgentClaims.
func (t *Table) TakeAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration) (bool, error) {
	exp, expArg := t.d.Expiry(ttl)
	now, nowArg := t.d.Now()
	res, err := t.w.ExecContext(ctx, t.q(
		`UPDATE background_agents SET owner_id = ?, lease_expires = `+exp+`
		 WHERE thread_id = ? AND agent_id = ? AND lease_expires < `+now),
		append([]any{owner, expArg, ref.ThreadID, ref.AgentID}, nowArg...)...)
	if err != nil {
		return false, t.wrap("take an agent of", ref.ThreadID, err)
	}
	n, err := res.RowsAffected()
	return n == 1, t.wrap("take an agent of", ref.ThreadID, err)
}
