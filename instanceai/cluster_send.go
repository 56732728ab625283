package instanceai

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Bus send limits: one publish may take publishTimeout before the bus
// counts as failing; while it fails, a resync notice is tried every
// retryInterval; the queue of messages waiting to be sent holds at most
// maxOutbound bytes.
const (
	publishTimeout = 2 * time.Second
	retryInterval  = 250 * time.Millisecond
	maxOutbound    = 16 << 20
)

// busSender is the cluster's way out: a bounded queue of messages that
// one goroutine sends in order, so that the writer never waits for the
// bus. A thread whose frames did not go out (a failed publish, a full
// queue) is marked dirty, and once the bus takes messages again the other
// instances are told to read it from the log (a resync notice).
type busSender struct {
	bus      Bus
	routed   RoutedBus // frames go to their thread's topic (nil: to every instance)
	batcher  BatchBus  // routed, when it sends batches
	hub      *Hub      // withholds the deltas of what was not sent
	instance string
	logger   *slog.Logger
	// deltasHeld, when set and true, keeps queued deltas off the bus (see
	// Cluster.HoldDeltas).
	deltasHeld func() bool

	mu sync.Mutex
	// queue are the messages waiting to be sent, queueBytes their size;
	// wake signals the sending goroutine.
	queue      []busMessage
	queueBytes int
	wake       chan struct{}
	// dirty are threads whose frames could not be published.
	dirty map[string]bool
	// failing is set while publishes fail; the error is logged once per
	// outage.
	failing bool
}

func newBusSender(bus Bus, routed RoutedBus, hub *Hub, instance string, logger *slog.Logger) *busSender {
	s := &busSender{bus: bus, routed: routed, hub: hub, instance: instance, logger: logger,
		wake: make(chan struct{}, 1), dirty: map[string]bool{}}
	if routed != nil {
		s.batcher, _ = bus.(BatchBus)
	}
	return s
}

// isFailing reports whether the last publish failed.
func (s *busSender) isFailing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

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

// enqueue hands messages to the sender. What does not fit the bound is
// not sent: its thread is marked for a resync notice instead.
func (s *busSender) enqueue(msgs ...busMessage) {
	var unsent []string
	s.mu.Lock()
	for _, m := range msgs {
		n := m.size()
		if s.queueBytes+n > maxOutbound && len(s.queue) > 0 {
			if m.Thread != "" && m.Ctl == nil {
				s.dirty[m.Thread] = true
				unsent = append(unsent, m.Thread)
			}
			continue
		}
		s.queue = append(s.queue, m)
		s.queueBytes += n
	}
	s.mu.Unlock()
	for _, t := range unsent {
		s.hub.Withhold(t)
	}
	notify(s.wake)
}

// run sends the queued messages in order until ctx ends. After a failed
// publish, what is queued is not tried (the threads are marked for resync
// notices) until a resync notice gets through again: a link that hangs
// costs one publishTimeout per retry, not one per message.
func (s *busSender) run(ctx context.Context) {
	retry := time.NewTicker(retryInterval)
	defer retry.Stop()
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue, s.queueBytes = nil, 0
		failing := s.failing
		s.mu.Unlock()
		batch = s.coalesce(batch)
		if s.deltasHeld != nil && s.deltasHeld() {
			for _, m := range batch {
				if slices.ContainsFunc(m.Frames, func(bf busFrame) bool { return bf.delta }) {
					s.hub.Withhold(m.Thread)
				}
			}
			batch = dropDeltas(batch)
		}
		for len(batch) > 0 {
			n := 1
			if s.batcher != nil {
				n = batchLen(batch)
			}
			if failing || !s.send(ctx, batch[:n]) {
				failing = true
				for _, m := range batch[:n] {
					if m.Thread != "" && m.Ctl == nil {
						s.markDirty(m.Thread)
					}
				}
			}
			batch = batch[n:]
		}
		s.flushDirty(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
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
func (s *busSender) coalesce(batch []busMessage) []busMessage {
	limit := s.bus.MaxPayload()
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

func (s *busSender) markDirty(threadID string) {
	// Its frames did not go out: neither did its open segments' deltas.
	s.hub.Withhold(threadID)
	s.mu.Lock()
	s.dirty[threadID] = true
	s.mu.Unlock()
}

// flushDirty tells the other instances to re-read the threads whose frames
// were not published. It is also what finds out that a failing bus works
// again.
func (s *busSender) flushDirty(ctx context.Context) {
	s.mu.Lock()
	threads := make([]string, 0, len(s.dirty))
	for t := range s.dirty {
		threads = append(threads, t)
	}
	s.mu.Unlock()
	for _, t := range threads {
		if !s.send(ctx, []busMessage{{Thread: t, Resync: true}}) {
			return
		}
		s.mu.Lock()
		delete(s.dirty, t)
		s.mu.Unlock()
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
func (s *busSender) send(ctx context.Context, msgs []busMessage) bool {
	envs := make([]Envelope, len(msgs))
	var err error
	for i := range msgs {
		m := &msgs[i]
		m.Origin = s.instance
		if envs[i].Payload, err = json.Marshal(m); err != nil {
			break
		}
		if s.routed != nil && m.Ctl == nil && m.Thread != "" {
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
			err = s.batcher.PublishBatch(pctx, envs)
		case e.Topic != "":
			err = s.routed.PublishTo(pctx, e.Topic, e.Payload)
		default:
			err = s.bus.Publish(pctx, e.Payload)
		}
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !s.failing && ctx.Err() == nil {
			s.logger.Warn("bus publish failed; the other instances will read the log instead", "err", err)
		}
		s.failing = true
		return false
	}
	if s.failing {
		s.logger.Info("bus publish works again")
		s.failing = false
	}
	return true
}
