package storage

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
	"github.com/threadline/threadline/storage/postgres"
	"github.com/threadline/threadline/storage/sqlite"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec, kind, target string
	}{
		{"memory", "memory", ""},
		{" MEMORY ", "memory", ""},
		{"sqlite:data/threadline.db", "sqlite", "data/threadline.db"},
		{"sqlite:/var/lib/threadline/x", "sqlite", "/var/lib/threadline/x"},
		{"sqlite:///var/lib/x.db", "sqlite", "/var/lib/x.db"},
		{"sqlite://rel.db", "sqlite", "rel.db"},
		{"threadline.db", "sqlite", "threadline.db"},
		{"/abs/path/t.sqlite3", "sqlite", "/abs/path/t.sqlite3"},
		{"./t.sqlite", "sqlite", "./t.sqlite"},
		{"postgres://u:p@localhost:5432/db?sslmode=disable", "postgres", "postgres://u:p@localhost:5432/db?sslmode=disable"},
		{"postgresql://localhost/db", "postgres", "postgresql://localhost/db"},
	}
	for _, tt := range tests {
		kind, target, err := parse(tt.spec)
		if err != nil || kind != tt.kind || target != tt.target {
			t.Errorf("parse(%q) = %q, %q, %v; want %q, %q", tt.spec, kind, target, err, tt.kind, tt.target)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, spec := range []string{"", "   ", "mysql://u:secret@h/db", "redis://h", "sqlite:", "data/threadline", "https://x/y.db"} {
		_, _, err := parse(spec)
		if err == nil {
			t.Errorf("parse(%q) accepted it", spec)
			continue
		}
		if spec != "sqlite:" && !strings.Contains(err.Error(), "postgres://") {
			t.Errorf("parse(%q): error %q does not list the accepted forms", spec, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("parse(%q): error %q leaks the password", spec, err)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct{ spec, want string }{
		{"memory", "memory"},
		{"sqlite:data/x.db", "sqlite:data/x.db"},
		{"postgres://app:s3cr%40t@db:5432/threadline?sslmode=require", "postgres://app:xxxxx@db:5432/threadline?sslmode=require"},
		{"postgres://app@db/threadline", "postgres://app@db/threadline"},
		{"postgresql://db/threadline?user=app&password=hunter2", "postgresql://db/threadline?password=xxxxx&user=app"},
		{"postgres://app:bad%zz@db/x", "postgres://app:xxxxx@db/x"},
		{"host=db user=app password=hunter2 dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='a b\\'c' dbname=x", "host=db password=xxxxx dbname=x"},
	}
	for _, tt := range tests {
		if got := Describe(tt.spec); got != tt.want {
			t.Errorf("Describe(%q) = %q, want %q", tt.spec, got, tt.want)
		}
	}
}

// roundTrip proves a store returned by Open is usable end to end.
func roundTrip(t *testing.T, s instanceai.Store) {
	t.Helper()
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "open-test", OwnerID: "o"}); err != nil {
		t.Fatalf("EnsureThread: %v", err)
	}
	ev := instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "r", AgentID: "a", Payload: &instanceai.Text{Text: "hi"}}
	if first, err := s.Append(ctx, "open-test", []instanceai.Event{ev}); err != nil || first != 1 {
		t.Fatalf("Append = %d, %v", first, err)
	}
	got, err := s.ReadAfter(ctx, "open-test", 0, 0)
	if err != nil || len(got) != 1 || got[0].Event.RunID != "r" {
		t.Fatalf("ReadAfter = %+v, %v", got, err)
	}
	// Every backend keeps the builder's data too, on the same migrations.
	b, ok := s.(builder.Store)
	if !ok {
		t.Fatalf("the %s store is not a builder.Store", typeName(s))
	}
	if _, err := b.CreateProject(ctx, "o", builder.NewProject{Name: "open-test", InitialWorkflows: []string{"f.json"}}); err != nil {
		t.Fatalf("CreateProject: %v", err)
	}
	if p, err := b.GetProject(ctx, "o", "open-test"); err != nil || p.WorkflowCount != 1 {
		t.Fatalf("GetProject = %+v, %v", p, err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for spec, want := range map[string]any{
		"memory": &memory.Store{},
		"sqlite:" + filepath.Join(dir, "a", "x.db"):    &sqlite.Store{},
		filepath.Join(dir, "bare.db"):                  &sqlite.Store{},
		"sqlite://" + filepath.Join(dir, "url.sqlite"): &sqlite.Store{},
	} {
		s, err := Open(ctx, spec)
		if err != nil {
			t.Fatalf("Open(%q): %v", spec, err)
		}
		t.Cleanup(func() { s.Close() })
		if gotT, wantT := typeName(s), typeName(want); gotT != wantT {
			t.Errorf("Open(%q) returned a %s, want %s", spec, gotT, wantT)
		}
		roundTrip(t, s)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "x.db")); err != nil {
		t.Errorf("sqlite file not created: %v", err)
	}
	if _, err := Open(ctx, "nonsense"); err == nil {
		t.Error("Open(nonsense) succeeded")
	}
}

// A memory spec's window bounds what a thread keeps.
func TestOpenMemoryWindow(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "memory?max-events=3")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		ev := instanceai.Event{Type: instanceai.TypeRunStart, RunID: "r", AgentID: "orchestrator-r", Payload: &instanceai.RunStart{MessageID: "m"}}
		if _, err := s.Append(ctx, "w", []instanceai.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.ReadAfter(ctx, "w", 0, 0)
	if err != nil || len(rows) != 3 || rows[0].Seq != 3 {
		t.Fatalf("ReadAfter = %d rows from seq %v (%v), want 3 from 3", len(rows), rows, err)
	}
	for _, spec := range []string{"memory?max-events=0", "memory?max-events=x", "memory?max-bytes=-1", "memory?window=3", "memory?%zz"} {
		if _, err := Open(ctx, spec); err == nil || !strings.Contains(err.Error(), "memory spec") {
			t.Errorf("Open(%q) = %v, want a memory spec error", spec, err)
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *memory.Store:
		return "memory"
	case *sqlite.Store:
		return "sqlite"
	case *postgres.Store:
		return "postgres"
	}
	return "unknown"
}

func TestOpenPostgres(t *testing.T) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is not set; under CI=true the PostgreSQL tests must run, not skip")
		}
		t.Skip("TEST_DATABASE_URL is not set; skipping PostgreSQL tests " +
			"(set it to e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Fatalf("TEST_DATABASE_URL must be a postgres:// URL for this test: %v", err)
	}
	// A throwaway schema, so that the round trip leaves nothing behind.
	admin, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	schema := fmt.Sprintf("test_open_%d", time.Now().UnixNano())
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	s, err := Open(context.Background(), u.String())
	if err != nil {
		t.Fatalf("Open(%s): %v", Describe(u.String()), err)
	}
	defer s.Close()
	if typeName(s) != "postgres" {
		t.Fatalf("Open(%s) returned a %s", Describe(dsn), typeName(s))
	}
	roundTrip(t, s)
}
