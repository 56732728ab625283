package instanceai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/internal/tracing"
)

// DefaultPollInterval is how often an instance checks the log's head of
// the threads it streams that went quiet (see Cluster).
const DefaultPollInterval = time.Second

// Bus send limits: one publish may take publishTimeout before the bus
// counts as failing; while it fails, a resync notice is tried every
// retryInterval; the queue of messages waiting to be sent holds at most
// maxOutbound bytes.
const (
	publishTimeout = 2 * time.Second
	retryInterval  = 250 * time.Millisecond
	maxOutbound    = 16 << 20
)

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
type Cluster struct {
	bus   Bus
	hub   *Hub
	runs  *Runs
	cfg   ClusterConfig
	heads HeadReader // nil: no head check

	up atomic.Bool
	// everUp is set once the listener first connected.
	everUp atomic.Bool
	// downErr is why the listener last lost its connection (guarded by mu).
	downErr error

	mu sync.Mutex
	// outbound are the messages waiting for the sender, outBytes their
	// size; wake signals the sender.
	outbound []busMessage
	outBytes int
	wake     chan struct{}
	// dirty are threads whose frames could not be published: the other
	// instances are told to re-read them once the bus takes messages again.
	dirty map[string]bool
	// failing is set while publishes fail; the error is logged once per
	// outage.
	failing bool
	// check asks the head check to run now, for the threads in checkNow
	// (all of them when checkAll).
	check    chan struct{}
	checkNow map[string]bool
	checkAll bool

	// routed is the bus when frames go to their thread's topic (nil: to
	// every instance). reroute holds the threads whose following may have
	// to change (see Hub.NotifyWatch), routeWake signals the router, and
	// following is what it follows; the router alone uses following.
	routed    RoutedBus
	batcher   BatchBus // routed, when it sends batches
	reroute   map[string]bool
	routeWake chan struct{}
	following map[string]bool
	// confirmed are the threads whose follow the bus confirmed, and
	// awaiting the AwaitFollow calls waiting for one (guarded by mu).
	confirmed map[string]bool
	awaiting  map[string][]chan struct{}
	// self is how a message this instance published begins, so that one
	// that comes back is dropped without decoding it.
	self []byte

	// inbound are the bus messages received and not yet handled, inBytes
	// their size; inDropped is set when one did not fit; inWake signals
	// the receiver.
	inMu      sync.Mutex
	inbound   [][]byte
	inBytes   int
	inDropped bool
	inWake    chan struct{}
	// toHub is hub.Publish for what arrives from the bus (tests watch it).
	toHub func(threadID string, frames []Frame)
	// deltasHeld, when set and true, keeps queued deltas off the bus (see
	// HoldDeltas).
	deltasHeld func() bool
	// lag is told each received frame message's lag (nil: not measured).
	lag BusObserver
}

// HoldDeltas has the sender drop the text and reasoning deltas it still
// holds while held reports true: the writer checked its leases when it
// published them, but a process paused past its lease (a stop, a long
// stall) sends them after another instance may have settled their runs,
// and a client elsewhere would be shown text that settlement does not
// hold. Their text reaches the others in its block, as with the writer's
// own hold. Call it before Run.
func (c *Cluster) HoldDeltas(held func() bool) { c.deltasHeld = held }

