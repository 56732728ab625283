// Package testredis gives tests the Redis server named by TEST_REDIS_URL.
// Without that variable tests skip, except under CI=true, where a silently
// skipped transport would hide a broken one.
package testredis

import (
	"os"
	"testing"
)

// URL returns TEST_REDIS_URL, or skips (fails under CI=true).
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TEST_REDIS_URL")
	if u != "" {
		return u
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal("TEST_REDIS_URL is not set; under CI=true the Redis tests must run, not skip")
	}
	tb.Skip("TEST_REDIS_URL is not set; skipping Redis tests " +
		"(set it to e.g. redis://127.0.0.1:6379/0)")
	return ""
}
