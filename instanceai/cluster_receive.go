package instanceai

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/internal/tracing"
)

// maxInbound bounds the bytes of bus messages received and not yet
// handed to the hub: past it, a message is dropped and its thread read
// from the log instead, as for a message the bus lost.
const maxInbound = 16 << 20

// busReceiver is the cluster's way in: the bus listener queues what it
// receives, and one goroutine hands the frames to the hub as if written
// here, the controls to the run registry, and the resync notices to the
// head check.
type busReceiver struct {
	instance string
	// self is how a message this instance published begins, so that one
	// that comes back is dropped without decoding it.
	self   []byte
	logger *slog.Logger
	hub    *Hub
	runs   *Runs // nil until Cluster.Attach
	heads  *headCheck
	// lag is told each received frame message's lag (nil: not measured).
	lag BusObserver
	// toHub is hub.Publish for what arrives from the bus (tests watch it).
	toHub func(threadID string, frames []Frame)

	mu sync.Mutex
	// queue are the messages received and not yet handled, queueBytes
	// their size; dropped is set when one did not fit; wake signals the
	// receiving goroutine.
	queue      [][]byte
	queueBytes int
	dropped    bool
	wake       chan struct{}
}

func newBusReceiver(instance string, hub *Hub, heads *headCheck, lag BusObserver, logger *slog.Logger) *busReceiver {
	origin, _ := json.Marshal(instance)
	return &busReceiver{instance: instance, self: append(append([]byte(`{"o":`), origin...), ','),
		logger: logger, hub: hub, heads: heads, lag: lag, toHub: hub.Publish, wake: make(chan struct{}, 1)}
}

// deliver takes one message from the bus listener. It only queues it: the
// receiver hands what is queued to the hub in one pass per wake-up, so
// that a burst that arrives while the hub's subscribers are being woken
// reaches them as one batch per thread, not one per message.
func (r *busReceiver) deliver(payload []byte) {
	if bytes.HasPrefix(payload, r.self) {
		return
	}
	r.mu.Lock()
	if r.queueBytes+len(payload) > maxInbound && len(r.queue) > 0 {
		r.dropped = true
		r.mu.Unlock()
		return
	}
	r.queue = append(r.queue, payload)
	r.queueBytes += len(payload)
	r.mu.Unlock()
	notify(r.wake)
}

// run hands the queued messages to the hub and the run registry until ctx
// ends.
func (r *busReceiver) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		batch, dropped := r.queue, r.dropped
		r.queue, r.queueBytes, r.dropped = nil, 0, false
		r.mu.Unlock()
		if dropped {
			r.logger.Warn("bus messages arrived faster than this instance could take them; reading their threads from the log")
			r.hub.Unhear()
			r.heads.requestAll()
		}
		r.receive(batch)
	}
}

// receive handles a batch of messages in order, except that frames of one
// thread from several messages go to the hub in one Publish: the frames
// of different threads are independent, and each thread's keep their
// order. A control or resync message is a barrier: what came before it is
// published first.
func (r *busReceiver) receive(batch [][]byte) {
	var order []string
	pending := map[string][]Frame{}
	flush := func() {
		for _, t := range order {
			r.toHub(t, pending[t])
		}
		order = order[:0]
		clear(pending)
	}
	for _, payload := range batch {
		var m busMessage
		if err := json.Unmarshal(payload, &m); err != nil {
			r.logger.Warn("ignoring a bus message that does not decode", "err", err, "bytes", len(payload))
			continue
		}
		if m.Origin == r.instance {
			continue
		}
		switch {
		case m.Ctl != nil:
			flush()
			if m.Ctl.Kind == ControlDelete {
				r.hub.Forget(m.Ctl.ThreadID)
			}
			if r.runs != nil {
				r.runs.HandleControl(*m.Ctl)
			}
		case m.Resync:
			flush()
			r.heads.request(m.Thread)
		case len(m.Frames) > 0:
			if r.lag != nil && m.Sent > 0 {
				r.lag.BusLag(max(time.Since(time.UnixMicro(m.Sent)), 0))
			}
			if m.Trace != "" {
				traceReceive(&m)
			}
			frames, ok := pending[m.Thread]
			if !ok {
				order = append(order, m.Thread)
			}
			for _, bf := range m.Frames {
				ev := new(Event)
				if err := json.Unmarshal(bf.Event, ev); err != nil {
					// Frames come from another instance's writer, which
					// encoded them; one that does not decode is a version
					// skew: the head check reads the thread from the log.
					r.logger.Warn("a bus frame does not decode; reading its thread from the log", "thread", m.Thread, "err", err)
					r.heads.request(m.Thread)
					continue
				}
				frames = append(frames, bf.frame(ev))
			}
			pending[m.Thread] = frames
		}
	}
	flush()
}

// traceReceive records a span for frames that arrived over the bus,
// linked to the sender's publish: a link, not a parent, as the receiving
// instance's work is its own (it may serve many streams of the thread).
func traceReceive(m *busMessage) {
	sc := tracing.ParseTraceparent(m.Trace)
	if !sc.IsValid() {
		return
	}
	_, span := tracing.Tracer().Start(context.Background(), "bus.receive",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(trace.Link{SpanContext: sc}),
		trace.WithAttributes(attribute.String("thread.id", m.Thread), attribute.Int("batch.size", len(m.Frames)),
			attribute.String("bus.origin", m.Origin)))
	span.End()
}
