package instanceai_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/threadline/threadline/instanceai"
)

// The fan-out benchmarks: one thread, fanoutSubscribers live subscribers,
// fanoutRound frames per round; each subscriber frames every delivery as SSE
// into io.Discard, the work a connection does short of the socket.
const (
	fanoutSubscribers = 1000
	fanoutRound       = 100
)

// fanoutEvent is a typical live frame: a tool call of about 200 bytes.
func fanoutEvent(tb testing.TB) instanceai.Frame {
	f, err := instanceai.NewFrame(1, &instanceai.Event{Type: instanceai.TypeToolCall, RunID: "run_0123456789abcdef",
		AgentID: "orchestrator-run_0123456789abcdef", UserID: "u", TS: 1796000000000,
		Payload: &instanceai.ToolCall{ToolCallID: "tc_1", ToolName: "workflows", Args: []byte(`{"action":"list","limit":10}`)}})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// fanout is one provider with its subscribers attached.
type fanout interface {
	// round publishes fanoutRound frames and returns once every subscriber
	// has written all of them.
	round(tb testing.TB)
	close()
}

// counter signals when the deliveries of a round are complete.
type counter struct {
	delivered atomic.Int64
	target    atomic.Int64
	done      chan struct{}
}

func newCounter() *counter { return &counter{done: make(chan struct{}, 1)} }

func (c *counter) add(n int64) {
	if c.delivered.Add(n) == c.target.Load() {
		c.done <- struct{}{}
	}
}

func (c *counter) expect(n int64) { c.target.Store(c.delivered.Load() + n) }

func (c *counter) wait(tb testing.TB) {
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		tb.Fatal("deliveries did not complete")
	}
}

// writeFrame does what an SSE handler does with a hub frame.
func writeFrame(w io.Writer, f *instanceai.Frame) {
	_, _ = w.Write([]byte("id: 1\n"))
	_, _ = w.Write(f.Wire)
}

// hubFanout is the hub: each subscriber drains its queue in its own
// goroutine, as each SSE handler does.
type hubFanout struct {
	// batched publishes a round as one batch, as the writer does with the
	// frames of one commit; otherwise one Publish per frame.
	batched bool
	hub     *instanceai.Hub
	frame   instanceai.Frame
	seq     int64
	count   *counter
	cancel  context.CancelFunc
}

func newHubFanout(tb testing.TB, batched bool) *hubFanout {
	return newHubFanoutStalled(tb, batched, false)
}

// newHubFanoutStalled is newHubFanout with, when stalled is set, one more
// subscriber that never takes a frame: a client whose socket no longer
// drains. Its queue is large enough that it is not dropped during a
// benchmark, so the others run beside it throughout.
func newHubFanoutStalled(tb testing.TB, batched, stalled bool) *hubFanout {
	ctx, cancel := context.WithCancel(context.Background())
	h := &hubFanout{batched: batched, hub: instanceai.NewHub(1 << 24), frame: fanoutEvent(tb), count: newCounter(), cancel: cancel}
	if stalled {
		sub, _ := h.hub.Subscribe("t")
		go func() {
			<-ctx.Done()
			sub.Close()
		}()
	}
	for range fanoutSubscribers {
		sub, _ := h.hub.Subscribe("t")
		go func() {
			defer sub.Close()
			for {
				frames, err := sub.Next(ctx)
				if err != nil {
					return
				}
				for i := range frames {
					writeFrame(io.Discard, &frames[i])
				}
				h.count.add(int64(len(frames)))
			}
		}()
	}
	return h
}

func (h *hubFanout) round(tb testing.TB) {
	h.count.expect(fanoutSubscribers * fanoutRound)
	batch := make([]instanceai.Frame, 0, fanoutRound)
	for range fanoutRound {
		h.seq++
		f := h.frame
		f.Seq = h.seq
		if !h.batched {
			h.hub.Publish("t", []instanceai.Frame{f})
			continue
		}
		batch = append(batch, f)
	}
	if h.batched {
		h.hub.Publish("t", batch)
	}
	h.count.wait(tb)
}

func (h *hubFanout) close() { h.cancel() }

// joeClient is a go-sse MessageWriter doing the same framing work.
type joeClient struct{ count *counter }

func (c joeClient) Send(m *sse.Message) error {
	_, _ = m.WriteTo(io.Discard)
	c.count.add(1)
	return nil
}

func (joeClient) Flush() error { return nil }

// joeFanout is go-sse's own provider, Joe, whose one loop writes every
// message to every subscriber in turn.
type joeFanout struct {
	joe    *sse.Joe
	msg    *sse.Message
	count  *counter
	cancel context.CancelFunc
}

