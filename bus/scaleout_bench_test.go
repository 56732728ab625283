package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// The scale-out benchmark: many threads, each served by one instance of
// three (its subscribers are all there) and written by another, so that
// every frame crosses the bus. With routing by thread, an instance
// receives only the frames of the threads it serves; broadcasting, it
// receives every frame of the cluster.
const (
	scaleThreads    = 300
	scaleSubs       = 10 // per thread
	scaleFrames     = 20 // per thread and round
	scaleInstances  = 3
	scaleRoundWait  = 60 * time.Second
	scaleHubQueue   = 4 * scaleFrames
	scaleThreadName = "scale_%03d"
)

func scaleThread(i int) string { return fmt.Sprintf(scaleThreadName, i) }

// countingBus counts what its listener receives.
type countingBus struct {
	instanceai.RoutedBus
	bytes, msgs atomic.Int64
}

func (b *countingBus) Listen(ctx context.Context, deliver func([]byte), state func(bool, error)) error {
	return b.RoutedBus.Listen(ctx, func(p []byte) {
		b.bytes.Add(int64(len(p)))
		b.msgs.Add(1)
		deliver(p)
	}, state)
}

// scaleSide is one arrangement: three instances routing by thread, three
// broadcasting, or one instance with every subscriber and no bus.
type scaleSide struct {
	name     string
	hubs     []*instanceai.Hub
	clusters []*instanceai.Cluster
	buses    []*countingBus

	delivered atomic.Int64
	target    atomic.Int64
	done      chan struct{}
	failed    chan error

	rounds int
	busy   time.Duration
	// received are the bus bytes each instance received in the measured
	// rounds.
	received []int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *scaleSide) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// instanceOf is the instance that serves thread i, and writerOf the one
// that writes it.
func (s *scaleSide) instanceOf(i int) int { return i % len(s.hubs) }
func (s *scaleSide) writerOf(i int) int   { return (i + 1) % len(s.hubs) }

