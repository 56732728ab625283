package instanceai

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/threadline/threadline/ssestream"
)

// Delivery is one frame as a particular connection must write it.
type Delivery struct {
	// ID is the SSE id to write, 0 for none.
	ID int64
	// Type is the SSE event type, "" for the default (message).
	Type string
	// Kind is the event's type, set on every delivery of an event, also
	// when Event is not (a row a SkipDecode feed replayed).
	Kind EventType
	// Event is the decoded event, nil for a reset frame and for the rows
	// a SkipDecode feed replays.
	Event *Event
	Data  []byte
	// Wire is Data framed as SSE data lines (see Frame.Wire).
	Wire []byte
	// Reset is set on a reset frame (Type ResetFrameType): the events
	// between the connection's cursor and Reset.NextEventID are no longer
	// in the log.
	Reset *Reset
}

// ResetFrameType is the SSE event type of a reset frame.
const ResetFrameType = "reset"

// ReasonEventsEvicted is the reason of a reset frame whose events a
// bounded log (the memory store) dropped.
const ReasonEventsEvicted = "events_evicted"

// Reset tells a connection that the log no longer holds the events after
// its cursor up to NextEventID-1: a bounded store evicted them. Resuming
// silently would fold a gap into the client's state, so the stream says so:
// the client drops what it holds of the thread and takes what follows (the
// log from NextEventID on) as the thread. The frame carries the id
// NextEventID-1, so a reconnect after it does not meet the same gap again.
// Reset is an error too, so a consumer that cannot start over (an AG-UI
// run) can end with it.
type Reset struct {
	Reason   string `json:"reason"`
	ThreadID string `json:"threadId"`
	// LastEventID is the cursor the connection stood at.
	LastEventID int64 `json:"lastEventId"`
	// NextEventID is the oldest event the log still holds after it.
	NextEventID int64 `json:"nextEventId"`
}

func (r *Reset) Error() string {
	return fmt.Sprintf("events %d to %d of thread %q are no longer stored (%s); reload the thread",
		r.LastEventID+1, r.NextEventID-1, r.ThreadID, r.Reason)
}

// replayPage bounds how many rows one log read returns.
const replayPage = 1000

type feedPhase int

const (
	phaseReplay feedPhase = iota
	phaseGap
	phaseOpen
	phaseLive
)

// Feed is one connection's view of a thread: the log after the cursor, then
// the live tail, with no gap and no duplicate.
//
// The handoff: replay the log after the cursor; then register with the hub,
// which atomically captures the highest published seq C and the open
// segments; read the log again up to C (the rows committed while the first
// read ran); send each open segment's text as one id-less delta; then serve
// the subscription's queue, which holds exactly what was published after C.
// When the replay went past C (a block committed but not yet published, or
// a cursor beyond what this hub has seen), the segments those blocks close
// are still open in the hub: their text is not sent again, neither from
// the snapshot nor as deltas queued before the block's own frame.
type Feed struct {
	log      EventLog
	hub      *Hub
	threadID string

	phase feedPhase
	// last is the highest seq this connection has accounted for: written
	// with its id, or a block whose deltas it was sent live.
	last int64
	sub  *Subscription
	snap Snapshot
	// ahead holds the segments whose closing block this connection was
	// sent from the log before the hub published it (the replay read past
	// Snapshot.Committed: the moment between a commit and its publish, or
	// a bus's delay), with the block's seq. Their text is in the block, so
	// the hub's open text of them (in the snapshot, or deltas still
	// queued) is not sent again, until a frame at or past that seq shows
	// the hub has closed them too.
	ahead map[openKey]int64
	// endedLive holds the runs whose run-finish this connection was sent
	// live without an id (they could not be stored): their stored echo is
	// not sent again.
	endedLive map[string]bool

	// SkipDecode, when set before the first Next, delivers the rows the
	// feed reads from the log with their bytes and Kind but no Event: a
	// consumer that sends the stored bytes as they are (the native stream)
	// saves decoding each row, most of a replay's cost. Live frames keep
	// their Event either way.
	SkipDecode bool

	// BeforeLive, if set, is called once when the replay is over, with the
	// highest seq the replay covered and the open segments sent; what it
	// returns is delivered before the live tail (run-sync frames).
	BeforeLive func(committed int64, open []Event) []Delivery

	// Wake, for a feed read with Poll, is called when the live tail has
	// something to take after a Poll found nothing: frames, a resync or
	// the subscription's end. It is called on the publisher's goroutine
	// and must not block. Set it before the first Poll.
	Wake func()
}

