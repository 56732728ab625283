package instanceai

import (
	"runtime"
	"time"
)

// threadDrain is the ordered drain of one thread: one goroutine that takes
// what the queue holds, coalesces it, commits it and publishes it. Each of
// its parts keeps its own state: the queue is shared with producers under
// its lock, the rest is the drain goroutine's alone.
type threadDrain struct {
	w        *Writer
	threadID string
	queue    *threadQueue

	coalescer coalescer
	// refusals are the runs and claims whose events are dropped.
	refusals refusals
	// endings are those of runs a storage outage failed (see fail).
	endings outageEndings
	// head is what the drain knows of the thread's committed seqs.
	head logHead
	// checkpoints is the state of the open segments' pieces.
	checkpoints checkpointState
}

func newThreadDrain(w *Writer, threadID string) *threadDrain {
	return &threadDrain{w: w, threadID: threadID, queue: newThreadQueue(),
		coalescer: newCoalescer(), refusals: refusals{runs: map[string]error{}}}
}

func (d *threadDrain) run() {
	defer d.w.wg.Done()
	idle := time.NewTimer(d.w.cfg.IdleFlush)
	defer idle.Stop()
	lastActivity := time.Now()
	backlog := false // the last pass left events queued: take them at once
	for {
		if !backlog {
			select {
			case <-d.queue.wake:
			case <-idle.C:
			}
		}
		p := d.queue.take()
		backlog = p.backlog
		for _, f := range p.drop {
			d.dropStale(f)
		}

		now := time.Now()
		if len(p.batch) > 0 {
			lastActivity = now
		}
		var b batchBuilder
		for i := range p.batch {
			d.add(&b, &p.batch[i])
		}
		switch {
		case p.stop && !backlog:
			d.closeWhere(&b, func(*segment) bool { return true })
		case d.coalescer.holdsOpen() && now.Sub(lastActivity) >= d.w.cfg.IdleFlush:
			d.pause(&b)
		}
		d.storeEndings()
		if len(b.items) > 0 {
			d.commit(b.items)
		}
		d.dropPieces()
		d.checkpoint(now)
		d.endings.publishKept()
		d.queue.release()

		if backlog {
			// The subscribers this publish woke share the CPU with this
			// goroutine; yielding lets them take the pass before the next
			// one lands in their queues, so a backlog reaches a fast
			// subscriber in passes rather than piling up in its queue.
			runtime.Gosched()
			continue
		}
		if p.stop {
			if d.queue.empty() {
				d.retire()
				return
			}
			continue
		}
		if !d.coalescer.holdsOpen() && !d.endings.holds() && time.Since(lastActivity) >= d.w.cfg.RetireAfter && d.tryRetire() {
			return
		}
		wait := d.w.cfg.IdleFlush
		if d.coalescer.holdsOpen() {
			wait = max(time.Until(lastActivity.Add(d.w.cfg.IdleFlush)), time.Millisecond)
		} else {
			// Nothing to flush: wake when the drain may retire.
			wait = min(wait, max(time.Until(lastActivity.Add(d.w.cfg.RetireAfter)), time.Millisecond))
		}
		if d.endings.holds() {
			// Try the log again soon, whatever else the thread does.
			wait = min(wait, d.w.cfg.MaxBackoff)
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(wait)
	}
}

// tryRetire removes an idle drain unless an event arrived meanwhile.
func (d *threadDrain) tryRetire() bool {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if !d.queue.idle() {
		return false
	}
	d.w.forget(d.threadID)
	return true
}

// retire removes a stopped drain and releases its Sync callers.
func (d *threadDrain) retire() {
	d.w.mu.Lock()
	if d.w.threads[d.threadID] == d {
		d.w.forget(d.threadID)
	}
	d.w.mu.Unlock()
	d.queue.releaseAll()
}
