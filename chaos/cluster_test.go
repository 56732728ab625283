package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/internal/testpg"
)

// An instance that fails to start is reported, with what it said before it
// exited, and what had started is stopped: the harness does not panic.
func TestStartClusterReportsAnInstanceThatFailsToStart(t *testing.T) {
	dsn := testpg.BaseDSN(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "threadline")
	script := "#!/bin/sh\n" +
		"echo 'level=INFO msg=\"starting\"' >&2\n" +
		"echo 'level=ERROR msg=\"open store: connection refused\"' >&2\n" +
		"exit 3\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Short()
	cfg.Binary, cfg.DatabaseURL = bin, dsn
	j := openJournal(dir)
	defer j.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := StartCluster(ctx, &cfg, "postgres", dir, j)
	if err == nil {
		cl.Close()
		t.Fatal("a cluster whose instances exit at start started")
	}
	if cl != nil {
		t.Fatalf("StartCluster returned a cluster with its error %v", err)
	}
	for _, want := range []string{"instance 1", "exit status 3", "open store: connection refused", "instance-1.log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}
