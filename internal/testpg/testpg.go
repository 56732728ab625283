// Package testpg gives tests an isolated PostgreSQL schema on the database
// named by TEST_DATABASE_URL. Without that variable tests skip, except under
// CI=true, where a silently skipped backend would hide a broken one.
package testpg

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"maps"
	"net/url"
	"os"
	"slices"
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
func FreshDSN(tb testing.TB) string { return Schema(tb, nil) }

// Schema is FreshDSN with extra run-time parameters (synchronous_commit, …)
// set on every connection of the returned DSN.
func Schema(tb testing.TB, params map[string]string) string {
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
	params = maps.Clone(params)
	if params == nil {
		params = map[string]string{}
	}
	params["search_path"] = schema
	return WithParams(tb, base, params)
}

// WithParams adds run-time parameters (search_path, …) to a DSN; lib/pq
// sends the ones it does not know itself to the server with every new
// connection.
func WithParams(tb testing.TB, dsn string, params map[string]string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("TEST_DATABASE_URL: %v", err)
		}
		q := u.Query()
		for _, k := range slices.Sorted(maps.Keys(params)) {
			q.Set(k, params[k])
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		dsn += " " + k + "=" + params[k]
	}
	return dsn
}
