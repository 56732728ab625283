package instanceai

import (
	"bytes"
	"context"
)

// The live tail: what a feed does with the frames its subscription
// takes, and with the rows of the log they reveal it missed.

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
