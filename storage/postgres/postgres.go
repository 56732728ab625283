// Package postgres is the production storage backend: PostgreSQL through
// sqlx and lib/pq, shared by every instance of the server.
//
// Several instances may append to the same thread at once. Seqs stay
// contiguous because each append takes the thread's counter row with
// UPDATE ... RETURNING: the row lock queues the appenders of every pool and
// process, and each one's seqs follow the previous one's commit.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"io/fs"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq" // also registers the "postgres" driver

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/storage/internal/buildersql"
	"github.com/threadline/threadline/storage/internal/claims"
	"github.com/threadline/threadline/storage/internal/migrate"
	"github.com/threadline/threadline/storage/internal/prunesql"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// maxParams is the PostgreSQL wire protocol's limit on bind parameters per
// statement (a 16-bit count).
const maxParams = 65535

// Store is an instanceai.Store on PostgreSQL.
type Store struct {
	*sqllog.Log
	*claims.Table
	*buildersql.Store
	*prunesql.Pruner

	db  *sqlx.DB
	one *oneStatement
}

var _ instanceai.Prober = (*Store)(nil)

var (
	_ instanceai.Store = (*Store)(nil)
	_ builder.Store    = (*Store)(nil)
	_ retention.Store  = (*Store)(nil)
	_ retention.Locker = (*Store)(nil)
)

// Open connects to the database named by dsn (a postgres:// URL or a
// key=value string, as lib/pq accepts) and checks that it answers. Call
// Migrate before first use.
func Open(ctx context.Context, dsn string) (*Store, error) {
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, storeerr.Errorf("postgres: open: %w", withCtx(ctx, err))
	}
	// Appenders to one thread wait on its row lock while holding a
	// connection, so the pool must be larger than the number of threads
	// written at once; idle connections are let go after a while so an idle
	// instance does not hold server slots.
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, storeerr.Errorf("postgres: connect: %w", withCtx(ctx, err))
	}
	one := &oneStatement{}
	return &Store{Log: sqllog.New(logDialect(one), db.DB, db.DB), one: one, Table: claims.New(claimsDialect, db.DB, db.DB),
		Store: buildersql.New(builderDialect, db.DB, db.DB), Pruner: prunesql.New(pruneDialect, db.DB, db.DB), db: db}, nil
}

// logDialect returns the event log's dialect, appending through one. It
// stamps events with the database's clock, one clock for every
// instance. The counter row's lock, taken here, is held until COMMIT: a
// concurrent appender's UPDATE waits, then sees this one's last_seq and
// continues after it.
func logDialect(one *oneStatement) sqllog.Dialect {
	return sqllog.Dialect{
		Name: "postgres", Placeholders: sqllog.Dollar, MaxParams: maxParams, Err: withCtx,
		// substring counts characters in text and bytes in bytea.
		ByteSlice: `substring(convert_to(data, 'UTF8') from ?::int for ?::int)`,
		// The server sends a result whole: a page is cut where it is read.
		BudgetInQuery: true,
		Reserve: func(ctx context.Context, tx *sql.Tx, threadID, owner string, n int64) (int64, any, error) {
			var last int64
			var now time.Time
			err := tx.QueryRowContext(ctx,
				`UPDATE threads SET last_seq = last_seq + $2, updated_at = now()
				 WHERE id = $1 AND ($3 = '' OR owner_id = $3) RETURNING last_seq, now()`,
				threadID, n, owner).Scan(&last, &now)
			return last, now, err
		},
		AppendOne:       one.append,
		AppendOneFenced: one.appendFenced,
		ShareLock:       " FOR SHARE",
	}
}

// appendOneSQL moves the thread's counter and inserts the batch in one
// statement. The UPDATE takes the counter row's lock, as Reserve does, and
// holds it until the statement commits, so concurrent appenders queue
// behind it and seqs follow commit order; the INSERT numbers the rows from
// the seq after the old last_seq by their position in the arrays. A
// data-modifying WITH runs whether or not the outer query reads it, and
// reads no rows of r when the thread is missing, or is not $7's when $7 is
// set: no row comes back, and nothing was inserted. One statement is one transaction, so a failed
// insert (a duplicate seq) takes the counter bump with it.
const appendOneSQL = `WITH r AS (
    UPDATE threads SET last_seq = last_seq + $2, updated_at = now()
    WHERE id = $1 AND ($7 = '' OR owner_id = $7) RETURNING last_seq
), i AS (
    INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at)
    SELECT $1, r.last_seq - $2 + v.ord, v.type, v.run_id, v.agent_id, v.data, now()
    FROM r, unnest($3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS v (type, run_id, agent_id, data, ord)
)
SELECT last_seq FROM r`

