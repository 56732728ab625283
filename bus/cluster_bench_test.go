package bus_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/bus/postgres"
	"github.com/threadline/threadline/bus/redis"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
)

// The cross-instance fan-out benchmarks: one thread, clusterSubscribers
// live hub subscriptions, either all on one hub (no bus) or spread evenly
// over three Hub+Cluster pairs in this process that share a real bus.
// Instance A publishes; B and C get the frames from the bus.
//
// Each round is a burst: instance A publishes clusterBurst frames back to
// back, one live text delta per Publish, each as soon as the previous
// Publish returned (Cluster.Publish waits for the bus, as the writer's
// drain does), then waits until every subscriber has every frame. So
// deliveries/s is what the path sustains, and a frame's latency
// (receive − publish) includes its wait behind the earlier frames of its
// burst, on both sides alike.
const (
	clusterSubscribers = 1000
	clusterInstances   = 3
	clusterBurst       = 200
	clusterThread      = "thread_bench"
	clusterRun         = "run_8f3a2c1d9e"
	// clusterRoundWait bounds one round, clusterSetupWait each wait of
	// the setup (listeners up, subscribers gone): a stuck bus fails the
	// benchmark instead of hanging it.
	clusterRoundWait = 30 * time.Second
	clusterSetupWait = 15 * time.Second
)

// clusterTexts are the deltas' texts by position in the burst: "chunk 12. ".
// A subscriber checks each frame it gets against the one due next, which
// catches a lost, duplicated or reordered frame.
var clusterTexts = func() []string {
	t := make([]string, clusterBurst)
	for i := range t {
		t[i] = fmt.Sprintf("chunk %d. ", i)
	}
	return t
}()

// clusterFrame is the i-th delta of a burst, built as the writer builds
// a live frame (json.Marshal, then EncodedFrame; seq 0 for a delta): 164
// bytes of JSON, a new response per round.
func clusterFrame(tb testing.TB, responseID string, i int) instanceai.Frame {
	f, err := instanceai.NewFrame(0, &instanceai.Event{
		Type: instanceai.TypeTextDelta, RunID: clusterRun, AgentID: instanceai.OrchestratorAgentID(clusterRun),
		ResponseID: responseID, TS: time.Now().UnixMilli(),
		Payload: &instanceai.Text{Text: clusterTexts[i]},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// fanoutSide is one arrangement (one hub, or three instances on a bus)
// with its subscribers attached.
type fanoutSide struct {
	name     string
	hubs     []*instanceai.Hub
	clusters []*instanceai.Cluster // nil for the one-hub side
	publish  func(threadID string, frames []instanceai.Frame)
	// Clock: publish and receive times are nanoseconds since base, on the
	// monotonic clock. pubAt[i] is when the current round's frame i went
	// to Publish; atomic because it reaches the other instances' goroutines
	// through a socket, which orders nothing for the memory model.
	base  time.Time
	pubAt [clusterBurst]atomic.Int64

	subs      []*fanoutSub
	delivered atomic.Int64 // deliveries of every round so far
	target    atomic.Int64 // delivered once the current round is complete
	perInst   []atomic.Int64
	done      chan struct{}
	failed    chan error // first failure: a drop, a wrong frame, a bus warning
	drops     atomic.Int64

	rounds int           // measured rounds so far (the warm-up is not one)
	busy   time.Duration // their total time

	cancel context.CancelFunc
	wg     sync.WaitGroup // subscriber goroutines
}

type fanoutSub struct {
	inst int
	n    int      // frames received so far, warm-up included
	lat  *latHist // latencies of the measured rounds
}

// latHist is a latency histogram in nanoseconds with 64 buckets per power
// of two (values within 1.6 %), allocated once so that recording allocates
// nothing: the measurement adds no garbage of its own to the fan-out.
type latHist [latBuckets]uint32

const (
	latSub     = 6 // log2 of the buckets per power of two
	latMax     = 1<<40 - 1
	latBuckets = (40 - latSub + 1) << latSub
)

func (h *latHist) add(ns int64) {
	v := uint64(min(max(ns, 0), latMax))
	if v < 1<<latSub {
		h[v]++
		return
	}
	e := bits.Len64(v) - 1 - latSub // v>>e is in [64, 128)
	h[(e+1)<<latSub+int(v>>e)-1<<latSub]++
}

// latMid is the middle of bucket i, in ns.
func latMid(i int) float64 {
	if i < 1<<latSub {
		return float64(i)
	}
	e := i>>latSub - 1
	lo := uint64(i&(1<<latSub-1)+1<<latSub) << e
	return float64(lo) + float64(uint64(1)<<e)/2
}

func newFanoutSide(name string, instances int) *fanoutSide {
	s := &fanoutSide{
		name:    name,
		base:    time.Now(),
		perInst: make([]atomic.Int64, instances),
		done:    make(chan struct{}, 1),
		failed:  make(chan error, 1),
	}
	for range instances {
		// Every subscriber can hold a whole burst: a round ends only once
		// every queue is empty, so none can overflow.
		s.hubs = append(s.hubs, instanceai.NewHub(4*clusterBurst))
	}
	return s
}

func (s *fanoutSide) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// subscribe attaches clusterSubscribers subscriptions, round-robin over the
// hubs, each drained by its own goroutine as an SSE handler drains its own.
func (s *fanoutSide) subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for i := range clusterSubscribers {
		fs := &fanoutSub{inst: i % len(s.hubs), lat: new(latHist)}
		s.subs = append(s.subs, fs)
		sub, _ := s.hubs[fs.inst].Subscribe(clusterThread)
		s.wg.Go(func() {
			defer sub.Close()
			s.drain(ctx, sub, i, fs)
		})
	}
}

func (s *fanoutSide) drain(ctx context.Context, sub *instanceai.Subscription, i int, fs *fanoutSub) {
	for {
		frames, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.drops.Add(1)
				s.fail(fmt.Errorf("subscriber %d on instance %d ended after %d frames: %w", i, fs.inst, fs.n, err))
			}
			return
		}
		now := time.Since(s.base).Nanoseconds()
		for k := range frames {
			pos := fs.n % clusterBurst
			text, _ := frames[k].Event.Payload.(*instanceai.Text)
			if text == nil || text.Text != clusterTexts[pos] {
				s.fail(fmt.Errorf("subscriber %d on instance %d: frame %d is %s, want the delta %q",
					i, fs.inst, fs.n, frames[k].Data, clusterTexts[pos]))
				return
			}
			if fs.n >= clusterBurst { // the first burst is the warm-up
				fs.lat.add(now - s.pubAt[pos].Load())
			}
			fs.n++
		}
		// Recorded before counted: the round's waiter reads lat after this.
		s.perInst[fs.inst].Add(int64(len(frames)))
		if s.delivered.Add(int64(len(frames))) == s.target.Load() {
			s.done <- struct{}{}
		}
	}
}

