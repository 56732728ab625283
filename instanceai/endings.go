package instanceai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"time"
)

// What a drain does when the log refuses a batch for good: the runs it
// touched end, their endings kept and stored once the log answers again,
// and what the outage may have stored after all is found in the log.

// outageEndings are the error and run-finish of runs failed by a storage
// outage, with their runs' token holders: published live when the run
// failed, stored once the log answers again (see storeEndings). The drain
// goroutine owns them; kept is for readers outside it.
type outageEndings struct {
	items []batchItem
	// lostFinish holds, by run, the run-finish of a batch the outage
	// failed: its append may have been stored after all (see
	// dropStoredEndings).
	lostFinish map[string]Event
	// kept is len(items) as of the end of the last pass, for readers
	// outside the drain (see Writer.keepsEndings).
	kept atomic.Int32
}

// holds reports whether endings wait to be stored.
func (e *outageEndings) holds() bool { return len(e.items) > 0 }

// publishKept tells readers outside the drain what it keeps, at the end
// of a pass.
func (e *outageEndings) publishKept() { e.kept.Store(int32(len(e.items))) }

// keeps reports, from any goroutine, whether endings waited at the end of
// the drain's last pass.
func (e *outageEndings) keeps() bool { return e.kept.Load() > 0 }

// forget drops every ending: stored, or their thread is gone.
func (e *outageEndings) forget() { e.items, e.lostFinish = nil, nil }

// dropRun discards the run's open segments and every later event of it,
// for why. It reports whether the run was not dropped already.
func (d *threadDrain) dropRun(runID string, why error) bool {
	if !d.refusals.failRun(runID, why) {
		return false
	}
	d.coalescer.dropWhere(func(s *segment) bool { return s.key.runID == runID })
	return true
}

// gone drops a batch the log refused as not found, and every later event
// of the runs it touched: their thread was deleted under them, and an id
// taken again by a new thread must not receive them. Each run is reported
// once, so that the registry stops it.
func (d *threadDrain) gone(items []batchItem) {
	d.w.cfg.Logger.Info("dropping events of a deleted thread", "thread", d.threadID, "events", len(items))
	why := &ThreadNotFoundError{ThreadID: d.threadID}
	for _, it := range items {
		it.fence.lose(why)
		runID := it.ev.RunID
		if !d.dropRun(runID, why) {
			continue
		}
		if cb := d.w.cfg.OnRunGone; cb != nil {
			cb(d.threadID, runID)
		}
	}
}

// fail gives up on a batch: every run it touched ends with a visible error
// and run-finish{error}, published live at once, and later events of those
// runs are dropped (a run touched only by background agents that write
// under claims of their own fails those agents alone: failAgentsOnly).
// The two events are kept and stored, exactly as
// published, once the log answers again (storeEndings), so the log ends the
// run as its clients saw it end.
func (d *threadDrain) fail(items []batchItem, err error) {
	if errors.Is(err, ErrNotFound) {
		d.gone(items)
		return
	}
	d.w.cfg.Logger.Error("giving up on storing events; failing their runs", "thread", d.threadID,
		"events", len(items), "err", err)
	var frames []Frame
	// A run whose run-start is in the failed batch has nothing in the log
	// yet: its run-start is kept with its ending, so that the log does not
	// end a run it never started (the chat that started the run answered
	// with its id, and the client waits for its run in the log).
	starts := map[string]Event{}
	for _, it := range items {
		switch it.ev.Type {
		case TypeRunFinish:
			if d.endings.lostFinish == nil {
				d.endings.lostFinish = map[string]Event{}
			}
			d.endings.lostFinish[it.ev.RunID] = it.ev
		case TypeRunStart:
			starts[it.ev.RunID] = it.ev
		}
	}
	why := &NotStoredError{Fate: FateStorageFailed, Err: err}
	for _, it := range items {
		it.fence.lose(why)
	}
	for _, it := range items {
		runID := it.ev.RunID
		if d.failAgentsOnly(items, runID, err) {
			continue
		}
		if !d.dropRun(runID, why) {
			continue
		}
		// The endings are the run's: its orchestrator's events carry the
		// run's token holder, which a background agent's event of the run
		// does not (its own, unless it has none).
		holder := it.fence
		for _, other := range items {
			if other.ev.RunID == runID && other.fence != nil && other.fence.agentID == "" {
				holder = other.fence
				break
			}
		}
		agent := OrchestratorAgentID(runID)
		now := time.Now().UnixMilli()
		var ending []Event
		if start, ok := starts[runID]; ok {
			ending = append(ending, start)
		}
		for _, ev := range append(ending, []Event{
			{Type: TypeError, RunID: runID, AgentID: agent, UserID: it.ev.UserID, TS: now,
				Payload: &ErrorPayload{Content: "The server could not store this run's events; the run was stopped.",
					Code: "storage_unavailable", TechnicalDetails: err.Error()}},
			{Type: TypeRunFinish, RunID: runID, AgentID: agent, UserID: it.ev.UserID, TS: now,
				Payload: &RunFinish{Status: RunError, Reason: "storage_unavailable"}},
		}...) {
			if f, ferr := NewFrame(0, &ev); ferr == nil {
				frames = append(frames, f)
				d.endings.items = append(d.endings.items, batchItem{ev: ev, stored: true, fence: holder})
			}
		}
		if cb := d.w.cfg.OnRunFailed; cb != nil {
			cb(d.threadID, runID, err)
		}
	}
	d.w.hub.Publish(d.threadID, frames)
}

