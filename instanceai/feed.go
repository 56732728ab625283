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
	// Wire is Data framed as SSE data lines (see Frame.Wire) on a live
	// frame's delivery; nil on a row read from the log, which a stream
	// frames as it writes it.
	Wire []byte
	// Size is the bytes of a row delivered without Data: a large one,
	// which the feed left in the log (see SkipDecode) for the stream to
	// read in parts (PartReader.ReadRowPart) as it writes it.
	Size int
	// Reset is set on a reset frame (Type ResetFrameType): the events
	// between the connection's cursor and Reset.NextEventID are no longer
	// in the log, or never were (a cursor ahead of the log).
	Reset *Reset
	// Repair is set on a block sent to a connection that had been sent
	// more of the segment's text as deltas than the block holds: a writer
	// that died streamed text it never stored, and another instance
	// settled the segment from what it had. The block alone cannot fix the
	// client's text (the REPLACE rule takes only a block that extends it);
	// a consumer that can restate the run (the native stream's run-sync)
	// should.
	Repair bool
}

// ResetFrameType is the SSE event type of a reset frame.
const ResetFrameType = "reset"

// Reasons of reset frames: the events after the cursor were dropped by a
// bounded log (the memory store), or the cursor is ahead of the log (it
// came from a thread that was deleted and created again, or from another
// deployment), so the log holds nothing the client's state lines up with.
const (
	ReasonEventsEvicted = "events_evicted"
	ReasonCursorAhead   = "cursor_ahead"
)

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
	if r.Reason == ReasonCursorAhead {
		return fmt.Sprintf("event id %d is beyond the end of thread %q (%s); reload the thread",
			r.LastEventID, r.ThreadID, r.Reason)
	}
	return fmt.Sprintf("events %d to %d of thread %q are no longer stored (%s); reload the thread",
		r.LastEventID+1, r.NextEventID-1, r.ThreadID, r.Reason)
}

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
//
// A cursor beyond the log's end is not served silently: the connection is
// reset to the start of the log (ReasonCursorAhead).
//
// Text: the feed follows what it sent the connection of each segment (see
// segmentLedger). Deltas that do not continue that text are held back, and
// late ones dropped; a block is sent unless the connection has exactly its
// text already, so a client that missed deltas (the bus lost them, or this
// instance joined mid-segment) has its text made whole by the block. A
// block ahead of the hub (the replay read past C: the moment between a
// commit and its publish, or a bus's delay) closes its segment here, so
// the hub's open text of it is not sent again.
type Feed struct {
	log threadLog
	hub *Hub

	phase feedPhase
	// cursor is the cursor the connection opened with (0 after a reset to
	// the start).
	cursor int64
	// last is the highest seq this connection has accounted for: written
	// with its id, or a block whose text it already had.
	last int64
	sub  *Subscription
	snap Snapshot
	// ledger follows what this connection was sent of each segment.
	ledger segmentLedger
	// liveEndings holds, by run, the bytes of the error and run-finish
	// this connection was sent live without an id (they could not be
	// stored then): their stored copies, byte for byte the same, only move
	// the cursor.
	liveEndings map[string][][]byte
	// replay is what the replay noted for the handoff.
	replay replayNotes

	// SkipDecode, when set before the first Next, delivers the rows the
	// feed reads from the log with their bytes and Kind but no Event: a
	// consumer that sends the stored bytes as they are (the native stream)
	// saves decoding each row, most of a replay's cost. Live frames keep
	// their Event either way.
	SkipDecode bool

	// BeforeLive, if set, is called once when the replay is over (see
	// Handoff); what it returns is delivered before the live tail
	// (run-sync frames).
	BeforeLive func(Handoff) []Delivery

	// Restate, if set, is called after a block that needs a repair (see
	// Delivery.Repair), with the block's run and seq; what it returns is
	// delivered right after the block (a run-sync of the run).
	Restate func(runID string, upTo int64) []Delivery

	// Replayed, if set, is told how many stored events each page of the
	// replay delivered: the log rows sent before the live tail (those read
	// later, to fill a gap the live tail left, are not a replay).
	Replayed func(events int)

	// Wake, for a feed read with Poll, is called when the live tail has
	// something to take after a Poll found nothing: frames or the
	// subscription's end. It is called on the publisher's goroutine
	// and must not block. Set it before the first Poll.
	Wake func()
}

// Handoff is what a feed has sent when its replay is over.
type Handoff struct {
	// Last is the highest seq the connection was sent.
	Last int64
	// Open are the open segments' text it was sent as deltas.
	Open []Event
	// Cursor is the cursor it opened with (0 after a reset).
	Cursor int64
	// Resumed are the runs the replay sent events of but not their
	// run-start: the client held part of each at its cursor, maybe more
	// of its text than the log has (see Delivery.Repair).
	Resumed []string
}

// OpenFeed starts a feed after the cursor (0 = from the start).
func OpenFeed(log EventLog, hub *Hub, threadID string, after int64) *Feed {
	return &Feed{log: threadLog{log: log, threadID: threadID}, hub: hub, last: after, cursor: after}
}

