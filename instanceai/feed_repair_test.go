package instanceai_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// feedThread is a memory store with one thread "t" and a hub over it.
func feedThread(t *testing.T) (*memory.Store, *instanceai.Hub) {
	t.Helper()
	store := memory.New()
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	return store, instanceai.NewHub(64)
}

func stamped(ev instanceai.Event) instanceai.Event {
	ev.AgentID, ev.UserID, ev.TS = "a", "u", 1
	if ev.RunID == "" {
		ev.RunID = "r"
	}
	return ev
}

func appendEvents(t *testing.T, store *memory.Store, evs ...instanceai.Event) {
	t.Helper()
	for i := range evs {
		evs[i] = stamped(evs[i])
	}
	if _, err := store.Append(context.Background(), "t", evs); err != nil {
		t.Fatal(err)
	}
}

func runStartEv(run string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeRunStart, RunID: run, Payload: &instanceai.RunStart{MessageID: "m-" + run}}
}

func runFinishEv(run string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeRunFinish, RunID: run, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}}
}

func textBlockEv(resp, text string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeTextBlock, ResponseID: resp, Payload: &instanceai.Text{Text: text}}
}

// placedDelta is a delta frame as a writer publishes it: at offset, after
// the writer committed after. Each response is its own agent's, so that
// their segments are open together.
func placedDelta(t *testing.T, resp, text string, offset, after int64) instanceai.Frame {
	t.Helper()
	ev := stamped(textDelta(resp, text))
	ev.AgentID = "agent-" + resp
	f, err := instanceai.NewFrame(0, &ev)
	if err != nil {
		t.Fatal(err)
	}
	f.Offset, f.HasOffset, f.After = offset, true, after
	return f
}

