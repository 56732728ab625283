package storagetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// SQLBackend is a store on a SQL database with a way to its tables, for
// the checks that look beneath the interface.
type SQLBackend struct {
	instanceai.Store
	// DB reads and writes the store's tables directly (for SQLite, its
	// writer: the readers are query-only).
	DB *sql.DB
	// SetMaxRows makes appends split a batch into INSERT statements of at
	// most n rows.
	SetMaxRows func(n int)
	// ParseTime reads a created_at value as the database returns it.
	ParseTime func(v any) (time.Time, error)
}

// SQLOpener returns a fresh, empty SQL backend. The suite migrates the
// store and closes it.
type SQLOpener func(t *testing.T) SQLBackend

// RunSQL checks the rows a SQL backend keeps: their columns and bytes,
// that a delete takes every row of the thread, and that a batch split over
// several statements commits whole or not at all. Its statements bind no
// parameters, so they read the same in every dialect.
func RunSQL(t *testing.T, open SQLOpener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b SQLBackend)
	}{
		{"StoredBytes", testStoredBytes},
		{"DeleteRemovesRows", testDeleteRemovesRows},
		{"ChunkedAppendIsAtomic", testChunkedAppend},
		{"OneStatementAppendIsAtomic", testOneStatementAppend},
		{"ChunkedFencedAppend", testChunkedFencedAppend},
		{"Checkpoints", testCheckpoints},
		{"FencedCheckpoints", testFencedCheckpoints},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b SQLBackend
			openMigrated(t, func(t *testing.T) instanceai.Store {
				b = open(t)
				return b.Store
			})
			tc.fn(t, b)
		})
	}
}

