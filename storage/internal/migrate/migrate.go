// Package migrate applies a backend's embedded SQL migrations.
//
// A migration is a file named NNN_name.sql (NNN a positive decimal version,
// name free text) at the root of an fs.FS, usually an embed.FS of the
// backend's migrations folder. Each pending migration runs in its own
// transaction together with the row that records it in schema_migrations, so
// a failing migration leaves neither half-applied DDL nor a false record, and
// a crash between two migrations resumes at the right one.
//
// The runner is deliberately tiny: no down migrations, no checksums. The
// schema only ever moves forward, and both backends run DDL transactionally.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"hash/fnv"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/threadline/threadline/storage/internal/storeerr"
)

// Migration is one versioned SQL script.
type Migration struct {
	Version int64
	Name    string
	SQL     string
}

// Dialect is what differs between database engines for the runner.
type Dialect struct {
	// Name appears in error messages.
	Name string
	// CreateTable creates the bookkeeping table if it does not exist.
	CreateTable string
	// Applied selects 1 when the version bound to its one parameter is
	// recorded; Record inserts (version, name). Both spell bind parameters in
	// the engine's own syntax.
	Applied string
	Record  string
	// Lock is called first in every migration transaction. It must block
	// until no other migrator of the same database holds the lock, and the
	// lock must be released when the transaction ends, so that two processes
	// starting at once apply each migration exactly once.
	Lock func(ctx context.Context, tx *sql.Tx) error
	// Busy, when set, tells an error that a moment later may not repeat:
	// SQLite refuses a connection's setup (its journal_mode pragma) or
	// BEGIN with SQLITE_BUSY without waiting in the busy handler while
	// another process converts a fresh file to WAL. inTx retries those.
	Busy func(error) bool
}

// SQLite is the dialect for SQLite. Its Lock is empty because SQLite has a
// single writer: the caller's connection must begin transactions IMMEDIATE
// (storage/sqlite sets _txlock=immediate), which takes the database's write
// lock at BEGIN, before the runner reads schema_migrations. Another process
// then waits in the busy handler until the first one commits.
var SQLite = Dialect{
	Name: "sqlite",
	CreateTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`,
	Applied: `SELECT 1 FROM schema_migrations WHERE version = ?`,
	Record:  `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`,
	Lock:    func(context.Context, *sql.Tx) error { return nil },
	Busy:    func(err error) bool { return strings.Contains(err.Error(), "SQLITE_BUSY") },
}

// Postgres is the dialect for PostgreSQL. Its Lock takes a transaction-scoped
// advisory lock, released by COMMIT or ROLLBACK, so a migrator that dies
// cannot leave the lock behind. The lock is keyed by the current schema so
// that migrations of unrelated schemas (parallel test schemas, say) do not
// queue behind each other.
var Postgres = Dialect{
	Name: "postgres",
	CreateTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    BIGINT PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`,
	Applied: `SELECT 1 FROM schema_migrations WHERE version = $1`,
	Record:  `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`,
	Lock:    postgresLock,
}

// lockClass is the first key of the advisory lock: a constant that keeps our
// locks apart from any other application's that share the database.
const lockClass int32 = 0x7468_6c6e // "thln"

func postgresLock(ctx context.Context, tx *sql.Tx) error {
	var schema sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return storeerr.Errorf("read current schema: %w", err)
	}
	h := fnv.New32a()
	h.Write([]byte(schema.String))
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockClass, int32(h.Sum32())); err != nil {
		return storeerr.Errorf("take advisory lock: %w", err)
	}
	return nil
}

var fileName = regexp.MustCompile(`^([0-9]+)_([A-Za-z0-9_.-]+)\.sql$`)

// Load reads the migrations at the root of fsys, sorted by version. Other
// files are ignored, but a .sql file with a malformed name is an error: it is
// almost certainly a migration that would otherwise be silently skipped.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, storeerr.Errorf("migrate: list migrations: %w", err)
	}
	var migs []Migration
	seen := map[int64]string{}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, storeerr.Errorf("migrate: %s: name must be NNN_name.sql", e.Name())
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || v <= 0 {
			return nil, storeerr.Errorf("migrate: %s: version must be a positive integer", e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, storeerr.Errorf("migrate: %s and %s share version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, storeerr.Errorf("migrate: read %s: %w", e.Name(), err)
		}
		migs = append(migs, Migration{Version: v, Name: m[2], SQL: string(body)})
	}
	slices.SortFunc(migs, func(a, b Migration) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
	return migs, nil
}

// Up applies the migrations of fsys that db has not recorded yet, in version
// order, and returns the versions it applied (none when the schema is
// current). Running it again, or in several processes at once, is safe.
func Up(ctx context.Context, db *sql.DB, d Dialect, fsys fs.FS) ([]int64, error) {
	migs, err := Load(fsys)
	if err != nil {
		return nil, err
	}
	var applied map[int64]bool
	err = inTx(ctx, db, d, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, d.CreateTable); err != nil {
			return storeerr.Errorf("create schema_migrations: %w", err)
		}
		applied, err = appliedVersions(ctx, tx)
		return err
	})
	if err != nil {
		return nil, storeerr.Errorf("migrate (%s): %w", d.Name, err)
	}

	var done []int64
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		ran := false
		err := inTx(ctx, db, d, func(tx *sql.Tx) error {
			// Another process may have applied it since the first read;
			// under the lock this answer is final.
			var one int
			err := tx.QueryRowContext(ctx, d.Applied, m.Version).Scan(&one)
			if err == nil {
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return storeerr.Errorf("check version: %w", err)
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, d.Record, m.Version, m.Name); err != nil {
				return storeerr.Errorf("record version: %w", err)
			}
			ran = true
			return nil
		})
		if err != nil {
			return done, storeerr.Errorf("migrate (%s): %03d_%s: %w", d.Name, m.Version, m.Name, err)
		}
		if ran {
			done = append(done, m.Version)
		}
	}
	return done, nil
}

func appliedVersions(ctx context.Context, tx *sql.Tx) (map[int64]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, storeerr.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	got := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, storeerr.Errorf("read schema_migrations: %w", err)
		}
		got[v] = true
	}
	return got, rows.Err()
}

// busyWait bounds how long inTx retries a BEGIN the dialect calls busy.
const busyWait = 10 * time.Second

// inTx runs fn in a transaction that holds the dialect's lock.
func inTx(ctx context.Context, db *sql.DB, d Dialect, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	for deadline := time.Now().Add(busyWait); err != nil && d.Busy != nil && d.Busy(err) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return storeerr.Errorf("begin: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		tx, err = db.BeginTx(ctx, nil)
	}
	if err != nil {
		return storeerr.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := d.Lock(ctx, tx); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return storeerr.Errorf("commit: %w", err)
	}
	return nil
}

// Pending returns the versions of fsys that db has not recorded, in order,
// without applying anything. It reads schema_migrations once, a query cheap
// enough for a readiness probe, which it also serves as: an error means
// the database did not answer (or has no schema_migrations yet).
func Pending(ctx context.Context, db *sql.DB, fsys fs.FS) ([]int64, error) {
	migs, err := Load(fsys)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, storeerr.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, storeerr.Errorf("read schema_migrations: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("read schema_migrations: %w", err)
	}
	var pending []int64
	for _, m := range migs {
		if !applied[m.Version] {
			pending = append(pending, m.Version)
		}
	}
	return pending, nil
}
