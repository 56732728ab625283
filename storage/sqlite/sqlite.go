// Package sqlite is the embedded storage backend: one SQLite file on disk,
// durable with zero infrastructure, through the pure-Go driver
// modernc.org/sqlite so that the build needs no cgo.
//
// SQLite allows one writer at a time. Rather than let concurrent appenders
// race for the file lock and fail with SQLITE_BUSY, the Store sends every
// write through its own *sql.DB limited to one connection: writers queue in
// the pool (honouring their contexts) and run back to back. Reads go through
// a separate pool; WAL mode lets them run beside the writer and see every
// committed append.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/storage/internal/buildersql"
	"github.com/threadline/threadline/storage/internal/claims"
	"github.com/threadline/threadline/storage/internal/migrate"
	"github.com/threadline/threadline/storage/internal/prunesql"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/internal/storeerr"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// maxParams is SQLite's default SQLITE_MAX_VARIABLE_NUMBER (since 3.32).
const maxParams = 32766

// busyTimeout bounds how long a connection waits for the file lock held by
// another process (or another Store on the same file) before failing.
const busyTimeout = 10 * time.Second

// timeLayout is how timestamps are stored: UTC, microseconds (PostgreSQL's
// resolution, so both backends return the same values), and fixed width, so
// that text order is time order.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// Store is an instanceai.Store on a SQLite file.
type Store struct {
	*sqllog.Log
	*claims.Table
	*buildersql.Store
	*prunesql.Pruner

	path string
	// wdb has exactly one connection, which begins transactions IMMEDIATE:
	// a write transaction holds the file's write lock from its first
	// statement, so it never has to upgrade a read lock (the upgrade is what
	// fails with SQLITE_BUSY regardless of busy_timeout).
	wdb *sql.DB
	// rdb is a pool of query-only connections.
	rdb *sql.DB
}

var (
	_ instanceai.Store = (*Store)(nil)
	_ builder.Store    = (*Store)(nil)
	_ retention.Store  = (*Store)(nil)
)