// round publishes one burst from instance A and waits until every
// subscriber has it; it returns the time from the first publish to the
// last delivery.
func (s *fanoutSide) round(b *testing.B, r int) time.Duration {
	want := int64(clusterSubscribers * clusterBurst)
	s.target.Store(s.delivered.Load() + want)
	responseID := fmt.Sprintf("resp_%06d", r)
	start := time.Now()
	for i := range clusterBurst {
		f := clusterFrame(b, responseID, i)
		s.pubAt[i].Store(time.Since(s.base).Nanoseconds())
		s.publish(clusterThread, []instanceai.Frame{f})
	}
	timer := time.NewTimer(clusterRoundWait)
	defer timer.Stop()
	select {
	case <-s.done:
	case err := <-s.failed:
		b.Fatalf("%s, round %d: %v (%d subscribers dropped)", s.name, r, err, s.drops.Load())
	case <-timer.C:
		b.Fatalf("%s, round %d: %d of %d deliveries after %v; %s",
			s.name, r, want-(s.target.Load()-s.delivered.Load()), want, clusterRoundWait, s.status())
	}
	if n := s.drops.Load(); n > 0 {
		b.Fatalf("%s, round %d: %d subscribers dropped", s.name, r, n)
	}
	return time.Since(start)
}

// status says how far each instance got, for a failure message.
func (s *fanoutSide) status() string {
	var parts []string
	for i := range s.perInst {
		p := fmt.Sprintf("instance %d: %d deliveries", i, s.perInst[i].Load())
		if s.clusters != nil {
			p += fmt.Sprintf(", bus up %v", s.clusters[i].Up())
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// warmUp runs one unmeasured round: every subscriber is parked, every
// listener hears instance A, and the connections are warm.
func (s *fanoutSide) warmUp(b *testing.B) { s.round(b, 0) }

// measure runs one measured round.
func (s *fanoutSide) measure(b *testing.B) time.Duration {
	s.rounds++
	d := s.round(b, s.rounds)
	s.busy += d
	return d
}

// stats are the side's figures over its measured rounds; call it after
// the last round (the waits order the subscribers' writes before it).
func (s *fanoutSide) stats() (perSec, p50, p99 float64) {
	var all [latBuckets]uint64
	var n uint64
	for _, fs := range s.subs {
		for i, c := range fs.lat {
			all[i] += uint64(c)
			n += uint64(c)
		}
	}
	if n == 0 || s.busy <= 0 {
		return 0, 0, 0
	}
	// at is the q-quantile in µs: the bucket holding the rank-th latency.
	at := func(q float64) float64 {
		rank := uint64(q * float64(n))
		var seen uint64
		for i, c := range all {
			if seen += c; seen > rank {
				return latMid(i) / 1e3
			}
		}
		return latMid(latBuckets-1) / 1e3
	}
	return float64(s.rounds*clusterSubscribers*clusterBurst) / s.busy.Seconds(), at(0.50), at(0.99)
}

// close ends the subscribers and waits for them, with a deadline.
func (s *fanoutSide) close(tb testing.TB) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	waitGroup(tb, &s.wg, s.name+": subscriber goroutines")
}

func waitGroup(tb testing.TB, wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(clusterSetupWait):
		tb.Errorf("%s did not end within %v", what, clusterSetupWait)
	}
}

// oneInstance is the baseline: every subscriber on one hub, no bus.
func oneInstance(b *testing.B) *fanoutSide {
	s := newFanoutSide("one instance", 1)
	s.publish = s.hubs[0].Publish
	s.subscribe()
	b.Cleanup(func() { s.close(b) })
	s.warmUp(b)
	return s
}

// busOpener opens one instance's bus; every call of one opener shares a
// channel of its own.
type busOpener func(ctx context.Context) (instanceai.Bus, error)

// threeInstances is three Hub+Cluster pairs joined by the buses open
// returns, their listeners running and subscribed.
func threeInstances(b *testing.B, transport string, open busOpener) *fanoutSide {
	s := newFanoutSide("three instances on "+transport, clusterInstances)
	var (
		runWG sync.WaitGroup
		buses []instanceai.Bus
	)
	runCtx, stopRun := context.WithCancel(context.Background())
	b.Cleanup(func() {
		s.close(b)
		stopRun()
		for _, bus := range buses {
			_ = bus.Close()
		}
		waitGroup(b, &runWG, s.name+": Cluster.Run")
	})
	octx, cancel := context.WithTimeout(context.Background(), clusterSetupWait)
	defer cancel()
	runErr := make(chan error, clusterInstances)
	logger := slog.New(&failHandler{fail: s.fail})
	for i, hub := range s.hubs {
		bus, err := open(octx)
		if err != nil {
			if os.Getenv("CI") == "true" {
				b.Fatalf("%s is not reachable: %v", transport, err)
			}
			b.Skipf("%s is not reachable, skipping: %v", transport, err)
		}
		buses = append(buses, bus)
		cl := instanceai.NewCluster(bus, hub, instanceai.ClusterConfig{
			Instance: fmt.Sprintf("bench-%c", 'a'+i), Logger: logger})
		s.clusters = append(s.clusters, cl)
		runWG.Go(func() {
			if err := cl.Run(runCtx); err != nil && runCtx.Err() == nil {
				runErr <- fmt.Errorf("instance %d: Cluster.Run: %w", i, err)
			}
		})
	}
	// Cluster.Up turns true once the listener is subscribed (SUBSCRIBE
	// confirmed, LISTEN done): from then on it hears every publish.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !allUp(s.clusters) {
		select {
		case err := <-runErr:
			b.Fatal(err)
		case err := <-s.failed:
			b.Fatal(err)
		case <-octx.Done():
			b.Fatalf("%s: listeners not up within %v; %s", s.name, clusterSetupWait, s.status())
		case <-tick.C:
		}
	}
	s.publish = s.clusters[0].Publish
	s.subscribe()
	// On a bus that routes by thread, each instance follows the thread
	// once its hub has a subscriber: the bus must have confirmed it
	// before the first round, or that round's frames are not heard.
	waitFollows(b, func() string {
		for _, c := range s.clusters {
			if !c.Follows(clusterThread) {
				return clusterThread
			}
		}
		return ""
	}, runErr, s.failed)
	s.warmUp(b)
	return s
}

