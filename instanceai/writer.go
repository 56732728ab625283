package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/internal/tracing"
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

// queueRoomEvents is how many of the largest events a thread's queue
// holds before its producers wait for the drain (see awaitRoom).
const queueRoomEvents = 4

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
	// fenced is the log's FencedAppender (nil: it has none), used unless
	// unfenced is set: the run registry sets it when its claims are not
	// the log's, whose tokens the log would not know.
	fenced   FencedAppender
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
	w.fenced, _ = log.(FencedAppender)
	if cs, ok := log.(CheckpointStore); ok && (cfg.CheckpointBytes > 0 || cfg.CheckpointInterval > 0) {
		w.pieces = cs
	}
	return w
}

func (w *Writer) onRunFinished(f func(threadID, runID string, fence int64)) { w.finished = f }

// useFences says whether appends carry the tokens of the run registry's
// claims, which they can only when the claims are kept by the log itself.
func (w *Writer) useFences(on bool) { w.unfenced.Store(!on) }

// fencedLog is the log's FencedAppender when appends carry tokens.
func (w *Writer) fencedLog() FencedAppender {
	if w.unfenced.Load() {
		return nil
	}
	return w.fenced
}

// dropFence discards what is queued under f's claim, and everything
// queued under it later: another instance took the claim over and settles
// its run (or agent).
func (w *Writer) dropFence(threadID string, f *fence) {
	w.mu.Lock()
	d := w.threads[threadID]
	w.mu.Unlock()
	if d == nil {
		return
	}
	d.mu.Lock()
	d.drop = append(d.drop, f)
	d.mu.Unlock()
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
		d = &threadDrain{w: w, threadID: threadID, wake: make(chan struct{}, 1),
			segs: map[segKey]*segment{}, paused: map[segKey]*pausedSegment{}, failedRuns: map[string]error{}}
		w.threads[threadID] = d
		w.threadsPeak = max(w.threadsPeak, len(w.threads))
		w.wg.Add(1)
		go d.run()
	}
	d.mu.Lock()
	d.queue = append(d.queue, queued{ev: ev, data: data, fence: f})
	d.queuedBytes += queuedSize(&ev, data)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

// queuedSize is what an event takes in a queue, near enough: a delta its
// text, another event its encoding (or a small record's worth).
func queuedSize(ev *Event, data []byte) int {
	if t, ok := ev.Payload.(*Text); ok {
		return len(t.Text) + 256
	}
	return len(data) + 256
}