// appendFencedSQL is appendOneSQL for a batch written under fencing tokens
// ($8, distinct and non-zero): the counter moves, and the rows go in, only
// if claim rows of the thread hold every token. The claim rows are read by
// CTEs with FOR SHARE that the UPDATE's condition evaluates before it
// takes the counter row, and not by plain subqueries: in READ COMMITTED an
// UPDATE that waits for the counter row's lock (another appender's)
// re-checks that row alone when it gets it, and subqueries on other tables
// keep the statement's snapshot, so a take committed during the wait would
// go unseen. FOR SHARE instead waits for a take or release of the row
// under way, re-reads the row as it left it, and holds off the next one
// until this statement commits. Every append locks claim rows before the
// counter row, and a take locks no counter row, so the locks never wait in
// a cycle.
const appendFencedSQL = `WITH fa AS (
    SELECT fence FROM active_runs WHERE thread_id = $1 AND fence = ANY($8::bigint[]) FOR SHARE
), fb AS (
    SELECT fence FROM background_agents WHERE thread_id = $1 AND fence = ANY($8::bigint[]) FOR SHARE
), r AS (
    UPDATE threads SET last_seq = last_seq + $2, updated_at = now()
    WHERE id = $1 AND ($7 = '' OR owner_id = $7)
      AND (SELECT count(*) FROM fa) + (SELECT count(*) FROM fb) = cardinality($8::bigint[])
    RETURNING last_seq
), i AS (
    INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at)
    SELECT $1, r.last_seq - $2 + v.ord, v.type, v.run_id, v.agent_id, v.data, now()
    FROM r, unnest($3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS v (type, run_id, agent_id, data, ord)
)
SELECT last_seq FROM r`

// oneStatement runs appendOneSQL and appendFencedSQL, whose texts never
// change (seven and eight parameters whatever the batch's size), so each is
// prepared once, on first use (the tables exist only after Migrate):
// lib/pq sends an unprepared statement with parameters in two round trips
// (parse, then bind and execute), a prepared one in one.
type oneStatement struct {
	mu     sync.Mutex
	stmt   *sql.Stmt
	fenced *sql.Stmt
}

func (o *oneStatement) prepared(ctx context.Context, db *sql.DB, fenced bool) (*sql.Stmt, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	slot, query := &o.stmt, appendOneSQL
	if fenced {
		slot, query = &o.fenced, appendFencedSQL
	}
	if *slot == nil {
		stmt, err := db.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		*slot = stmt
	}
	return *slot, nil
}

func (o *oneStatement) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for _, stmt := range []*sql.Stmt{o.stmt, o.fenced} {
		if stmt != nil {
			errs = append(errs, stmt.Close())
		}
	}
	return errors.Join(errs...)
}

// oneArgs are the parameters the two statements share, $1 to $7.
func oneArgs(threadID, owner string, events []instanceai.Event, data [][]byte) []any {
	types := make([]string, len(events))
	runs := make([]string, len(events))
	agents := make([]string, len(events))
	datas := make([]string, len(events))
	for i := range events {
		types[i], runs[i], agents[i], datas[i] = string(events[i].Type), events[i].RunID, events[i].AgentID, string(data[i])
	}
	return []any{threadID, len(events), pq.Array(types), pq.Array(runs), pq.Array(agents), pq.Array(datas), owner}
}

func (o *oneStatement) append(ctx context.Context, db *sql.DB, threadID, owner string, events []instanceai.Event, data [][]byte) (int64, error) {
	stmt, err := o.prepared(ctx, db, false)
	if err != nil {
		return 0, err
	}
	var last int64
	err = stmt.QueryRowContext(ctx, oneArgs(threadID, owner, events, data)...).Scan(&last)
	return last, err
}

func (o *oneStatement) appendFenced(ctx context.Context, db *sql.DB, threadID, owner string, events []instanceai.Event, data [][]byte, tokens []int64) (int64, error) {
	stmt, err := o.prepared(ctx, db, true)
	if err != nil {
		return 0, err
	}
	var last int64
	err = stmt.QueryRowContext(ctx, append(oneArgs(threadID, owner, events, data), pq.Array(tokens))...).Scan(&last)
	return last, err
}

