package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
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

// Two pools on one schema are what two server instances are.
func TestTwoPools(t *testing.T) {
	dsn := freshSchema(t)
	storagetest.RunTwoPools(t,
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
	if !slices.Equal(versions, []int64{1, 2, 3}) {
		t.Fatalf("schema_migrations = %v, want [1 2 3]", versions)
	}
	// The schema works from every instance.
	if _, _, err := stores[n-1].EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	if first, err := stores[0].Append(ctx, "t", storagetest.TypicalBatch("r", 3)); err != nil || first != 1 {
		t.Fatalf("Append = %d, %v", first, err)
	}
}

// The data column holds exactly the bytes json.Marshal produced, so anything
// reading the table directly sees the wire form.
func TestStoredBytes(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	events := storagetest.EveryType("run-1")
	if _, err := s.Append(ctx, "t", events); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Seq     int64     `db:"seq"`
		Type    string    `db:"type"`
		RunID   string    `db:"run_id"`
		AgentID string    `db:"agent_id"`
		Data    string    `db:"data"`
		Created time.Time `db:"created_at"`
	}
	if err := s.db.SelectContext(ctx, &rows,
		`SELECT seq, type, run_id, agent_id, data, created_at FROM events WHERE thread_id = 't' ORDER BY seq`); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(events) {
		t.Fatalf("%d rows, want %d", len(rows), len(events))
	}
	for i, r := range rows {
		want, _ := json.Marshal(&events[i])
		if r.Data != string(want) {
			t.Errorf("seq %d data = %s, want %s", r.Seq, r.Data, want)
		}
		if r.Type != string(events[i].Type) || r.RunID != events[i].RunID || r.AgentID != events[i].AgentID {
			t.Errorf("seq %d columns = %s/%s/%s, want %s/%s/%s", r.Seq, r.Type, r.RunID, r.AgentID, events[i].Type, events[i].RunID, events[i].AgentID)
		}
		if time.Since(r.Created) > time.Minute {
			t.Errorf("seq %d created_at = %v, not about now", r.Seq, r.Created)
		}
	}
	// The text is valid JSON to the server too, for ad-hoc queries.
	var typ string
	if err := s.db.GetContext(ctx, &typ, `SELECT data::jsonb->>'type' FROM events WHERE thread_id = 't' AND seq = 1`); err != nil || typ != string(events[0].Type) {
		t.Fatalf("data::jsonb->>'type' = %q, %v", typ, err)
	}
}

func countEvents(t *testing.T, s *Store, thread string) int {
	t.Helper()
	return countRows(t, s, "events", thread)
}

func countRows(t *testing.T, s *Store, table, thread string) int {
	t.Helper()
	var n int
	if err := s.db.Get(&n, `SELECT count(*) FROM `+table+` WHERE thread_id = $1`, thread); err != nil {
		t.Fatal(err)
	}
	return n
}

// The cascade happens in the database, not only in what ReadAfter shows.
func TestDeleteRemovesRows(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "t", storagetest.TypicalBatch("r", 50)); err != nil {
		t.Fatal(err)
	}
	if err := s.AddMessage(ctx, instanceai.Message{ID: "m", ThreadID: "t", Role: "user", Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddConfirmation(ctx, instanceai.Confirmation{RequestID: "c", ThreadID: "t", Request: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"events": 50, "messages": 1, "confirmations": 1}
	for table, n := range want {
		if got := countRows(t, s, table, "t"); got != n {
			t.Fatalf("%d %s rows before delete, want %d", got, table, n)
		}
	}
	if err := s.DeleteThread(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for table := range want {
		if n := countRows(t, s, table, "t"); n != 0 {
			t.Fatalf("%d %s rows left after delete, want 0", n, table)
		}
	}
}

// A batch larger than one INSERT is split, and all of it commits or none.
func TestChunkedAppend(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	s.maxRows = 7
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	batch := storagetest.TypicalBatch("r", 50)
	if first, err := s.Append(ctx, "t", batch); err != nil || first != 1 {
		t.Fatalf("Append = %d, %v; want 1", first, err)
	}
	got, err := s.ReadAfter(ctx, "t", 0, 0)
	if err != nil || len(got) != 50 || got[49].Seq != 50 {
		t.Fatalf("read %d events (%v), want 1..50", len(got), err)
	}

	// A row squatting on seq 60 makes the second chunk of the next batch
	// (seqs 58..64) collide with the primary key: the whole batch, and the
	// counter bump, must roll back.
	if _, err := s.db.ExecContext(ctx,
		`INSERT INTO events (thread_id, seq, type, data) VALUES ('t', 60, 'status', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "t", batch[:20]); err == nil {
		t.Fatal("Append over a squatted seq succeeded")
	} else if errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("Append over a squatted seq: %v", err)
	}
	if n := countEvents(t, s, "t"); n != 51 {
		t.Fatalf("%d rows after the failed append, want 51 (50 + the squatter)", n)
	}
	var last int64
	if err := s.db.Get(&last, `SELECT last_seq FROM threads WHERE id = 't'`); err != nil || last != 50 {
		t.Fatalf("last_seq after the failed append = %d, %v; want 50", last, err)
	}
}

func TestInsertSQL(t *testing.T) {
	got := insertSQL(2)
	want := `INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at) VALUES ($1,$3,$4,$5,$6,$7,$2),($1,$8,$9,$10,$11,$12,$2)`
	if got != want {
		t.Fatalf("insertSQL(2) =\n%s\nwant\n%s", got, want)
	}
	// A full chunk's highest parameter stays within the protocol's limit.
	rows := (maxParams - sharedParams) / rowParams
	if highest := sharedParams + rowParams*rows; highest > maxParams || !strings.HasSuffix(insertSQL(rows), ","+"$"+itoa(highest)+",$2)") {
		t.Fatalf("a full chunk of %d rows does not end at $%d", rows, highest)
	}
	// And the server takes such a statement.
	ctx := context.Background()
	s := openMigrated(t)
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	tiny := make([]instanceai.Event, rows+1)
	for i := range tiny {
		tiny[i] = instanceai.Event{Type: instanceai.TypeStatus, RunID: "r", AgentID: "a", Payload: &instanceai.Status{}}
	}
	if first, err := s.Append(ctx, "t", tiny); err != nil || first != 1 {
		t.Fatalf("Append of %d events (two chunks) = %d, %v", len(tiny), first, err)
	}
	if n := countEvents(t, s, "t"); n != len(tiny) {
		t.Fatalf("%d rows, want %d", n, len(tiny))
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
	if err := tx.SelectContext(ctx, &plan, `EXPLAIN `+unfinishedRunsSQL); err != nil {
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