// Open opens (creating it and its parent directories if needed) the SQLite
// database at path. Call Migrate before first use.
func Open(ctx context.Context, path string) (*Store, error) {
	switch {
	case path == "":
		return nil, errors.New("sqlite: empty database path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		// Every pooled connection would open its own private database;
		// the memory backend is the non-durable option.
		return nil, storeerr.Errorf("sqlite: %q is not a file path (use the memory backend for a non-durable store)", path)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, storeerr.Errorf("sqlite: create directory for %s: %w", path, err)
		}
	}
	busy := "_pragma=busy_timeout(" + strconv.FormatInt(busyTimeout.Milliseconds(), 10) + ")"

	wdb, err := sql.Open("sqlite", dsn(path,
		busy,
		"_pragma=journal_mode(WAL)",
		"_pragma=foreign_keys(1)",
		// FULL syncs the WAL at every commit: an append that returned is on
		// disk even after a power cut, which "persist before emit" promises.
		// The writer batches events, so the sync is paid once per batch.
		"_pragma=synchronous(FULL)",
		"_txlock=immediate",
	))
	if err != nil {
		return nil, storeerr.Errorf("sqlite: open %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxIdleTime(0)
	wdb.SetConnMaxLifetime(0)

	s := &Store{path: path, wdb: wdb}
	var mode string
	if err := wdb.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		wdb.Close()
		return nil, storeerr.Errorf("sqlite: open %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		// Without WAL, readers would block the writer and the other way
		// round; better to refuse than to run with surprising stalls.
		wdb.Close()
		return nil, storeerr.Errorf("sqlite: open %s: journal mode is %q, WAL is required", path, mode)
	}

	// Readers are opened after the writer switched the file to WAL, which is
	// a persistent property of the file.
	rdb, err := sql.Open("sqlite", dsn(path, busy, "_pragma=query_only(1)"))
	if err != nil {
		wdb.Close()
		return nil, storeerr.Errorf("sqlite: open %s: %w", path, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	rdb.SetMaxOpenConns(readers)
	rdb.SetMaxIdleConns(readers)
	if err := rdb.PingContext(ctx); err != nil {
		rdb.Close()
		wdb.Close()
		return nil, storeerr.Errorf("sqlite: open %s: %w", path, err)
	}
	s.rdb = rdb
	s.Log = sqllog.New(logDialect, wdb, rdb)
	s.Table = claims.New(claimsDialect, wdb, rdb)
	s.Store = buildersql.New(builderDialect, wdb, rdb)
	s.Pruner = prunesql.New(pruneDialect, wdb, rdb)
	return s, nil
}

// dsn builds a file: URI so that any path works, including one containing
// '?' or '#', which would otherwise be read as the start of the parameters.
func dsn(path string, params ...string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + esc + "?" + strings.Join(params, "&")
}

// logDialect stamps events with the process clock, in the text form of
// timeLayout.
var logDialect = sqllog.Dialect{
	Name: "sqlite", Placeholders: sqllog.Question, MaxParams: maxParams,
	// substr counts characters in text and bytes in a blob.
	ByteSlice: `substr(CAST(data AS BLOB), ?, ?)`,
	Reserve: func(ctx context.Context, tx *sql.Tx, threadID, owner string, n int64) (int64, any, error) {
		now := formatTime(time.Now())
		var last int64
		err := tx.QueryRowContext(ctx,
			`UPDATE threads SET last_seq = last_seq + ?, updated_at = ? WHERE id = ? AND (? = '' OR owner_id = ?) RETURNING last_seq`,
			n, now, threadID, owner, owner).Scan(&last)
		return last, now, err
	},
}

// claimsDialect spells the claims statements for SQLite: leases in epoch
// milliseconds from the process clock, which the processes sharing one
// file share, and tokens from the one-row counter, bumped in the claim's
// transaction (which holds the file's write lock from its BEGIN).
var claimsDialect = claims.Dialect{
	Name: "sqlite", Rebind: sqllog.Question.Rebind,
	Now:                   func() (string, []any) { return `?`, []any{time.Now().UnixMilli()} },
	Expiry:                func(ttl time.Duration) (string, any) { return `?`, time.Now().Add(ttl).UnixMilli() },
	IsForeignKeyViolation: func(err error) bool { return strings.Contains(err.Error(), "FOREIGN KEY constraint failed") },
	NextFence: func(ctx context.Context, tx *sql.Tx) (int64, error) {
		var token int64
		err := tx.QueryRowContext(ctx, `UPDATE claim_fences SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&token)
		return token, err
	},
}

// builderDialect stamps the builder's rows with the process clock, in the
// text form of timeLayout.
var builderDialect = buildersql.Dialect{
	Name: "sqlite", Rebind: sqllog.Question.Rebind,
	Now:  func() (string, []any) { return `?`, []any{formatTime(time.Now())} },
	Time: func(t time.Time) any { return formatTime(t) },
	ParseTime: func(v any) (time.Time, error) {
		switch v := v.(type) {
		case string:
			return parseTime(v)
		case []byte:
			return parseTime(string(v))
		}
		return time.Time{}, storeerr.Errorf("stored timestamp is %T, want TEXT", v)
	},
}

// pruneDialect compares updated_at in its text form. No row lock is
// needed: a deleting transaction holds the file's write lock from its
// BEGIN. The size reported is the database file's (pages in use or free),
// which SQLite tells from its header.
var pruneDialect = prunesql.Dialect{
	Name: "sqlite", Rebind: sqllog.Question.Rebind,
	Time: func(t time.Time) any { return formatTime(t) },
	Size: func(ctx context.Context, db *sql.DB) (int64, error) {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT p.page_count * s.page_size FROM pragma_page_count() p, pragma_page_size() s`).Scan(&n)
		return n, err
	},
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Probe implements instanceai.Prober: one read of schema_migrations on the
// query-only pool, which a long write does not hold up (WAL).
func (s *Store) Probe(ctx context.Context) ([]int64, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, storeerr.Errorf("sqlite: %w", err)
	}
	pending, err := migrate.Pending(ctx, s.rdb, sub)
	if err != nil {
		return nil, storeerr.Errorf("sqlite: %w", err)
	}
	return pending, nil
}

var _ instanceai.Prober = (*Store)(nil)

// Migrate applies the embedded schema migrations.
func (s *Store) Migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return storeerr.Errorf("sqlite: %w", err)
	}
	if _, err := migrate.Up(ctx, s.wdb, migrate.SQLite, sub); err != nil {
		return storeerr.Errorf("sqlite: %w", err)
	}
	return nil
}

// Close closes both pools. The writer goes last: the last connection to
// close checkpoints the WAL into the database file, which a query-only
// reader cannot do.
func (s *Store) Close() error {
	serr := s.Log.Close()
	rerr := s.rdb.Close()
	return errors.Join(serr, rerr, s.wdb.Close())
}

func formatTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format(timeLayout)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, storeerr.Errorf("bad stored timestamp %q: %w", s, err)
	}
	return t, nil
}

const threadColumns = `id, owner_id, title, archived, created_at, updated_at`

type scanner interface{ Scan(dest ...any) error }