// storeEndings appends the endings of runs failed by a storage outage, in
// one try: a pass that finds the log still down leaves them for the next,
// which comes within MaxBackoff. Their frames are published as echoes: a
// connection that had them live when the runs failed only moves its cursor
// past the rows, one that joined since is sent them, and replay and session
// restore read the same events from the log. The stored run-finish releases
// the run's claim as any run-finish does. Each ending is written under its
// run's token: if another instance took the run meanwhile (the outage
// outlasted its lease) and settled it, the log refuses the ending, which
// is dropped; the log then ends the run with that settlement.
func (d *threadDrain) storeEndings() {
	if len(d.endings.items) == 0 || !d.dropStoredEndings() || !d.dropStoredStarts() || len(d.endings.items) == 0 {
		return
	}
	events := make([]Event, len(d.endings.items))
	data := make([][]byte, len(d.endings.items))
	holders := make([]*fence, len(d.endings.items))
	for i := range d.endings.items {
		events[i], holders[i] = d.endings.items[i].ev, d.endings.items[i].fence
		b, err := json.Marshal(&events[i])
		if err != nil {
			d.w.cfg.Logger.Error("encode a failed run's ending", "thread", d.threadID, "err", err)
			d.endings.items = nil
			return
		}
		data[i] = b
	}
	first, tokens, err := d.appendOnce(events, data, holders)
	if errors.Is(err, ErrNotFound) {
		d.endings.forget() // the thread was deleted meanwhile
		return
	}
	var stale *StaleFenceError
	if errors.As(err, &stale) {
		d.settledElsewhere(tokens, stale.Tokens)
		return
	}
	if err != nil {
		return
	}
	d.head.committed = first + int64(len(events)) - 1
	d.w.cfg.Logger.Info("stored the endings of runs the storage outage failed", "thread", d.threadID, "events", len(events))
	if d.w.pieces != nil {
		// The failed runs' segments never got their blocks: their
		// pieces are of no more use.
		for i := range events {
			if events[i].Type == TypeRunFinish {
				d.deletePieces(func(ctx context.Context) error {
					return d.w.pieces.DeleteRunCheckpoints(ctx, d.threadID, events[i].RunID, "")
				})
			}
		}
	}
	frames := make([]Frame, len(events))
	for i := range events {
		frames[i] = EncodedFrame(first+int64(i), &events[i], data[i])
		frames[i].Echo = true
		if events[i].Type == TypeRunFinish && d.w.finished != nil {
			d.w.finished(d.threadID, events[i].RunID, tokens[i])
		}
	}
	d.endings.forget()
	d.w.hub.Publish(d.threadID, frames)
}

