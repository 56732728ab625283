package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage"
)

// prunedStore makes a SQLite store with an idle thread (made in 2001,
// with two messages) and a recent one (with events), and closes it.
func prunedStore(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	spec := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	s, err := storage.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "old", OwnerID: "u", CreatedAt: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m1", "m2"} {
		if err := s.AddMessage(ctx, instanceai.Message{ID: id, ThreadID: "old", Role: "user", Content: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "recent", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	ev := instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "r", AgentID: "a", Payload: &instanceai.Text{Text: "hello"}}
	if _, err := s.Append(ctx, "recent", []instanceai.Event{ev, ev, ev}); err != nil {
		t.Fatal(err)
	}
	return spec
}

func threadIDs(t *testing.T, spec string) []string {
	t.Helper()
	ctx := context.Background()
	s, err := storage.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []string
	for _, id := range []string{"old", "recent"} {
		if _, err := s.GetThread(ctx, id); err == nil {
			ids = append(ids, id)
		} else if !errors.Is(err, instanceai.ErrNotFound) {
			t.Fatal(err)
		}
	}
	return ids
}

// TestPruneCommand: a dry run prints what a real run then deletes, and
// deletes nothing; the real run prints the same counts and deletes them.
func TestPruneCommand(t *testing.T) {
	spec := prunedStore(t)
	var dry, stderr bytes.Buffer
	if err := run(context.Background(), []string{"prune", "-store", spec, "-retention-idle", "720h", "-dry-run"}, &dry, &stderr); err != nil {
		t.Fatalf("prune -dry-run: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"would delete 1 idle threads, 3 rows in all, in 1 transactions", "threads              1", "messages             2", "events               0", "the log holds 3 events"} {
		if !strings.Contains(dry.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, dry.String())
		}
	}
	if ids := threadIDs(t, spec); len(ids) != 2 {
		t.Fatalf("after the dry run: threads %v, want both", ids)
	}
	var real bytes.Buffer
	if err := run(context.Background(), []string{"prune", "-store", spec, "-retention-idle", "720h"}, &real, &stderr); err != nil {
		t.Fatalf("prune: %v\n%s", err, stderr.String())
	}
	// The first line names the cutoff, which the clock moved.
	body := func(s string) string { _, rest, _ := strings.Cut(s, "\n"); return rest }
	if got, want := body(real.String()), strings.ReplaceAll(body(dry.String()), "would delete", "deleted"); got != want {
		t.Errorf("prune printed\n%s\nthe dry run\n%s", got, dry.String())
	}
	if ids := threadIDs(t, spec); len(ids) != 1 || ids[0] != "recent" {
		t.Fatalf("after the prune: threads %v, want [recent]", ids)
	}

	// With the clock a year on, the recent thread is idle too.
	defer func(old func() time.Time) { pruneNow = old }(pruneNow)
	pruneNow = func() time.Time { return time.Now().Add(365 * 24 * time.Hour) }
	real.Reset()
	if err := run(context.Background(), []string{"prune", "-store", spec, "-retention-idle", "720h", "-quiet"}, &real, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(real.String(), "deleted 1 idle threads, 4 rows in all") || !strings.Contains(real.String(), "events               3") {
		t.Errorf("prune a year on printed\n%s", real.String())
	}
	if ids := threadIDs(t, spec); len(ids) != 0 {
		t.Fatalf("a year on: threads %v, want none", ids)
	}
}

// TestPruneKeepRuns: --retention-keep-runs deletes a thread's old runs,
// with an idle age or without one, and the dry run counts them.
func TestPruneKeepRuns(t *testing.T) {
	ctx := context.Background()
	spec := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	s, err := storage.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"r1", "r2", "r3"} {
		orch := instanceai.OrchestratorAgentID(run)
		if _, err := s.Append(ctx, "t", []instanceai.Event{
			{Type: instanceai.TypeRunStart, RunID: run, AgentID: orch, Payload: &instanceai.RunStart{MessageID: "m"}},
			{Type: instanceai.TypeTextBlock, RunID: run, AgentID: orch, Payload: &instanceai.Text{Text: "hi"}},
			{Type: instanceai.TypeRunFinish, RunID: run, AgentID: orch, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	for _, dry := range []bool{true, false} {
		args := []string{"prune", "-store", spec, "-retention-keep-runs", "1"}
		verb := "deleted"
		if dry {
			args, verb = append(args, "-retention-idle", "720h", "-dry-run"), "would delete"
		}
		var out, stderr bytes.Buffer
		if err := run(ctx, args, &out, &stderr); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		for _, want := range []string{verb + " 0 idle threads, 6 rows in all", "events               6"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v printed\n%s\nwithout %q", args, out.String(), want)
			}
		}
	}
	s, err = storage.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := s.ReadAfter(ctx, "t", 0, 0)
	if err != nil || len(events) != 3 || events[0].Seq != 7 {
		t.Fatalf("after the cap: %d events (%v), want the last run's 3 from seq 7", len(events), err)
	}
}

// TestPruneFlags: a missing or bad value is a usage error naming its flag.
func TestPruneFlags(t *testing.T) {
	spec := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"prune", "-store", spec}, "--retention-idle"},
		{[]string{"prune", "-store", spec, "-retention-idle", "-1h"}, "--retention-idle"},
		{[]string{"prune", "-store", spec, "-retention-idle", "abc"}, "retention-idle"},
		{[]string{"prune", "-store", spec, "-retention-idle", "1h", "-retention-batch", "0"}, "--retention-batch"},
		{[]string{"prune", "-store", spec, "-retention-idle", "1h", "-retention-batch", "5000"}, "--retention-batch"},
		{[]string{"prune", "-store", spec, "-retention-idle", "1h", "-retention-batch-rows", "0"}, "--retention-batch-rows"},
		{[]string{"prune", "-store", spec, "-retention-idle", "1h", "-retention-pause", "-1s"}, "--retention-pause"},
		{[]string{"serve", "-retention-idle", "1h", "-retention-interval", "0s"}, "--retention-interval"},
		{[]string{"serve", "-retention-batch", "0"}, "--retention-batch"},
		{[]string{"prune", "-store", spec, "-retention-idle", "1h", "-retention-keep-runs", "-2"}, "--retention-keep-runs"},
		{[]string{"serve", "-retention-keep-runs", "5", "-retention-interval", "0s"}, "--retention-interval"},
	} {
		err := run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (exit %d), want a usage error naming %s", tc.args, err, exitCode(err), tc.want)
		}
	}
	err := run(context.Background(), []string{"prune", "-store", "nope:x", "-retention-idle", "1h"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "open store") {
		t.Errorf("prune of an unknown store: %v", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help", "prune"}, &out, &bytes.Buffer{}); err != nil ||
		!strings.Contains(out.String(), "-dry-run") || !strings.Contains(out.String(), "THREADLINE_RETENTION_IDLE") {
		t.Errorf("help prune: %v\n%s", err, out.String())
	}
}

// TestServeRetention: serve with --retention-idle prunes at start (the
// first pass does not wait for the interval), and its metrics say so.
func TestServeRetention(t *testing.T) {
	spec := prunedStore(t)
	base, logs := startServe(t, "-store", spec, "-retention-idle", "720h", "-retention-interval", "1h", "-retention-pause", "0")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids := threadIDs(t, spec)
		metrics := ""
		if res, err := http.Get(base + "/metrics"); err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			metrics = string(body)
		}
		if len(ids) == 1 && ids[0] == "recent" && strings.Contains(metrics, "threadline_retention_threads_pruned_total 1") &&
			strings.Contains(metrics, `threadline_retention_deleted_rows_total{table="messages"} 2`) &&
			strings.Contains(metrics, "threadline_event_log_events 3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: threads %v, metrics:\n%s\nlog:\n%s", ids, grepLines(metrics, "retention|event_log"), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "retention pass") {
		t.Errorf("the log does not tell the pass:\n%s", logs.String())
	}
}

func grepLines(text, pattern string) string {
	re := regexp.MustCompile(pattern)
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
