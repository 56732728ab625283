package probe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// blockingStore is a store whose probe query waits for release.
type blockingStore struct {
	instanceai.Store
	calls   atomic.Int32
	release chan struct{}
}

func (s *blockingStore) Probe(context.Context) ([]int64, error) {
	s.calls.Add(1)
	<-s.release
	return []int64{7}, nil
}

// Probes that come while a storage query hangs answer within the timeout,
// and share that one query rather than each starting their own; its answer,
// once it comes, is the next probes'.
func TestReadyBoundedAndSingleQuery(t *testing.T) {
	st := &blockingStore{release: make(chan struct{})}
	p := New(Config{Store: st, Timeout: 50 * time.Millisecond, Bus: func() error { return errors.New("down") }})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := p.Ready(context.Background())
			if r.Status != "unready" || r.Checks["storage"] != "error: no answer within 50ms" || r.Checks["bus"] != "error: down" {
				t.Errorf("while the query hangs: %+v", r)
			}
		})
	}
	wg.Wait()
	if n := st.calls.Load(); n != 1 {
		t.Fatalf("%d storage queries for 8 probes, want 1", n)
	}
	close(st.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := p.Ready(context.Background())
		if r.Checks["storage"] == OK {
			if r.Checks["migrations"] != "error: not applied: 007" {
				t.Fatalf("after the answer: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the query's answer never reached a probe: %+v", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
