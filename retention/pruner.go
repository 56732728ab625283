package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultBatchThreads = 100
	DefaultBatchRows    = 10000
	DefaultPause        = 100 * time.Millisecond
	// MaxBatchThreads bounds BatchThreads: a batch's ids are bound
	// parameters of its statements.
	MaxBatchThreads = 1000
)

// Config configures a Pruner.
type Config struct {
	// IdleAfter is the age past which an idle thread is deleted; 0 deletes
	// no thread (KeepRuns must then be set).
	IdleAfter time.Duration
	// BatchThreads bounds the threads one transaction deletes
	// (DefaultBatchThreads when 0).
	BatchThreads int
	// BatchRows bounds the rows one transaction deletes, as far as a
	// thread can be split: a thread of more events than this has its
	// oldest events deleted in transactions of BatchRows first
	// (DefaultBatchRows when 0).
	BatchRows int
	// KeepRuns, when > 0, caps the runs a thread keeps: the log before
	// its KeepRuns newest runs is deleted, if every run there is closed
	// (the store must be a Capper).
	KeepRuns int
	// Pause is the wait between two transactions, which lets the writer
	// in (DefaultPause when 0; negative: none).
	Pause time.Duration
	// Now is the clock the cutoff is taken from (time.Now when nil).
	Now func() time.Time
	// Sleep waits d or until ctx ends (a timer when nil); tests pass one
	// that does not wait.
	Sleep func(ctx context.Context, d time.Duration) error
	// Observer, when set, is told what each pass deleted.
	Observer Observer
	// Forget, when set, is called with the threads each transaction
	// deleted, once it committed: a server ends their open streams.
	Forget func(ids []string)
	// Progress, when set, is called after each batch with the pass's
	// totals so far.
	Progress func(Report)
	Logger   *slog.Logger
}

// Observer receives the numbers a metrics registry exports.
type Observer interface {
	// RetentionDeleted counts rows deleted, by table ("threads" counts the
	// threads pruned).
	RetentionDeleted(rows map[string]int64)
	// RetentionPass records a finished pass: when, and the log's size
	// after it.
	RetentionPass(at time.Time, events, bytes int64)
}

// Report is what one pass found or deleted.
type Report struct {
	DryRun bool
	// Cutoff is the time before which a thread counted as idle.
	Cutoff time.Time
	// Skipped is set when another process held the prune lock: the pass
	// did nothing.
	Skipped bool
	// Threads is the number of threads pruned (or, dry, to prune).
	Threads int
	// Rows are the rows deleted (or, dry, to delete), by table.
	Rows Counts
	// Transactions counts the deleting transactions (dry: that would be
	// run); MaxTransactionRows is the most rows one of them deleted.
	Transactions       int
	MaxTransactionRows int64
	Size               Size
}

// Pruner runs retention passes over one store.
type Pruner struct {
	store Store
	cfg   Config
	// running keeps two passes of this process apart; Locker keeps those
	// of several processes apart.
	running sync.Mutex
}

// ErrBusy is returned by Prune when a pass of this Pruner is under way.
var ErrBusy = errors.New("retention: a pass is already running")

