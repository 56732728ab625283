package servertest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/storage"
)

// StoreKind is one storage backend of the matrix the server tests run on.
type StoreKind struct {
	// Name names the subtest: "memory", "sqlite" or "postgres".
	Name string
	// Open returns a fresh, migrated, empty store of the kind, closed when
	// the test ends: SQLite in a temporary directory, PostgreSQL in a
	// schema of its own (internal/testpg; skipped without
	// TEST_DATABASE_URL, failed under CI=true).
	Open func(t testing.TB) instanceai.Store
}

// StoreKinds is the store matrix: every backend Threadline ships.
var StoreKinds = []StoreKind{
	{"memory", func(t testing.TB) instanceai.Store { return OpenStore(t, "memory") }},
	{"sqlite", func(t testing.TB) instanceai.Store {
		return OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "threadline.db"))
	}},
	{"postgres", func(t testing.TB) instanceai.Store { return OpenStore(t, testpg.FreshDSN(t)) }},
}

// ForEachStore runs fn as a subtest on a fresh store of every kind.
func ForEachStore(t *testing.T, fn func(t *testing.T, store instanceai.Store)) {
	for _, k := range StoreKinds {
		t.Run(k.Name, func(t *testing.T) { fn(t, k.Open(t)) })
	}
}

// OpenStore opens and migrates the store spec names, as --store takes it
// ("memory", "memory?max-events=6", "sqlite:path", a PostgreSQL DSN), and
// closes it when the test ends.
func OpenStore(t testing.TB, spec string) instanceai.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("open store %s: %v", spec, err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate store %s: %v", spec, err)
	}
	return s
}

// StoredEvents returns every stored event of the thread, in order, read
// from the store itself rather than through the server.
func StoredEvents(t testing.TB, store instanceai.Store, thread string) []instanceai.StoredEvent {
	t.Helper()
	rows, err := store.ReadAfter(context.Background(), thread, 0, 0)
	if err != nil {
		t.Fatalf("read the log of %s: %v", thread, err)
	}
	return rows
}