// dropDeltas removes the deltas from msgs' frames, and the frame messages
// left with none.
func dropDeltas(msgs []busMessage) []busMessage {
	out := msgs[:0]
	for _, m := range msgs {
		if len(m.Frames) > 0 {
			m.Frames = slices.DeleteFunc(m.Frames, func(bf busFrame) bool { return bf.delta })
			if len(m.Frames) == 0 {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// HeadReader is implemented by an EventLog that reads the heads of many
// threads at once: the highest committed seq of each existing thread
// among ids (a missing thread is absent from the answer). The cluster's
// head check uses it.
type HeadReader interface {
	Heads(ctx context.Context, threadIDs []string) (map[string]int64, error)
}

// NewCluster returns a cluster on bus feeding hub.
func NewCluster(bus Bus, hub *Hub, cfg ClusterConfig) *Cluster {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cluster{bus: bus, hub: hub, cfg: cfg, dirty: map[string]bool{},
		wake: make(chan struct{}, 1), check: make(chan struct{}, 1), checkNow: map[string]bool{},
		inWake: make(chan struct{}, 1)}
	c.heads, _ = cfg.Log.(HeadReader)
	c.lag, _ = cfg.Observer.(BusObserver)
	c.toHub = hub.Publish
	origin, _ := json.Marshal(cfg.Instance)
	c.self = append(append([]byte(`{"o":`), origin...), ',')
	if rb, ok := bus.(RoutedBus); ok && !cfg.Broadcast {
		c.routed = rb
		c.batcher, _ = bus.(BatchBus)
		c.reroute, c.following, c.confirmed = map[string]bool{}, map[string]bool{}, map[string]bool{}
		c.awaiting = map[string][]chan struct{}{}
		c.routeWake = make(chan struct{}, 1)
		hub.NotifyWatch(c.watchChanged)
	}
	return c
}

// Routed reports whether frames travel only to the instances that serve
// their thread.
func (c *Cluster) Routed() bool { return c.routed != nil }

// AwaitFollow waits until the bus confirmed that this instance follows
// the thread (see Follows), or ctx ends. The hub must watch the thread.
func (c *Cluster) AwaitFollow(ctx context.Context, threadID string) error {
	if c.routed == nil {
		return nil
	}
	c.mu.Lock()
	if c.confirmed[threadID] {
		c.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	c.awaiting[threadID] = append(c.awaiting[threadID], w)
	c.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.awaiting[threadID] = slices.DeleteFunc(c.awaiting[threadID], func(x chan struct{}) bool { return x == w })
		if len(c.awaiting[threadID]) == 0 {
			delete(c.awaiting, threadID)
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Follows reports whether the bus confirmed that this instance receives
// the thread's frames from the others (always true when not routed, once
// the listener is up).
func (c *Cluster) Follows(threadID string) bool {
	if c.routed == nil {
		return c.Up()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.confirmed[threadID]
}

// Attach gives the cluster the run registry its control messages are for.
// Call it before Run.
func (c *Cluster) Attach(runs *Runs) { c.runs = runs }

// Up reports whether the bus listener is connected.
func (c *Cluster) Up() bool { return c.up.Load() }

// Check reports why the bus does not work now, for a readiness probe: its
// listener is not connected (not yet, or lost), or the last publish
// failed. It asks nothing of the bus itself: the listener proves its
// connection by its own round trips (a Redis PING, a PostgreSQL health
// query) when the bus is quiet, and reports a loss within their timeouts.
func (c *Cluster) Check() error {
	c.mu.Lock()
	failing, downErr := c.failing, c.downErr
	c.mu.Unlock()
	switch {
	case !c.up.Load() && !c.everUp.Load():
		return errors.New("bus listener not connected yet")
	case !c.up.Load() && downErr != nil:
		return fmt.Errorf("bus listener disconnected: %w", downErr)
	case !c.up.Load():
		return errors.New("bus listener disconnected")
	case failing:
		return errors.New("bus publishes fail")
	}
	return nil
}

// Lost reports whether the bus listener was connected and is not now:
// this instance may no longer reach the others over the bus, nor they it.
func (c *Cluster) Lost() bool { return c.everUp.Load() && !c.up.Load() }

// busMessage is what travels on the bus, as JSON. Exactly one of Frames,
// Resync and Control is set.
type busMessage struct {
	Origin string `json:"o"`
	Thread string `json:"t,omitempty"`
	// Frames are committed frames of Thread, in commit order.
	Frames []busFrame `json:"f,omitempty"`
	// Resync: frames of Thread were committed that this message does not
	// carry (too large for the bus, or their publish failed).
	Resync bool     `json:"r,omitempty"`
	Ctl    *Control `json:"c,omitempty"`
	// Sent is when the writer handed the message's first frames to the
	// bus, in Unix microseconds (0 from a version that did not stamp):
	// the receiver measures the bus's lag from it, the sender's queue
	// included.
	Sent int64 `json:"ts,omitempty"`
	// Trace is the W3C traceparent of the writer's publish that sent the
	// frames (empty while tracing is off): the receiver links its span to
	// it. An instance of a version without it ignores the field.
	Trace string `json:"tp,omitempty"`
}

// size is the message's share of the outbound bound.
func (m *busMessage) size() int {
	n := envelope + len(m.Thread)
	for i := range m.Frames {
		n += len(m.Frames[i].Event) + perFrame
	}
	return n
}

type busFrame struct {
	Seq   int64           `json:"s,omitempty"`
	Event json.RawMessage `json:"e"`
	// Pos is a delta's Frame.Offset plus one (0: the delta is not
	// placed), and After its Frame.After.
	Pos   int64 `json:"x,omitempty"`
	After int64 `json:"a,omitempty"`
	// delta is set on a text or reasoning delta (see HoldDeltas).
	delta bool
}

// busFrameOf is the bus form of a frame whose event encodes as data.
func busFrameOf(f *Frame, data []byte) busFrame {
	bf := busFrame{Seq: f.Seq, Event: data, After: f.After}
	if f.Event != nil {
		bf.delta = f.Event.Type == TypeTextDelta || f.Event.Type == TypeReasoningDelta
	}
	if f.HasOffset {
		bf.Pos = f.Offset + 1
	}
	return bf
}

// frame is the frame a bus frame carries, ev decoded from it.
func (bf *busFrame) frame(ev *Event) Frame {
	f := EncodedFrame(bf.Seq, ev, bf.Event)
	if bf.Pos > 0 {
		f.Offset, f.HasOffset = bf.Pos-1, true
	}
	f.After = bf.After
	return f
}

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
	msgs := c.messages(threadID, frames)
	if tp := tracing.Traceparent(ctx); tp != "" {
		for i := range msgs {
			msgs[i].Trace = tp
		}
	}
	c.enqueue(msgs...)
}

// SendControl implements Controller. The database holds what the control
// asks for (see Runs); the message only makes its owner act at once.
func (c *Cluster) SendControl(ctl Control) {
	c.enqueue(busMessage{Thread: ctl.ThreadID, Ctl: &ctl})
}

// enqueue hands messages to the sender. What does not fit the bound is
// not sent: its thread is marked for a resync notice instead.
func (c *Cluster) enqueue(msgs ...busMessage) {
	var unsent []string
	c.mu.Lock()
	for _, m := range msgs {
		n := m.size()
		if c.outBytes+n > maxOutbound && len(c.outbound) > 0 {
			if m.Thread != "" && m.Ctl == nil {
				c.dirty[m.Thread] = true
				unsent = append(unsent, m.Thread)
			}
			continue
		}
		c.outbound = append(c.outbound, m)
		c.outBytes += n
	}
	c.mu.Unlock()
	for _, t := range unsent {
		c.hub.Withhold(t)
	}
	notify(c.wake)
}

// sendLoop sends the queued messages in order until ctx ends. After a
// failed publish, what is queued is not tried (the threads are marked for
// resync notices) until a resync notice gets through again: a link that
// hangs costs one publishTimeout per retry, not one per message.
func (c *Cluster) sendLoop(ctx context.Context) {
	retry := time.NewTicker(retryInterval)
	defer retry.Stop()
	for {
		c.mu.Lock()
		batch := c.outbound
		c.outbound, c.outBytes = nil, 0
		failing := c.failing
		c.mu.Unlock()
		batch = c.coalesce(batch)
		if c.deltasHeld != nil && c.deltasHeld() {
			for _, m := range batch {
				if slices.ContainsFunc(m.Frames, func(bf busFrame) bool { return bf.delta }) {
					c.hub.Withhold(m.Thread)
				}
			}
			batch = dropDeltas(batch)
		}
		for len(batch) > 0 {
			n := 1
			if c.batcher != nil {
				n = batchLen(batch)
			}
			if failing || !c.send(ctx, batch[:n]) {
				failing = true
				for _, m := range batch[:n] {
					if m.Thread != "" && m.Ctl == nil {
						c.markDirty(m.Thread)
					}
				}
			}
			batch = batch[n:]
		}
		c.flushDirty(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-retry.C:
		}
	}
}

// maxCoalesced bounds a message that coalesce makes of several, on a bus
// with no payload limit of its own.
const maxCoalesced = 256 << 10

// coalesce merges the messages of frames of one thread, as far as the
// bus's payload limit allows: a burst the writer published in many passes
// goes out in few publishes, one per thread at best when many threads are
// busy at once. Each thread's frames keep their order; a control message
// is a barrier that nothing moves across, and a resync notice one for its
// thread.
func (c *Cluster) coalesce(batch []busMessage) []busMessage {
	limit := c.bus.MaxPayload()
	if limit <= 0 {
		limit = maxCoalesced
	}
	out := batch[:0]
	var sizes []int
	open := map[string]int{} // a thread's message in out that takes more frames
	for _, m := range batch {
		if len(m.Frames) > 0 {
			if i, ok := open[m.Thread]; ok {
				if add := m.size() - envelope - len(m.Thread); sizes[i]+add <= limit {
					out[i].Frames = append(out[i].Frames, m.Frames...)
					sizes[i] += add
					continue
				}
			}
			open[m.Thread] = len(out)
		} else if m.Ctl != nil {
			clear(open)
		} else {
			delete(open, m.Thread)
		}
		out = append(out, m)
		sizes = append(sizes, m.size())
	}
	return out
}

func (c *Cluster) markDirty(threadID string) {
	// Its frames did not go out: neither did its open segments' deltas.
	c.hub.Withhold(threadID)
	c.mu.Lock()
	c.dirty[threadID] = true
	c.mu.Unlock()
}

// flushDirty tells the other instances to re-read the threads whose frames
// were not published. It is also what finds out that a failing bus works
// again.
func (c *Cluster) flushDirty(ctx context.Context) {
	c.mu.Lock()
	threads := make([]string, 0, len(c.dirty))
	for t := range c.dirty {
		threads = append(threads, t)
	}
	c.mu.Unlock()
	for _, t := range threads {
		if !c.send(ctx, []busMessage{{Thread: t, Resync: true}}) {
			return
		}
		c.mu.Lock()
		delete(c.dirty, t)
		c.mu.Unlock()
	}
}

// Batches for a BatchBus: at most maxBatch messages, and at most
// maxBatchBytes of their frames, per round trip.
const (
	maxBatch      = 256
	maxBatchBytes = 1 << 20
)

// batchLen is how many of msgs, from the first, go in one batch.
func batchLen(msgs []busMessage) int {
	n, size := 0, 0
	for n < len(msgs) && n < maxBatch {
		size += msgs[n].size()
		if n > 0 && size > maxBatchBytes {
			break
		}
		n++
	}
	return n
}

// send publishes msgs, one by one or as one batch; it reports whether the
// bus took them, and keeps the failing state with one log line per outage.
func (c *Cluster) send(ctx context.Context, msgs []busMessage) bool {
	envs := make([]Envelope, len(msgs))
	var err error
	for i := range msgs {
		m := &msgs[i]
		m.Origin = c.cfg.Instance
		if envs[i].Payload, err = json.Marshal(m); err != nil {
			break
		}
		if c.routed != nil && m.Ctl == nil && m.Thread != "" {
			// Frames and resync notices concern the instances that
			// serve the thread; controls, its owner, which may serve
			// none of it.
			envs[i].Topic = m.Thread
		}
	}
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		switch e := envs[0]; {
		case len(envs) > 1:
			err = c.batcher.PublishBatch(pctx, envs)
		case e.Topic != "":
			err = c.routed.PublishTo(pctx, e.Topic, e.Payload)
		default:
			err = c.bus.Publish(pctx, e.Payload)
		}
		cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !c.failing && ctx.Err() == nil {
			c.cfg.Logger.Warn("bus publish failed; the other instances will read the log instead", "err", err)
		}
		c.failing = true
		return false
	}
	if c.failing {
		c.cfg.Logger.Info("bus publish works again")
		c.failing = false
	}
	return true
}

// envelope is the size of a message without its frames, and perFrame a
// frame's overhead beside its event, both with room to spare.
const (
	envelope = 256
	perFrame = 48
)

// messages packs frames into as few messages as the bus's payload limit
// allows. A delta too large for one message is split into several deltas
// of the same segment, which the clients append back together; any other
// frame too large travels as a resync notice, and the other instances read
// it from the log.
func (c *Cluster) messages(threadID string, frames []Frame) []busMessage {
	limit := c.bus.MaxPayload()
	var out []busMessage
	cur := busMessage{Thread: threadID}
	size := envelope + len(threadID)
	sent := time.Now().UnixMicro()
	flush := func() {
		if len(cur.Frames) > 0 || cur.Resync {
			cur.Sent = sent
			out = append(out, cur)
		}
		cur = busMessage{Thread: threadID}
		size = envelope + len(threadID)
	}
	add := func(bf busFrame) {
		if limit > 0 && size+len(bf.Event)+perFrame > limit {
			flush()
		}
		cur.Frames = append(cur.Frames, bf)
		size += len(bf.Event) + perFrame
	}
	for i := range frames {
		f := &frames[i]
		if limit <= 0 || envelope+len(threadID)+len(f.Data)+perFrame <= limit {
			add(busFrameOf(f, f.Data))
			continue
		}
		if pieces := splitDelta(f, limit-envelope-len(threadID)-perFrame); pieces != nil {
			for _, p := range pieces {
				add(p)
			}
			continue
		}
		flush()
		out = append(out, busMessage{Thread: threadID, Resync: true})
	}
	flush()
	return out
}

// splitDelta splits a text or reasoning delta into deltas whose encodings
// each fit in limit bytes, cutting at character boundaries, each placed
// where its text stands in the segment; nil for any other frame.
func splitDelta(f *Frame, limit int) []busFrame {
	if f.Seq != 0 || (f.Event.Type != TypeTextDelta && f.Event.Type != TypeReasoningDelta) || limit < 512 {
		return nil
	}
	text := f.Event.Payload.(*Text).Text
	var out []busFrame
	piece0 := *f // each piece's frame, for its place in the segment
	// JSON escaping can make text up to six times longer (\u00XX);
	// halving the piece until it fits covers every case.
	piece := (limit - 256) / 2
	for len(text) > 0 {
		n := min(piece, len(text))
		for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		ev := *f.Event
		ev.Payload = &Text{Text: text[:n]}
		data, err := json.Marshal(&ev)
		if err != nil {
			return nil
		}
		if len(data) > limit && n > 1 {
			piece = max(n/2, 1)
			continue
		}
		out = append(out, busFrameOf(&piece0, data))
		piece0.Offset += int64(n)
		text = text[n:]
	}
	return out
}

// Run sends and listens until ctx ends, with the head check beside them.
func (c *Cluster) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.sendLoop(ctx) })
	wg.Go(func() { c.receiveLoop(ctx) })
	if c.heads != nil {
		wg.Go(func() { c.headLoop(ctx) })
	}
	if c.routed != nil {
		wg.Go(func() { c.routeLoop(ctx) })
	}
	return c.bus.Listen(ctx, c.deliver, c.state)
}

func (c *Cluster) state(up bool, err error) {
	if !up {
		c.mu.Lock()
		c.downErr = err
		c.mu.Unlock()
	}
	was := c.up.Swap(up)
	if up {
		c.everUp.Store(true)
	}
	switch {
	case up:
		if !was {
			c.cfg.Logger.Info("bus connected")
			// What the other instances published while the listener was
			// away is gone: no run so far was heard whole here.
			c.hub.Unhear()
		}
		// What was published while the listener was away is gone.
		c.checkThreads("")
	case was:
		c.cfg.Logger.Warn("bus connection lost; the head check reads the log until it is back",
			"err", err, "poll", c.cfg.PollInterval)
	}
}

// checkThreads asks the head check to look at the thread now (every
// thread with subscribers when threadID is "").
func (c *Cluster) checkThreads(threadID string) {
	c.mu.Lock()
	if threadID == "" {
		c.checkAll = true
	} else {
		c.checkNow[threadID] = true
	}
	c.mu.Unlock()
	notify(c.check)
}

// headLoop runs the head check every PollInterval, and at once when asked.
func (c *Cluster) headLoop(ctx context.Context) {
	tick := time.NewTicker(c.cfg.PollInterval)
	defer tick.Stop()
	failing := false
	for {
		var threads []string
		all := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			threads = c.hub.Behind(c.cfg.PollInterval)
		case <-c.check:
			c.mu.Lock()
			all = c.checkAll
			for t := range c.checkNow {
				threads = append(threads, t)
			}
			c.checkAll, c.checkNow = false, map[string]bool{}
			c.mu.Unlock()
			if all {
				threads = c.hub.Behind(0)
			}
		}
		err := c.checkHeads(ctx, threads)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			c.cfg.Logger.Warn("the head check cannot read the log; retrying", "err", err)
			failing = true
		case err == nil && failing:
			c.cfg.Logger.Info("the head check reads the log again")
			failing = false
		}
	}
}

// checkHeads reads the heads of threads in the log and, for each thread
// whose head is past what the hub published, publishes the rows it
// missed; a thread that is gone has its subscribers ended.
func (c *Cluster) checkHeads(ctx context.Context, threads []string) error {
	if len(threads) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(c.cfg.PollInterval, 2*time.Second))
	defer cancel()
	heads, err := c.heads.Heads(ctx, threads)
	if err != nil {
		return err
	}
	for _, t := range threads {
		head, ok := heads[t]
		if !ok || head < c.hub.Committed(t) {
			// Gone, or deleted and made again under the same id (the hub
			// holds seqs its log never had): its subscribers end, and
			// the thread starts afresh here.
			c.hub.Forget(t)
			continue
		}
		if err := c.catchUp(ctx, t, head); err != nil {
			return err
		}
	}
	return nil
}

