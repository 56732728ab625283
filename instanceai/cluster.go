package instanceai

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// DefaultPollInterval is how often, while the bus is down, every live
// subscriber re-reads the log instead.
const DefaultPollInterval = time.Second

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	// Instance is this process's id; messages it published itself are
	// ignored when they come back.
	Instance string
	// PollInterval is the log poll's period while the bus is down
	// (default 1 s).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Cluster joins this process's hub and run registry to the other instances
// through a Bus. Frames the writer commits go to the local hub at once and
// to the bus; frames from other instances go into the local hub as if
// written here. Control messages reach the run registry. Whatever the bus
// loses is recovered from the log: durable frames carry their seq, so a
// subscriber that sees a gap reads the missing rows; after the listener
// reconnects every subscriber re-reads from its cursor; and while the bus
// is down the subscribers poll the log.
type Cluster struct {
	bus  Bus
	hub  *Hub
	runs *Runs
	cfg  ClusterConfig

	up atomic.Bool
	mu sync.Mutex
	// dirty are threads whose frames could not be published: the other
	// instances are told to re-read them once the bus takes messages again.
	dirty map[string]bool
	// publishFailing rate-limits the publish error log to one per outage.
	publishFailing bool
}

// NewCluster returns a cluster on bus feeding hub.
func NewCluster(bus Bus, hub *Hub, cfg ClusterConfig) *Cluster {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Cluster{bus: bus, hub: hub, cfg: cfg, dirty: map[string]bool{}}
}

// Attach gives the cluster the run registry its control messages are for.
// Call it before Run.
func (c *Cluster) Attach(runs *Runs) { c.runs = runs }

// Up reports whether the bus listener is connected.
func (c *Cluster) Up() bool { return c.up.Load() }

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
}

type busFrame struct {
	Seq   int64           `json:"s,omitempty"`
	Event json.RawMessage `json:"e"`
}

// Publish implements Publisher: the local hub first, then the bus.
func (c *Cluster) Publish(threadID string, frames []Frame) {
	c.hub.Publish(threadID, frames)
	if len(frames) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.flushDirty(ctx)
	for _, m := range c.messages(threadID, frames) {
		if !c.send(ctx, m) {
			c.mu.Lock()
			c.dirty[threadID] = true
			c.mu.Unlock()
			return
		}
	}
}

// SendControl implements Controller.
func (c *Cluster) SendControl(ctl Control) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.send(ctx, busMessage{Thread: ctl.ThreadID, Ctl: &ctl})
}

// flushDirty tells the other instances to re-read the threads whose frames
// an earlier publish lost.
func (c *Cluster) flushDirty(ctx context.Context) {
	c.mu.Lock()
	if len(c.dirty) == 0 {
		c.mu.Unlock()
		return
	}
	threads := make([]string, 0, len(c.dirty))
	for t := range c.dirty {
		threads = append(threads, t)
	}
	c.mu.Unlock()
	for _, t := range threads {
		if !c.send(ctx, busMessage{Thread: t, Resync: true}) {
			return
		}
		c.mu.Lock()
		delete(c.dirty, t)
		c.mu.Unlock()
	}
}

func (c *Cluster) send(ctx context.Context, m busMessage) bool {
	m.Origin = c.cfg.Instance
	payload, err := json.Marshal(&m)
	if err == nil {
		err = c.bus.Publish(ctx, payload)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !c.publishFailing {
			c.cfg.Logger.Warn("bus publish failed; other instances will read the log instead", "err", err)
		}
		c.publishFailing = true
		return false
	}
	if c.publishFailing {
		c.cfg.Logger.Info("bus publish works again")
		c.publishFailing = false
	}
	return true
}

// envelope is the size of a message without its frames, and perFrame a
// frame's overhead beside its event, both with room to spare.
const (
	envelope = 256
	perFrame = 32
)

// messages packs frames into as few messages as the bus's payload limit
// allows. A delta too large for one message is split into several deltas
// of the same segment, which the clients append back together; any other
// frame too large travels as a resync notice, and the other instances'
// subscribers read it from the log.
func (c *Cluster) messages(threadID string, frames []Frame) []busMessage {
	limit := c.bus.MaxPayload()
	var out []busMessage
	cur := busMessage{Thread: threadID}
	size := envelope + len(threadID)
	flush := func() {
		if len(cur.Frames) > 0 || cur.Resync {
			out = append(out, cur)
		}
		cur = busMessage{Thread: threadID}
		size = envelope + len(threadID)
	}
	add := func(seq int64, data []byte) {
		if limit > 0 && size+len(data)+perFrame > limit {
			flush()
		}
		cur.Frames = append(cur.Frames, busFrame{Seq: seq, Event: data})
		size += len(data) + perFrame
	}
	for i := range frames {
		f := &frames[i]
		if limit <= 0 || envelope+len(threadID)+len(f.Data)+perFrame <= limit {
			add(f.Seq, f.Data)
			continue
		}
		if pieces := splitDelta(f, limit-envelope-len(threadID)-perFrame); pieces != nil {
			for _, p := range pieces {
				add(0, p)
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
// each fit in limit bytes, cutting at character boundaries; nil for any
// other frame.
func splitDelta(f *Frame, limit int) [][]byte {
	if f.Seq != 0 || (f.Event.Type != TypeTextDelta && f.Event.Type != TypeReasoningDelta) || limit < 512 {
		return nil
	}
	text := f.Event.Payload.(*Text).Text
	var out [][]byte
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
		out = append(out, data)
		text = text[n:]
	}
	return out
}

// Run listens to the bus until ctx ends. While the listener is down,
// subscribers poll the log every PollInterval; each (re)connection makes
// every subscriber re-read from its cursor, since what was published
// meanwhile is gone.
func (c *Cluster) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		tick := time.NewTicker(c.cfg.PollInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if !c.up.Load() {
					c.hub.Resync("")
				}
			}
		}
	})
	return c.bus.Listen(ctx, c.deliver, c.state)
}

func (c *Cluster) state(up bool, err error) {
	was := c.up.Swap(up)
	switch {
	case up:
		if !was {
			c.cfg.Logger.Info("bus connected")
		}
		c.hub.Resync("")
	case was:
		c.cfg.Logger.Warn("bus connection lost; subscribers poll the log until it is back",
			"err", err, "poll", c.cfg.PollInterval)
	}
}

// deliver handles one message from the bus.
func (c *Cluster) deliver(payload []byte) {
	var m busMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		c.cfg.Logger.Warn("ignoring a bus message that does not decode", "err", err, "bytes", len(payload))
		return
	}
	if m.Origin == c.cfg.Instance {
		return
	}
	switch {
	case m.Ctl != nil:
		if m.Ctl.Kind == ControlDelete {
			c.hub.Forget(m.Ctl.ThreadID)
		}
		if c.runs != nil {
			c.runs.HandleControl(*m.Ctl)
		}
	case m.Resync:
		c.hub.Resync(m.Thread)
	case len(m.Frames) > 0:
		frames := make([]Frame, 0, len(m.Frames))
		for _, bf := range m.Frames {
			ev := new(Event)
			if err := json.Unmarshal(bf.Event, ev); err != nil {
				// Frames come from another instance's writer, which
				// encoded them; one that does not decode is a version
				// skew: let the subscribers read the log.
				c.cfg.Logger.Warn("a bus frame does not decode; resyncing its thread", "thread", m.Thread, "err", err)
				c.hub.Resync(m.Thread)
				continue
			}
			frames = append(frames, EncodedFrame(bf.Seq, ev, bf.Event))
		}
		c.hub.Publish(m.Thread, frames)
	}
}