// awaitRoom waits, until ctx ends, while the thread's queue holds more
// than queueRoomEvents of the largest events: a producer faster than the
// drain (whose pace is the database's) is slowed to it, rather than let
// the queue grow without bound. Events already queued stay queued.
func (w *Writer) awaitRoom(ctx context.Context, threadID string) {
	room := queueRoomEvents * w.cfg.Limits.MaxEventBytes
	for {
		w.mu.Lock()
		d := w.threads[threadID]
		w.mu.Unlock()
		if d == nil {
			return
		}
		d.mu.Lock()
		if d.queuedBytes <= room || d.stop {
			d.mu.Unlock()
			return
		}
		if d.roomMade == nil {
			d.roomMade = make(chan struct{})
		}
		made := d.roomMade
		d.mu.Unlock()
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
	w.mu.Lock()
	d := w.threads[threadID]
	w.mu.Unlock()
	return d != nil && d.kept.Load() > 0
}

// Sync waits until every event enqueued for the thread before the call has
// been persisted and published (or dropped after a failure).
func (w *Writer) Sync(ctx context.Context, threadID string) error {
	w.mu.Lock()
	d := w.threads[threadID]
	if d == nil {
		w.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	d.mu.Lock()
	d.waiters = append(d.waiters, waiter{at: d.enqueued + len(d.queue), done: done})
	d.mu.Unlock()
	w.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
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
		d.stopping()
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

type waiter struct {
	at   int
	done chan struct{}
}

// maxDrainPass bounds the events one drain pass takes from the queue. A
// producer faster than the drain (an agent emitting deltas in a loop)
// queues tens of thousands of events during one pass; published as one
// batch they would overflow every subscriber's queue at once, however fast
// it reads (a batch reaches a subscriber whole or not at all). A pass of
// this size is one multi-row append and one publish that fit a default
// queue many times over, and costs nothing measurable per event.
const maxDrainPass = 1024

// queued is an event waiting in a drain, with its encoding when its
// producer made it (nil: the drain makes it) and the holder of the token
// it is written under (nil: none).
type queued struct {
	ev    Event
	data  []byte
	fence *fence
}

// threadDrain is the ordered drain of one thread.
type threadDrain struct {
	w        *Writer
	threadID string
	wake     chan struct{}

	mu    sync.Mutex
	queue []queued
	// queuedBytes is what the queue holds (queuedSize); roomMade, when
	// set, is closed when the drain takes from the queue, for producers
	// waiting in awaitRoom.
	queuedBytes int
	roomMade    chan struct{}
	enqueued    int // events taken from the queue so far
	waiters     []waiter
	stop        bool
	drop        []*fence // claims to discard, from dropFence

	// Owned by the drain goroutine.
	segs map[segKey]*segment
	// paused are the segments the last silence closed (see openSegment).
	paused    map[segKey]*pausedSegment
	nextOrder int
	// failedRuns are the runs whose events are dropped, with why: a
	// storage failure (see fail), or their thread gone.
	failedRuns map[string]error
	// stale are the claims whose events are dropped: the log refused
	// their token, the registry found them taken (dropFence), or their
	// background agent's events could not be stored (failAgentsOnly).
	stale map[*fence]bool
	// endings are the error and run-finish of runs failed by a storage
	// outage, with their runs' token holders: published live when the run
	// failed, stored once the log answers again (see storeEndings).
	endings []batchItem
	// lostFinish holds, by run, the run-finish of a batch the outage
	// failed: its append may have been stored after all (see
	// dropStoredEndings).
	lostFinish map[string]Event
	// kept is len(endings) as of the end of the last pass, for readers
	// outside the drain (see Writer.keepsEndings).
	kept atomic.Int32
	// committed is the thread's highest seq this drain knows committed (0:
	// it has not appended yet), the Since of the next first piece and the
	// After of the deltas it publishes.
	committed int64
	// headKnown is set once the drain read the log's head for its first
	// deltas, headAsked once it tried (see knownHead).
	headKnown, headAsked bool
	// closing are the segments with checkpoint pieces that this pass
	// closed: their pieces go once their block is stored.
	closing []*segment
	// pieceBackoff is the pause after the last failed checkpoint (0: the
	// last one was stored), and no piece is tried before pieceRetry.
	pieceBackoff time.Duration
	pieceRetry   time.Time
}

func (d *threadDrain) stopping() {
	d.mu.Lock()
	d.stop = true
	if d.roomMade != nil {
		close(d.roomMade)
		d.roomMade = nil
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
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
			case <-d.wake:
			case <-idle.C:
			}
		}
		d.mu.Lock()
		batch := d.queue
		d.queue = nil
		backlog = len(batch) > maxDrainPass
		if backlog {
			d.queue, batch = batch[maxDrainPass:], batch[:maxDrainPass]
		}
		d.enqueued += len(batch)
		for i := range batch {
			d.queuedBytes -= queuedSize(&batch[i].ev, batch[i].data)
		}
		if d.roomMade != nil {
			close(d.roomMade)
			d.roomMade = nil
		}
		stop := d.stop
		drop := d.drop
		d.drop = nil
		d.mu.Unlock()
		for _, f := range drop {
			d.dropStale(f)
		}

		now := time.Now()
		if len(batch) > 0 {
			lastActivity = now
		}
		var b batchBuilder
		for i := range batch {
			d.add(&b, &batch[i])
		}
		switch {
		case stop && !backlog:
			d.closeWhere(&b, func(*segment) bool { return true })
		case len(d.segs) > 0 && now.Sub(lastActivity) >= d.w.cfg.IdleFlush:
			d.pause(&b)
		}
		d.storeEndings()
		if len(b.items) > 0 {
			d.commit(b.items)
		}
		d.dropPieces()
		d.checkpoint(now)
		d.kept.Store(int32(len(d.endings)))
		d.release()

		if backlog {
			// The subscribers this publish woke share the CPU with this
			// goroutine; yielding lets them take the pass before the next
			// one lands in their queues, so a backlog reaches a fast
			// subscriber in passes rather than piling up in its queue.
			runtime.Gosched()
			continue
		}
		if stop {
			d.mu.Lock()
			empty := len(d.queue) == 0
			d.mu.Unlock()
			if empty {
				d.retire()
				return
			}
			continue
		}
		if len(d.segs) == 0 && len(d.endings) == 0 && time.Since(lastActivity) >= d.w.cfg.RetireAfter && d.tryRetire() {
			return
		}
		wait := d.w.cfg.IdleFlush
		if len(d.segs) > 0 {
			wait = max(time.Until(lastActivity.Add(d.w.cfg.IdleFlush)), time.Millisecond)
		} else {
			// Nothing to flush: wake when the drain may retire.
			wait = min(wait, max(time.Until(lastActivity.Add(d.w.cfg.RetireAfter)), time.Millisecond))
		}
		if len(d.endings) > 0 {
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

// release wakes Sync callers whose events have all been handled.
func (d *threadDrain) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.waiters[:0]
	for _, wt := range d.waiters {
		if wt.at <= d.enqueued {
			close(wt.done)
		} else {
			kept = append(kept, wt)
		}
	}
	d.waiters = kept
}

// tryRetire removes an idle drain unless an event arrived meanwhile.
func (d *threadDrain) tryRetire() bool {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queue) > 0 || len(d.waiters) > 0 || d.stop {
		return false
	}
	d.w.forget(d.threadID)
	return true
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

func (d *threadDrain) retire() {
	d.w.mu.Lock()
	if d.w.threads[d.threadID] == d {
		d.w.forget(d.threadID)
	}
	d.w.mu.Unlock()
	d.mu.Lock()
	for _, wt := range d.waiters {
		close(wt.done)
	}
	d.waiters = nil
	d.mu.Unlock()
}

// refusal is why an event of the run, written under f's claim, is
// dropped rather than stored (nil: it is not): its run failed, or its
// claim was taken.
func (d *threadDrain) refusal(runID string, f *fence) error {
	if err := d.failedRuns[runID]; err != nil && !f.settlement() {
		return err
	}
	if d.stale[f] {
		return ErrRunTakenOver
	}
	return nil
}

// commit persists the stored items in one append (retrying with backoff),
// then publishes every item in order. Each event is encoded once: the same
// bytes go to the log and to the live frame.
func (d *threadDrain) commit(items []batchItem) {
	data := make([][]byte, len(items))
	var rows []Event
	var rowData [][]byte
	var rowFences []*fence
	for i := range items {
		b := items[i].data
		var err error
		if b == nil {
			b, err = json.Marshal(&items[i].ev)
		}
		if err == nil && items[i].stored && len(b) > d.w.cfg.Limits.MaxEventBytes {
			// The run's door refuses such events; one that came another
			// way is not stored either, where a database might refuse it
			// (PostgreSQL's 1 GB field) and every reader would hold it.
			err = &LimitError{Code: CodeEventTooLarge, Type: items[i].ev.Type, Size: len(b), Limit: d.w.cfg.Limits.MaxEventBytes}
		}
		if err != nil {
			// Validated events always encode; one that does not is dropped
			// rather than allowed to fail the whole batch.
			d.w.cfg.Logger.Error("dropping an event that cannot be stored", "thread", d.threadID, "type", items[i].ev.Type, "err", err)
			items[i].fence.lose(&NotStoredError{Fate: FateRefused, Err: err})
			items[i].stored = false
			continue
		}
		data[i] = b
		if items[i].stored {
			rows = append(rows, items[i].ev)
			rowData = append(rowData, b)
			rowFences = append(rowFences, items[i].fence)
		}
	}
	if len(rows) > 0 {
		start := time.Now()
		_, span := d.startSpan("writer.append", items, len(rows))
		first, tokens, err := d.appendWithRetry(rows, rowData, rowFences)
		if err != nil {
			span.SetStatus(codes.Error, "append failed")
		}
		span.End()
		var stale *StaleFenceError
		if errors.As(err, &stale) {
			if rest, ok := d.refused(items, rowFences, tokens, stale.Tokens); ok {
				if len(rest) > 0 {
					d.commit(rest)
				}
				return
			}
		}
		if errors.Is(err, ErrNotFound) && len(usersOf(items)) > 1 {
			// The log stores a user's events only in that user's thread: a
			// batch that mixes the events of a run whose thread was deleted
			// and taken by another user with the new owner's must not lose
			// the new owner's. Each user's events go in on their own.
			for _, user := range usersOf(items) {
				d.commit(slices.DeleteFunc(slices.Clone(items), func(it batchItem) bool { return it.ev.UserID != user }))
			}
			return
		}
		if err != nil {
			d.fail(items, err)
			return
		}
		// The latest commit's, not the highest ever: a thread deleted and
		// made again under the same id starts again at 1 in this drain.
		d.committed = first + int64(len(rows)) - 1
		d.w.cfg.Observer.BatchCommitted(len(rows), time.Since(start))
		if d.w.finished != nil {
			for i := range rows {
				if rows[i].Type == TypeRunFinish {
					d.w.finished(d.threadID, rows[i].RunID, tokens[i])
				}
			}
		}
		d.publish(items, data, first)
		return
	}
	d.publish(items, data, 0)
}

// publish sends a committed batch's frames, in order, the stored ones
// with their seqs from first on.
func (d *threadDrain) publish(items []batchItem, data [][]byte, first int64) {
	obs := d.w.cfg.Observer
	frames := make([]Frame, 0, len(items))
	seq := first
	// after is the highest seq committed before the next frame: every
	// seq before this batch's first is (seqs follow commit order).
	after := d.committed
	if first > 0 {
		after = first - 1
	} else if after == 0 && hasDelta(items) {
		// Only what this drain committed counts, not what it heard of
		// since: a delta of a writer whose run another instance settled
		// meanwhile must stay older than the settlement's rows, so that
		// every point drops it as late.
		after = d.knownHead()
	}
	held := d.w.cfg.LiveHeld != nil && d.w.cfg.LiveHeld()
	for i := range items {
		if data[i] == nil {
			continue
		}
		if t := items[i].ev.Type; held && (t == TypeTextDelta || t == TypeReasoningDelta) {
			continue
		}
		var s int64
		if items[i].stored {
			s = seq
			seq++
		}
		f := EncodedFrame(s, &items[i].ev, data[i])
		if s > 0 {
			after = s
		} else if t := items[i].ev.Type; t == TypeTextDelta || t == TypeReasoningDelta {
			f.Offset, f.HasOffset, f.After = items[i].offset, true, after
		}
		frames = append(frames, f)
		obs.EventPublished(items[i].ev.Type)
	}
	ctx, span := d.startSpan("writer.publish", items, len(frames))
	if cp, ok := d.w.hub.(contextPublisher); ok {
		cp.PublishContext(ctx, d.threadID, frames)
	} else {
		d.w.hub.Publish(d.threadID, frames)
	}
	span.End()
}

// contextPublisher is a Publisher that carries the trace context on (the
// cluster link, in its bus messages).
type contextPublisher interface {
	PublishContext(ctx context.Context, threadID string, frames []Frame)
}

// noSpan is the span of a batch while tracing is off.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan begins a span of the drain's work on a batch, under the span
// of the first run it writes for: a drain serves every run of its thread
// in turn, so its spans have no context of their own. Only the thread
// and the batch's size are recorded, never the events.
func (d *threadDrain) startSpan(name string, items []batchItem, n int) (context.Context, trace.Span) {
	if !tracing.Active() {
		return context.Background(), noSpan
	}
	var parent trace.SpanContext
	for i := range items {
		if f := items[i].fence; f != nil && f.span.IsValid() {
			parent = f.span
			break
		}
	}
	return tracing.Start(trace.ContextWithSpanContext(context.Background(), parent), name,
		attribute.String("thread.id", d.threadID), attribute.Int("batch.size", n))
}

// knownHead returns the thread's highest committed seq for a drain that
// has committed nothing yet, reading it from the log once; -1 when the log
// did not answer in time (the deltas then go out with After unknown).
func (d *threadDrain) knownHead() int64 {
	if d.committed > 0 || d.headKnown {
		return d.committed
	}
	if d.headAsked {
		return -1 // asked once and failed: the drain's next commit tells
	}
	d.headAsked = true
	ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
	defer cancel()
	next, err := d.w.log.NextSeq(ctx, d.threadID)
	if err != nil {
		return -1
	}
	d.headKnown = true
	d.committed = next - 1
	return d.committed
}

// hasDelta reports whether items hold a delta.
func hasDelta(items []batchItem) bool {
	return slices.ContainsFunc(items, func(it batchItem) bool {
		return it.ev.Type == TypeTextDelta || it.ev.Type == TypeReasoningDelta
	})
}

// usersOf returns the users the items carry, in order of first appearance.
func usersOf(items []batchItem) []string {
	var users []string
	for i := range items {
		if u := items[i].ev.UserID; !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	return users
}

// appendWithRetry appends rows, each under its holder's token, retrying
// failures with backoff but for a missing thread and a stale token, which
// no retry mends. It returns the tokens of its last try.
func (d *threadDrain) appendWithRetry(rows []Event, data [][]byte, holders []*fence) (first int64, tokens []int64, err error) {
	backoff := d.w.cfg.RetryBackoff
	for attempt := 0; attempt <= d.w.cfg.Retries; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff)
			backoff = min(backoff*2, d.w.cfg.MaxBackoff)
		}
		first, tokens, err = d.appendOnce(rows, data, holders)
		if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrStaleFence) {
			return first, tokens, err
		}
		d.w.cfg.Logger.Warn("append failed, retrying", "thread", d.threadID, "rows", len(rows),
			"attempt", attempt+1, "err", err)
	}
	return 0, tokens, err
}

