package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/storagetest"
)

// freshSchema is a schema of its own for one test (see testpg).
//
// Tests commit without waiting for the WAL flush (synchronous_commit=off):
// that changes what survives a server crash and nothing else (locks,
// ordering and visibility are the same), and it makes the suite several
// times faster on a slow disk. Benchmarks use durableSchema instead.
func freshSchema(tb testing.TB) string {
	return testpg.Schema(tb, map[string]string{"synchronous_commit": "off"})
}

// durableSchema is freshSchema with the server's own commit settings, as
// production runs.
func durableSchema(tb testing.TB) string { return testpg.Schema(tb, nil) }

func openDSN(tb testing.TB, dsn string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	return s
}

// openMigrated opens a store on a fresh schema and closes it after the test.
func openMigrated(tb testing.TB) *Store {
	tb.Helper()
	s := openDSN(tb, freshSchema(tb))
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	return s
}

func TestContract(t *testing.T) {
	testpg.BaseDSN(t) // skip (or fail under CI) once, not in every subtest
	storagetest.Run(t, func(t *testing.T) instanceai.Store {
		return openDSN(t, freshSchema(t))
	})
}

func TestRetention(t *testing.T) {
	testpg.BaseDSN(t)
	storagetest.RunRetention(t, func(t *testing.T) instanceai.Store {
		return openDSN(t, freshSchema(t))
	})
}

func TestBuilderContract(t *testing.T) {
	testpg.BaseDSN(t)
	storagetest.RunBuilder(t, func(t *testing.T) storagetest.BuilderStore {
		return openDSN(t, freshSchema(t))
	})
}

// Two pools on one schema are what two server instances are.
func TestTwoPools(t *testing.T) {
	dsn := freshSchema(t)
	storagetest.RunTwoPools(t,
		func(t *testing.T) instanceai.Store { return openDSN(t, dsn) },
		func(t *testing.T) instanceai.Store { return openDSN(t, dsn) })
}

// Appends under a run's token on one instance race the other's take.
func TestFenceRaceAcrossPools(t *testing.T) {
	dsn := freshSchema(t)
	storagetest.RunFenceRaceAcrossPools(t,
		func(t *testing.T) instanceai.Store { return openDSN(t, dsn) },
		func(t *testing.T) instanceai.Store { return openDSN(t, dsn) })
}

// Instances starting together all migrate; each migration runs once.
func TestConcurrentMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	const n = 6
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = openDSN(t, dsn)
		defer stores[i].Close()
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	var versions []int64
	if err := stores[0].db.SelectContext(ctx, &versions, `SELECT version FROM schema_migrations ORDER BY version`); err != nil {
		t.Fatal(err)
	}
	if want := embeddedVersions(t); !slices.Equal(versions, want) {
		t.Fatalf("schema_migrations = %v, want %v", versions, want)
	}
	// The schema works from every instance.
	if _, _, err := stores[n-1].EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	if first, err := stores[0].Append(ctx, "t", storagetest.TypicalBatch("r", 3)); err != nil || first != 1 {
		t.Fatalf("Append = %d, %v", first, err)
	}
}

func TestSQLContract(t *testing.T) {
	testpg.BaseDSN(t)
	storagetest.RunSQL(t, func(t *testing.T) storagetest.SQLBackend {
		s := openDSN(t, freshSchema(t))
		return storagetest.SQLBackend{Store: s, DB: s.db.DB, SetMaxRows: s.SetMaxRows,
			ParseTime: func(v any) (time.Time, error) {
				at, ok := v.(time.Time)
				if !ok {
					return time.Time{}, fmt.Errorf("created_at is %T, want a timestamp", v)
				}
				return at, nil
			}}
	})
}

// The data column's text is valid JSON to the server too, for ad-hoc
// queries.
func TestStoredDataIsJSON(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: storagetest.FixtureUser}); err != nil {
		t.Fatal(err)
	}
	events := storagetest.EveryType("run-1")
	if _, err := s.Append(ctx, "t", events); err != nil {
		t.Fatal(err)
	}
	var typ string
	if err := s.db.GetContext(ctx, &typ, `SELECT data::jsonb->>'type' FROM events WHERE thread_id = 't' AND seq = 1`); err != nil || typ != string(events[0].Type) {
		t.Fatalf("data::jsonb->>'type' = %q, %v", typ, err)
	}
}