// OpenLiveFeed opens a feed of the thread's live tail for a caller about
// to start a run on it: it registers with the hub first, then takes the
// log's end as its cursor (Last), so that every frame published from then
// on, ephemeral ones included (a status, a custom event: no replay brings
// them back), reaches it through its queue, in the order they were
// published. Stored rows of other writers that the queue misses are read
// from the log as on any feed. Read it with Next.
func OpenLiveFeed(ctx context.Context, log EventLog, hub *Hub, threadID string) (*Feed, error) {
	f := &Feed{log: threadLog{log: log, threadID: threadID}, hub: hub}
	f.sub, f.snap = hub.subscribe(threadID, nil)
	next, err := log.NextSeq(ctx, threadID)
	if err != nil {
		f.Close()
		return nil, err
	}
	// Every row after next-1 commits after the registration, so the hub
	// publishes it to the queue: nothing is to be replayed.
	f.last, f.cursor, f.phase = next-1, next-1, phaseGap
	return f, nil
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
			out, n, _, err := f.readPage(ctx, 0)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				return out, nil
			}
			if f.last > 0 && f.last == f.cursor {
				ahead, err := f.cursorAhead(ctx)
				if err != nil {
					return nil, err
				}
				if ahead != nil {
					return []Delivery{*ahead}, nil
				}
			}
			var wake func()
			if poll {
				wake = f.Wake
			}
			f.sub, f.snap = f.hub.subscribe(f.log.threadID, wake)
			f.phase = phaseGap
		case phaseGap:
			if f.last >= f.snap.Committed {
				f.phase = phaseOpen
				continue
			}
			out, _, _, err := f.readPage(ctx, f.snap.Committed)
			if err != nil {
				return nil, err
			}
			if len(out) == 0 {
				// The log holds nothing more up to C, though C was
				// committed: a bounded store evicted it, and the queue
				// continues from C+1, so the connection is reset to there;
				// unless the log never had C (its head, which counts
				// evicted events, is below): the hub's C is of a deleted
				// thread that was made again under the same id.
				next, err := f.log.nextSeq(ctx)
				if err != nil {
					return nil, err
				}
				if next-1 < f.snap.Committed {
					f.snap.Committed = f.last
					continue
				}
				out = []Delivery{f.reset(ReasonEventsEvicted, f.snap.Committed+1)}
			}
			return out, nil
		case phaseOpen:
			f.phase = phaseLive
			if err := f.notePending(ctx); err != nil {
				return nil, err
			}
			if err := f.noteBefore(ctx); err != nil {
				return nil, err
			}
			var out []Delivery
			var sent []Event
			for i := range f.snap.Open {
				ev := &f.snap.Open[i]
				after := f.snap.OpenAfter[i]
				if f.ledger.superseded(ev, after) {
					continue // closed since, in what the replay sent
				}
				if after > f.last {
					// The segment began after stored events this
					// connection has not been sent yet (its run's
					// run-start, committed after the snapshot): its text
					// must not come before them. Its later deltas are then
					// a gap here, held back until its block.
					continue
				}
				text := ev.Payload.(*Text).Text
				f.ledger.delta(ev, 0, after, len(text))
				data, err := json.Marshal(ev)
				if err != nil {
					return nil, err
				}
				out = append(out, Delivery{Kind: ev.Type, Event: ev, Data: data, Wire: ssestream.DataFrame(data)})
				sent = append(sent, *ev)
			}
			if f.BeforeLive != nil {
				out = append(out, f.BeforeLive(Handoff{Last: f.last, Open: sent, Cursor: f.cursor, Resumed: f.replay.resumed})...)
			}
			f.snap.Open, f.snap.OpenAfter = nil, nil
			f.replay.forgetRuns()
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
			batches, err := f.sub.take()
			if err != nil {
				return nil, err
			}
			out, err := f.admit(ctx, batches)
			// The deliveries point at the frames' events and bytes, not at
			// the batches: the subscription may reuse their slice, and an
			// idle connection keeps no published frame alive.
			clear(batches)
			if err != nil {
				return nil, err
			}
			if len(out) > 0 {
				return out, nil
			}
		}
	}
}

// cursorAhead checks the cursor of a connection whose replay found nothing
// after it: a cursor past the log's end is reset to the start of the log,
// so that the client drops state that lines up with nothing stored and
// takes the log as the thread, instead of a live tail silently missing
// what it believes it has.
func (f *Feed) cursorAhead(ctx context.Context) (*Delivery, error) {
	next, err := f.log.nextSeq(ctx)
	if err != nil {
		return nil, err
	}
	if f.cursor < next {
		return nil, nil
	}
	r := &Reset{Reason: ReasonCursorAhead, ThreadID: f.log.threadID, LastEventID: f.cursor, NextEventID: 1}
	data, _ := json.Marshal(r) // a struct of strings and integers
	f.last, f.cursor = 0, 0
	return &Delivery{ID: 0, Type: ResetFrameType, Data: data, Reset: r}, nil
}

// reset returns the reset frame that moves the cursor to next-1, over
// events the log no longer holds.
func (f *Feed) reset(reason string, next int64) Delivery {
	r := &Reset{Reason: reason, ThreadID: f.log.threadID, LastEventID: f.last, NextEventID: next}
	data, _ := json.Marshal(r) // a struct of strings and integers
	f.last = next - 1
	// A client that starts over holds no run in part.
	f.replay.forgetRuns()
	return Delivery{ID: next - 1, Type: ResetFrameType, Data: data, Reset: r}
}