// OpenFeed starts a feed after the cursor (0 = from the start).
func OpenFeed(log EventLog, hub *Hub, threadID string, after int64) *Feed {
	return &Feed{log: log, hub: hub, threadID: threadID, last: after}
}

// Close releases the feed's subscription.
func (f *Feed) Close() {
	if f.sub != nil {
		f.sub.Close()
	}
}

// Last returns the highest seq the connection has accounted for.
func (f *Feed) Last() int64 { return f.last }

// Next returns the next deliveries. In the live phase it waits for frames;
// it returns (nil, nil) when tick fires first, so the caller can send a
// heartbeat. An error ends the connection: the subscriber was dropped, the
// thread was deleted, the log failed or ctx ended.
func (f *Feed) Next(ctx context.Context, tick <-chan time.Time) ([]Delivery, error) {
	return f.next(ctx, tick, false)
}

// Poll is Next for a caller that keeps no goroutine waiting on an idle
// feed: where Next would wait for the live tail, Poll returns (nil, nil)
// and Wake is called once there is something to take, so the caller polls
// again then. The replay and the log reads Next makes are made here too.
// A feed is read with Next or with Poll, not both.
func (f *Feed) Poll(ctx context.Context) ([]Delivery, error) {
	return f.next(ctx, nil, true)
}

func (f *Feed) next(ctx context.Context, tick <-chan time.Time, poll bool) ([]Delivery, error) {
	for {
		switch f.phase {
		case phaseReplay:
			out, n, err := f.readPage(ctx, 0)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				return out, nil
			}
			var wake func()
			if poll {
				wake = f.Wake
			}
			f.sub, f.snap = f.hub.subscribe(f.threadID, wake)
			f.phase = phaseGap
		case phaseGap:
			if f.last >= f.snap.Committed {
				f.phase = phaseOpen
				continue
			}
			out, _, err := f.readPage(ctx, f.snap.Committed)
			if err != nil {
				return nil, err
			}
			if len(out) == 0 {
				// The log holds nothing more up to C, though C was
				// committed: a bounded store evicted it. The queue
				// continues from C+1, so the connection is reset to there.
				out = []Delivery{f.reset(f.snap.Committed + 1)}
			}
			return out, nil
		case phaseOpen:
			f.phase = phaseLive
			if f.last > f.snap.Committed {
				if err := f.noteAhead(ctx); err != nil {
					return nil, err
				}
			}
			var out []Delivery
			for i := range f.snap.Open {
				ev := &f.snap.Open[i]
				if _, sent := f.ahead[keyOf(ev)]; sent {
					continue
				}
				data, err := json.Marshal(ev)
				if err != nil {
					return nil, err
				}
				out = append(out, Delivery{Kind: ev.Type, Event: ev, Data: data, Wire: ssestream.DataFrame(data)})
			}
			if f.BeforeLive != nil {
				out = append(out, f.BeforeLive(f.snap.Committed, f.snap.Open)...)
			}
			f.snap.Open = nil
			if len(out) == 0 {
				continue
			}
			return out, nil
		case phaseLive:
			if ready, ch := f.sub.wait(); !ready {
				if poll {
					return nil, nil
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-tick:
					return nil, nil
				case <-ch:
				}
			}
			batches, resync, err := f.sub.take()
			if err != nil {
				return nil, err
			}
			var out []Delivery
			if resync {
				if out, err = f.catchUp(ctx, 0); err != nil {
					return nil, err
				}
			}
			more, err := f.admit(ctx, batches)
			// The deliveries point at the frames' events and bytes, not at
			// the batches: the subscription may reuse their slice, and an
			// idle connection keeps no published frame alive.
			clear(batches)
			if err != nil {
				return nil, err
			}
			if out = append(out, more...); len(out) > 0 {
				return out, nil
			}
		}
	}
}