func newJoeFanout(tb testing.TB) *joeFanout {
	ctx, cancel := context.WithCancel(context.Background())
	frame := fanoutEvent(tb)
	j := &joeFanout{joe: &sse.Joe{}, msg: &sse.Message{ID: sse.ID("1")}, count: newCounter(), cancel: cancel}
	j.msg.AppendData(string(frame.Data))
	registered := make([]atomic.Bool, fanoutSubscribers)
	for i := range fanoutSubscribers {
		go func() {
			_ = j.joe.Subscribe(ctx, sse.Subscription{Client: warmClient{&registered[i], j.count}, Topics: []string{"t"}})
		}()
	}
	// Joe has no subscriber count: a subscription is registered once a
	// warm-up message reaches it.
	for {
		all := true
		for i := range registered {
			all = all && registered[i].Load()
		}
		if all {
			break
		}
		_ = j.joe.Publish(j.msg, []string{"t"})
		time.Sleep(2 * time.Millisecond)
	}
	// Let queued warm-up messages drain before counting rounds.
	for prev := int64(-1); prev != j.count.delivered.Load(); {
		prev = j.count.delivered.Load()
		time.Sleep(20 * time.Millisecond)
	}
	return j
}

// warmClient marks its subscription registered on first delivery.
type warmClient struct {
	seen  *atomic.Bool
	count *counter
}

func (c warmClient) Send(m *sse.Message) error {
	c.seen.Store(true)
	return joeClient{c.count}.Send(m)
}

func (warmClient) Flush() error { return nil }

func (j *joeFanout) round(tb testing.TB) {
	j.count.expect(fanoutSubscribers * fanoutRound)
	for range fanoutRound {
		_ = j.joe.Publish(j.msg, []string{"t"})
	}
	j.count.wait(tb)
}

func (j *joeFanout) close() {
	j.cancel()
	_ = j.joe.Shutdown(context.Background())
}

func benchFanout(b *testing.B, f fanout) {
	defer f.close()
	rounds := 0
	for b.Loop() {
		f.round(b)
		rounds++
	}
	b.ReportMetric(float64(rounds*fanoutRound*fanoutSubscribers)/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkFanout1x1000 compares the hub with go-sse's Joe in the same run:
// one thread, 1,000 subscribers, deliveries per second. Sub-benchmarks:
// hub (one Publish per frame), hub-batched (a round's frames in one Publish,
// as the writer publishes a commit), joe; ratio and ratio-batched alternate
// rounds of hub and joe and report hub/joe.
func BenchmarkFanout1x1000(b *testing.B) {
	b.Run("hub", func(b *testing.B) { benchFanout(b, newHubFanout(b, false)) })
	b.Run("hub-batched", func(b *testing.B) { benchFanout(b, newHubFanout(b, true)) })
	b.Run("joe", func(b *testing.B) { benchFanout(b, newJoeFanout(b)) })
	b.Run("ratio", func(b *testing.B) { benchFanoutRatio(b, false) })
	b.Run("ratio-batched", func(b *testing.B) { benchFanoutRatio(b, true) })
}

// BenchmarkFanoutStalled1x1000 measures the isolation of subscribers: the
// same 1,000 subscribers' deliveries per second with and without one more
// subscriber that never reads, rounds alternating in one loop; stalled/clean
// is the throughput the others keep (1.0 = none lost). Joe has no row: a
// client that does not return from Send stops its one loop, and every
// subscriber with it.
func BenchmarkFanoutStalled1x1000(b *testing.B) {
	b.Run("per-frame", func(b *testing.B) { benchStalledRatio(b, false) })
	b.Run("batched", func(b *testing.B) { benchStalledRatio(b, true) })
}

func benchStalledRatio(b *testing.B, batched bool) {
	clean, stalled := newHubFanoutStalled(b, batched, false), newHubFanoutStalled(b, batched, true)
	defer clean.close()
	defer stalled.close()
	rounds, cleanTime, stalledTime := alternate(b, clean, stalled)
	deliveries := float64(rounds * fanoutRound * fanoutSubscribers)
	b.ReportMetric(deliveries/cleanTime.Seconds(), "clean-deliveries/s")
	b.ReportMetric(deliveries/stalledTime.Seconds(), "stalled-deliveries/s")
	b.ReportMetric(cleanTime.Seconds()/stalledTime.Seconds(), "stalled/clean")
}

// alternate runs rounds of a and b in turn, each first every other
// iteration, and returns the rounds each ran and the time each took.
func alternate(tb *testing.B, a, b fanout) (rounds int, aTime, bTime time.Duration) {
	timed := func(d *time.Duration, f fanout) {
		t0 := time.Now()
		f.round(tb)
		*d += time.Since(t0)
	}
	i := 0
	for tb.Loop() {
		if i%2 == 0 {
			timed(&aTime, a)
			timed(&bTime, b)
		} else {
			timed(&bTime, b)
			timed(&aTime, a)
		}
		i++
	}
	return i, aTime, bTime
}

func benchFanoutRatio(b *testing.B, batched bool) {
	hub, joe := newHubFanout(b, batched), newJoeFanout(b)
	defer hub.close()
	defer joe.close()
	rounds, hubTime, joeTime := alternate(b, hub, joe)
	deliveries := float64(rounds * fanoutRound * fanoutSubscribers)
	b.ReportMetric(deliveries/hubTime.Seconds(), "hub-deliveries/s")
	b.ReportMetric(deliveries/joeTime.Seconds(), "joe-deliveries/s")
	b.ReportMetric(joeTime.Seconds()/hubTime.Seconds(), "hub/joe")
}
