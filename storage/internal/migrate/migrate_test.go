package migrate

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	_ "modernc.org/sqlite"
)

func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	// _txlock=immediate is the contract of the SQLite dialect (see SQLite).
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func versions(t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.Query(`SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"010_later.sql":  {Data: []byte("CREATE TABLE b (x INTEGER);")},
		"002_first.sql":  {Data: []byte("CREATE TABLE a (x INTEGER);")},
		"README.md":      {Data: []byte("not a migration")},
		"sub/003_x.sql":  {Data: []byte("ignored: not at the root")},
		"001_zero-1.sql": {Data: []byte("SELECT 1;")},
	}
	migs, err := Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range migs {
		got = append(got, m.Name)
	}
	if want := []string{"zero-1", "first", "later"}; !slices.Equal(got, want) {
		t.Fatalf("names in order = %v, want %v", got, want)
	}
	if migs[2].Version != 10 || migs[2].SQL != "CREATE TABLE b (x INTEGER);" {
		t.Fatalf("last migration = %+v", migs[2])
	}

	for name, fsys := range map[string]fstest.MapFS{
		"bad name":  {"init.sql": {Data: []byte("")}},
		"zero":      {"000_init.sql": {Data: []byte("")}},
		"duplicate": {"001_a.sql": {Data: []byte("")}, "01_b.sql": {Data: []byte("")}},
	} {
		if _, err := Load(fsys); err == nil {
			t.Errorf("%s: Load accepted %v", name, fsys)
		}
	}
}

func TestUpAppliesInOrderOnce(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t, filepath.Join(t.TempDir(), "m.db"))
	fsys := fstest.MapFS{
		"001_a.sql": {Data: []byte("CREATE TABLE a (x INTEGER); INSERT INTO a VALUES (1);")},
		// Depends on 001: fails unless run after it.
		"002_b.sql": {Data: []byte("CREATE TABLE b AS SELECT x + 1 AS y FROM a;")},
	}
	done, err := Up(ctx, db, SQLite, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done, []int64{1, 2}) {
		t.Fatalf("first Up applied %v, want [1 2]", done)
	}
	var y int
	if err := db.QueryRow(`SELECT y FROM b`).Scan(&y); err != nil || y != 2 {
		t.Fatalf("b.y = %d, %v; want 2", y, err)
	}

	done, err = Up(ctx, db, SQLite, fsys)
	if err != nil || len(done) != 0 {
		t.Fatalf("second Up applied %v, %v; want nothing", done, err)
	}

	fsys["003_c.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE c (z TEXT);")}
	done, err = Up(ctx, db, SQLite, fsys)
	if err != nil || !slices.Equal(done, []int64{3}) {
		t.Fatalf("Up after adding 003 applied %v, %v; want [3]", done, err)
	}
	if got := versions(t, db); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("recorded versions = %v", got)
	}
}

func TestUpRollsBackAFailingMigration(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t, filepath.Join(t.TempDir(), "m.db"))
	fsys := fstest.MapFS{
		"001_ok.sql": {Data: []byte("CREATE TABLE ok (x INTEGER);")},
		// The first statement succeeds; the second fails, and with it the
		// whole migration must vanish.
		"002_broken.sql": {Data: []byte("CREATE TABLE half (x INTEGER); INSERT INTO missing VALUES (1);")},
	}
	done, err := Up(ctx, db, SQLite, fsys)
	if err == nil {
		t.Fatal("Up succeeded with a broken migration")
	}
	if !strings.Contains(err.Error(), "002_broken") {
		t.Errorf("error %q does not name the migration", err)
	}
	if !slices.Equal(done, []int64{1}) {
		t.Fatalf("applied %v before failing, want [1]", done)
	}
	if got := versions(t, db); !slices.Equal(got, []int64{1}) {
		t.Fatalf("recorded versions = %v, want [1]", got)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'half'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table of the failed migration exists (count %d, %v)", n, err)
	}

	// Fixed, it applies on the next run.
	fsys["002_broken.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE half (x INTEGER);")}
	if done, err := Up(ctx, db, SQLite, fsys); err != nil || !slices.Equal(done, []int64{2}) {
		t.Fatalf("Up after the fix applied %v, %v; want [2]", done, err)
	}
}

// Two pools on one file stand for two processes starting at once.
func TestUpConcurrentPools(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	fsys := fstest.MapFS{}
	for i, name := range []string{"001_a.sql", "002_b.sql", "003_c.sql", "004_d.sql"} {
		// Not idempotent on purpose: a second application would fail.
		fsys[name] = &fstest.MapFile{Data: []byte("CREATE TABLE t" + string(rune('a'+i)) + " (x INTEGER);")}
	}
	const n = 4
	dbs := make([]*sql.DB, n)
	for i := range dbs {
		dbs[i] = openSQLite(t, path)
	}
	var wg sync.WaitGroup
	results := make([][]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { results[i], errs[i] = Up(ctx, dbs[i], SQLite, fsys) })
	}
	wg.Wait()
	var all []int64
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		all = append(all, results[i]...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []int64{1, 2, 3, 4}) {
		t.Fatalf("versions applied across migrators = %v, want each of 1..4 once", all)
	}
	if got := versions(t, dbs[0]); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("recorded versions = %v", got)
	}
}

// Pending names what Up would apply, without applying it, and fails on a
// database that was never migrated (no schema_migrations): a readiness
// probe must not call that database ready.
func TestPending(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t, filepath.Join(t.TempDir(), "m.db"))
	fsys := fstest.MapFS{"001_a.sql": {Data: []byte("CREATE TABLE a (x INTEGER);")}}
	if _, err := Pending(ctx, db, fsys); err == nil {
		t.Fatal("Pending on a database never migrated: no error")
	}
	if _, err := Up(ctx, db, SQLite, fsys); err != nil {
		t.Fatal(err)
	}
	if p, err := Pending(ctx, db, fsys); err != nil || len(p) != 0 {
		t.Fatalf("Pending after Up = %v, %v", p, err)
	}
	fsys["002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE b (y INTEGER);")}
	fsys["003_c.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE c (z INTEGER);")}
	if p, err := Pending(ctx, db, fsys); err != nil || !slices.Equal(p, []int64{2, 3}) {
		t.Fatalf("Pending with two new files = %v, %v; want [2 3]", p, err)
	}
	if got := versions(t, db); !slices.Equal(got, []int64{1}) {
		t.Fatalf("Pending applied something: %v", got)
	}
}