// claimsDialect spells the claims statements for PostgreSQL: leases on the
// database's clock, which every instance shares.
var claimsDialect = claims.Dialect{
	Name: "postgres", Rebind: sqllog.Dollar.Rebind,
	Now:    func() (string, []any) { return `now()`, nil },
	Expiry: func(ttl time.Duration) (string, any) { return `now() + make_interval(secs => ?)`, ttl.Seconds() },
	IsForeignKeyViolation: func(err error) bool {
		var pe *pq.Error
		return errors.As(err, &pe) && pe.Code == "23503"
	},
	FenceSQL:  `nextval('claim_fences')`,
	ShareLock: ` FOR SHARE`,
}

// builderDialect stamps the builder's rows with the database's clock: the
// start of the statement, one value however often a statement reads it.
var builderDialect = buildersql.Dialect{
	Name: "postgres", Rebind: sqllog.Dollar.Rebind, Err: withCtx,
	Now:  func() (string, []any) { return `statement_timestamp()`, nil },
	Time: func(t time.Time) any { return t.UTC().Truncate(time.Microsecond) },
	ParseTime: func(v any) (time.Time, error) {
		if t, ok := v.(time.Time); ok {
			return t.UTC(), nil
		}
		return time.Time{}, storeerr.Errorf("stored timestamp is %T, want a timestamp", v)
	},
}

// Probe implements instanceai.Prober: one read of schema_migrations.
func (s *Store) Probe(ctx context.Context) ([]int64, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, storeerr.Errorf("postgres: %w", err)
	}
	pending, err := migrate.Pending(ctx, s.db.DB, sub)
	if err != nil {
		return nil, storeerr.Errorf("postgres: %w", withCtx(ctx, err))
	}
	return pending, nil
}

// Migrate applies the embedded schema migrations. Several instances may run
// it at once: an advisory lock lets one apply each migration.
func (s *Store) Migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return storeerr.Errorf("postgres: %w", withCtx(ctx, err))
	}
	if _, err := migrate.Up(ctx, s.db.DB, migrate.Postgres, sub); err != nil {
		return storeerr.Errorf("postgres: %w", withCtx(ctx, err))
	}
	return nil
}

// Close closes the connection pool.
func (s *Store) Close() error { return errors.Join(s.one.close(), s.Log.Close(), s.db.Close()) }

// threadRow is a threads row as sqlx scans it.
type threadRow struct {
	ID        string    `db:"id"`
	OwnerID   string    `db:"owner_id"`
	Title     string    `db:"title"`
	Archived  bool      `db:"archived"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
}

const threadColumns = `id, owner_id, title, archived, created_at, updated_at`

// thread converts a row; lib/pq returns timestamps in the session's time
// zone, and the store promises UTC.
func (r threadRow) thread() instanceai.Thread {
	return instanceai.Thread{ID: r.ID, OwnerID: r.OwnerID, Title: r.Title, Archived: r.Archived,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

// EnsureThread implements instanceai.ThreadStore. A zero t.CreatedAt means
// the database's now(). An existing thread is returned as stored, whatever t
// says, so the caller can compare owners.
func (s *Store) EnsureThread(ctx context.Context, t instanceai.Thread) (instanceai.Thread, bool, error) {
	if t.ID == "" {
		return instanceai.Thread{}, false, errors.New("postgres: ensure thread: empty id")
	}
	var at any // NULL: let the database's clock decide, one clock for all instances
	if !t.CreatedAt.IsZero() {
		at = t.CreatedAt.UTC().Truncate(time.Microsecond)
	}
	// The INSERT reports the row only when it made it. Otherwise the thread
	// existed, or a concurrent call made it, or it was deleted again in
	// between; a fresh statement sees the outcome, and the loop retries the
	// last case.
	for range 3 {
		var r threadRow
		err := s.db.GetContext(ctx, &r,
			`INSERT INTO threads (id, owner_id, title, created_at, updated_at)
			 VALUES ($1, $2, $3, COALESCE($4::timestamptz, now()), COALESCE($4::timestamptz, now()))
			 ON CONFLICT (id) DO NOTHING
			 RETURNING `+threadColumns,
			t.ID, t.OwnerID, t.Title, at)
		if err == nil {
			return r.thread(), true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return instanceai.Thread{}, false, storeerr.Errorf("postgres: ensure thread %q: %w", t.ID, withCtx(ctx, err))
		}
		err = s.db.GetContext(ctx, &r, `SELECT `+threadColumns+` FROM threads WHERE id = $1`, t.ID)
		if err == nil {
			return r.thread(), false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return instanceai.Thread{}, false, storeerr.Errorf("postgres: ensure thread %q: %w", t.ID, withCtx(ctx, err))
		}
	}
	return instanceai.Thread{}, false, storeerr.Errorf("postgres: ensure thread %q: created and deleted concurrently, giving up", t.ID)
}

// GetThread implements instanceai.ThreadStore.
func (s *Store) GetThread(ctx context.Context, id string) (instanceai.Thread, error) {
	var r threadRow
	err := s.db.GetContext(ctx, &r, `SELECT `+threadColumns+` FROM threads WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		err = instanceai.ErrNotFound
	}
	if err != nil {
		return instanceai.Thread{}, storeerr.Errorf("postgres: get thread %q: %w", id, withCtx(ctx, err))
	}
	return r.thread(), nil
}