// waitFollows waits until pending, which names a thread some instance
// does not follow yet, returns "".
func waitFollows(b *testing.B, pending func() string, errs ...<-chan error) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterSetupWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		thread := pending()
		if thread == "" {
			return
		}
		select {
		case err := <-errs[0]:
			b.Fatal(err)
		case err := <-errs[1]:
			b.Fatal(err)
		case <-ctx.Done():
			b.Fatalf("thread %s not followed within %v", thread, clusterSetupWait)
		case <-tick.C:
		}
	}
}

func allUp(cs []*instanceai.Cluster) bool {
	for _, c := range cs {
		if !c.Up() {
			return false
		}
	}
	return true
}

// failHandler turns every warning a Cluster logs (a failed publish, a lost
// connection, a frame that does not decode) into the side's failure: any
// of them makes the figures meaningless. Lower levels are dropped.
type failHandler struct{ fail func(error) }

func (h *failHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *failHandler) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	h.fail(errors.New("cluster: " + msg))
	return nil
}

func (h *failHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *failHandler) WithGroup(string) slog.Handler      { return h }

func randomSuffix(tb testing.TB) string {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(rnd[:])
}

// redisOpener opens buses on TEST_REDIS_URL, on a fresh channel.
func redisOpener(b *testing.B) busOpener {
	u, err := url.Parse(testredis.URL(b))
	if err != nil {
		b.Fatalf("TEST_REDIS_URL: %v", err)
	}
	q := u.Query()
	q.Set("channel", "threadline-bench-"+randomSuffix(b))
	u.RawQuery = q.Encode()
	spec := u.String()
	return func(ctx context.Context) (instanceai.Bus, error) { return redis.Open(ctx, spec) }
}

