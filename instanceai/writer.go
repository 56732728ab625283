package instanceai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// ErrWriterClosed is returned by Enqueue after Close.
var ErrWriterClosed = errors.New("writer is closed")

// WriterConfig tunes the writer. Zero values take the defaults.
type WriterConfig struct {
	// IdleFlush closes open segments after this much silence on a thread
	// (default 3 s, as n8n does).
	IdleFlush time.Duration
	// Retries is how many times a failed append is retried (default 6).
	Retries int
	// RetryBackoff is the first retry's pause; it doubles each time up to
	// MaxBackoff (defaults 50 ms and 2 s).
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// RetireAfter stops a thread's drain goroutine after this much idleness
	// with nothing open (default 1 min); the next event starts a new one.
	RetireAfter time.Duration
	// OnRunFailed is told about runs whose events could not be stored after
	// the retry budget, so the run registry can stop them.
	OnRunFailed func(threadID, runID string, err error)
	// OnAgentFailed is told about each background agent whose own events
	// (written under a claim of its own, see failAgentsOnly) could not be
	// stored after the retry budget, when the run has no other event in
	// the batch: the agent alone fails, its later events are dropped, and
	// the registry stops it and settles it from the log.
	OnAgentFailed func(threadID, runID, agentID string, err error)
	// OnRunGone is told about each run an append refused with ErrNotFound:
	// the thread was deleted, or taken by another user, under the run. The
	// registry stops such a run at once; nothing more of it is written.
	OnRunGone func(threadID, runID string)
	// OnRunFenced is told, once, about each claim whose fencing token the
	// log refused as stale (see FencedAppender): another instance took
	// the run (agentID "") or its background agent agentID, and settles
	// it. The writer has dropped what it held under that claim, and drops
	// whatever is queued under it later; the registry stops the run or the
	// agent.
	OnRunFenced func(threadID, runID, agentID string)
	// LiveHeld, when set and true, keeps deltas from going out live: the
	// instance may have lost its claims to another instance, which
	// settles their runs from the text it heard (see Runs.LiveHeld). The
	// deltas still make their blocks.
	LiveHeld func() bool
	Logger   *slog.Logger
	// Observer is told about each commit and published event (nil: none).
	Observer Observer
	// CheckpointBytes stores the text of an open segment in a checkpoint
	// piece once this much of it is in no piece yet (default 16 KiB;
	// negative: never by size), and CheckpointInterval once the oldest of
	// it has waited this long (default 2 s; negative: never by age), so
	// that a crash loses at most that much of a segment that has not
	// closed. Pieces need a log that keeps them (CheckpointStore); the
	// log's block of the segment is written whole at its close either way.
	CheckpointBytes    int
	CheckpointInterval time.Duration
	// Limits bound what the writer stores and holds: it stores no event
	// over MaxEventBytes and grows no segment past MaxSegmentBytes (the
	// run's door keeps producers under both; this is the last guard), and
	// a thread's queue may hold queueRoomEvents events of that size before
	// producers wait (awaitRoom).
	Limits Limits
}

// Checkpoint defaults.
const (
	DefaultCheckpointBytes    = 16 << 10
	DefaultCheckpointInterval = 2 * time.Second
)