// ListThreads implements instanceai.ThreadStore: newest first, ties broken
// by id so that pages never overlap.
func (s *Store) ListThreads(ctx context.Context, q instanceai.ThreadQuery) ([]instanceai.Thread, error) {
	var lim any // NULL is LIMIT ALL
	if q.Limit > 0 {
		lim = q.Limit
	}
	var rows []threadRow
	err := s.db.SelectContext(ctx, &rows,
		`SELECT `+threadColumns+` FROM threads WHERE owner_id = $1 AND ($2 OR NOT archived)
		 ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4`,
		q.OwnerID, q.IncludeArchived, lim, max(q.Offset, 0))
	if err != nil {
		return nil, storeerr.Errorf("postgres: list threads of %q: %w", q.OwnerID, withCtx(ctx, err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := make([]instanceai.Thread, len(rows))
	for i, r := range rows {
		out[i] = r.thread()
	}
	return out, nil
}

// RenameThread implements instanceai.ThreadStore.
func (s *Store) RenameThread(ctx context.Context, id, title string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE threads SET title = $2, updated_at = now() WHERE id = $1`, id, title)
	if err == nil {
		err = sqllog.MustAffect(res)
	}
	if err != nil {
		return storeerr.Errorf("postgres: rename thread %q: %w", id, withCtx(ctx, err))
	}
	return nil
}

// ArchiveThread implements instanceai.ThreadStore.
func (s *Store) ArchiveThread(ctx context.Context, id string, archived bool) error {
	res, err := s.db.ExecContext(ctx, `UPDATE threads SET archived = $2, updated_at = now() WHERE id = $1`, id, archived)
	if err == nil {
		err = sqllog.MustAffect(res)
	}
	if err != nil {
		return storeerr.Errorf("postgres: archive thread %q: %w", id, withCtx(ctx, err))
	}
	return nil
}

// deleteThreadSQL deletes a thread; its rows go with it through ON DELETE
// CASCADE. It locks the thread's claim rows before the thread's row, in
// the order a fenced append locks them (appendFencedSQL): a cascade that
// reached the claim rows only after the thread's row was taken would wait
// for an append holding one of them, while that append waits for the
// thread's row, and PostgreSQL would end the cycle by failing one of them.
const deleteThreadSQL = `WITH ca AS (
    SELECT 1 FROM active_runs WHERE thread_id = $1 FOR UPDATE
), cb AS (
    SELECT 1 FROM background_agents WHERE thread_id = $1 FOR UPDATE
)
DELETE FROM threads WHERE id = $1 AND (SELECT count(*) FROM ca) + (SELECT count(*) FROM cb) >= 0`

// DeleteThread implements instanceai.ThreadStore; the events go with the
// thread through ON DELETE CASCADE.
func (s *Store) DeleteThread(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, deleteThreadSQL, id)
	if err == nil {
		err = sqllog.MustAffect(res)
	}
	if err != nil {
		return storeerr.Errorf("postgres: delete thread %q: %w", id, withCtx(ctx, err))
	}
	return nil
}

// withCtx adds ctx's error to err once ctx has ended: lib/pq reports a
// statement cancelled by its context as its own error (57014, "canceling
// statement due to user request"), and callers that tell a cancelled
// request from a failed one look for context.Canceled.
func withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); err != nil && cerr != nil && !errors.Is(err, cerr) {
		return storeerr.Errorf("%w (%w)", err, cerr)
	}
	return err
}
