package instanceai

import (
	"bytes"
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
	log      EventLog
	hub      *Hub
	threadID string

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
	// runsSeen are the runs the replay sent events of, and resumed those
	// whose first event it sent was not their run-start: the client held
	// part of them at its cursor.
	runsSeen map[string]bool
	resumed  []string
	// pending are the undecoded blocks the replay sent, by run, until the
	// replay ends (see noteReplayed).
	pending map[string][]pendingBlock
	// pageRows is how many rows the next page asks for (0: replayPage).
	pageRows int

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
	return &Feed{log: log, hub: hub, threadID: threadID, last: after, cursor: after}
}

// OpenLiveFeed opens a feed of the thread's live tail for a caller about
// to start a run on it: it registers with the hub first, then takes the
// log's end as its cursor (Last), so that every frame published from then
// on, ephemeral ones included (a status, a custom event: no replay brings
// them back), reaches it through its queue, in the order they were
// published. Stored rows of other writers that the queue misses are read
// from the log as on any feed. Read it with Next.
func OpenLiveFeed(ctx context.Context, log EventLog, hub *Hub, threadID string) (*Feed, error) {
	f := &Feed{log: log, hub: hub, threadID: threadID}
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
			f.sub, f.snap = f.hub.subscribe(f.threadID, wake)
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
				next, err := f.log.NextSeq(ctx, f.threadID)
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
				out = append(out, f.BeforeLive(Handoff{Last: f.last, Open: sent, Cursor: f.cursor, Resumed: f.resumed})...)
			}
			f.snap.Open, f.snap.OpenAfter, f.runsSeen, f.resumed = nil, nil, nil, nil
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

// catchUp delivers what the log holds after the cursor, up to upTo when
// it is set: the rows a live connection missed because their frames were
// lost (a bus outage) or arrived out of order (another instance wrote
// them). Blocks among them are delivered too: their deltas were likely
// lost with them, and the reducer's REPLACE rule makes a block harmless
// where they were not.
func (f *Feed) catchUp(ctx context.Context, upTo int64) ([]Delivery, error) {
	var out []Delivery
	for {
		page, _, more, err := f.readPage(ctx, upTo)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if !more || (upTo > 0 && f.last >= upTo) {
			return out, nil
		}
	}
}

// readPage reads one page of the log after f.last and turns it into
// deliveries (see replayed); n is the number of rows the page held, and
// more whether the log may hold rows after them. A page
// is bounded in bytes as well as rows (ReplayPageBytes), and the next one
// is read only when the caller comes back for it, after it wrote this
// one: what a connection holds of the log is one page, however far
// behind its client reads.
func (f *Feed) readPage(ctx context.Context, upTo int64) (out []Delivery, n int, more bool, err error) {
	limit := f.pageRows
	if limit == 0 {
		limit = replayPage
	}
	var rows []StoredRow
	if pr, ok := f.log.(PartReader); ok && f.SkipDecode {
		rows, err = pr.ReadLightRowsAfter(ctx, f.threadID, f.last, limit, ReplayPageBytes, LargeRowBytes)
	} else {
		rows, err = f.log.ReadRowsAfter(ctx, f.threadID, f.last, limit, ReplayPageBytes)
	}
	if err != nil {
		return nil, 0, false, err
	}
	// A page the byte bound cut short says how many rows the next one
	// will hold, about: asking for a few more than that, rather than
	// replayPage, spares a database server walking rows past the page to
	// size them, or, on a log that cuts pages where it reads them only
	// (no PageReader), sending rows the reader drops.
	cut := rowsBytes(rows) >= ReplayPageBytes
	f.pageRows = replayPage
	if cut {
		f.pageRows = min(max(len(rows)+len(rows)/8+1, 16), replayPage)
	}
	out, err = f.replayed(ctx, rows, upTo)
	return out, len(rows), len(rows) == limit || cut, err
}

// rowsBytes is the bytes of rows (a light row's size counted).
func rowsBytes(rows []StoredRow) int {
	n := 0
	for i := range rows {
		n += len(rows[i].Data) + rows[i].Size
	}
	return n
}

// ReadRow reads the bytes of one row of a thread's log: for a feed, a row
// a light read left out that it must look into itself (a live
// connection's block or ending read from the log).
func ReadRow(ctx context.Context, log EventLog, threadID string, seq int64) ([]byte, error) {
	rows, err := log.ReadRowsAfter(ctx, threadID, seq-1, 1, 0)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || rows[0].Seq != seq {
		return nil, fmt.Errorf("event %d of thread %q is no longer stored", seq, threadID)
	}
	return rows[0].Data, nil
}

