package instanceai

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// The ledger's verdicts on one segment's deltas as a bus can deliver them:
// in order, repeated, overlapping, after a gap, and after the block.
func TestLedgerDeltaVerdicts(t *testing.T) {
	var l segmentLedger
	d := func(off, after int64, text string) (deltaVerdict, int64) {
		v, skip, _ := l.delta(textEv(TypeTextDelta, "r", "a", "x", text), off, after, len(text))
		return v, skip
	}
	steps := []struct {
		name      string
		off       int64
		text      string
		want      deltaVerdict
		wantSkip  int64
		afterSent int64
	}{
		{"the first delta", 0, "hel", deltaDeliver, 0, 3},
		{"the next one", 3, "lo ", deltaDeliver, 0, 6},
		{"a repeat", 3, "lo ", deltaRepeat, 0, 6},
		{"an overlap sends its new part", 4, "o wo", deltaDeliver, 2, 8},
		{"a gap holds back", 10, "ld", deltaGap, 0, 8},
		{"and what fills it afterwards too: the segment waits for its block", 8, "rl", deltaGap, 0, 8},
	}
	for _, s := range steps {
		v, skip := d(s.off, 5, s.text)
		if v != s.want || skip != s.wantSkip {
			t.Fatalf("%s: verdict %d skip %d, want %d skip %d", s.name, v, skip, s.want, s.wantSkip)
		}
		if sent := l.open[segKey{"r", "a", TypeTextDelta}].sent; sent != s.afterSent {
			t.Fatalf("%s: sent %d, want %d", s.name, sent, s.afterSent)
		}
	}
	sent, open := l.block(textEv(TypeTextBlock, "r", "a", "x", "hello world"), 9)
	if !open || sent != 8 {
		t.Fatalf("block: sent %d open %v, want 8 true", sent, open)
	}
	// A delta published before the block (After 5 < 9) arrives late; one
	// of a new segment of the same response, published after it, opens it.
	if v, _ := d(0, 5, "hel"); v != deltaLate {
		t.Fatalf("a delta held back past its block: %d, want late", v)
	}
	if v, _ := d(0, 9, "again"); v != deltaDeliver {
		t.Fatalf("a new segment of the same response: %d, want deliver", v)
	}
	// Unknown After: late only when it continues a closed segment.
	var u segmentLedger
	u.block(textEv(TypeTextBlock, "r", "a", "x", "hello"), 4)
	if v, _, _ := u.delta(textEv(TypeTextDelta, "r", "a", "x", "lo"), 3, -1, 2); v != deltaLate {
		t.Fatalf("an unplaced-in-time delta past the start of a closed segment: %d, want late", v)
	}
	if v, _, _ := u.delta(textEv(TypeTextDelta, "r", "a", "x", "new"), 0, -1, 3); v != deltaDeliver {
		t.Fatalf("an unplaced-in-time delta at the start: %d, want deliver", v)
	}
}

// A point that joins mid-segment holds the segment back; one that gets
// deltas without places takes them as continuing.
func TestLedgerJoinsMidSegmentAndUnplacedDeltas(t *testing.T) {
	var l segmentLedger
	if v, _, _ := l.delta(textEv(TypeTextDelta, "r", "a", "x", "lo"), 3, 1, 2); v != deltaGap {
		t.Fatalf("a first delta past the start: %d, want gap", v)
	}
	if sent, open := l.block(textEv(TypeTextBlock, "r", "a", "x", "hello"), 2); !open || sent != 0 {
		t.Fatalf("its block: sent %d open %v, want 0 true (nothing of it went out)", sent, open)
	}
	for i, text := range []string{"a", "b", "c"} {
		if v, _, seg := l.delta(textEv(TypeTextDelta, "r", "a", "y", text), -1, -1, 1); v != deltaDeliver || seg.sent != int64(i+1) {
			t.Fatalf("unplaced delta %d: %d sent %d", i, v, seg.sent)
		}
	}
}