func newScaleSide(b *testing.B, name string, instances int, open busOpener, broadcast bool) *scaleSide {
	s := &scaleSide{name: name, done: make(chan struct{}, 1), failed: make(chan error, 1), received: make([]int64, instances)}
	for range instances {
		s.hubs = append(s.hubs, instanceai.NewHub(scaleHubQueue))
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	var runWG sync.WaitGroup
	b.Cleanup(func() {
		if s.cancel != nil {
			s.cancel()
			waitGroup(b, &s.wg, name+": subscribers")
		}
		stopRun()
		for _, bus := range s.buses {
			_ = bus.Close()
		}
		waitGroup(b, &runWG, name+": Cluster.Run")
	})
	runErr := make(chan error, instances)
	if open != nil {
		octx, cancel := context.WithTimeout(context.Background(), clusterSetupWait)
		defer cancel()
		for i, hub := range s.hubs {
			bus, err := open(octx)
			if err != nil {
				b.Skipf("the bus is not reachable, skipping: %v", err)
			}
			routed, ok := bus.(instanceai.RoutedBus)
			if !ok {
				b.Fatalf("%T does not route by topic", bus)
			}
			cb := &countingBus{RoutedBus: routed}
			s.buses = append(s.buses, cb)
			cl := instanceai.NewCluster(cb, hub, instanceai.ClusterConfig{Instance: fmt.Sprintf("scale-%c", 'a'+i),
				Broadcast: broadcast, Logger: slog.New(&failHandler{fail: s.fail})})
			s.clusters = append(s.clusters, cl)
			runWG.Go(func() {
				if err := cl.Run(runCtx); err != nil && runCtx.Err() == nil {
					runErr <- err
				}
			})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for t := range scaleThreads {
		hub := s.hubs[s.instanceOf(t)]
		for range scaleSubs {
			sub, _ := hub.Subscribe(scaleThread(t))
			s.wg.Go(func() {
				defer sub.Close()
				s.drain(ctx, sub)
			})
		}
	}
	if s.clusters != nil {
		waitFollows(b, func() string {
			for t := range scaleThreads {
				if !s.clusters[s.instanceOf(t)].Follows(scaleThread(t)) {
					return scaleThread(t)
				}
			}
			return ""
		}, runErr, s.failed)
	}
	s.round(b, 0) // warm-up
	return s
}

func (s *scaleSide) drain(ctx context.Context, sub *instanceai.Subscription) {
	for {
		frames, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.fail(fmt.Errorf("a subscriber ended: %w", err))
			}
			return
		}
		if s.delivered.Add(int64(len(frames))) == s.target.Load() {
			s.done <- struct{}{}
		}
	}
}

// round writes scaleFrames deltas to every thread, each through its
// writer's instance, and waits until every subscriber has them all.
func (s *scaleSide) round(b *testing.B, r int) time.Duration {
	want := int64(scaleThreads * scaleSubs * scaleFrames)
	s.target.Store(s.delivered.Load() + want)
	responseID := fmt.Sprintf("resp_%06d", r)
	frames := make([]instanceai.Frame, scaleFrames)
	for i := range frames {
		frames[i] = clusterFrame(b, responseID, i)
	}
	before := s.busBytes()
	start := time.Now()
	for i := range scaleFrames {
		for t := range scaleThreads {
			one := frames[i : i+1]
			if s.clusters == nil {
				s.hubs[0].Publish(scaleThread(t), one)
			} else {
				s.clusters[s.writerOf(t)].Publish(scaleThread(t), one)
			}
		}
	}
	timer := time.NewTimer(scaleRoundWait)
	defer timer.Stop()
	select {
	case <-s.done:
	case err := <-s.failed:
		b.Fatalf("%s, round %d: %v", s.name, r, err)
	case <-timer.C:
		b.Fatalf("%s, round %d: %d of %d deliveries after %v", s.name, r,
			want-(s.target.Load()-s.delivered.Load()), want, scaleRoundWait)
	}
	d := time.Since(start)
	if r > 0 {
		s.rounds++
		s.busy += d
		for i, n := range s.busBytes() {
			s.received[i] += n - before[i]
		}
	}
	return d
}

func (s *scaleSide) busBytes() []int64 {
	out := make([]int64, len(s.buses))
	for i, b := range s.buses {
		out[i] = b.bytes.Load()
	}
	return out
}

// report reports the side's deliveries/s and the bus bytes its
// instances received per round, on average and at most.
func (s *scaleSide) report(b *testing.B, prefix string) (perSec, perInstance float64) {
	perSec = float64(s.rounds*scaleThreads*scaleSubs*scaleFrames) / s.busy.Seconds()
	b.ReportMetric(perSec, prefix+"deliveries/s")
	if len(s.buses) == 0 || s.rounds == 0 {
		return perSec, 0
	}
	var total, most int64
	for _, n := range s.received {
		total += n
		most = max(most, n)
	}
	perInstance = float64(total) / float64(len(s.received)) / float64(s.rounds)
	b.ReportMetric(perInstance, prefix+"bus-B/inst/round")
	b.ReportMetric(float64(most)/float64(total), prefix+"busiest-share")
	return perSec, perInstance
}

// benchScaleOut alternates rounds of three instances routing by thread,
// three broadcasting, and one instance without a bus, and reports each,
// with routed/broadcast (the bus bytes an instance receives per round,
// routed over broadcast: a third when every thread is served by one
// instance) and routed/one (deliveries/s of the routed cluster over one
// instance's).
func benchScaleOut(b *testing.B, opener func(*testing.B) busOpener) {
	// Each cluster on a channel of its own: a broadcasting one's frames
	// would reach the other's instances too.
	routed := newScaleSide(b, "three instances routing", scaleInstances, opener(b), false)
	broadcast := newScaleSide(b, "three instances broadcasting", scaleInstances, opener(b), true)
	one := newScaleSide(b, "one instance", 1, nil, false)
	sides := []*scaleSide{routed, broadcast, one}
	i := 0
	for b.Loop() {
		for k := range sides {
			s := sides[(i+k)%len(sides)]
			s.round(b, s.rounds+1)
		}
		i++
	}
	routedPerSec, routedBytes := routed.report(b, "routed-")
	_, broadcastBytes := broadcast.report(b, "broadcast-")
	onePerSec, _ := one.report(b, "one-")
	b.ReportMetric(routedBytes/broadcastBytes, "routed/broadcast-bytes")
	b.ReportMetric(routedPerSec/onePerSec, "routed/one")
}

// BenchmarkScaleOut300x10 measures what routing by thread saves each
// instance: 300 threads with 10 live subscribers each, every thread's
// subscribers on one of three instances (100 threads each) and its
// frames written by another, 20 live deltas per thread and round. It
// reports, for three instances routing by thread, three broadcasting,
// and one instance holding every subscriber without a bus: deliveries/s,
// and for the clusters the bus bytes each instance received per round
// (on average) and the busiest instance's share of the cluster's total.
// The redis and postgres sub-benchmarks need TEST_REDIS_URL and
// TEST_DATABASE_URL; they skip without a reachable server.
func BenchmarkScaleOut300x10(b *testing.B) {
	b.Run("redis", func(b *testing.B) { benchScaleOut(b, redisOpener) })
	b.Run("postgres", func(b *testing.B) { benchScaleOut(b, postgresOpener) })
}
