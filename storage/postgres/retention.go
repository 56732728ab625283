package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/threadline/threadline/storage/internal/prunesql"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

// pruneDialect locks the threads rows a deleting transaction reads, so
// that an append to one of them waits for the COMMIT (and then finds the
// thread gone) rather than slipping in between the check and the delete.
// The size reported is the events table's, indexes and TOAST included,
// which PostgreSQL keeps at hand.
var pruneDialect = prunesql.Dialect{
	Name: "postgres", Rebind: sqllog.Dollar.Rebind, LockRows: " FOR UPDATE",
	Time: func(t time.Time) any { return t.UTC() },
	Size: func(ctx context.Context, db *sql.DB) (int64, error) {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT pg_total_relation_size('events')`).Scan(&n)
		return n, err
	},
}

// pruneLockClass is the first key of the prune lock's advisory lock,
// apart from the migrations' (see storage/internal/migrate); the second
// is the schema's hash, so that deployments on one database in several
// schemas prune each at its own pace.
const pruneLockClass int32 = 0x7468_6c72 // "thlr"

// TryPruneLock implements retention.Locker with a session-level advisory
// lock on a connection of its own, held until release: of the instances on
// this database, one prunes at a time, and the lock of an instance that
// dies goes with its connection, so nobody has to wait out a lease.
func (s *Store) TryPruneLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, false, storeerr.Errorf("postgres: prune lock: %w", withCtx(ctx, err))
	}
	const key = `hashtext(COALESCE(current_schema(), ''))`
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, `+key+`)`, pruneLockClass).Scan(&ok); err != nil {
		conn.Close()
		return nil, false, storeerr.Errorf("postgres: prune lock: %w", withCtx(ctx, err))
	}
	if !ok {
		conn.Close()
		return nil, false, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var released bool
		if err := conn.QueryRowContext(uctx, `SELECT pg_advisory_unlock($1, `+key+`)`, pruneLockClass).Scan(&released); err != nil || !released {
			// A session lock outlives the connection's return to the
			// pool: a connection that may still hold it is closed
			// instead, which releases it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}, true, nil
}
