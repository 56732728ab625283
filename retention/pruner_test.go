package retention_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/storage/memory"
)

func TestConfigIsChecked(t *testing.T) {
	s := memory.New()
	for _, tc := range []struct {
		cfg  retention.Config
		want string
	}{
		{retention.Config{}, "idle age"},
		{retention.Config{IdleAfter: -time.Hour}, "idle age"},
		{retention.Config{IdleAfter: time.Hour, BatchThreads: -1}, "batch threads"},
		{retention.Config{IdleAfter: time.Hour, BatchThreads: retention.MaxBatchThreads + 1}, "batch threads"},
		{retention.Config{IdleAfter: time.Hour, BatchRows: -5}, "batch rows"},
		{retention.Config{IdleAfter: time.Hour, KeepRuns: -1}, "runs to keep"},
	} {
		if _, err := retention.New(s, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error about the %s", tc.cfg, err, tc.want)
		}
	}
	// A cap alone is a policy: no thread is deleted for idleness.
	if _, err := retention.New(s, retention.Config{KeepRuns: 2}); err != nil {
		t.Errorf("a run cap without an idle age: %v", err)
	}
	// A store that cannot cap runs is refused a cap, not ignored.
	if _, err := retention.New(onlyIdle{s}, retention.Config{IdleAfter: time.Hour, KeepRuns: 3}); err == nil ||
		!strings.Contains(err.Error(), "cannot cap") {
		t.Errorf("a cap on a store without one: %v", err)
	}
}

// onlyIdle hides a store's Capper.
type onlyIdle struct{ retention.Store }

// observer records what a Pruner reports.
type observer struct {
	deleted map[string]int64
	passes  []time.Time
	events  int64
}

func (o *observer) RetentionDeleted(rows map[string]int64) {
	for k, v := range rows {
		o.deleted[k] += v
	}
}

func (o *observer) RetentionPass(at time.Time, events, _ int64) {
	o.passes = append(o.passes, at)
	o.events = events
}

// TestRunPassesEveryInterval: Run prunes at once and after every
// interval, tells the observer each pass, and stops when its context
// ends. The clock and the waits are the test's.
func TestRunPassesEveryInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := memory.New()
	clock := time.Now()
	obs := &observer{deleted: map[string]int64{}}
	var waits []time.Duration
	ev := instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "r", AgentID: "a", Payload: &instanceai.Text{Text: "hi"}}
	p, err := retention.New(s, retention.Config{IdleAfter: time.Hour, Observer: obs, Now: func() time.Time { return clock },
		Sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			switch len(waits) {
			case 1:
				// Between the first pass and the second: a thread whose
				// last event is older than the age by the second's clock.
				if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
					t.Error(err)
				}
				if _, err := s.Append(ctx, "t", []instanceai.Event{ev, ev}); err != nil {
					t.Error(err)
				}
				clock = clock.Add(2 * time.Hour)
			case 3:
				cancel()
			}
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Run(ctx, 10*time.Minute); close(done) }()
	<-done
	if len(waits) != 3 || waits[0] != 10*time.Minute {
		t.Errorf("waits %v, want three of the interval", waits)
	}
	if len(obs.passes) != 3 || !obs.passes[1].Equal(clock) {
		t.Errorf("passes at %v, want three, the second at %v", obs.passes, clock)
	}
	if obs.deleted[retention.Threads] != 1 || obs.deleted[retention.Events] != 2 || obs.events != 0 {
		t.Errorf("observed %v deleted, %d events left; want the thread and its 2 events", obs.deleted, obs.events)
	}
}

// TestOnePassAtATime: a second pass of the same Pruner while one runs is
// refused, not run beside it.
func TestOnePassAtATime(t *testing.T) {
	s := memory.New()
	if _, _, err := s.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u",
		CreatedAt: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	var p *retention.Pruner
	var inner error
	p, err := retention.New(s, retention.Config{IdleAfter: time.Hour, Progress: func(retention.Report) {
		_, inner = p.Prune(context.Background(), false)
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Prune(context.Background(), false)
	if err != nil || r.Threads != 1 {
		t.Fatalf("Prune: %+v, %v", r, err)
	}
	if !errors.Is(inner, retention.ErrBusy) {
		t.Errorf("a pass inside a pass: %v, want ErrBusy", inner)
	}
}