// testStoredBytes: the data column holds exactly the bytes json.Marshal
// produced, so anything reading the table directly sees the wire form; the
// other columns copy the event's and the append's time.
func testStoredBytes(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	ensure(t, b, "t", FixtureUser)
	events := EveryType("run-1")
	before := time.Now()
	if _, err := b.Append(ctx, "t", events); err != nil {
		t.Fatal(err)
	}
	rows, err := b.DB.QueryContext(ctx, `SELECT seq, type, run_id, agent_id, data, created_at FROM events WHERE thread_id = 't' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var seq int64
		var typ, run, agent, data string
		var created any
		if err := rows.Scan(&seq, &typ, &run, &agent, &data, &created); err != nil {
			t.Fatal(err)
		}
		if i >= len(events) {
			t.Fatalf("more rows than the %d events appended", len(events))
		}
		want, _ := json.Marshal(&events[i])
		if data != string(want) {
			t.Errorf("seq %d data = %s, want %s", seq, data, want)
		}
		if typ != string(events[i].Type) || run != events[i].RunID || agent != events[i].AgentID {
			t.Errorf("seq %d columns = %s/%s/%s, want %s/%s/%s", seq, typ, run, agent, events[i].Type, events[i].RunID, events[i].AgentID)
		}
		at, err := b.ParseTime(created)
		if err != nil {
			t.Errorf("seq %d created_at %v: %v", seq, created, err)
		} else if at.Before(before.Add(-timeWindow)) || at.After(time.Now().Add(timeWindow)) {
			t.Errorf("seq %d created_at = %v, not about now", seq, at)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(events) {
		t.Fatalf("%d rows, want %d", i, len(events))
	}
}

// countRows counts the rows of thread "t" in table.
func countRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table + ` WHERE thread_id = 't'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// testDeleteRemovesRows: the cascade happens in the database, not only in
// what the store's reads show.
func testDeleteRemovesRows(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	ensure(t, b, "t", "o")
	if _, err := b.Append(ctx, "t", TypicalBatch("r", 50)); err != nil {
		t.Fatal(err)
	}
	if err := b.AddMessage(ctx, instanceai.Message{ID: "m", ThreadID: "t", Role: "user", Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddConfirmation(ctx, instanceai.Confirmation{RequestID: "c", ThreadID: "t", Request: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ClaimThread(ctx, "t", "r", "inst", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ClaimAgent(ctx, instanceai.AgentRef{ThreadID: "t", RunID: "r", AgentID: "a"}, "inst", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.(instanceai.CheckpointStore).AddCheckpoint(ctx, "t", instanceai.Checkpoint{RunID: "r", AgentID: "a",
		Kind: instanceai.TypeTextDelta, Text: "open text"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"events": 50, "messages": 1, "confirmations": 1, "active_runs": 1, "background_agents": 1,
		"segment_checkpoints": 1}
	for table, n := range want {
		if got := countRows(t, b.DB, table); got != n {
			t.Fatalf("%d %s rows before delete, want %d", got, table, n)
		}
	}
	if err := b.DeleteThread(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for table := range want {
		if n := countRows(t, b.DB, table); n != 0 {
			t.Fatalf("%d %s rows left after delete, want 0", n, table)
		}
	}
}

// testChunkedAppend: a batch larger than one INSERT is split, and all of it
// commits or none, counter bump included.
func testChunkedAppend(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	b.SetMaxRows(7)
	ensure(t, b, "t", "o")
	batch := TypicalBatch("r", 50)
	if first, err := b.Append(ctx, "t", batch); err != nil || first != 1 {
		t.Fatalf("Append = %d, %v; want 1", first, err)
	}
	got, err := b.ReadAfter(ctx, "t", 0, 0)
	if err != nil || len(got) != 50 || got[49].Seq != 50 {
		t.Fatalf("read %d events (%v), want 1..50", len(got), err)
	}

	// A row squatting on seq 60 makes the second chunk of the next batch
	// (seqs 58..64) collide with the primary key: the whole batch, and the
	// counter bump, must roll back. The timestamp literal is one both
	// databases read.
	if _, err := b.DB.ExecContext(ctx,
		`INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at)
		 VALUES ('t', 60, 'status', '', '', '{}', '2025-06-01T12:00:00.000000Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "t", batch[:20]); err == nil {
		t.Fatal("Append over a squatted seq succeeded")
	} else if errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("Append over a squatted seq: %v", err)
	}
	if n := countRows(t, b.DB, "events"); n != 51 {
		t.Fatalf("%d rows after the failed append, want 51 (50 + the squatter)", n)
	}
	var last int64
	if err := b.DB.QueryRow(`SELECT last_seq FROM threads WHERE id = 't'`).Scan(&last); err != nil || last != 50 {
		t.Fatalf("last_seq after the failed append = %d, %v; want 50", last, err)
	}
}

// testOneStatementAppend: a batch that fits one INSERT (PostgreSQL writes
// it with one statement that also moves the counter) that collides with a
// row in its middle stores nothing and leaves the counter where it was;
// the next append continues right after the last good one, and a batch for
// a missing thread is ErrNotFound with nothing stored.
func testOneStatementAppend(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	ensure(t, b, "t", "o")
	if first, err := b.Append(ctx, "t", TypicalBatch("r", 10)); err != nil || first != 1 {
		t.Fatalf("Append = %d, %v; want 1", first, err)
	}
	if _, err := b.DB.ExecContext(ctx,
		`INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at)
		 VALUES ('t', 13, 'status', '', '', '{}', '2025-06-01T12:00:00.000000Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "t", TypicalBatch("r", 5)); err == nil {
		t.Fatal("Append over a squatted seq succeeded")
	} else if errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("Append over a squatted seq: %v", err)
	}
	if n := countRows(t, b.DB, "events"); n != 11 {
		t.Fatalf("%d rows after the failed append, want 11 (10 + the squatter)", n)
	}
	var last int64
	if err := b.DB.QueryRow(`SELECT last_seq FROM threads WHERE id = 't'`).Scan(&last); err != nil || last != 10 {
		t.Fatalf("last_seq after the failed append = %d, %v; want 10", last, err)
	}
	if _, err := b.DB.ExecContext(ctx, `DELETE FROM events WHERE thread_id = 't' AND seq = 13`); err != nil {
		t.Fatal(err)
	}
	if first, err := b.Append(ctx, "t", TypicalBatch("r", 5)); err != nil || first != 11 {
		t.Fatalf("Append after the failure = %d, %v; want 11", first, err)
	}
	got, err := b.ReadAfter(ctx, "t", 0, 0)
	if err != nil || len(got) != 15 || got[14].Seq != 15 {
		t.Fatalf("read %d events (%v), want 1..15", len(got), err)
	}
	if _, err := b.Append(ctx, "missing", TypicalBatch("r", 3)); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("Append to a missing thread: %v, want ErrNotFound", err)
	}
	if n := countRows(t, b.DB, "events"); n != 15 {
		t.Fatalf("%d rows after appending to a missing thread, want 15", n)
	}
}

// testChunkedFencedAppend: a fenced batch larger than one INSERT (written
// in a transaction of several statements) checks its tokens as one
// statement does: a stale token stores no chunk and leaves the counter,
// and a take racing the appends is never overtaken.
func testChunkedFencedAppend(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	b.SetMaxRows(4)
	var fa instanceai.FencedAppender = b.Store
	ensure(t, b, "t", "o")
	row, err := b.ClaimThread(ctx, "t", "r", "inst_a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fences := func(f int64) []int64 {
		out := make([]int64, 10)
		for i := range out {
			out[i] = f
		}
		return out
	}
	if first, err := appendFenced(fa, "t", 0, fences(row.Fence)...); err != nil || first != 1 {
		t.Fatalf("chunked append under the current token = %d, %v; want 1", first, err)
	}
	if _, won, err := b.TakeRun(ctx, "t", "r", "inst_b", time.Minute); err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	_, err = appendFenced(fa, "t", 10, fences(row.Fence)...)
	wantStale(t, "chunked append under the taken token", err, row.Fence)
	if n := countRows(t, b.DB, "events"); n != 10 {
		t.Fatalf("%d rows after the refused append, want 10", n)
	}
	var last int64
	if err := b.DB.QueryRow(`SELECT last_seq FROM threads WHERE id = 't'`).Scan(&last); err != nil || last != 10 {
		t.Fatalf("last_seq after the refused append = %d, %v; want 10", last, err)
	}
	checkFencedAppendRacesTake(t, b.Store, b.Store, 10, 3)
}

// testCheckpoints: pieces come back by segment and piece whatever order
// they were stored in; storing one again changes nothing; another user's
// thread and a missing one refuse them; the deletions take exactly what
// they name.
func testCheckpoints(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	cs, ok := b.Store.(instanceai.CheckpointStore)
	if !ok {
		t.Fatal("the store keeps no checkpoints")
	}
	ensure(t, b, "t", "alice")
	piece := func(agent string, kind instanceai.EventType, since int64, n int, text string) instanceai.Checkpoint {
		return instanceai.Checkpoint{RunID: "r", AgentID: agent, Kind: kind, ResponseID: "resp-" + agent, UserID: "alice",
			TS: 1700000000000 + since, Since: since, Piece: n, Text: text}
	}
	stored := []instanceai.Checkpoint{
		piece("b", instanceai.TypeTextDelta, 7, 1, "b1 ✓"),
		piece("a", instanceai.TypeTextDelta, 7, 0, "a0"),
		piece("b", instanceai.TypeTextDelta, 7, 0, "b0"),
		piece("a", instanceai.TypeReasoningDelta, 3, 0, "thinking"),
		piece("a", instanceai.TypeTextDelta, 9, 0, "later segment"),
	}
	for _, c := range stored {
		if err := cs.AddCheckpoint(ctx, "t", c); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.AddCheckpoint(ctx, "t", piece("a", instanceai.TypeTextDelta, 7, 0, "a0 again")); err != nil {
		t.Fatalf("storing a piece again: %v", err)
	}
	other := piece("a", instanceai.TypeTextDelta, 7, 5, "not hers")
	other.UserID = "bob"
	if err := cs.AddCheckpoint(ctx, "t", other); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("bob's piece in alice's thread: %v, want ErrNotFound", err)
	}
	if err := cs.AddCheckpoint(ctx, "missing", piece("a", instanceai.TypeTextDelta, 1, 0, "x")); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("a piece of a missing thread: %v, want ErrNotFound", err)
	}
	got, err := cs.RunCheckpoints(ctx, "t", "r")
	if err != nil {
		t.Fatal(err)
	}
	want := []instanceai.Checkpoint{stored[3], stored[1], stored[2], stored[0], stored[4]}
	if len(got) != len(want) {
		t.Fatalf("got %d pieces, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("piece %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if err := cs.DeleteCheckpoints(ctx, "t", "r", "b", instanceai.TypeTextDelta, 7); err != nil {
		t.Fatal(err)
	}
	if got, _ := cs.RunCheckpoints(ctx, "t", "r"); len(got) != 3 {
		t.Fatalf("after deleting b's segment: %+v", got)
	}
	if err := cs.DeleteRunCheckpoints(ctx, "t", "r", "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := cs.RunCheckpoints(ctx, "t", "r"); len(got) != 0 {
		t.Fatalf("after deleting a's pieces: %+v", got)
	}
	if err := cs.AddCheckpoint(ctx, "t", piece("c", instanceai.TypeTextDelta, 1, 0, "c")); err != nil {
		t.Fatal(err)
	}
	if err := cs.DeleteRunCheckpoints(ctx, "t", "r", ""); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, b.DB, "segment_checkpoints"); n != 0 {
		t.Fatalf("%d pieces left after deleting the run's", n)
	}
}

// testFencedCheckpoints: a piece stored under a token is stored only while
// a claim row of its thread holds the token. Refused, it leaves nothing,
// even where the same piece was stored before under the token; a missing
// thread is ErrNotFound first.
func testFencedCheckpoints(t *testing.T, b SQLBackend) {
	ctx := context.Background()
	cs := b.Store.(instanceai.CheckpointStore)
	ensure(t, b, "t", "alice")
	row, err := b.ClaimThread(ctx, "t", "r", "inst_a", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	piece := func(n int, fence int64) instanceai.Checkpoint {
		return instanceai.Checkpoint{RunID: "r", AgentID: "a", Kind: instanceai.TypeTextDelta, ResponseID: "resp", UserID: "alice",
			TS: 1700000000000, Since: 3, Piece: n, Text: fmt.Sprint("piece ", n), Fence: fence}
	}
	if err := cs.AddCheckpoint(ctx, "t", piece(0, row.Fence)); err != nil {
		t.Fatalf("a piece under the current token: %v", err)
	}
	taken, won, err := b.TakeRun(ctx, "t", "r", "inst_b", time.Minute)
	if err != nil || !won {
		t.Fatalf("TakeRun = %v, %v", won, err)
	}
	wantStale(t, "a piece under the taken token", cs.AddCheckpoint(ctx, "t", piece(1, row.Fence)), row.Fence)
	wantStale(t, "a piece stored before, again under the taken token", cs.AddCheckpoint(ctx, "t", piece(0, row.Fence)), row.Fence)
	if err := cs.AddCheckpoint(ctx, "missing", piece(1, row.Fence)); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("a piece of a missing thread under a stale token: %v, want ErrNotFound", err)
	}
	if err := cs.AddCheckpoint(ctx, "t", piece(1, taken)); err != nil {
		t.Fatalf("a piece under the taker's token: %v", err)
	}
	got, err := cs.RunCheckpoints(ctx, "t", "r")
	if err != nil || len(got) != 2 || got[0] != piece(0, 0) || got[1] != piece(1, 0) {
		t.Fatalf("pieces = %+v, %v; want pieces 0 and 1, read back with token 0", got, err)
	}
}
