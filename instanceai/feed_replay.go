package instanceai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// The replay: what a feed sends of the log after its cursor, and what it
// notes of it for the handoff to the live tail (see Feed).

// readPage reads one page of the log after f.last and turns it into
// deliveries (see replayed); n is the number of rows the page held, and
// more whether the log may hold rows after them. A page
// is bounded in bytes as well as rows (ReplayPageBytes), and the next one
// is read only when the caller comes back for it, after it wrote this
// one: what a connection holds of the log is one page, however far
// behind its client reads.
func (f *Feed) readPage(ctx context.Context, upTo int64) (out []Delivery, n int, more bool, err error) {
	rows, more, err := f.log.page(ctx, f.last, f.SkipDecode)
	if err != nil {
		return nil, 0, false, err
	}
	out, err = f.replayed(ctx, rows, upTo)
	return out, len(rows), more, err
}

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
				return nil, fmt.Errorf("row %d of thread %q: %w", seq, f.log.threadID, err)
			}
		}
		if seq > f.last+1 {
			out = append(out, f.reset(ReasonEventsEvicted, seq))
		}
		f.last = seq
		repair := false
		if f.phase < phaseOpen {
			if f.cursor > 0 {
				f.replay.noteRun(runID, kind)
			}
			f.noteReplayed(seq, kind, runID, ev, data)
		} else {
			whole := data
			if whole == nil && (kind == TypeRunFinish || kind == TypeError || kind == TypeTextBlock || kind == TypeReasoningBlock) {
				// A large row the connection's own judgement needs.
				var err error
				if whole, err = f.log.row(ctx, seq); err != nil {
					return nil, err
				}
			}
			if f.isLiveEnding(runID, whole) {
				continue
			}
			var err error
			if repair, err = f.noteRow(kind, ev, whole, seq); err != nil {
				return nil, fmt.Errorf("row %d of thread %q: %w", seq, f.log.threadID, err)
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
		delete(f.replay.pending, runID)
	case TypeTextBlock, TypeReasoningBlock:
		if ev != nil {
			f.ledger.block(ev, seq)
			return
		}
		if f.replay.pending == nil {
			f.replay.pending = map[string][]pendingBlock{}
		}
		// The head of its bytes, where the envelope is, copied: the row's
		// bytes share memory with the rest of its page, which the feed
		// would otherwise keep as long as the block waits.
		var head []byte
		if data != nil {
			head = bytes.Clone(data[:min(len(data), envelopeBytes)])
		}
		f.replay.pending[runID] = append(f.replay.pending[runID], pendingBlock{seq: seq, head: head})
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
	for runID, blocks := range f.replay.pending {
		for _, b := range blocks {
			data := b.head
			if data == nil {
				// A large block the replay left in the log: its envelope
				// is at its head.
				var err error
				if data, err = f.log.rowHead(ctx, b.seq); err != nil {
					return err
				}
			}
			if ev, err := decodeEnvelope(data); err != nil || ev.Type == "" {
				// An envelope longer than the head: the whole row.
				var rerr error
				if data, rerr = f.log.row(ctx, b.seq); rerr != nil {
					return rerr
				}
			}
			ev, err := decodeEnvelope(data)
			if err != nil {
				return fmt.Errorf("row %d of thread %q: %w", b.seq, f.log.threadID, err)
			}
			ev.RunID = runID
			f.ledger.block(&ev, b.seq)
		}
	}
	f.replay.pending = nil
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
		rows, err := f.log.rowsAfter(ctx, after)
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
				return fmt.Errorf("row %d of thread %q: %w", r.Seq, f.log.threadID, err)
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

// replayNotes is what a feed's replay notes for the handoff.
type replayNotes struct {
	// runsSeen are the runs the replay sent events of, and resumed those
	// whose first event it sent was not their run-start: the client held
	// part of them at its cursor.
	runsSeen map[string]bool
	resumed  []string
	// pending are the undecoded blocks the replay sent, by run, until the
	// replay ends (see Feed.noteReplayed).
	pending map[string][]pendingBlock
}

// noteRun records a replayed row's run, and the run as resumed when its
// first replayed row is not its run-start.
func (n *replayNotes) noteRun(runID string, kind EventType) {
	if runID == "" || n.runsSeen[runID] {
		return
	}
	if n.runsSeen == nil {
		n.runsSeen = map[string]bool{}
	}
	n.runsSeen[runID] = true
	if kind != TypeRunStart {
		n.resumed = append(n.resumed, runID)
	}
}

// forgetRuns drops the runs noted: the handoff took them, or the client
// starts over.
func (n *replayNotes) forgetRuns() { n.runsSeen, n.resumed = nil, nil }
