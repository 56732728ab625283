package nativecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// CheckReplay judges replay equivalence for a thread whose runs have all
// finished: live followed them from the start of the thread; full is a fresh
// connection without cursor; after[c] is a connection opened with
// Last-Event-ID c (for every c the caller chose). The agent tree folded from
// live must equal the one from full and the one from each after[c] combined
// with the events of full up to c.
//
// Only the replay rules are reported: the connection rules of each recording
// are CheckConnection's, and a caller that wants them runs it on each. live
// may be nil (only the replays are compared then).
func CheckReplay(live, full *conformance.Recording, after map[int64]*conformance.Recording) []conformance.Finding {
	t := conformance.NewTally(Rules[connectionRules:])
	if full == nil {
		for _, r := range Rules[connectionRules:] {
			t.Skip(r.ID, "no full replay recorded")
		}
		return t.Findings()
	}
	fullC := judge(full)
	var liveC *connection
	if live != nil {
		liveC = judge(live)
	}
	cursors := make([]int64, 0, len(after))
	for c := range after {
		cursors = append(cursors, c)
	}
	sort.Slice(cursors, func(i, j int) bool { return cursors[i] < cursors[j] })
	afterC := map[int64]*connection{}
	for _, c := range cursors {
		afterC[c] = judge(after[c])
	}

	// The replay of a finished thread: stored events only, consecutive ids.
	byID := map[int64]event{}
	var prev int64
	for i, f := range full.Frames {
		if f.Event == "run-sync" {
			t.Fail(RuleReplayStoredOnly, "full: frame %d is a run-sync, but no run is live", i)
		}
	}
	for _, e := range fullC.events {
		if !e.hasID || (!e.idOnly && !instanceai.DurabilityOf(e.ev.Type).Stored()) {
			t.Fail(RuleReplayStoredOnly, "full: frame %d: %s (id %v) is not a stored event with its id", e.index, e.ev.Type, e.hasID)
			continue
		}
		t.Pass(RuleReplayStoredOnly)
		t.Expect(RuleReplayContiguous, prev == 0 || e.id == prev+1, "full: id %d follows id %d", e.id, prev)
		prev = e.id
		byID[e.id] = e
	}
	want := fold(fullC.events)

	if liveC != nil {
		for _, e := range liveC.events {
			if !e.hasID || e.id <= fullC.resetID {
				continue // not in the reset replay: nothing to compare with
			}
			r, ok := byID[e.id]
			switch {
			case !ok:
				t.Fail(RuleReplayLiveIDs, "live: id %d (%s) is not in the replay", e.id, e.ev.Type)
			case !sameJSON(r.data, e.data):
				t.Fail(RuleReplayLiveIDs, "live: id %d is %s, the replay's id %d is %s", e.id, e.data, e.id, r.data)
			default:
				t.Pass(RuleReplayLiveIDs)
			}
		}
		switch diff := treeDiff(want, fold(liveC.events)); {
		case fullC.resetID > liveC.resetID:
			t.Skip(RuleReplayLiveTree, "the full replay was reset at id %d (the store no longer holds the thread's start)", fullC.resetID)
		case diff != "":
			t.Fail(RuleReplayLiveTree, "live vs full: %s", diff)
		default:
			t.Pass(RuleReplayLiveTree)
		}
	} else {
		t.Skip(RuleReplayLiveIDs, "no live recording")
		t.Skip(RuleReplayLiveTree, "no live recording")
	}

	for _, c := range cursors {
		ac := afterC[c]
		// Below floor one of the two recordings was reset (the store
		// evicted those events): only what both can hold is compared.
		floor := max(c, ac.resetID, fullC.resetID)
		var suffix []event
		var prefix []event
		for _, e := range fullC.events {
			if e.hasID && e.id > floor {
				suffix = append(suffix, e)
			} else if e.id <= c {
				prefix = append(prefix, e)
			}
		}
		if ac.resetID > 0 {
			prefix = nil // the reconnection's client dropped its state
		}
		var got []event
		for _, e := range ac.events {
			if !e.hasID || e.id <= floor && e.id > c {
				continue
			}
			if e.id <= c {
				// The cursor rule's failure; the suffix is judged on the
				// rest, so one fault is reported once.
				t.Fail(RuleReplayCursor, "after %d: id %d (%s)", c, e.id, e.ev.Type)
				continue
			}
			t.Pass(RuleReplayCursor)
			got = append(got, e)
		}
		d := suffixDiff(suffix, got)
		if first := firstIDAfter(ac.events, c); d == "" && ac.resetID == 0 && first > 0 && first != c+1 {
			// The log is contiguous: without a reset the first id after c
			// is c+1, even when the full replay no longer shows it.
			d = fmt.Sprintf("id %d follows the cursor without a reset frame", first)
		}
		if d != "" {
			t.Fail(RuleReplaySuffix, "after %d: %s", c, d)
		} else {
			t.Pass(RuleReplaySuffix)
		}
		joined := append(append([]event(nil), prefix...), ac.events...)
		if diff := treeDiff(want, fold(joined)); diff != "" {
			t.Fail(RuleReplayAfterTree, "full up to %d + after %d vs full: %s", c, c, diff)
		} else {
			t.Pass(RuleReplayAfterTree)
		}
	}
	if len(cursors) == 0 {
		for _, id := range []string{RuleReplayCursor, RuleReplaySuffix, RuleReplayAfterTree} {
			t.Skip(id, "no reconnection recorded")
		}
	}
	return t.Findings()
}

