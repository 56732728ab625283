package instanceai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadline/threadline/internal/tracing"
)

// DefaultPollInterval is how often an instance checks the log's head of
// the threads it streams that went quiet (see Cluster).
const DefaultPollInterval = time.Second

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	// Instance is this process's id; messages it published itself are
	// ignored when they come back.
	Instance string
	// PollInterval is the head check's period (default 1 s).
	PollInterval time.Duration
	// Log is the shared log the head check reads. Without it, a frame the
	// bus lost reaches this instance's subscribers only with the thread's
	// next stored frame.
	Log    EventLog
	Logger *slog.Logger
	// Broadcast sends every thread's frames to every instance even on a
	// bus that routes by topic (see RoutedBus): for a cluster whose
	// instances do not all route yet, during a rolling upgrade.
	Broadcast bool
	// Observer, when it is a BusObserver, is told each received
	// message's lag.
	Observer Observer
}

// Cluster joins this process's hub and run registry to the other instances
// through a Bus. Frames the writer commits go to the local hub at once and
// to the bus; frames from other instances go into the local hub as if
// written here. Control messages reach the run registry.
//
// The bus may lose anything, so the log stays the source of truth:
//   - the writer never waits for the bus: frames go to the local hub, then
//     into a bounded queue that one goroutine sends in order; a publish that
//     fails, or a full queue, marks the thread, and once the bus takes
//     messages again (tried every retryInterval) the other instances are
//     told to read the thread from the log (a resync notice);
//   - durable frames carry their seq, so a subscriber that sees a gap reads
//     the missing rows from the log;
//   - and the head check: every PollInterval, for each thread with
//     subscribers here that has been quiet for as long, or whose stored
//     frames came with a gap, this instance reads the thread's head in the
//     log and publishes into its hub the rows its bus did not deliver. That covers what no later frame reveals (a run's
//     last frames), whatever link lost them: this instance's, the writer's,
//     or the bus as a whole, and a deleted thread's subscribers are ended.
//     A reconnection of the listener and a resync notice run it at once.
//
// What arrives late (a held-back bus delivering frames the head check
// already published) is harmless: stored frames are deduplicated by seq,
// and deltas by their place in their segment (see segmentLedger).
//
// Four machines do the work, each owning its state: the sender (the way
// out), the receiver (the way in), the head check, and, on a bus that
// routes by topic, the router.
type Cluster struct {
	bus      Bus
	hub      *Hub
	cfg      ClusterConfig
	listener listenerState
	sender   *busSender
	receiver *busReceiver
	heads    *headCheck
	router   *busRouter // nil: frames travel to every instance
}

// listenerState is the bus listener's connection as it last reported it.
type listenerState struct {
	up     atomic.Bool
	everUp atomic.Bool // set once the listener first connected

	mu      sync.Mutex
	downErr error // why the listener last lost its connection
}

// set records the listener's report and returns whether it was up before.
func (l *listenerState) set(up bool, err error) (was bool) {
	if !up {
		l.mu.Lock()
		l.downErr = err
		l.mu.Unlock()
	}
	was = l.up.Swap(up)
	if up {
		l.everUp.Store(true)
	}
	return was
}

func (l *listenerState) lastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.downErr
}

// NewCluster returns a cluster on bus feeding hub.
func NewCluster(bus Bus, hub *Hub, cfg ClusterConfig) *Cluster {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cluster{bus: bus, hub: hub, cfg: cfg}
	c.heads = newHeadCheck(hub, cfg.Log, cfg.PollInterval, cfg.Logger)
	lag, _ := cfg.Observer.(BusObserver)
	c.receiver = newBusReceiver(cfg.Instance, hub, c.heads, lag, cfg.Logger)
	var routed RoutedBus
	if rb, ok := bus.(RoutedBus); ok && !cfg.Broadcast {
		routed = rb
		c.router = newBusRouter(rb, hub, c.heads, cfg.Logger)
	}
	c.sender = newBusSender(bus, routed, hub, cfg.Instance, cfg.Logger)
	return c
}

// HoldDeltas has the sender drop the text and reasoning deltas it still
// holds while held reports true: the writer checked its leases when it
// published them, but a process paused past its lease (a stop, a long
// stall) sends them after another instance may have settled their runs,
// and a client elsewhere would be shown text that settlement does not
// hold. Their text reaches the others in its block, as with the writer's
// own hold. Call it before Run.
func (c *Cluster) HoldDeltas(held func() bool) { c.sender.deltasHeld = held }