// A full INSERT statement, as many rows as the protocol's parameter limit
// allows, is one the server takes; one row more is split.
func TestFullChunk(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	tiny := make([]instanceai.Event, s.MaxRows()+1)
	for i := range tiny {
		tiny[i] = instanceai.Event{Type: instanceai.TypeStatus, RunID: "r", AgentID: "a", Payload: &instanceai.Status{}}
	}
	if first, err := s.Append(ctx, "t", tiny); err != nil || first != 1 {
		t.Fatalf("Append of %d events (two chunks) = %d, %v", len(tiny), first, err)
	}
	var n int
	if err := s.db.Get(&n, `SELECT count(*) FROM events WHERE thread_id = 't'`); err != nil || n != len(tiny) {
		t.Fatalf("%d rows (%v), want %d", n, err, len(tiny))
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// rawAppend is the baseline of BenchmarkAppend: one hand-written multi-row
// INSERT in autocommit, seqs supplied by the caller, no counter row.
func rawAppend(s *Store) storagetest.RawAppend {
	return func(ctx context.Context, threadID string, first int64, events []instanceai.Event) error {
		var q strings.Builder
		q.WriteString(`INSERT INTO events (thread_id, seq, type, run_id, agent_id, data) VALUES `)
		args := make([]any, 0, 6*len(events))
		for i := range events {
			b, err := json.Marshal(&events[i])
			if err != nil {
				return err
			}
			if i > 0 {
				q.WriteByte(',')
			}
			n := len(args)
			q.WriteString("($" + itoa(n+1) + ",$" + itoa(n+2) + ",$" + itoa(n+3) + ",$" + itoa(n+4) + ",$" + itoa(n+5) + ",$" + itoa(n+6) + ")")
			args = append(args, threadID, first+int64(i), string(events[i].Type), events[i].RunID, events[i].AgentID, string(b))
		}
		_, err := s.db.ExecContext(ctx, q.String(), args...)
		return err
	}
}

func BenchmarkAppend(b *testing.B) {
	s := openDSN(b, durableSchema(b))
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storagetest.BenchAppend(b, s, rawAppend(s))
}

func BenchmarkWriter(b *testing.B) {
	s := openDSN(b, durableSchema(b))
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storagetest.BenchWriter(b, s, rawAppend(s))
}

// UnfinishedRuns can answer from the run-boundary indexes alone. The table
// is tiny here, so sequential scans are taken off the menu to see which
// indexes the planner can use.
func TestUnfinishedRunsUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan []string
	if err := tx.SelectContext(ctx, &plan, `EXPLAIN `+sqllog.UnfinishedRunsSQL); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	for _, index := range []string{"events_run_starts", "events_run_finishes"} {
		if !strings.Contains(text, index) {
			t.Errorf("the plan does not use %s:\n%s", index, text)
		}
	}
}

// A statement cut short by its context reports context.Canceled, whatever
// lib/pq says, so a server can answer "retry" rather than "internal error".
func TestCancelledStatementSaysCanceled(t *testing.T) {
	s := openMigrated(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, err := s.db.ExecContext(ctx, "SELECT pg_sleep(5)")
	if err == nil {
		t.Fatal("the statement was not cancelled")
	}
	if err := withCtx(ctx, err); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v does not say context.Canceled", err)
	}
}

// BenchmarkReplay reads a 100,000-event thread through a feed against the
// bare page query on the store's own pool.
func BenchmarkReplay(b *testing.B) {
	s := openDSN(b, durableSchema(b))
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storagetest.BenchReplay(b, s, storagetest.SQLReplayPage(s.db.DB,
		`SELECT seq, data FROM events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`),
		func() error { _, err := s.db.Exec(`ANALYZE events`); return err })
}

// embeddedVersions are the versions of the embedded migrations, in order.
func embeddedVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, name := range names {
		v, err := strconv.ParseInt(strings.SplitN(path.Base(name), "_", 2)[0], 10, 64)
		if err != nil {
			t.Fatalf("migration %s: %v", name, err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