// catchUp publishes into the hub the rows of the thread after those it was
// published without a gap, up to head: its last page of them at most,
// since the subscribers read any earlier gap from the log themselves.
func (c *Cluster) catchUp(ctx context.Context, threadID string, head int64) error {
	from := c.hub.Contiguous(threadID)
	if head <= from {
		return nil
	}
	rows, err := c.cfg.Log.ReadAfter(ctx, threadID, max(from, head-replayPage), replayPage)
	if err != nil {
		return err
	}
	frames := make([]Frame, 0, len(rows))
	for i := range rows {
		r := &rows[i]
		if r.Seq > head {
			break
		}
		data := r.Data
		if len(data) == 0 {
			if data, err = json.Marshal(&r.Event); err != nil {
				return err
			}
		}
		frames = append(frames, EncodedFrame(r.Seq, &r.Event, data))
	}
	c.hub.CaughtUp(threadID, frames, head)
	return nil
}

// maxInbound bounds the bytes of bus messages received and not yet
// handed to the hub: past it, a message is dropped and its thread read
// from the log instead, as for a message the bus lost.
const maxInbound = 16 << 20

// deliver takes one message from the bus listener. It only queues it: the
// receiver hands what is queued to the hub in one pass per wake-up, so
// that a burst that arrives while the hub's subscribers are being woken
// reaches them as one batch per thread, not one per message.
func (c *Cluster) deliver(payload []byte) {
	if bytes.HasPrefix(payload, c.self) {
		return
	}
	c.inMu.Lock()
	if c.inBytes+len(payload) > maxInbound && len(c.inbound) > 0 {
		c.inDropped = true
		c.inMu.Unlock()
		return
	}
	c.inbound = append(c.inbound, payload)
	c.inBytes += len(payload)
	c.inMu.Unlock()
	notify(c.inWake)
}