// firstIDAfter returns the first id greater than c, 0 when none.
func firstIDAfter(events []event, c int64) int64 {
	for _, e := range events {
		if e.hasID && e.id > c {
			return e.id
		}
	}
	return 0
}

// suffixDiff compares what a reconnection replayed with the log after its
// cursor: the same ids with the same events, in order.
func suffixDiff(want, got []event) string {
	for i := 0; i < len(want) || i < len(got); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("id %d (%s) missing", want[i].id, want[i].ev.Type)
		case i >= len(want):
			return fmt.Sprintf("id %d (%s) is beyond the log", got[i].id, got[i].ev.Type)
		case got[i].id != want[i].id:
			return fmt.Sprintf("id %d where the log has id %d", got[i].id, want[i].id)
		case !sameJSON(got[i].data, want[i].data):
			return fmt.Sprintf("id %d is %s, the log's is %s", got[i].id, got[i].data, want[i].data)
		}
	}
	return ""
}

// sameJSON compares two JSON texts as values, so key order and spacing
// (which no client sees) do not count.
func sameJSON(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return a == b
	}
	return reflect.DeepEqual(va, vb)
}

// fold folds a connection's events into one tree, as a client does: every
// run of the thread joins the same state, so this is no per-run fold
// (agenttree.FoldRuns).
func fold(events []event) *agenttree.AgentNode {
	s := agenttree.New()
	for _, e := range events {
		if !e.idOnly {
			s.Apply(e.ev)
		}
	}
	return s.Tree()
}

// treeDiff returns "" when the trees marshal to the same JSON value, else
// where they first differ.
func treeDiff(want, got *agenttree.AgentNode) string {
	wj, err1 := json.Marshal(want)
	gj, err2 := json.Marshal(got)
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("cannot marshal the trees: %v %v", err1, err2)
	}
	if sameJSON(string(wj), string(gj)) {
		return ""
	}
	i := 0
	for i < len(wj) && i < len(gj) && wj[i] == gj[i] {
		i++
	}
	from := max(0, i-60)
	return fmt.Sprintf("trees differ at byte %d: want …%s… got …%s…", i, clip(wj, from, i+60), clip(gj, from, i+60))
}

func clip(b []byte, from, to int) []byte {
	to = min(to, len(b))
	if from > to {
		return nil
	}
	return bytes.ToValidUTF8(b[from:to], nil)
}