// envelopeBytes is how much of a large row the feed reads to decode its
// envelope: the encoder writes the payload last.
const envelopeBytes = 4 << 10

// ReplayPageBytes bounds the bytes of one page of a replay (one row more
// when a single row is larger): small enough that thousands of
// connections replaying at once, or stuck on clients that do not read,
// hold little (a stream that stops reading in the middle of a page holds
// the rest of it), large enough that a page is one query for several
// hundred typical rows.
const ReplayPageBytes = 128 << 10

// LargeRowBytes is the size from which a row is left out of a page for
// its stream to read in parts (see PartReader).
const LargeRowBytes = 64 << 10

// replayed turns log rows into deliveries, decoding each unless the feed
// skips decoding, and stopping after upTo when set. The log's seqs are
// contiguous, so a first row beyond f.last+1 means the rows in between
// were evicted: a reset frame goes first. On a live connection the rows
// also pass the ledger (see note). Deliveries of rows carry no Wire: a
// stream frames Data as it writes it, so the page is not copied twice.
func (f *Feed) replayed(ctx context.Context, rows []StoredRow, upTo int64) ([]Delivery, error) {
	out := make([]Delivery, 0, len(rows))
	replayed := 0
	for i := range rows {
		r := &rows[i]
		seq, kind, runID, data := r.Seq, r.Type, r.RunID, r.Data
		if upTo > 0 && seq > upTo {
			break
		}
		if seq <= f.last || (len(data) == 0 && r.Size == 0) {
			continue
		}
		var ev *Event
		if !f.SkipDecode {
			ev = new(Event)
			if err := ev.UnmarshalJSON(data); err != nil {
				return nil, fmt.Errorf("row %d of thread %q: %w", seq, f.threadID, err)
			}
		}
		if seq > f.last+1 {
			out = append(out, f.reset(ReasonEventsEvicted, seq))
		}
		f.last = seq
		repair := false
		if f.phase < phaseOpen {
			if f.cursor > 0 {
				f.noteResumed(runID, kind)
			}
			f.noteReplayed(seq, kind, runID, ev, data)
		} else {
			whole := data
			if whole == nil && (kind == TypeRunFinish || kind == TypeError || kind == TypeTextBlock || kind == TypeReasoningBlock) {
				// A large row the connection's own judgement needs.
				var err error
				if whole, err = ReadRow(ctx, f.log, f.threadID, seq); err != nil {
					return nil, err
				}
			}
			if f.isLiveEnding(runID, whole) {
				continue
			}
			var err error
			if repair, err = f.noteRow(kind, ev, whole, seq); err != nil {
				return nil, fmt.Errorf("row %d of thread %q: %w", seq, f.threadID, err)
			}
		}
		out = append(out, Delivery{ID: seq, Kind: kind, Event: ev, Data: data, Size: r.Size, Repair: repair})
		if f.phase < phaseOpen {
			replayed++
		}
		if repair {
			out = f.restate(out, runID, seq)
		}
	}
	if replayed > 0 && f.Replayed != nil {
		f.Replayed(replayed)
	}
	return out, nil
}

// restate appends what Restate gives for a repaired block of the run.
func (f *Feed) restate(out []Delivery, runID string, seq int64) []Delivery {
	if f.Restate == nil {
		return out
	}
	return append(out, f.Restate(runID, seq)...)
}

// noteResumed records a replayed row's run, and the run as resumed when
// its first replayed row is not its run-start.
func (f *Feed) noteResumed(runID string, kind EventType) {
	if runID == "" || f.runsSeen[runID] {
		return
	}
	if f.runsSeen == nil {
		f.runsSeen = map[string]bool{}
	}
	f.runsSeen[runID] = true
	if kind != TypeRunStart {
		f.resumed = append(f.resumed, runID)
	}
}

// noteReplayed passes a replayed row through the ledger, so that the
// hub's open text of a segment the replay closed (and its deltas, should
// they still arrive) is not sent after its block. Only the runs that are
// not over by the replay's end matter; an undecoded block waits until
// then (see notePending), since most of a replay's blocks are of runs its
// own run-finishes close.
func (f *Feed) noteReplayed(seq int64, kind EventType, runID string, ev *Event, data []byte) {
	switch kind {
	case TypeRunFinish:
		f.ledger.finish(runID, seq)
		delete(f.pending, runID)
	case TypeTextBlock, TypeReasoningBlock:
		if ev != nil {
			f.ledger.block(ev, seq)
			return
		}
		if f.pending == nil {
			f.pending = map[string][]pendingBlock{}
		}
		// The head of its bytes, where the envelope is, copied: the row's
		// bytes share memory with the rest of its page, which the feed
		// would otherwise keep as long as the block waits.
		var head []byte
		if data != nil {
			head = bytes.Clone(data[:min(len(data), envelopeBytes)])
		}
		f.pending[runID] = append(f.pending[runID], pendingBlock{seq: seq, head: head})
	}
}

