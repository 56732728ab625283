package instanceai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/internal/tracing"
)

// The committer: how a drain stores a pass in one append, retried with
// backoff, and only then publishes it.

// logHead is what a drain knows of its thread's committed seqs.
type logHead struct {
	// committed is the thread's highest seq this drain knows committed (0:
	// it has not appended yet), the Since of the next first piece and the
	// After of the deltas it publishes.
	committed int64
	// known is set once the drain read the log's head for its first
	// deltas, asked once it tried (see read).
	known, asked bool
}

// read returns the thread's highest committed seq for a drain that has
// committed nothing yet, reading it from the log once; -1 when the log
// did not answer in time (the deltas then go out with After unknown).
func (h *logHead) read(log EventLog, threadID string) int64 {
	if h.committed > 0 || h.known {
		return h.committed
	}
	if h.asked {
		return -1 // asked once and failed: the drain's next commit tells
	}
	h.asked = true
	ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
	defer cancel()
	next, err := log.NextSeq(ctx, threadID)
	if err != nil {
		return -1
	}
	h.known = true
	h.committed = next - 1
	return h.committed
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
		d.head.committed = first + int64(len(rows)) - 1
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
	after := d.head.committed
	if first > 0 {
		after = first - 1
	} else if after == 0 && hasDelta(items) {
		// Only what this drain committed counts, not what it heard of
		// since: a delta of a writer whose run another instance settled
		// meanwhile must stay older than the settlement's rows, so that
		// every point drops it as late.
		after = d.head.read(d.w.log, d.threadID)
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
		if attempt > 0 {
			if first, ok := d.landed(rows, data); ok {
				return first, tokens, nil
			}
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

// landed reports whether a failed append was committed after all, and
// where: the log's last rows are the batch's bytes. A connection that
// broke after the database committed and before its answer arrived looks
// like a failure, and trying again would store the batch twice. Events
// carry their time and ids, so another batch with the same bytes is not
// one a producer could have meant as new.
func (d *threadDrain) landed(rows []Event, data [][]byte) (first int64, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
	defer cancel()
	next, err := d.w.log.NextSeq(ctx, d.threadID)
	n := int64(len(rows))
	if err != nil || n == 0 || next-1 < n {
		return 0, false
	}
	stored, err := d.w.log.ReadRowsAfter(ctx, d.threadID, next-1-n, len(rows), 0)
	if err != nil || len(stored) != len(rows) {
		return 0, false
	}
	for i := range rows {
		want := []byte(nil)
		if i < len(data) {
			want = data[i]
		}
		if want == nil {
			if want, err = json.Marshal(&rows[i]); err != nil {
				return 0, false
			}
		}
		if !bytes.Equal(stored[i].Data, want) {
			return 0, false
		}
	}
	return next - n, true
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
	if d.w.fences() && fenced {
		first, err := d.w.log.AppendFenced(context.Background(), d.threadID, rows, data, tokens)
		return first, tokens, err
	}
	first, err := d.w.log.AppendEncoded(context.Background(), d.threadID, rows, data)
	return first, tokens, err
}