// dropStoredEndings drops the kept endings of runs whose own run-finish
// is in the log after all: an append the writer took for failed may have
// been committed, its answer lost with the connection (a reset after the
// COMMIT). The rows this drain did not know it committed are published,
// as any catch-up from the log, and each such run's claim is released as
// its run-finish's commit would have. It reports false when the log could
// not be read: the endings wait for the next pass. A drain that had
// committed nothing before cannot tell its rows from other writers' in a
// bounded read, and stores the endings as before.
func (d *threadDrain) dropStoredEndings() bool {
	if d.head.committed == 0 {
		return true
	}
	var rows []StoredEvent
	for after := d.head.committed; ; {
		ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
		page, err := d.w.log.ReadAfter(ctx, d.threadID, after, lostRowsPage)
		cancel()
		if err != nil {
			// A deleted thread: the endings' own append says so.
			return errors.Is(err, ErrNotFound)
		}
		rows = append(rows, page...)
		if len(page) < lostRowsPage || len(rows) >= maxLostRows {
			break
		}
		after = page[len(page)-1].Seq
	}
	var frames []Frame
	ours := map[string]bool{} // run → its run-finish in the log is the one this drain lost
	for _, r := range rows {
		frames = append(frames, EncodedFrame(r.Seq, &r.Event, r.Data))
		if r.Event.Type == TypeRunFinish && slices.ContainsFunc(d.endings.items, func(e batchItem) bool { return e.ev.RunID == r.Event.RunID }) {
			lost, kept := d.endings.lostFinish[r.Event.RunID]
			b, err := json.Marshal(&lost)
			ours[r.Event.RunID] = kept && err == nil && bytes.Equal(b, r.Data)
		}
	}
	if len(ours) == 0 {
		return true
	}
	token := map[string]int64{}
	d.endings.items = slices.DeleteFunc(d.endings.items, func(e batchItem) bool {
		if _, done := ours[e.ev.RunID]; done {
			token[e.ev.RunID] = e.fence.token()
			return true
		}
		return false
	})
	d.head.committed = rows[len(rows)-1].Seq
	// Released before the frames go out, as commit does: a run-finish a
	// client was sent has freed its thread.
	for run, mine := range ours {
		delete(d.endings.lostFinish, run)
		if !mine {
			d.w.cfg.Logger.Warn("another instance settled this run while the storage outage kept its ending here; dropping the ending",
				"thread", d.threadID, "run", run)
			continue
		}
		d.w.cfg.Logger.Warn("an append the storage outage seemed to fail had been stored; dropping the run's kept ending",
			"thread", d.threadID, "run", run)
		if d.w.finished != nil {
			// As the run-finish's commit would have, had its answer come.
			d.w.finished(d.threadID, run, token[run])
		}
	}
	d.w.hub.Publish(d.threadID, frames)
	return true
}

// dropStoredStarts drops the kept run-starts (see fail) that the log holds
// after all: the append that seemed to fail had been committed, its
// answer lost. The rest of such a run's ending is still stored; the run's
// rows this drain did not know it committed are published, as any
// catch-up from the log. It reports false when the log could not be read:
// the endings wait for the next pass. A log that cannot list a run's
// events keeps the run-starts.
func (d *threadDrain) dropStoredStarts() bool {
	index, ok := d.w.log.(RunIndex)
	if !ok {
		return true
	}
	stored := map[string]bool{}
	var frames []Frame
	for _, e := range d.endings.items {
		if e.ev.Type != TypeRunStart {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
		rows, err := index.RunEvents(ctx, d.threadID, e.ev.RunID)
		cancel()
		if err != nil {
			// A deleted thread: the endings' own append says so.
			return errors.Is(err, ErrNotFound)
		}
		stored[e.ev.RunID] = slices.ContainsFunc(rows, func(r StoredEvent) bool { return r.Event.Type == TypeRunStart })
		for _, r := range rows {
			if r.Seq > d.head.committed {
				frames = append(frames, EncodedFrame(r.Seq, &r.Event, r.Data))
			}
		}
	}
	d.endings.items = slices.DeleteFunc(d.endings.items, func(e batchItem) bool {
		return e.ev.Type == TypeRunStart && stored[e.ev.RunID]
	})
	if len(frames) > 0 {
		d.w.hub.Publish(d.threadID, frames)
	}
	return true
}

// dropStoredEndings reads the rows after the drain's last known commit in
// pages of lostRowsPage, at most maxLostRows of them: more than the
// writer's passes of an outage commit.
const (
	lostRowsPage = 1024
	maxLostRows  = 64 << 10
)

// settledElsewhere drops the kept endings that the log refused for their
// stale tokens (tokens are those the try used): another instance settled
// their runs while the outage kept the endings here. Each run is logged
// once. The others are tried again at once.
func (d *threadDrain) settledElsewhere(tokens, stale []int64) {
	var kept []batchItem
	var dropped []string
	for i, e := range d.endings.items {
		if !slices.Contains(stale, tokens[i]) {
			kept = append(kept, e)
			continue
		}
		if !slices.Contains(dropped, e.ev.RunID) {
			dropped = append(dropped, e.ev.RunID)
			d.w.cfg.Logger.Warn("another instance settled this run while the storage outage kept its ending here; dropping the ending",
				"thread", d.threadID, "run", e.ev.RunID)
		}
	}
	if len(dropped) == 0 {
		return // no ending had a stale token: tried again at the next pass
	}
	d.endings.items = kept
	d.storeEndings()
}
