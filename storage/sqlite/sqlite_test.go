package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/sqllog"
	"github.com/threadline/threadline/storage/storagetest"
)

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s
}

// openMigrated opens a store on a fresh file and closes it after the test.
func openMigrated(t testing.TB) *Store {
	t.Helper()
	s := openAt(t, filepath.Join(t.TempDir(), "threadline.db"))
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

func TestContract(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) instanceai.Store {
		return openAt(t, filepath.Join(t.TempDir(), "threadline.db"))
	})
}

func TestRetention(t *testing.T) {
	storagetest.RunRetention(t, func(t *testing.T) instanceai.Store {
		return openAt(t, filepath.Join(t.TempDir(), "threadline.db"))
	})
}

func TestBuilderContract(t *testing.T) {
	storagetest.RunBuilder(t, func(t *testing.T) storagetest.BuilderStore {
		return openAt(t, filepath.Join(t.TempDir(), "threadline.db"))
	})
}

func TestSQLContract(t *testing.T) {
	storagetest.RunSQL(t, func(t *testing.T) storagetest.SQLBackend {
		s := openAt(t, filepath.Join(t.TempDir(), "threadline.db"))
		return storagetest.SQLBackend{Store: s, DB: s.wdb, SetMaxRows: s.SetMaxRows,
			ParseTime: func(v any) (time.Time, error) {
				text, ok := v.(string)
				if !ok {
					return time.Time{}, fmt.Errorf("created_at is %T, want TEXT", v)
				}
				return parseTime(text)
			}}
	})
}

// Two Stores on one file are two writers that only the file lock (and the
// busy timeout) keep apart, as two processes would be.
func TestTwoPools(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	storagetest.RunTwoPools(t,
		func(t *testing.T) instanceai.Store { return openAt(t, path) },
		func(t *testing.T) instanceai.Store { return openAt(t, path) })
}

func TestOpenCreatesDirectoriesAndConfiguresConnections(t *testing.T) {
	ctx := context.Background()
	// Characters that a DSN would otherwise take for syntax.
	path := filepath.Join(t.TempDir(), "a dir", "with#and?and%", "nested", "x.db")
	s := openAt(t, path)
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created at %s: %v", path, err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}

	var mode string
	if err := s.rdb.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	var fk, sync, busy int
	if err := s.wdb.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Errorf("writer foreign_keys = %d, %v; want 1", fk, err)
	}
	if err := s.wdb.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("writer synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
	if err := s.rdb.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != int(busyTimeout.Milliseconds()) {
		t.Errorf("reader busy_timeout = %d, %v; want %d", busy, err, busyTimeout.Milliseconds())
	}
	if got := s.wdb.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("writer pool allows %d connections, want 1", got)
	}
	// The read pool cannot write, so no code path can bypass the writer.
	if _, err := s.rdb.ExecContext(ctx, `INSERT INTO threads (id, owner_id, created_at, updated_at) VALUES ('x', 'o', '', '')`); err == nil {
		t.Error("the read pool accepted a write")
	}
}

// Data survives closing and reopening the file.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	s := openAt(t, path)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: storagetest.FixtureUser, Title: "kept"}); err != nil {
		t.Fatal(err)
	}
	events := storagetest.EveryType("run-1")
	if _, err := s.Append(ctx, "t", events); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path)
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	th, err := s.GetThread(ctx, "t")
	if err != nil || th.Title != "kept" {
		t.Fatalf("GetThread after reopen = %+v, %v", th, err)
	}
	next, err := s.NextSeq(ctx, "t")
	if err != nil || next != int64(len(events))+1 {
		t.Fatalf("NextSeq after reopen = %d, %v; want %d", next, err, len(events)+1)
	}
	if first, err := s.Append(ctx, "t", events[:1]); err != nil || first != next {
		t.Fatalf("Append after reopen = %d, %v; want %d", first, err, next)
	}
}

// rawAppend is the baseline of BenchmarkAppend: one hand-written multi-row
// INSERT in autocommit, seqs supplied by the caller, no counter row.
func rawAppend(s *Store) storagetest.RawAppend {
	return func(ctx context.Context, threadID string, first int64, events []instanceai.Event) error {
		now := formatTime(time.Now())
		var q strings.Builder
		q.WriteString(`INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at) VALUES `)
		args := make([]any, 0, 7*len(events))
		for i := range events {
			b, err := json.Marshal(&events[i])
			if err != nil {
				return err
			}
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString(`(?,?,?,?,?,?,?)`)
			args = append(args, threadID, first+int64(i), string(events[i].Type), events[i].RunID, events[i].AgentID, string(b), now)
		}
		_, err := s.wdb.ExecContext(ctx, q.String(), args...)
		return err
	}
}

func BenchmarkAppend(b *testing.B) {
	s := openMigrated(b)
	storagetest.BenchAppend(b, s, rawAppend(s))
}

func TestOpenRejectsNonFiles(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db?mode=memory"} {
		if s, err := Open(context.Background(), path); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", path)
		}
	}
}

func BenchmarkWriter(b *testing.B) {
	s := openMigrated(b)
	storagetest.BenchWriter(b, s, rawAppend(s))
}

// UnfinishedRuns reads only the run-boundary indexes, never the whole log.
func TestUnfinishedRunsUsesIndexes(t *testing.T) {
	s := openMigrated(t)
	rows, err := s.rdb.Query(`EXPLAIN QUERY PLAN ` + sqllog.UnfinishedRunsSQL)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	text := strings.Join(plan, "\n")
	for _, index := range []string{"events_run_starts", "events_run_finishes"} {
		if !strings.Contains(text, index) {
			t.Errorf("the plan does not use %s:\n%s", index, text)
		}
	}
	for _, step := range plan {
		if (strings.HasPrefix(step, "SCAN") || strings.HasPrefix(step, "SEARCH")) && !strings.Contains(step, "INDEX") {
			t.Errorf("the plan reads the events table itself (%s):\n%s", step, text)
		}
	}
}

// BenchmarkReplay reads a 100,000-event thread through a feed against the
// bare page query on the store's own readers.
func BenchmarkReplay(b *testing.B) {
	s := openMigrated(b)
	storagetest.BenchReplay(b, s, storagetest.SQLReplayPage(s.rdb,
		`SELECT seq, data FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?`),
		func() error { _, err := s.wdb.Exec(`ANALYZE`); return err })
}