// receiveLoop hands the queued messages to the hub and the run registry
// until ctx ends.
func (c *Cluster) receiveLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.inWake:
		}
		c.inMu.Lock()
		batch, dropped := c.inbound, c.inDropped
		c.inbound, c.inBytes, c.inDropped = nil, 0, false
		c.inMu.Unlock()
		if dropped {
			c.cfg.Logger.Warn("bus messages arrived faster than this instance could take them; reading their threads from the log")
			c.hub.Unhear()
			c.checkThreads("")
		}
		c.receive(batch)
	}
}

// receive handles a batch of messages in order, except that frames of one
// thread from several messages go to the hub in one Publish: the frames
// of different threads are independent, and each thread's keep their
// order. A control or resync message is a barrier: what came before it is
// published first.
func (c *Cluster) receive(batch [][]byte) {
	var order []string
	pending := map[string][]Frame{}
	flush := func() {
		for _, t := range order {
			c.toHub(t, pending[t])
		}
		order = order[:0]
		clear(pending)
	}
	for _, payload := range batch {
		var m busMessage
		if err := json.Unmarshal(payload, &m); err != nil {
			c.cfg.Logger.Warn("ignoring a bus message that does not decode", "err", err, "bytes", len(payload))
			continue
		}
		if m.Origin == c.cfg.Instance {
			continue
		}
		switch {
		case m.Ctl != nil:
			flush()
			if m.Ctl.Kind == ControlDelete {
				c.hub.Forget(m.Ctl.ThreadID)
			}
			if c.runs != nil {
				c.runs.HandleControl(*m.Ctl)
			}
		case m.Resync:
			flush()
			c.checkThreads(m.Thread)
		case len(m.Frames) > 0:
			if c.lag != nil && m.Sent > 0 {
				c.lag.BusLag(max(time.Since(time.UnixMicro(m.Sent)), 0))
			}
			if m.Trace != "" {
				c.traceReceive(&m)
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
					c.cfg.Logger.Warn("a bus frame does not decode; reading its thread from the log", "thread", m.Thread, "err", err)
					c.checkThreads(m.Thread)
					continue
				}
				frames = append(frames, bf.frame(ev))
			}
			pending[m.Thread] = frames
		}
	}
	flush()
}

