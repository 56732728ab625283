package instanceai_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// renewRace runs during once, right after a renewal answered: a run
// claimed then is missing from that answer through no fault of its own.
// It counts the renewals that answered.
type renewRace struct {
	instanceai.RunClaims
	once     sync.Once
	during   func()
	renewals atomic.Int64
}

func (c *renewRace) RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.ActiveRun, error) {
	held, err := c.RunClaims.RenewRuns(ctx, owner, ttl)
	c.once.Do(c.during)
	c.renewals.Add(1)
	return held, err
}

// A run that starts while the heartbeat renews the leases is not taken for
// one another instance took over: it keeps running, and its row is
// renewed by the next beat.
func TestHeartbeatSparesARunClaimedDuringTheRenewal(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	for _, id := range []string{"t1", "t2"} {
		if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	writer := instanceai.NewWriter(store, instanceai.NewHub(64), instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(ctx) })
	waiting := instanceai.AgentFunc(func(ctx context.Context, _ *instanceai.Run) error {
		<-ctx.Done()
		return ctx.Err()
	})
	claims := &renewRace{RunClaims: store}
	runs := instanceai.NewRuns(writer, waiting, instanceai.RunsConfig{Claims: claims, Confirmations: store, Index: store,
		Instance: "inst", Lease: time.Second})
	t.Cleanup(func() { _ = runs.Shutdown(ctx) })
	if _, err := runs.Start(instanceai.StartRequest{ThreadID: "t1", UserID: "u", Message: "one"}); err != nil {
		t.Fatal(err)
	}
	var second *instanceai.Run
	claims.during = func() {
		var err error
		if second, err = runs.Start(instanceai.StartRequest{ThreadID: "t2", UserID: "u", Message: "two"}); err != nil {
			t.Error(err)
		}
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { runs.Maintain(mctx, 10*time.Millisecond); close(done) }()
	// The beat whose renewal missed the run judged it once the next one
	// began; the one after that renewed it.
	waitUntil(t, "two renewals after the one the run was claimed during", func() bool { return claims.renewals.Load() >= 3 })
	stop()
	<-done
	if second == nil {
		t.Fatal("the run was not started during a renewal")
	}
	if a := runs.Active("t2"); a != second {
		t.Fatalf("the run claimed during the renewal is gone (active: %v)", a)
	}
	row, err := store.ActiveRun(ctx, "t2")
	if err != nil || row.RunID != second.ID || row.Owner != "inst" {
		t.Fatalf("row of t2 = %+v, %v; want owned by inst for run %s", row, err, second.ID)
	}
}
