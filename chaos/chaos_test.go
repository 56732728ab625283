package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/chaos"
	"github.com/threadline/threadline/internal/testbin"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
)

// logWriter sends the harness's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaosShort is the short version of the fault harness: every scenario
// once, on both buses, with short leases (see chaos.Short). It fails with
// the report's table and evidence on any anomaly, and keeps the logs,
// client traces and database dump of each scenario that had one in a
// directory it names.
func TestChaosShort(t *testing.T) {
	dsn := testpg.BaseDSN(t)
	redis := testredis.URL(t)
	if testing.Short() {
		t.Skip("the fault harness takes minutes; skipped with -short (make chaos runs the long version)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg := chaos.Short()
	cfg.DatabaseURL, cfg.RedisURL = dsn, redis
	cfg.Progress = logWriter{t}
	cfg.Binary = testbin.Threadline(t)
	var err error
	// Outlives the test when it fails: the evidence an engineer reads.
	if cfg.Dir, err = os.MkdirTemp("", "threadline-chaos-"); err != nil {
		t.Fatal(err)
	}
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		var b strings.Builder
		rep.WriteText(&b, 3)
		if err != nil || rep.Anomalies() > 0 {
			t.Errorf("fault harness (short version), evidence kept in %s:\n%s", cfg.Dir, b.String())
		} else {
			t.Logf("fault harness (short version):\n%s", b.String())
			os.RemoveAll(cfg.Dir)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
