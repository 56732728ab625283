package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/storage"
)

// DefaultRetentionInterval is --retention-interval's default.
const DefaultRetentionInterval = time.Hour

// retentionConfig is the retention policy's flags, shared by serve and
// prune.
type retentionConfig struct {
	idle         time.Duration
	interval     time.Duration
	batchThreads int
	batchRows    int
	pause        time.Duration
	keepRuns     int
}

func retentionFlags(f *envFlags, c *retentionConfig, serve bool) {
	idleHelp := "delete threads idle for longer than this (no event appended, no rename, no run, confirmation or background agent pending), " +
		"with their events, messages, confirmations and checkpoints, e.g. 720h; 0 = keep everything"
	if !serve {
		idleHelp = "delete threads idle for longer than this, with their events, messages, confirmations and checkpoints, e.g. 720h " +
			"(this, --retention-keep-runs, or both)"
	}
	f.Duration(&c.idle, "retention-idle", "THREADLINE_RETENTION_IDLE", 0, idleHelp)
	if serve {
		f.Duration(&c.interval, "retention-interval", "THREADLINE_RETENTION_INTERVAL", DefaultRetentionInterval,
			"with --retention-idle or --retention-keep-runs: how often a retention pass runs (one instance at a time on PostgreSQL)")
	}
	f.Int(&c.batchThreads, "retention-batch", "THREADLINE_RETENTION_BATCH", retention.DefaultBatchThreads,
		fmt.Sprintf("threads deleted per transaction (1 to %d)", retention.MaxBatchThreads))
	f.Int(&c.batchRows, "retention-batch-rows", "THREADLINE_RETENTION_BATCH_ROWS", retention.DefaultBatchRows,
		"rows deleted per transaction at most: a thread with more events loses its oldest ones in transactions of this many first")
	f.Int(&c.keepRuns, "retention-keep-runs", "THREADLINE_RETENTION_KEEP_RUNS", 0,
		"cap every thread at this many runs: the log before its newest ones goes, oldest first, once every run there is closed "+
			"(a client whose cursor falls there gets the reset of evicted events); 0 = no cap")
	f.Duration(&c.pause, "retention-pause", "THREADLINE_RETENTION_PAUSE", retention.DefaultPause,
		"pause between two retention transactions, which lets the writer in")
}

// check reports a bad retention flag, naming it; required is set for the
// prune command, which has nothing to do without an age or a run cap.
func (c *retentionConfig) check(required bool) error {
	switch {
	case c.idle < 0:
		return usageError{fmt.Sprintf("--retention-idle %v: want a positive age such as 720h", c.idle)}
	case required && c.idle == 0 && c.keepRuns <= 0:
		return usageError{"prune needs --retention-idle (a positive age such as 720h), --retention-keep-runs, or both"}
	case !required && c.enabled() && c.interval <= 0:
		return usageError{fmt.Sprintf("--retention-interval %v must be positive", c.interval)}
	case c.batchThreads < 1 || c.batchThreads > retention.MaxBatchThreads:
		return usageError{fmt.Sprintf("--retention-batch %d: want 1 to %d", c.batchThreads, retention.MaxBatchThreads)}
	case c.batchRows < 1:
		return usageError{fmt.Sprintf("--retention-batch-rows %d must be positive", c.batchRows)}
	case c.keepRuns < 0:
		return usageError{fmt.Sprintf("--retention-keep-runs %d must be 0 (no cap) or more", c.keepRuns)}
	case c.pause < 0:
		return usageError{fmt.Sprintf("--retention-pause %v must be 0 or more", c.pause)}
	}
	return nil
}

// enabled says whether serve runs retention passes: an age, a cap, or both.
func (c *retentionConfig) enabled() bool { return c.idle > 0 || c.keepRuns > 0 }

// pruner builds the policy's Pruner over store.
func (c *retentionConfig) pruner(store instanceai.Store, spec string, cfg retention.Config) (*retention.Pruner, error) {
	rs, ok := store.(retention.Store)
	if !ok {
		return nil, fmt.Errorf("store %s cannot prune idle threads", storage.Describe(spec))
	}
	cfg.IdleAfter, cfg.BatchThreads, cfg.BatchRows, cfg.Pause, cfg.KeepRuns = c.idle, c.batchThreads, c.batchRows, c.pause, c.keepRuns
	if c.pause == 0 {
		cfg.Pause = -1 // none; the Pruner's zero takes the default
	}
	return retention.New(rs, cfg)
}

// pruneNow is the clock of the prune command; tests move it.
var pruneNow = time.Now

func prune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEnvFlags("prune", "Delete the threads idle for longer than --retention-idle, with every row that belongs to them, "+
		"and with --retention-keep-runs the runs past the cap, as serve's retention passes do, and print what was deleted. "+
		"With --dry-run, delete nothing and print what would be.", stderr)
	var spec string
	var rc retentionConfig
	var dry, quiet bool
	storeFlag(f, &spec)
	retentionFlags(f, &rc, false)
	f.fs.BoolVar(&dry, "dry-run", false, "count what would be deleted, delete nothing")
	f.fs.BoolVar(&quiet, "quiet", false, "print the totals only, no progress lines")
	if err := f.Parse(args); err != nil {
		return err
	}
	if err := rc.check(true); err != nil {
		return err
	}
	store, err := openMigrated(ctx, spec)
	if err != nil {
		return err
	}
	defer store.Close()
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	cfg := retention.Config{Now: pruneNow, Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	if !quiet {
		// A long pass shows it is moving, at most once a second.
		var last time.Time
		cfg.Progress = func(r retention.Report) {
			if now := time.Now(); now.Sub(last) >= time.Second {
				last = now
				fmt.Fprintf(stderr, "… %s %d threads, %d rows so far\n", verb, r.Threads, r.Rows.Total())
			}
		}
	}
	p, err := rc.pruner(store, spec, cfg)
	if err != nil {
		return err
	}
	r, err := p.Prune(ctx, dry)
	if r.Skipped {
		return fmt.Errorf("another process is pruning %s; try again once it is done", storage.Describe(spec))
	}
	printReport(stdout, r, verb, storage.Describe(spec))
	if err != nil {
		return fmt.Errorf("prune %s: %w (what was deleted before the error is printed above)", storage.Describe(spec), err)
	}
	return nil
}

// printReport prints a pass's totals, one table a line.
func printReport(w io.Writer, r retention.Report, verb, store string) {
	if r.Cutoff.IsZero() {
		fmt.Fprintf(w, "store %s: no idle age, so no thread deleted for idleness\n", store)
	} else {
		fmt.Fprintf(w, "store %s: threads idle since before %s\n", store, r.Cutoff.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "%s %d idle threads, %d rows in all, in %d transactions\n", verb, r.Threads, r.Rows.Total(), r.Transactions)
	for _, table := range r.Rows.Sorted() {
		fmt.Fprintf(w, "  %-20s %d\n", table, r.Rows[table])
	}
	var bytes string
	if r.Size.Bytes > 0 {
		bytes = fmt.Sprintf(", %s", humanBytes(r.Size.Bytes))
	}
	fmt.Fprintf(w, "the log holds %d events%s\n", r.Size.Events, bytes)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), strings.ToUpper("kmgtpe")[exp])
}