// postgresOpener opens buses on TEST_DATABASE_URL, on a fresh channel.
func postgresOpener(b *testing.B) busOpener {
	dsn := testpg.BaseDSN(b)
	channel := "threadline_bench_" + randomSuffix(b)
	return func(ctx context.Context) (instanceai.Bus, error) { return postgres.Open(ctx, dsn, channel) }
}

func reportSide(b *testing.B, prefix string, s *fanoutSide) (perSec, p99 float64) {
	perSec, p50, p99 := s.stats()
	b.ReportMetric(perSec, prefix+"deliveries/s")
	b.ReportMetric(p50, prefix+"p50-us")
	b.ReportMetric(p99, prefix+"p99-us")
	return perSec, p99
}

func benchSide(b *testing.B, s *fanoutSide) {
	for b.Loop() {
		s.measure(b)
	}
	reportSide(b, "", s)
}

// benchRatio alternates rounds of one instance and of three (which goes
// first swaps every iteration) and reports both and their ratios:
// three/one is three-instance deliveries/s over one-instance deliveries/s,
// p99-three/one the three-instance p99 over the one-instance p99.
func benchRatio(b *testing.B, transport string, open busOpener) {
	three := threeInstances(b, transport, open)
	one := oneInstance(b)
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			one.measure(b)
			three.measure(b)
		} else {
			three.measure(b)
			one.measure(b)
		}
		i++
	}
	onePerSec, oneP99 := reportSide(b, "one-", one)
	threePerSec, threeP99 := reportSide(b, "three-", three)
	b.ReportMetric(threePerSec/onePerSec, "three/one")
	b.ReportMetric(threeP99/oneP99, "p99-three/one")
}

// BenchmarkClusterFanout1x1000 measures cross-instance live fan-out: one
// thread, 1,000 hub subscribers spread over three instances joined by a
// real bus, against the same 1,000 on one instance without a bus, in the
// same run. Each reports deliveries/s and publish→receive latency p50/p99
// in µs. Sub-benchmarks: one-instance; redis/three-instances and
// postgres/three-instances (Redis pub/sub, PostgreSQL LISTEN/NOTIFY); and
// redis/ratio and postgres/ratio, which alternate rounds of both and
// report three/one (deliveries/s) and p99-three/one. The Redis ones need
// TEST_REDIS_URL, the PostgreSQL ones TEST_DATABASE_URL; without them, or
// with a server that does not answer, they skip (unless CI=true).
func BenchmarkClusterFanout1x1000(b *testing.B) {
	b.Run("one-instance", func(b *testing.B) { benchSide(b, oneInstance(b)) })
	for _, tr := range []struct {
		name   string
		opener func(*testing.B) busOpener
	}{
		{"redis", redisOpener},
		{"postgres", postgresOpener},
	} {
		b.Run(tr.name+"/three-instances", func(b *testing.B) {
			benchSide(b, threeInstances(b, tr.name, tr.opener(b)))
		})
		b.Run(tr.name+"/ratio", func(b *testing.B) { benchRatio(b, tr.name, tr.opener(b)) })
	}
}