// pendingBlock is an undecoded block the replay sent.
type pendingBlock struct {
	seq int64
	// head is the first bytes of the block (up to envelopeBytes), nil for
	// a block the replay left in the log.
	head []byte
}

// notePending notes the blocks the replay sent of runs it left unfinished.
func (f *Feed) notePending(ctx context.Context) error {
	for runID, blocks := range f.pending {
		for _, b := range blocks {
			data := b.head
			if data == nil {
				// A large block the replay left in the log: its envelope
				// is at its head.
				pr, _ := f.log.(PartReader)
				var err error
				if data, err = pr.ReadRowPart(ctx, f.threadID, b.seq, 0, envelopeBytes); err != nil {
					return err
				}
			}
			if ev, err := decodeEnvelope(data); err != nil || ev.Type == "" {
				// An envelope longer than the head: the whole row.
				var rerr error
				if data, rerr = ReadRow(ctx, f.log, f.threadID, b.seq); rerr != nil {
					return rerr
				}
			}
			ev, err := decodeEnvelope(data)
			if err != nil {
				return fmt.Errorf("row %d of thread %q: %w", b.seq, f.threadID, err)
			}
			ev.RunID = runID
			f.ledger.block(&ev, b.seq)
		}
	}
	f.pending = nil
	return nil
}

// noteRow passes a row a live connection is sent through the ledger: a
// block closes its segment (and needs a repair when the connection was
// sent more of its text than it holds), a run-finish its run. An
// undecoded row of those kinds is decoded for it.
func (f *Feed) noteRow(kind EventType, ev *Event, data []byte, seq int64) (repair bool, err error) {
	switch kind {
	case TypeTextBlock, TypeReasoningBlock, TypeRunFinish:
	default:
		return false, nil
	}
	if ev == nil {
		ev = new(Event)
		if err := ev.UnmarshalJSON(data); err != nil {
			return false, err
		}
	}
	sent, open := f.ledger.note(ev, seq)
	if kind == TypeRunFinish {
		return false, nil
	}
	return open && sent > int64(len(ev.Payload.(*Text).Text)), nil
}

// cursorAhead checks the cursor of a connection whose replay found nothing
// after it: a cursor past the log's end is reset to the start of the log,
// so that the client drops state that lines up with nothing stored and
// takes the log as the thread, instead of a live tail silently missing
// what it believes it has.
func (f *Feed) cursorAhead(ctx context.Context) (*Delivery, error) {
	next, err := f.log.NextSeq(ctx, f.threadID)
	if err != nil {
		return nil, err
	}
	if f.cursor < next {
		return nil, nil
	}
	r := &Reset{Reason: ReasonCursorAhead, ThreadID: f.threadID, LastEventID: f.cursor, NextEventID: 1}
	data, _ := json.Marshal(r) // a struct of strings and integers
	f.last, f.cursor = 0, 0
	return &Delivery{ID: 0, Type: ResetFrameType, Data: data, Reset: r}, nil
}

// reset returns the reset frame that moves the cursor to next-1, over
// events the log no longer holds.
func (f *Feed) reset(reason string, next int64) Delivery {
	r := &Reset{Reason: reason, ThreadID: f.threadID, LastEventID: f.last, NextEventID: next}
	data, _ := json.Marshal(r) // a struct of strings and integers
	f.last = next - 1
	// A client that starts over holds no run in part.
	f.runsSeen, f.resumed = nil, nil
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
				out = append(out, f.reset(ReasonEventsEvicted, fr.Seq))
			}
		}
		if fr.Seq == 0 {
			if fr.HasOffset && fr.After > f.last {
				// The delta's writer had committed rows this connection
				// has not been sent (their frames were lost, or are on
				// their way): they come first, as they did for the writer.
				missed, err := f.catchUp(ctx, fr.After)
				if err != nil {
					return nil, err
				}
				out = append(out, missed...)
				if fr.After > f.last {
					out = append(out, f.reset(ReasonEventsEvicted, fr.After+1))
				}
			}
			if d, ok := f.ephemeral(fr); ok {
				out = append(out, d)
			}
			continue
		}
		if fr.Seq <= f.last {
			continue
		}
		f.last = fr.Seq // fr.Seq == f.last+1
		ev := fr.Event
		if f.isLiveEnding(ev.RunID, fr.Data) {
			continue
		}
		d := Delivery{ID: fr.Seq, Kind: ev.Type, Event: ev, Data: fr.Data, Wire: fr.Wire}
		sent, open := f.ledger.note(ev, fr.Seq)
		if ev.Type == TypeTextBlock || ev.Type == TypeReasoningBlock {
			switch n := int64(len(ev.Payload.(*Text).Text)); {
			case open && sent == n:
				continue // the connection has exactly the block's text
			case open && sent > n:
				d.Repair = true
			}
		}
		out = append(out, d)
		if d.Repair {
			out = f.restate(out, ev.RunID, fr.Seq)
		}
	}
	return out, nil
}