// A run-finish closes the run's segments that began before it and makes
// the run's earlier deltas late; a background agent's segment that begins
// after it is its own.
func TestLedgerRunFinish(t *testing.T) {
	var l segmentLedger
	l.delta(textEv(TypeTextDelta, "r", "a", "x", "hi"), 0, 3, 2)
	l.finish("r", 5)
	if l.isOpen(textEv(TypeTextDelta, "r", "a", "x", "")) {
		t.Fatal("the run's segment is still open after its run-finish")
	}
	if v, _, _ := l.delta(textEv(TypeTextDelta, "r", "a", "x", "!"), 2, 3, 1); v != deltaLate {
		t.Fatalf("a delta of the finished run: %d, want late", v)
	}
	if v, _, _ := l.delta(textEv(TypeTextDelta, "r", "bg", "z", "later"), 0, 5, 5); v != deltaDeliver {
		t.Fatalf("a background agent's delta after the finish: %d, want deliver", v)
	}
	if !l.superseded(textEv(TypeTextDelta, "r", "a", "x", ""), 3) || l.superseded(textEv(TypeTextDelta, "r", "bg", "z", ""), 5) {
		t.Fatal("superseded: the run's old segment is, the background agent's is not")
	}
	for i := range maxFinishedRuns + 10 {
		l.finish("run"+string(rune('A'+i)), int64(10+i))
	}
	if len(l.finished) != maxFinishedRuns || len(l.finishOrder) != maxFinishedRuns {
		t.Fatalf("the ledger remembers %d finished runs, want at most %d", len(l.finished), maxFinishedRuns)
	}
}

// The hub passes on only deltas that continue what it passed on, and its
// snapshot is the prefix that went out before a gap.
func TestHubHoldsBackAfterAGapAndDropsLateDeltas(t *testing.T) {
	h := NewHub(64)
	sub, _ := h.Subscribe("t")
	defer sub.Close()
	placed := func(off, after int64, text string) Frame {
		f := mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "x", text))
		f.Offset, f.HasOffset, f.After = off, true, after
		return f
	}
	h.Publish("t", []Frame{placed(0, 1, "one "), placed(4, 1, "two "), placed(12, 1, "four")}) // "three " lost
	h.Publish("t", []Frame{placed(4, 1, "two ")})                                              // a repeat
	frames, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range frames {
		got = append(got, f.Event.Payload.(*Text).Text)
	}
	if !slices.Equal(got, []string{"one ", "two "}) {
		t.Fatalf("passed on %q, want the deltas before the gap", got)
	}
	_, snap := h.Subscribe("t")
	if len(snap.Open) != 1 || snap.Open[0].Payload.(*Text).Text != "one two " || snap.OpenAfter[0] != 1 {
		t.Fatalf("snapshot %+v after %v, want the prefix before the gap", snap.Open, snap.OpenAfter)
	}
	h.Publish("t", []Frame{mustFrame(t, 2, textEv(TypeTextBlock, "r", "a", "x", "one two three four"))})
	h.Publish("t", []Frame{placed(16, 1, "!")}) // held back by the bus past the block
	frames, _ = sub.Next(context.Background())
	if len(frames) != 1 || frames[0].Seq != 2 {
		t.Fatalf("after the block: %d frames, want only the block", len(frames))
	}
	if _, snap := h.Subscribe("t"); len(snap.Open) != 0 {
		t.Fatalf("open text after the block: %+v", snap.Open)
	}
}

// Behind lists the threads with subscribers that are quiet or have a gap;
// CaughtUp fills the gap.
func TestHubBehindAndCaughtUp(t *testing.T) {
	h := NewHub(64)
	h.Publish("nobody", []Frame{toolFrame(t, 1)})
	sub, _ := h.Subscribe("t")
	defer sub.Close()
	h.Publish("t", []Frame{toolFrame(t, 1), toolFrame(t, 3)})
	if got := h.Behind(time.Hour); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("behind with a gap = %v, want [t]", got)
	}
	if c := h.Contiguous("t"); c != 1 {
		t.Fatalf("contiguous = %d, want 1", c)
	}
	h.CaughtUp("t", []Frame{toolFrame(t, 2), toolFrame(t, 3), toolFrame(t, 4)}, 5)
	if got := h.Behind(time.Hour); len(got) != 0 {
		t.Fatalf("behind after the catch-up = %v", got)
	}
	if c, k := h.Contiguous("t"), h.Committed("t"); c != 5 || k != 5 {
		t.Fatalf("contiguous %d committed %d, want 5 5", c, k)
	}
	if got := h.Behind(0); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("Behind(0) = %v, want every thread with subscribers", got)
	}
}