// New returns a Pruner of store. It checks cfg: a bad value is an error
// that names the field.
func New(store Store, cfg Config) (*Pruner, error) {
	if cfg.IdleAfter < 0 || (cfg.IdleAfter == 0 && cfg.KeepRuns <= 0) {
		return nil, fmt.Errorf("retention: want a positive idle age, a run cap, or both; got age %v and cap %d", cfg.IdleAfter, cfg.KeepRuns)
	}
	if cfg.BatchThreads == 0 {
		cfg.BatchThreads = DefaultBatchThreads
	}
	if cfg.BatchThreads < 1 || cfg.BatchThreads > MaxBatchThreads {
		return nil, fmt.Errorf("retention: batch threads must be 1 to %d, got %d", MaxBatchThreads, cfg.BatchThreads)
	}
	if cfg.BatchRows == 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.BatchRows < 1 {
		return nil, fmt.Errorf("retention: batch rows must be positive, got %d", cfg.BatchRows)
	}
	if cfg.KeepRuns < 0 {
		return nil, fmt.Errorf("retention: runs to keep must be 0 (no cap) or more, got %d", cfg.KeepRuns)
	}
	if _, ok := store.(Capper); cfg.KeepRuns > 0 && !ok {
		return nil, fmt.Errorf("retention: the store cannot cap the runs a thread keeps")
	}
	if cfg.Pause == 0 {
		cfg.Pause = DefaultPause
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Pruner{store: store, cfg: cfg}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Prune runs one pass: it deletes (or, dry, counts) every thread idle for
// longer than IdleAfter. A dry pass reads only. A pass that finds the
// prune lock taken by another process does nothing and reports Skipped.
func (p *Pruner) Prune(ctx context.Context, dry bool) (Report, error) {
	if !p.running.TryLock() {
		return Report{}, ErrBusy
	}
	defer p.running.Unlock()
	r := Report{DryRun: dry, Rows: Counts{}}
	if p.cfg.IdleAfter > 0 {
		r.Cutoff = p.cfg.Now().Add(-p.cfg.IdleAfter)
	}
	if l, ok := p.store.(Locker); ok && !dry {
		release, got, err := l.TryPruneLock(ctx)
		if err != nil {
			return r, fmt.Errorf("retention: take the prune lock: %w", err)
		}
		if !got {
			r.Skipped = true
			return r, nil
		}
		defer release()
	}
	var err error
	if p.cfg.IdleAfter > 0 {
		err = p.pass(ctx, &r)
	}
	if err == nil && p.cfg.KeepRuns > 0 {
		err = p.capPass(ctx, &r)
	}
	if size, serr := p.store.LogSize(ctx); serr == nil {
		r.Size = size
	} else if err == nil {
		err = fmt.Errorf("retention: read the log's size: %w", serr)
	}
	if p.cfg.Observer != nil && !dry {
		p.cfg.Observer.RetentionPass(p.cfg.Now(), r.Size.Events, r.Size.Bytes)
	}
	return r, err
}

// pass pages through the idle threads in id order. Deleted threads leave
// the listing and skipped ones stay behind the page's last id, so the
// pages never meet a thread twice.
func (p *Pruner) pass(ctx context.Context, r *Report) error {
	after := ""
	for {
		page, err := p.store.IdleThreads(ctx, r.Cutoff, after, p.cfg.BatchThreads)
		if err != nil {
			return fmt.Errorf("retention: list idle threads: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].ID
		if err := p.page(ctx, r, page); err != nil {
			return err
		}
		if len(page) < p.cfg.BatchThreads {
			return nil
		}
	}
}

// capPass caps the runs of every thread that holds more than KeepRuns,
// after the idle threads are gone.
func (p *Pruner) capPass(ctx context.Context, r *Report) error {
	c := p.store.(Capper)
	after := ""
	for {
		page, err := c.CrowdedThreads(ctx, p.cfg.KeepRuns, after, p.cfg.BatchThreads)
		if err != nil {
			return fmt.Errorf("retention: list threads of more than %d runs: %w", p.cfg.KeepRuns, err)
		}
		for _, id := range page {
			if err := p.capThread(ctx, r, c, id); err != nil {
				return err
			}
		}
		if len(page) < p.cfg.BatchThreads {
			return nil
		}
		after = page[len(page)-1]
	}
}

// capThread deletes the thread's old runs, a transaction at a time.
func (p *Pruner) capThread(ctx context.Context, r *Report, c Capper, id string) error {
	for {
		if err := p.between(ctx, r); err != nil {
			return err
		}
		rows, err := c.CapRuns(ctx, id, p.cfg.KeepRuns, p.cfg.BatchRows, r.DryRun)
		if err != nil {
			return fmt.Errorf("retention: cap the runs of thread %q: %w", id, err)
		}
		total := rows.Total()
		if total == 0 {
			return nil
		}
		if !r.DryRun {
			p.counted(r, rows, nil, total)
			continue
		}
		// Dry: the transactions the real pass would take, the first with
		// the rows other than events.
		limit := int64(p.cfg.BatchRows)
		others, events := total-rows[Events], rows[Events]
		first := min(events, max(limit-others, 1))
		p.counted(r, rows, nil, others+first)
		for events -= first; events > 0; events -= min(events, limit) {
			p.counted(r, nil, nil, min(events, limit))
		}
		return nil
	}
}

// page deletes a page of idle threads in batches of at most BatchRows
// rows: a thread larger than that has its oldest events trimmed first.
func (p *Pruner) page(ctx context.Context, r *Report, page []Candidate) error {
	limit := int64(p.cfg.BatchRows)
	var batch []string
	var rows int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := p.deleteBatch(ctx, r, batch, rows)
		batch, rows = batch[:0], 0
		return err
	}
	for _, c := range page {
		own := c.Rows
		for own > limit && c.Events > 0 {
			n := min(limit, c.Events)
			trimmed, err := p.trim(ctx, r, c.ID, n)
			if err != nil {
				return err
			}
			own -= trimmed
			c.Events -= trimmed
			if trimmed < n {
				break // the thread woke up, or holds fewer events now
			}
		}
		if rows+own > limit {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, c.ID)
		rows += own
	}
	return flush()
}

// trim deletes n of the thread's oldest events (or counts them, dry).
func (p *Pruner) trim(ctx context.Context, r *Report, id string, n int64) (int64, error) {
	if err := p.between(ctx, r); err != nil {
		return 0, err
	}
	if r.DryRun {
		// The thread's batch counts all its rows, these included.
		p.counted(r, nil, nil, n)
		return n, nil
	}
	deleted, err := p.store.TrimEvents(ctx, id, r.Cutoff, int(n))
	if err != nil {
		return 0, fmt.Errorf("retention: trim thread %q: %w", id, err)
	}
	p.counted(r, Counts{Events: deleted}, nil, deleted)
	return deleted, nil
}

// deleteBatch deletes a batch of threads in one transaction (or counts
// their rows, dry; a dry transaction would delete the rows the listing
// reported, less those trimmed before).
func (p *Pruner) deleteBatch(ctx context.Context, r *Report, ids []string, listed int64) error {
	if err := p.between(ctx, r); err != nil {
		return err
	}
	if r.DryRun {
		rows, err := p.store.ThreadRows(ctx, ids)
		if err != nil {
			return fmt.Errorf("retention: count the rows of %d threads: %w", len(ids), err)
		}
		p.counted(r, rows, ids, listed)
		return nil
	}
	pruned, rows, err := p.store.PruneThreads(ctx, ids, r.Cutoff)
	if err != nil {
		return fmt.Errorf("retention: delete %d threads: %w", len(ids), err)
	}
	p.counted(r, rows, pruned, rows.Total())
	if len(pruned) > 0 && p.cfg.Forget != nil {
		p.cfg.Forget(pruned)
	}
	return nil
}

// between pauses before every transaction but the pass's first, so that
// the writer gets the store between them.
func (p *Pruner) between(ctx context.Context, r *Report) error {
	if r.Transactions > 0 && p.cfg.Pause > 0 {
		if err := p.cfg.Sleep(ctx, p.cfg.Pause); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// counted adds one transaction's rows (txRows in all) to the report and
// tells the observer and the progress callback.
func (p *Pruner) counted(r *Report, rows Counts, threads []string, txRows int64) {
	r.Transactions++
	r.Threads += len(threads)
	r.Rows.Add(rows)
	r.MaxTransactionRows = max(r.MaxTransactionRows, txRows)
	if !r.DryRun && p.cfg.Observer != nil && rows.Total() > 0 {
		p.cfg.Observer.RetentionDeleted(rows)
	}
	if p.cfg.Progress != nil {
		snap := *r
		snap.Rows = r.Rows.Clone()
		p.cfg.Progress(snap)
	}
}

// Run runs a pass at once and then every interval until ctx ends, logging
// what each pass deleted and any error (a failed pass is tried again at
// the next interval).
func (p *Pruner) Run(ctx context.Context, interval time.Duration) {
	for {
		start := time.Now()
		r, err := p.Prune(ctx, false)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			p.cfg.Logger.Error("retention pass failed", "err", err, "threads", r.Threads, "rows", r.Rows.Total())
		case r.Skipped:
			p.cfg.Logger.Debug("retention pass skipped: another instance is pruning")
		case r.Threads > 0 || r.Rows.Total() > 0:
			p.cfg.Logger.Info("retention pass deleted idle threads or old runs", "threads", r.Threads, "rows", r.Rows.Total(),
				"events", r.Rows[Events], "cutoff", r.Cutoff, "took", time.Since(start).Round(time.Millisecond))
		}
		if p.cfg.Sleep(ctx, interval) != nil {
			return
		}
	}
}