// notify signals ch, a channel of capacity one that a loop waits on,
// without waiting: a signal already pending covers this one.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// followTimeout bounds one Follow: a bus that does not confirm by then
// follows the topics at its next connection, and the head check reads
// what they missed meanwhile.
const followTimeout = 5 * time.Second

// watchChanged is the hub's word that a thread's Watched may have changed.
func (c *Cluster) watchChanged(threadID string) {
	c.mu.Lock()
	c.reroute[threadID] = true
	c.mu.Unlock()
	notify(c.routeWake)
}

// routeLoop keeps the bus following exactly the threads the hub watches,
// until ctx ends. A thread is followed from its first subscriber here
// until its state leaves the hub. Once the bus confirms a follow, the
// head check reads the thread's log head: what was committed between the
// subscriber's replay and the follow reaches it from the log, and every
// later frame over the bus.
func (c *Cluster) routeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.routeWake:
		}
		c.mu.Lock()
		threads := c.reroute
		c.reroute = map[string]bool{}
		c.mu.Unlock()
		var add, drop []string
		for t := range threads {
			switch want := c.hub.Watched(t); {
			case want && !c.following[t]:
				add = append(add, t)
				c.following[t] = true
			case !want && c.following[t]:
				drop = append(drop, t)
				delete(c.following, t)
			}
		}
		if len(drop) > 0 {
			c.mu.Lock()
			for _, t := range drop {
				delete(c.confirmed, t)
			}
			c.mu.Unlock()
			if err := c.routed.Unfollow(ctx, drop...); err != nil && ctx.Err() == nil {
				c.cfg.Logger.Debug("bus unfollow failed", "threads", len(drop), "err", err)
			}
		}
		if len(add) == 0 {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, followTimeout)
		err := c.routed.Follow(fctx, add...)
		cancel()
		if err != nil {
			// The bus follows them at its next connection, whose
			// state(true) runs the head check of every thread, and the
			// periodic head check covers the wait; they are tried again
			// meanwhile, so that Follows comes true.
			if ctx.Err() == nil {
				c.cfg.Logger.Debug("bus follow not confirmed", "threads", len(add), "err", err)
			}
			c.mu.Lock()
			for _, t := range add {
				delete(c.following, t)
				c.reroute[t] = true
			}
			c.mu.Unlock()
			time.AfterFunc(retryInterval, func() {
				notify(c.routeWake)
			})
			continue
		}
		c.mu.Lock()
		for _, t := range add {
			c.checkNow[t] = true
			if c.following[t] {
				c.confirmed[t] = true
				for _, w := range c.awaiting[t] {
					close(w)
				}
				delete(c.awaiting, t)
			}
		}
		c.mu.Unlock()
		notify(c.check)
	}
}

// traceReceive records a span for frames that arrived over the bus,
// linked to the sender's publish: a link, not a parent, as the receiving
// instance's work is its own (it may serve many streams of the thread).
func (c *Cluster) traceReceive(m *busMessage) {
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