func storedFrame(t *testing.T, seq int64, ev instanceai.Event) instanceai.Frame {
	t.Helper()
	ev = stamped(ev)
	if ev.ResponseID != "" {
		ev.AgentID = "agent-" + ev.ResponseID
	}
	f, err := instanceai.NewFrame(seq, &ev)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A cursor the log never reached (a thread deleted and made again under
// the client) is reset to the start, in the open: a reset frame with id 0,
// then the whole log, then the live tail.
func TestFeedResetsACursorAheadOfTheLog(t *testing.T) {
	for _, skip := range []bool{false, true} {
		store, hub := feedThread(t)
		appendEvents(t, store, runStartEv("r"), textBlockEv("x", "hi"), runFinishEv("r"))
		feed := instanceai.OpenFeed(store, hub, "t", 1000)
		feed.SkipDecode = skip
		got := available(t, feed)
		if len(got) != 4 || got[0].Reset == nil || got[0].ID != 0 || got[0].Type != instanceai.ResetFrameType {
			t.Fatalf("deliveries %v, want a reset then the three rows", ids(got))
		}
		want := instanceai.Reset{Reason: instanceai.ReasonCursorAhead, ThreadID: "t", LastEventID: 1000, NextEventID: 1}
		var wire instanceai.Reset
		if err := json.Unmarshal(got[0].Data, &wire); err != nil || wire != want || *got[0].Reset != want {
			t.Fatalf("reset %s, want %+v", got[0].Data, want)
		}
		if !slices.Equal(ids(got[1:]), []int64{1, 2, 3}) || feed.Last() != 3 {
			t.Fatalf("after the reset: ids %v, cursor %d", ids(got[1:]), feed.Last())
		}
		// A cursor at the end is not ahead.
		caught := instanceai.OpenFeed(store, hub, "t", 3)
		if got := available(t, caught); len(got) != 0 {
			t.Fatalf("a caught-up cursor got %v", ids(got))
		}
		feed.Close()
		caught.Close()
	}
}

// A connection that got more of a segment live than its block holds (a
// writer that died streamed it, and another instance wrote the block from
// what it had) is sent the block marked for repair, and what Restate gives
// right after it; one that got less is sent the block to REPLACE its text;
// one that got exactly the block's text is not sent it.
func TestFeedRepairsTextTheBlockDoesNotHold(t *testing.T) {
	store, hub := feedThread(t)
	appendEvents(t, store, runStartEv("r"))
	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	var restated []int64
	feed.Restate = func(runID string, upTo int64) []instanceai.Delivery {
		restated = append(restated, upTo)
		return []instanceai.Delivery{{Type: "run-sync", Data: []byte(`{"runId":"` + runID + `"}`)}}
	}
	available(t, feed)
	hub.Publish("t", []instanceai.Frame{placedDelta(t, "long", "hello world", 0, 1), placedDelta(t, "short", "ab", 0, 1),
		placedDelta(t, "same", "xyz", 0, 1)})
	available(t, feed)
	hub.Publish("t", []instanceai.Frame{
		storedFrame(t, 2, textBlockEv("long", "hello")),       // shorter: repair
		storedFrame(t, 3, textBlockEv("short", "abcd")),       // longer: REPLACE
		storedFrame(t, 4, textBlockEv("same", "xyz")),         // the same: not sent
		storedFrame(t, 5, textBlockEv("unseen", "whole one")), // none of it went out
	})
	got := available(t, feed)
	var kinds []string
	for _, d := range got {
		switch {
		case d.Type == "run-sync":
			kinds = append(kinds, "run-sync")
		case d.Repair:
			kinds = append(kinds, "repair:"+d.Event.ResponseID)
		default:
			kinds = append(kinds, d.Event.ResponseID)
		}
	}
	if want := []string{"repair:long", "run-sync", "short", "unseen"}; !slices.Equal(kinds, want) {
		t.Fatalf("deliveries %v, want %v", kinds, want)
	}
	if !slices.Equal(restated, []int64{2}) || feed.Last() != 5 {
		t.Fatalf("restated %v, cursor %d", restated, feed.Last())
	}
}

// The handoff names the runs the replay resumed: those of which it sent
// events but not their run-start, whose state the client held in part.
func TestFeedHandoffNamesResumedRuns(t *testing.T) {
	store, hub := feedThread(t)
	appendEvents(t, store, runStartEv("done"), runFinishEv("done"), runStartEv("open"), runStartEv("bg"))
	appendEvents(t, store, stamped(toolCallIn("open", "c1")), runFinishEv("bg"), runStartEv("new"), stamped(toolCallIn("new", "c2")))
	for _, skip := range []bool{false, true} {
		feed := instanceai.OpenFeed(store, hub, "t", 4)
		feed.SkipDecode = skip
		var h instanceai.Handoff
		feed.BeforeLive = func(got instanceai.Handoff) []instanceai.Delivery {
			h = got
			return nil
		}
		available(t, feed)
		feed.Close()
		if !slices.Equal(h.Resumed, []string{"open", "bg"}) || h.Cursor != 4 || h.Last != 8 {
			t.Fatalf("handoff %+v (decoded %v), want open and bg resumed after 4, last 8", h, !skip)
		}
	}
	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	feed.BeforeLive = func(got instanceai.Handoff) []instanceai.Delivery {
		if len(got.Resumed) != 0 {
			t.Errorf("a replay from the start resumed %v", got.Resumed)
		}
		return nil
	}
	available(t, feed)
}

func toolCallIn(run, id string) instanceai.Event {
	ev := toolCall(id)
	ev.RunID = run
	return ev
}

// The stored copies of an ending a connection was sent live (the run's
// events could not be stored then) only move its cursor, whichever path
// brings them: the hub, or a catch-up from the log.
func TestFeedSendsALiveEndingOnce(t *testing.T) {
	store, hub := feedThread(t)
	appendEvents(t, store, runStartEv("r"))
	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	available(t, feed)
	errEv := stamped(instanceai.Event{Type: instanceai.TypeError, Payload: &instanceai.ErrorPayload{Content: "down", Code: "storage_unavailable"}})
	finEv := stamped(instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunError, Reason: "storage_unavailable"}})
	errLive, _ := instanceai.NewFrame(0, &errEv)
	finLive, _ := instanceai.NewFrame(0, &finEv)
	hub.Publish("t", []instanceai.Frame{errLive, finLive})
	if got := available(t, feed); len(got) != 2 || got[0].ID != 0 || got[1].ID != 0 {
		t.Fatalf("the live ending: %v", ids(got))
	}
	// The stored copies: the error through a catch-up (the hub shows 3
	// first), the run-finish through the hub.
	if _, err := store.AppendEncoded(context.Background(), "t", []instanceai.Event{errEv, finEv}, [][]byte{errLive.Data, finLive.Data}); err != nil {
		t.Fatal(err)
	}
	hub.Publish("t", []instanceai.Frame{{Seq: 3, Event: &finEv, Data: finLive.Data, Wire: finLive.Wire}})
	if got := available(t, feed); len(got) != 0 || feed.Last() != 3 {
		t.Fatalf("the stored copies were sent again: %v (cursor %d)", ids(got), feed.Last())
	}
}
