// Package testpg gives tests an isolated PostgreSQL schema on the database
// named by TEST_DATABASE_URL. Without that variable tests skip, except under
// CI=true, where a silently skipped backend would hide a broken one.
package testpg

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	_ "github.com/lib/pq" // the driver the DSNs are for
)

// BaseDSN returns TEST_DATABASE_URL, or skips (fails under CI=true).
func BaseDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn != "" {
		return dsn
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal("TEST_DATABASE_URL is not set; under CI=true the PostgreSQL tests must run, not skip")
	}
	tb.Skip("TEST_DATABASE_URL is not set; skipping PostgreSQL tests " +
		"(set it to e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	return ""
}

// FreshDSN creates an empty schema, drops it when the test ends, and returns
// a DSN whose connections use it. Every test gets its own, so tests run in
// parallel and repeatedly without interfering.
func FreshDSN(tb testing.TB) string {
	tb.Helper()
	base := BaseDSN(tb)
	admin, err := sql.Open("postgres", base)
	if err != nil {
		tb.Fatalf("open %s: %v", base, err)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatal(err)
	}
	schema := "test_" + hex.EncodeToString(rnd[:])
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		admin.Close()
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		if _, err := admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	return WithSearchPath(tb, base, schema)
}

// WithSearchPath adds search_path to a DSN; lib/pq sends it to the server as
// a run-time parameter of every connection.
func WithSearchPath(tb testing.TB, dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("TEST_DATABASE_URL: %v", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}