// appendOnce appends rows, each under its holder's token as it is now,
// and returns those tokens: a holder's token is read when its events are
// committed, since a run that takes its claim again moves it on.
func (d *threadDrain) appendOnce(rows []Event, data [][]byte, holders []*fence) (int64, []int64, error) {
	tokens := make([]int64, len(holders))
	fenced := false
	for i, h := range holders {
		tokens[i] = h.token()
		fenced = fenced || tokens[i] != 0
	}
	if fa := d.w.fencedLog(); fa != nil && fenced {
		first, err := fa.AppendFenced(context.Background(), d.threadID, rows, data, tokens)
		return first, tokens, err
	}
	first, err := d.w.log.AppendEncoded(context.Background(), d.threadID, rows, data)
	return first, tokens, err
}

// refused handles an append the log refused for the stale tokens stale.
// The claims behind them were taken by another instance, which settles
// their runs: every event queued under them, in this batch or later, is
// dropped, published to nobody, with their open segments, and each claim
// is reported once (OnRunFenced). A holder whose token moved on since the
// try (a suspended run took its claim again) is not stopped: its events
// go again with the new token. It returns the rest of the batch, to be
// committed at once; ok is false when no holder of the batch had a stale
// token, which no log refuses.
func (d *threadDrain) refused(items []batchItem, holders []*fence, tokens, stale []int64) (rest []batchItem, ok bool) {
	judged := map[*fence]bool{}
	for i, h := range holders {
		if h == nil || judged[h] || !slices.Contains(stale, tokens[i]) {
			continue
		}
		judged[h] = true
		ok = true
		if h.settled() == tokens[i] {
			d.stopStale(h)
		}
	}
	if !ok {
		return nil, false
	}
	dropped := 0
	for _, it := range items {
		if d.stale[it.fence] {
			it.fence.lose(ErrRunTakenOver)
			dropped++
			continue
		}
		rest = append(rest, it)
	}
	d.w.cfg.Logger.Info("dropping events the log refused: another instance took their claim", "thread", d.threadID,
		"events", dropped, "tokens", stale)
	return rest, true
}

// stopStale drops f's claim, refused by the log, and reports it once.
func (d *threadDrain) stopStale(f *fence) {
	if !d.dropStale(f) {
		return
	}
	f.lost.Store(true)
	if cb := d.w.cfg.OnRunFenced; cb != nil {
		cb(d.threadID, f.runID, f.agentID)
	}
}

// dropStale discards f's claim's open segments, with their checkpoint
// state, and every later event of it. The pieces of its segments stay in
// the store: they are the taker's, which reads them to settle the run. It
// reports whether the claim was not dropped already.
func (d *threadDrain) dropStale(f *fence) bool {
	if d.stale[f] {
		return false
	}
	if d.stale == nil {
		d.stale = map[*fence]bool{}
	}
	d.stale[f] = true
	f.lose(ErrRunTakenOver)
	for k, s := range d.segs {
		if s.fence == f {
			delete(d.segs, k)
		}
	}
	d.closing = slices.DeleteFunc(d.closing, func(s *segment) bool { return s.fence == f })
	return true
}