// A delta's place survives the bus: its offset (also 0) and After, and a
// split delta's pieces each stand where their text does.
func TestBusFramesKeepPlaces(t *testing.T) {
	f := mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "x", "héllo wörld, "+string(make([]byte, 3000))))
	f.Offset, f.HasOffset, f.After = 0, true, 7
	bf := busFrameOf(&f, f.Data)
	var back busFrame
	data, _ := json.Marshal(bf)
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if g := back.frame(f.Event); !g.HasOffset || g.Offset != 0 || g.After != 7 {
		t.Fatalf("round trip: offset %d (%v) after %d", g.Offset, g.HasOffset, g.After)
	}
	f.Offset = 40
	pieces := splitDelta(&f, 900)
	if len(pieces) < 2 {
		t.Fatalf("%d pieces", len(pieces))
	}
	want := int64(40)
	var text string
	for _, p := range pieces {
		var ev Event
		if err := json.Unmarshal(p.Event, &ev); err != nil {
			t.Fatal(err)
		}
		g := p.frame(&ev)
		if !g.HasOffset || g.Offset != want || g.After != 7 {
			t.Fatalf("piece at %d (%v) after %d, want at %d", g.Offset, g.HasOffset, g.After, want)
		}
		piece := ev.Payload.(*Text).Text
		want += int64(len(piece))
		text += piece
	}
	if text != f.Event.Payload.(*Text).Text {
		t.Fatal("the pieces do not make up the delta")
	}
	unplaced := mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "x", "hi"))
	if g := busFrameOf(&unplaced, unplaced.Data); g.Pos != 0 {
		t.Fatalf("an unplaced delta travels with position %d", g.Pos)
	}
}

// A settlement's blocks take the live text an instance heard where it
// extends the checkpointed text, and make blocks of live segments that
// have no pieces and no stored block since they began.
func TestSettlementBlocksTakeLiveText(t *testing.T) {
	block := func(typ EventType, agent, resp, text string) Event {
		return *textEv(typ, "r", agent, resp, text)
	}
	pieces := []Event{block(TypeTextBlock, "a", "x", "hello"), block(TypeReasoningBlock, "a", "y", "think hard")}
	open := []Event{
		*textEv(TypeTextDelta, "r", "a", "x", "hello world"), // extends the pieces
		*textEv(TypeReasoningDelta, "r", "a", "y", "think"),  // shorter: the pieces win
		*textEv(TypeTextDelta, "r", "b", "z", "only live"),   // no pieces
		*textEv(TypeTextDelta, "r", "c", "w", "closed"),      // its block is stored since
		*textEv(TypeTextDelta, "r", "d", "v", "other agent"), // not the settled agent's (below)
	}
	after := []int64{3, 3, 3, 3, 3}
	rows := []StoredEvent{{Seq: 4, Event: block(TypeTextBlock, "c", "w", "closed")}}
	got := withHubText(slices.Clone(pieces), rows, open, after, "")
	var texts []string
	for _, b := range got {
		texts = append(texts, b.AgentID+":"+b.Payload.(*Text).Text)
	}
	if want := []string{"a:hello world", "a:think hard", "b:only live", "d:other agent"}; !slices.Equal(texts, want) {
		t.Fatalf("blocks %q, want %q", texts, want)
	}
	if got := withHubText(nil, rows, open, after, "b"); len(got) != 1 || got[0].AgentID != "b" {
		t.Fatalf("one agent's settlement took %+v", got)
	}
}