func scanThread(row scanner) (instanceai.Thread, error) {
	var t instanceai.Thread
	var created, updated string
	if err := row.Scan(&t.ID, &t.OwnerID, &t.Title, &t.Archived, &created, &updated); err != nil {
		return instanceai.Thread{}, err
	}
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return instanceai.Thread{}, err
	}
	if t.UpdatedAt, err = parseTime(updated); err != nil {
		return instanceai.Thread{}, err
	}
	return t, nil
}

// EnsureThread implements instanceai.ThreadStore. A zero t.CreatedAt means
// now. An existing thread is returned as stored, whatever t says, so the
// caller can compare owners.
func (s *Store) EnsureThread(ctx context.Context, t instanceai.Thread) (instanceai.Thread, bool, error) {
	if t.ID == "" {
		return instanceai.Thread{}, false, errors.New("sqlite: ensure thread: empty id")
	}
	stored, created, err := s.ensureThread(ctx, t)
	if err != nil {
		return instanceai.Thread{}, false, storeerr.Errorf("sqlite: ensure thread %q: %w", t.ID, err)
	}
	return stored, created, nil
}

func (s *Store) ensureThread(ctx context.Context, t instanceai.Thread) (stored instanceai.Thread, created bool, err error) {
	at := t.CreatedAt
	if at.IsZero() {
		at = time.Now()
	}
	ts := formatTime(at)
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return stored, false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx,
		`INSERT INTO threads (id, owner_id, title, created_at, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		t.ID, t.OwnerID, t.Title, ts, ts)
	if err != nil {
		return stored, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return stored, false, err
	}
	stored, err = scanThread(tx.QueryRowContext(ctx, `SELECT `+threadColumns+` FROM threads WHERE id = ?`, t.ID))
	if err != nil {
		return stored, false, err
	}
	return stored, n == 1, tx.Commit()
}

// getThread reads a thread (GetThread runs it on a fresh stack).
func (s *Store) getThread(ctx context.Context, id string) (instanceai.Thread, error) {
	t, err := scanThread(s.rdb.QueryRowContext(ctx, `SELECT `+threadColumns+` FROM threads WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = instanceai.ErrNotFound
	}
	if err != nil {
		return instanceai.Thread{}, storeerr.Errorf("sqlite: get thread %q: %w", id, err)
	}
	return t, nil
}

// ListThreads implements instanceai.ThreadStore: newest first, ties broken
// by id so that pages never overlap.
func (s *Store) ListThreads(ctx context.Context, q instanceai.ThreadQuery) ([]instanceai.Thread, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = -1 // SQLite's "no limit"
	}
	rows, err := s.rdb.QueryContext(ctx,
		`SELECT `+threadColumns+` FROM threads WHERE owner_id = ? AND (? OR NOT archived)
		 ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`,
		q.OwnerID, q.IncludeArchived, limit, max(q.Offset, 0))
	if err != nil {
		return nil, storeerr.Errorf("sqlite: list threads of %q: %w", q.OwnerID, err)
	}
	defer rows.Close()
	var out []instanceai.Thread
	for rows.Next() {
		t, err := scanThread(rows)
		if err != nil {
			return nil, storeerr.Errorf("sqlite: list threads of %q: %w", q.OwnerID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("sqlite: list threads of %q: %w", q.OwnerID, err)
	}
	return out, nil
}

// RenameThread implements instanceai.ThreadStore.
func (s *Store) RenameThread(ctx context.Context, id, title string) error {
	res, err := s.wdb.ExecContext(ctx, `UPDATE threads SET title = ?, updated_at = ? WHERE id = ?`,
		title, formatTime(time.Now()), id)
	if err == nil {
		err = sqllog.MustAffect(res)
	}
	if err != nil {
		return storeerr.Errorf("sqlite: rename thread %q: %w", id, err)
	}
	return nil
}

// ArchiveThread implements instanceai.ThreadStore.
func (s *Store) ArchiveThread(ctx context.Context, id string, archived bool) error {
	res, err := s.wdb.ExecContext(ctx, `UPDATE threads SET archived = ?, updated_at = ? WHERE id = ?`,
		archived, formatTime(time.Now()), id)
	if err == nil {
		err = sqllog.MustAffect(res)
	}
	if err != nil {
		return storeerr.Errorf("sqlite: archive thread %q: %w", id, err)
	}
	return nil
}

// DeleteThread implements instanceai.ThreadStore. The events go with the
// thread through ON DELETE CASCADE (foreign_keys is on for the writer).
func (s *Store) DeleteThread(ctx context.Context, id string) error {
	res, err := s.wdb.ExecContext(ctx, `DELETE FROM threads WHERE id = ?`, id)
	if err == nil {
		err = sqllog.MustAffect(res)
	}
	if err != nil {
		return storeerr.Errorf("sqlite: delete thread %q: %w", id, err)
	}
	return nil
}