// catchUp delivers what the log holds after the cursor, up to upTo when
// it is set: the rows a live connection missed because their frames were
// lost (a bus outage) or arrived out of order (another instance wrote
// them). Blocks among them are delivered too: their deltas were likely
// lost with them, and the reducer's REPLACE rule makes a block harmless
// where they were not.
func (f *Feed) catchUp(ctx context.Context, upTo int64) ([]Delivery, error) {
	var out []Delivery
	for {
		page, n, err := f.readPage(ctx, upTo)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if n < replayPage || (upTo > 0 && f.last >= upTo) {
			return out, nil
		}
	}
}

// readPage reads one page of the log after f.last and turns it into
// deliveries (see replayed); n is the number of rows the page held.
func (f *Feed) readPage(ctx context.Context, upTo int64) (out []Delivery, n int, err error) {
	if f.SkipDecode {
		rows, err := ReadRowsAfter(ctx, f.log, f.threadID, f.last, replayPage)
		if err != nil {
			return nil, 0, err
		}
		return f.replayed(len(rows), upTo, func(i int) (int64, EventType, *Event, []byte) {
			r := &rows[i]
			return r.Seq, r.Type, nil, r.Data
		}), len(rows), nil
	}
	rows, err := f.log.ReadAfter(ctx, f.threadID, f.last, replayPage)
	if err != nil {
		return nil, 0, err
	}
	for i := range rows {
		if r := &rows[i]; len(r.Data) == 0 {
			// A log that keeps no bytes (a test double): encode the event.
			r.Data, _ = json.Marshal(&r.Event)
		}
	}
	return f.replayed(len(rows), upTo, func(i int) (int64, EventType, *Event, []byte) {
		r := &rows[i]
		return r.Seq, r.Event.Type, &r.Event, r.Data
	}), len(rows), nil
}

// replayed turns n log rows, read through row, into deliveries, stopping
// after upTo when set. The log's seqs are contiguous, so a first row beyond
// f.last+1 means the rows in between were evicted: a reset frame goes
// first.
func (f *Feed) replayed(n int, upTo int64, row func(i int) (seq int64, kind EventType, ev *Event, data []byte)) []Delivery {
	// The page's frames share one buffer: one allocation, not one per row.
	size := 0
	for i := range n {
		_, _, _, data := row(i)
		size += len(data) + ssestream.DataFrameOverhead
	}
	wires := make([]byte, 0, size)
	out := make([]Delivery, 0, n)
	for i := range n {
		seq, kind, ev, data := row(i)
		if upTo > 0 && seq > upTo {
			break
		}
		if seq <= f.last || len(data) == 0 {
			continue
		}
		if seq > f.last+1 {
			out = append(out, f.reset(seq))
		}
		f.last = seq
		start := len(wires)
		wires = ssestream.AppendDataFrame(wires, data)
		// A multi-line event can outgrow the estimate; the frames already
		// cut keep the old buffer, which stays valid.
		out = append(out, Delivery{ID: seq, Kind: kind, Event: ev, Data: data, Wire: wires[start:len(wires):len(wires)]})
	}
	return out
}

// reset returns the reset frame that moves the cursor to next-1, over
// events the log no longer holds.
func (f *Feed) reset(next int64) Delivery {
	r := &Reset{Reason: ReasonEventsEvicted, ThreadID: f.threadID, LastEventID: f.last, NextEventID: next}
	data, _ := json.Marshal(r) // a struct of strings and integers
	f.last = next - 1
	return Delivery{ID: next - 1, Type: ResetFrameType, Data: data, Reset: r}
}

