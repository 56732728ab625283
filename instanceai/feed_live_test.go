package instanceai

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
)

func admitIDs(t *testing.T, log EventLog) (got []Delivery, ids []int64, last int64) {
	t.Helper()
	f := &Feed{last: 3, log: threadLog{log: log, threadID: "t"}}
	block := mustFrame(t, 5, textEv(TypeTextBlock, "r", "a", "x", "hi"))
	delta := mustFrame(t, 0, textEv(TypeTextDelta, "r", "a", "x", "hi"))
	// Two batches, as two publishes queue them: the rules run across them.
	got, err := f.admit(context.Background(), [][]Frame{{toolFrame(t, 2), toolFrame(t, 3), toolFrame(t, 4), delta},
		{block, toolFrame(t, 6), toolFrame(t, 8), toolFrame(t, 9)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got {
		ids = append(ids, d.ID)
	}
	return got, ids, f.Last()
}

func TestFeedAdmitReadsTheLogOnAGap(t *testing.T) {
	seven := toolFrame(t, 7)
	got, ids, last := admitIDs(t, rowsLog{{Seq: 7, Event: *seven.Event, Data: seven.Data}})
	// 2 and 3 are already seen; 4 is next; the delta has no id; the block is
	// hidden but moves the cursor to 5; 6 is next; 8 follows a gap, so 7 is
	// read from the log first, and 8 and 9 keep their ids.
	if want := []int64{4, 0, 6, 7, 8, 9}; !slices.Equal(ids, want) || last != 9 {
		t.Fatalf("ids = %v cursor %d, want %v cursor 9", ids, last, want)
	}
	for _, d := range got {
		if d.Reset != nil {
			t.Fatalf("reset frame %s although the log filled the gap", d.Data)
		}
	}
}

func TestFeedAdmitResetsAfterAGapTheLogCannotFill(t *testing.T) {
	got, ids, last := admitIDs(t, rowsLog{})
	// 7 is in no log (a memory store evicted it): a reset frame with id 7
	// says so, and 8 and 9 follow with their ids.
	if want := []int64{4, 0, 6, 7, 8, 9}; !slices.Equal(ids, want) || last != 9 {
		t.Fatalf("ids = %v cursor %d, want %v cursor 9", ids, last, want)
	}
	r := got[3]
	if r.Type != ResetFrameType || r.Reset == nil || r.Event != nil {
		t.Fatalf("delivery 3 = %+v, want a reset frame", r)
	}
	want := Reset{Reason: ReasonEventsEvicted, ThreadID: "t", LastEventID: 6, NextEventID: 8}
	if *r.Reset != want {
		t.Fatalf("reset = %+v, want %+v", *r.Reset, want)
	}
	var wire Reset
	if err := json.Unmarshal(r.Data, &wire); err != nil || wire != want {
		t.Fatalf("reset data %s (%v), want %+v", r.Data, err, want)
	}
}
