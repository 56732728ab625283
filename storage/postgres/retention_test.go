package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
)

// TestPruneLock: of two instances on one database, one holds the prune
// lock at a time; the other's pass is skipped, and runs once the lock is
// released. Another schema's lock is its own.
func TestPruneLock(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	a, b := openDSN(t, dsn), openDSN(t, dsn)
	t.Cleanup(func() { a.Close(); b.Close() })
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	release, ok, err := a.TryPruneLock(ctx)
	if err != nil || !ok {
		t.Fatalf("first lock: %v, %v", ok, err)
	}
	if _, ok, err := b.TryPruneLock(ctx); err != nil || ok {
		t.Fatalf("second instance took the lock held by the first: %v, %v", ok, err)
	}
	other := openMigrated(t)
	if rel, ok, err := other.TryPruneLock(ctx); err != nil || !ok {
		t.Fatalf("another schema's lock: %v, %v", ok, err)
	} else {
		rel()
	}
	if _, _, err := b.EnsureThread(ctx, instanceai.Thread{ID: "old", OwnerID: "u", CreatedAt: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	p, err := retention.New(b, retention.Config{IdleAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Prune(ctx, false)
	if err != nil || !r.Skipped || r.Threads != 0 {
		t.Fatalf("pass while another instance holds the lock: %+v, %v; want skipped", r, err)
	}
	release()
	r, err = p.Prune(ctx, false)
	if err != nil || r.Skipped || r.Threads != 1 {
		t.Fatalf("pass after the release: %+v, %v; want the old thread pruned", r, err)
	}
}

// lockCounter counts the passes inside the prune lock at once.
type lockCounter struct {
	*Store
	inside, most *atomic.Int32
	passes       *atomic.Int32
}

func (l lockCounter) TryPruneLock(ctx context.Context) (func(), bool, error) {
	release, ok, err := l.Store.TryPruneLock(ctx)
	if !ok || err != nil {
		return release, ok, err
	}
	n := l.inside.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	l.passes.Add(1)
	return func() { l.inside.Add(-1); release() }, true, nil
}

// TestPrunersNeverOverlap: two instances' passes, started together again
// and again over threads that keep them busy, never hold the lock at
// once, and together delete each thread once.
func TestPrunersNeverOverlap(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	a, b := openDSN(t, dsn), openDSN(t, dsn)
	t.Cleanup(func() { a.Close(); b.Close() })
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var inside, most, passes atomic.Int32
	var pruned atomic.Int64
	pruners := make([]*retention.Pruner, 2)
	for i, s := range []*Store{a, b} {
		p, err := retention.New(lockCounter{Store: s, inside: &inside, most: &most, passes: &passes}, retention.Config{
			IdleAfter: time.Hour, Now: func() time.Time { return time.Now().Add(24 * time.Hour) }, BatchThreads: 2,
			Sleep: func(context.Context, time.Duration) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		pruners[i] = p
	}
	const rounds, threads = 5, 6
	for round := range rounds {
		for i := range threads {
			id := fmt.Sprintf("r%d-t%d", round, i)
			if _, _, err := a.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "u"}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for _, p := range pruners {
			wg.Go(func() {
				r, err := p.Prune(ctx, false)
				if err != nil {
					t.Error(err)
				}
				pruned.Add(int64(r.Threads))
			})
		}
		wg.Wait()
		// A pass skipped because the other held the lock leaves nothing
		// behind: the other pass took every thread.
	}
	if most.Load() > 1 {
		t.Errorf("%d passes held the prune lock at once", most.Load())
	}
	if pruned.Load() != rounds*threads {
		t.Errorf("%d threads pruned, want %d (each once)", pruned.Load(), rounds*threads)
	}
	if passes.Load() < rounds {
		t.Errorf("%d passes ran in %d rounds", passes.Load(), rounds)
	}
}