// admit applies the cursor rule to live frames: an id already accounted for
// is skipped; the next id is delivered with its id. A later id means rows
// in between reached this hub late or not at all (another instance wrote
// them, or the bus lost them): they are committed, since seqs are handed
// out in commit order, so they are read from the log first. Should the log
// not have them (a memory store evicted them), a reset frame says so
// before the frame goes out with its id: the client's cursor never jumps
// silently over a row it has not seen.
func (f *Feed) admit(ctx context.Context, batches [][]Frame) ([]Delivery, error) {
	n := 0
	for _, frames := range batches {
		n += len(frames)
	}
	out := make([]Delivery, 0, n)
	for _, frames := range batches {
		var err error
		if out, err = f.admitBatch(ctx, out, frames); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// admitBatch applies admit's rules to the frames of one batch, appending
// to out.
func (f *Feed) admitBatch(ctx context.Context, out []Delivery, frames []Frame) ([]Delivery, error) {
	for i := range frames {
		fr := &frames[i]
		if fr.Seq > f.last+1 {
			missed, err := f.catchUp(ctx, fr.Seq-1)
			if err != nil {
				return nil, err
			}
			out = append(out, missed...)
			if fr.Seq > f.last+1 {
				out = append(out, f.reset(fr.Seq))
			}
		}
		if len(f.ahead) > 0 {
			if f.repeats(fr) {
				continue
			}
		}
		var id int64
		switch {
		case fr.Seq == 0:
		case fr.Seq <= f.last:
			continue
		default: // fr.Seq == f.last+1
			f.last = fr.Seq
			id = fr.Seq
		}
		if fr.Hidden || (fr.Echo && f.endedLive[fr.Event.RunID]) {
			continue
		}
		if fr.Seq == 0 && fr.Event.Type == TypeRunFinish {
			if f.endedLive == nil {
				f.endedLive = map[string]bool{}
			}
			f.endedLive[fr.Event.RunID] = true
		}
		out = append(out, Delivery{ID: id, Kind: fr.Event.Type, Event: fr.Event, Data: fr.Data, Wire: fr.Wire})
	}
	return out, nil
}

// openKey names a coalescing segment as its deltas and its block carry it.
type openKey struct {
	runID, agentID, responseID string
	kind                       EventType // TypeTextDelta or TypeReasoningDelta
}

// keyOf returns the segment a delta or block belongs to; ok is false for
// every other event.
func keyOfEvent(ev *Event) (openKey, bool) {
	kind := ev.Type
	switch ev.Type {
	case TypeTextDelta, TypeReasoningDelta:
	case TypeTextBlock:
		kind = TypeTextDelta
	case TypeReasoningBlock:
		kind = TypeReasoningDelta
	default:
		return openKey{}, false
	}
	return openKey{runID: ev.RunID, agentID: ev.AgentID, responseID: ev.ResponseID, kind: kind}, true
}

func keyOf(ev *Event) openKey {
	k, _ := keyOfEvent(ev)
	return k
}

// noteAhead reads the rows the replay sent past the hub's snapshot, up to
// f.last, and records the blocks among them in f.ahead.
func (f *Feed) noteAhead(ctx context.Context) error {
	after := f.snap.Committed
	for after < f.last {
		rows, err := f.log.ReadAfter(ctx, f.threadID, after, replayPage)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		for i := range rows {
			r := &rows[i]
			if r.Seq > f.last {
				return nil
			}
			if r.Event.Type == TypeTextBlock || r.Event.Type == TypeReasoningBlock {
				if f.ahead == nil {
					f.ahead = map[openKey]int64{}
				}
				f.ahead[keyOf(&r.Event)] = r.Seq
			}
			after = r.Seq
		}
	}
	return nil
}

// repeats reports whether a live frame is text the connection already has
// in a block it was sent ahead of the hub, and forgets the segments the
// hub has now closed as well (a frame at or past their block's seq).
func (f *Feed) repeats(fr *Frame) bool {
	if fr.Seq > 0 {
		for k, seq := range f.ahead {
			if fr.Seq >= seq {
				delete(f.ahead, k)
			}
		}
		return false
	}
	k, ok := keyOfEvent(fr.Event)
	if !ok {
		return false
	}
	_, sent := f.ahead[k]
	return sent
}