func (c *WriterConfig) defaults() {
	if c.IdleFlush <= 0 {
		c.IdleFlush = 3 * time.Second
	}
	if c.Retries <= 0 {
		c.Retries = 6
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 50 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 2 * time.Second
	}
	if c.RetireAfter <= 0 {
		c.RetireAfter = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.CheckpointBytes == 0 {
		c.CheckpointBytes = DefaultCheckpointBytes
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	c.Limits.defaults()
}

// Publisher takes frames the writer has committed, in commit order: the
// hub of this process, or a cluster that also sends them to the other
// instances.
type Publisher interface {
	Publish(threadID string, frames []Frame)
}

// Writer is the only appender to the log. Each thread has one drain
// goroutine that takes whatever is queued, coalesces deltas into blocks,
// persists the batch in one multi-row insert, and only then publishes it.
// Producers never wait on the database.
type Writer struct {
	log EventLog
	hub Publisher
	cfg WriterConfig
	// pieces keeps open segments' checkpoints; nil when the log keeps
	// none or both rules are off.
	pieces CheckpointStore
	// finished is told, after the commit and before the publish, about
	// each run whose run-finish was just stored, with the fencing token it
	// was stored under (the run registry frees the thread's claim there).
	finished func(threadID, runID string, fence int64)
	// unfenced is set by the run registry when its claims are not the
	// log's, whose tokens the log would not know: appends then carry none.
	unfenced atomic.Bool

	mu      sync.Mutex
	threads map[string]*threadDrain
	// threadsPeak is the most threads the map held since it was made.
	threadsPeak int
	closed      bool
	wg          sync.WaitGroup
}

// NewWriter returns a writer appending to log and publishing to hub.
func NewWriter(log EventLog, hub Publisher, cfg WriterConfig) *Writer {
	cfg.defaults()
	w := &Writer{log: log, hub: hub, cfg: cfg, threads: map[string]*threadDrain{}}
	if cs, ok := log.(CheckpointStore); ok && (cfg.CheckpointBytes > 0 || cfg.CheckpointInterval > 0) {
		w.pieces = cs
	}
	return w
}

func (w *Writer) onRunFinished(f func(threadID, runID string, fence int64)) { w.finished = f }

// useFences says whether appends carry the tokens of the run registry's
// claims, which they can only when the claims are kept by the log itself.
func (w *Writer) useFences(on bool) { w.unfenced.Store(!on) }

// fences reports whether appends carry the tokens of their claims.
func (w *Writer) fences() bool { return !w.unfenced.Load() }

// drain returns the thread's drain, nil when it has none.
func (w *Writer) drain(threadID string) *threadDrain {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.threads[threadID]
}

// dropFence discards what is queued under f's claim, and everything
// queued under it later: another instance took the claim over and settles
// its run (or agent).
func (w *Writer) dropFence(threadID string, f *fence) {
	if d := w.drain(threadID); d != nil {
		d.queue.dropClaim(f)
	}
}

// Enqueue hands an event to the thread's drain. It never blocks on storage.
// The event must already be valid and stamped. It is written under no
// claim's fencing token (see RunClaims): the run registry queues the events
// of its runs with theirs.
func (w *Writer) Enqueue(threadID string, ev Event) error { return w.enqueue(threadID, ev, nil) }

// enqueue is Enqueue of an event written under f's token, which is read
// when the event is committed (nil: no token).
func (w *Writer) enqueue(threadID string, ev Event, f *fence) error {
	return w.enqueueEncoded(threadID, ev, nil, f)
}

// enqueueEncoded is enqueue of an event whose JSON encoding the caller has
// made already (nil: the writer encodes it).
func (w *Writer) enqueueEncoded(threadID string, ev Event, data []byte, f *fence) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrWriterClosed
	}
	d := w.threads[threadID]
	if d == nil {
		d = newThreadDrain(w, threadID)
		w.threads[threadID] = d
		w.threadsPeak = max(w.threadsPeak, len(w.threads))
		w.wg.Add(1)
		go d.run()
	}
	d.queue.push(queued{ev: ev, data: data, fence: f})
	return nil
}

// awaitRoom waits, until ctx ends, while the thread's queue holds more
// than queueRoomEvents of the largest events: a producer faster than the
// drain (whose pace is the database's) is slowed to it, rather than let
// the queue grow without bound. Events already queued stay queued.
func (w *Writer) awaitRoom(ctx context.Context, threadID string) {
	room := queueRoomEvents * w.cfg.Limits.MaxEventBytes
	for {
		// Looked up again each time: the drain may have retired and
		// another taken its place.
		d := w.drain(threadID)
		if d == nil {
			return
		}
		made, full := d.queue.full(room)
		if !full {
			return
		}
		select {
		case <-made:
		case <-ctx.Done():
			return
		}
	}
}

// keepsEndings reports whether the thread's drain keeps endings of runs an
// outage failed, to store once the log answers (see storeEndings).
func (w *Writer) keepsEndings(threadID string) bool {
	d := w.drain(threadID)
	return d != nil && d.endings.keeps()
}

// Sync waits until every event enqueued for the thread before the call has
// been persisted and published (or dropped after a failure).
func (w *Writer) Sync(ctx context.Context, threadID string) error {
	done := make(chan struct{})
	w.mu.Lock()
	d := w.threads[threadID]
	if d == nil {
		w.mu.Unlock()
		return nil
	}
	// Under the writer's lock, so that the drain cannot retire between
	// the look-up and the wait (see tryRetire).
	d.queue.await(done)
	w.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting events, closes every open segment, persists what is
// queued and waits for the drains to finish (or ctx to end).
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	for _, d := range w.threads {
		d.queue.stopping()
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("writer shutdown: %w", ctx.Err())
	}
}

// forget removes a thread's drain from the writer's map, and makes the
// map anew once it holds far fewer threads than it did: a map keeps its
// buckets after its keys are deleted. The caller holds w.mu.
func (w *Writer) forget(threadID string) {
	delete(w.threads, threadID)
	if len(w.threads) < w.threadsPeak/4 {
		w.threads = maps.Clone(w.threads)
		w.threadsPeak = len(w.threads)
	}
}