// ephemeral judges an id-less frame: a delta passes the ledger (held back
// after a gap, dropped when late or repeated, its head cut when it
// overlaps what was sent); an ending sent live is remembered so that its
// stored copy is not sent again.
func (f *Feed) ephemeral(fr *Frame) (Delivery, bool) {
	ev := fr.Event
	d := Delivery{Kind: ev.Type, Event: ev, Data: fr.Data, Wire: fr.Wire}
	switch ev.Type {
	case TypeTextDelta, TypeReasoningDelta:
		off, after := fr.Offset, fr.After
		if !fr.HasOffset {
			off, after = -1, -1
		}
		if after >= 0 && after < f.cursor && !f.ledger.isOpen(ev) {
			// A segment that began before the cursor and that the handoff
			// did not open here: it may have closed before the cursor
			// too (this delta is late, the bus held it back), and if not,
			// its block, after the cursor, brings its text.
			f.ledger.holdBack(ev, after)
			return Delivery{}, false
		}
		v, skip, _ := f.ledger.delta(ev, off, after, len(ev.Payload.(*Text).Text))
		if v != deltaDeliver {
			return Delivery{}, false
		}
		if skip > 0 {
			trimmed, err := trimDelta(fr, skip)
			if err != nil {
				return Delivery{}, false
			}
			d = Delivery{Kind: ev.Type, Event: trimmed.Event, Data: trimmed.Data, Wire: trimmed.Wire}
		}
	case TypeRunFinish, TypeError:
		if f.liveEndings == nil {
			f.liveEndings = map[string][][]byte{}
		}
		f.liveEndings[ev.RunID] = append(f.liveEndings[ev.RunID], fr.Data)
	}
	return d, true
}

// isLiveEnding reports whether data is the stored copy of an ending of
// the run this connection was sent live.
func (f *Feed) isLiveEnding(runID string, data []byte) bool {
	for _, sent := range f.liveEndings[runID] {
		if bytes.Equal(sent, data) {
			return true
		}
	}
	return false
}

// noteBefore notes in the ledger the blocks and run-finishes stored
// before the cursor since an open segment of the snapshot began: a hub that
// missed the block closing a segment (the bus lost it, and the head check
// has not filled the gap yet) still holds its text as open, which a
// connection whose cursor covers the block must not be sent. The replay
// noted what came after the cursor.
func (f *Feed) noteBefore(ctx context.Context) error {
	after := f.cursor
	for _, a := range f.snap.OpenAfter {
		if a >= 0 {
			after = min(after, a)
		}
	}
	for after < f.cursor {
		rows, err := f.log.ReadRowsAfter(ctx, f.threadID, after, replayPage, ReplayPageBytes)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		for i := range rows {
			r := &rows[i]
			if r.Seq > f.cursor {
				return nil
			}
			after = r.Seq
			switch r.Type {
			case TypeTextBlock, TypeReasoningBlock, TypeRunFinish, TypeRunStart:
			default:
				continue // the ledger notes nothing else
			}
			var ev Event
			if err := ev.UnmarshalJSON(r.Data); err != nil {
				return fmt.Errorf("row %d of thread %q: %w", r.Seq, f.threadID, err)
			}
			f.ledger.note(&ev, r.Seq)
		}
	}
	return nil
}

// decodeEnvelope decodes an event's type, run, agent and response, and
// stops at its payload: the encoder writes the payload last, so a large
// block is not scanned. A row written otherwise is read to its end.
func decodeEnvelope(data []byte) (Event, error) {
	var ev Event
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return ev, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ev, err
		}
		key, _ := tok.(string)
		var dst *string
		switch key {
		case "type":
			dst = (*string)(&ev.Type)
		case "runId":
			dst = &ev.RunID
		case "agentId":
			dst = &ev.AgentID
		case "responseId":
			dst = &ev.ResponseID
		case "payload":
			if ev.Type != "" && ev.AgentID != "" {
				return ev, nil
			}
		}
		if dst != nil {
			if err := dec.Decode(dst); err != nil {
				return ev, err
			}
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ev, err
		}
	}
	return ev, nil
}