// Routed reports whether frames travel only to the instances that serve
// their thread.
func (c *Cluster) Routed() bool { return c.router != nil }

// AwaitFollow waits until the bus confirmed that this instance follows
// the thread (see Follows), or ctx ends. The hub must watch the thread.
func (c *Cluster) AwaitFollow(ctx context.Context, threadID string) error {
	if c.router == nil {
		return nil
	}
	return c.router.awaitFollow(ctx, threadID)
}

// Follows reports whether the bus confirmed that this instance receives
// the thread's frames from the others (always true when not routed, once
// the listener is up).
func (c *Cluster) Follows(threadID string) bool {
	if c.router == nil {
		return c.Up()
	}
	return c.router.follows(threadID)
}

// Attach gives the cluster the run registry its control messages are for.
// Call it before Run.
func (c *Cluster) Attach(runs *Runs) { c.receiver.runs = runs }

// Up reports whether the bus listener is connected.
func (c *Cluster) Up() bool { return c.listener.up.Load() }

// Check reports why the bus does not work now, for a readiness probe: its
// listener is not connected (not yet, or lost), or the last publish
// failed. It asks nothing of the bus itself: the listener proves its
// connection by its own round trips (a Redis PING, a PostgreSQL health
// query) when the bus is quiet, and reports a loss within their timeouts.
func (c *Cluster) Check() error {
	up, everUp := c.listener.up.Load(), c.listener.everUp.Load()
	switch downErr := c.listener.lastErr(); {
	case !up && !everUp:
		return errors.New("bus listener not connected yet")
	case !up && downErr != nil:
		return fmt.Errorf("bus listener disconnected: %w", downErr)
	case !up:
		return errors.New("bus listener disconnected")
	case c.sender.isFailing():
		return errors.New("bus publishes fail")
	}
	return nil
}

// Lost reports whether the bus listener was connected and is not now:
// this instance may no longer reach the others over the bus, nor they it.
func (c *Cluster) Lost() bool { return c.listener.everUp.Load() && !c.listener.up.Load() }

// Publish implements Publisher: the local hub first, then the bus, which
// the writer does not wait for (see Cluster).
func (c *Cluster) Publish(threadID string, frames []Frame) {
	c.PublishContext(context.Background(), threadID, frames)
}

// PublishContext is Publish that carries ctx's trace context in the bus
// messages, for the receivers' spans to link to.
func (c *Cluster) PublishContext(ctx context.Context, threadID string, frames []Frame) {
	c.hub.Publish(threadID, frames)
	if len(frames) == 0 {
		return
	}
	msgs := packMessages(threadID, frames, c.bus.MaxPayload())
	if tp := tracing.Traceparent(ctx); tp != "" {
		for i := range msgs {
			msgs[i].Trace = tp
		}
	}
	c.sender.enqueue(msgs...)
}

// SendControl implements Controller. The database holds what the control
// asks for (see Runs); the message only makes its owner act at once.
func (c *Cluster) SendControl(ctl Control) {
	c.sender.enqueue(busMessage{Thread: ctl.ThreadID, Ctl: &ctl})
}

// Run sends and listens until ctx ends, with the head check beside them.
func (c *Cluster) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.sender.run(ctx) })
	wg.Go(func() { c.receiver.run(ctx) })
	wg.Go(func() { c.heads.run(ctx) })
	if c.router != nil {
		wg.Go(func() { c.router.run(ctx) })
	}
	return c.bus.Listen(ctx, c.receiver.deliver, c.state)
}

// state is the listener's report of its connection.
func (c *Cluster) state(up bool, err error) {
	was := c.listener.set(up, err)
	switch {
	case up:
		if !was {
			c.cfg.Logger.Info("bus connected")
			// What the other instances published while the listener was
			// away is gone: no run so far was heard whole here.
			c.hub.Unhear()
		}
		// What was published while the listener was away is gone.
		c.heads.requestAll()
	case was:
		c.cfg.Logger.Warn("bus connection lost; the head check reads the log until it is back",
			"err", err, "poll", c.cfg.PollInterval)
	}
}

// notify signals ch, a channel of capacity one that a loop waits on,
// without waiting: a signal already pending covers this one.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
