package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
	"github.com/threadline/threadline/server/servertest"
)

// TestPrunedThreadReplays: a thread the retention policy deleted answers
// its replay with 404 thread_not_found, and its open stream ends; a
// thread whose oldest events were trimmed answers a cursor among them
// with the reset frame of evicted events, then the rest of its log.
func TestPrunedThreadReplays(t *testing.T) {
	ctx := context.Background()
	store := servertest.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "t.db"))
	h := start(t, store, servertest.Options{})
	for _, thread := range []string{"gone", "kept"} {
		run := h.Chat(thread, "tools")
		waitRow(t, store, thread, run, rowType(instanceai.TypeRunFinish))
		if err := h.App.Sync(ctx, thread); err != nil {
			t.Fatal(err)
		}
	}
	kept := servertest.StoredEvents(t, store, "kept")
	last := kept[len(kept)-1].Seq
	stream := h.Connect("gone", "", true)
	defer stream.Close()

	rs := store.(retention.Store)
	cutoff := time.Now().Add(time.Hour) // both threads are idle by this cutoff
	pruned, rows, err := rs.PruneThreads(ctx, []string{"gone"}, cutoff)
	if err != nil || len(pruned) != 1 || rows[retention.Events] == 0 {
		t.Fatalf("PruneThreads: %v, %v, %v", pruned, rows, err)
	}
	h.App.ThreadsPruned(pruned)
	code, out := h.Do(http.MethodGet, "/instance-ai/events/gone", "")
	errorOf(t, "events of a pruned thread", code, out, http.StatusNotFound, "thread_not_found", "threadId")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := stream.Next(5 * time.Second); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("the pruned thread's stream ended with %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream of the pruned thread is still open")
		}
	}

	if n, err := rs.TrimEvents(ctx, "kept", cutoff, 3); err != nil || n != 3 {
		t.Fatalf("TrimEvents: %d, %v", n, err)
	}
	c := h.Connect("kept", "1", false)
	frames := c.Until(5*time.Second, func(f servertest.Frame) bool { return f.ID == strconv.FormatInt(last, 10) })
	c.Close()
	if frames[0].Event != instanceai.ResetFrameType {
		t.Fatalf("first frame %+v, want a reset", frames[0].Frame)
	}
	var reset instanceai.Reset
	if err := json.Unmarshal([]byte(frames[0].Data), &reset); err != nil {
		t.Fatal(err)
	}
	want := instanceai.Reset{Reason: instanceai.ReasonEventsEvicted, ThreadID: "kept", LastEventID: 1, NextEventID: 4}
	if reset != want || frames[0].ID != "3" {
		t.Fatalf("reset %s (id %s), want %+v with id 3", frames[0].Data, frames[0].ID, want)
	}
	if len(frames) != len(kept)-3+1 || frames[1].ID != "4" {
		t.Fatalf("%d frames after the reset from id %s, want the %d kept from 4", len(frames)-1, frames[1].ID, len(kept)-3)
	}
}

// TestCappedThreadReplays: a thread whose old runs the cap deleted
// replays from a cursor among them (or from the start) with the reset of
// evicted events, then its newest run whole, from its run-start.
func TestCappedThreadReplays(t *testing.T) {
	ctx := context.Background()
	store := servertest.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "t.db"))
	h := start(t, store, servertest.Options{})
	for range 2 {
		run := h.Chat("th", "tools")
		waitRow(t, store, "th", run, rowType(instanceai.TypeRunFinish))
		if err := h.App.Sync(ctx, "th"); err != nil {
			t.Fatal(err)
		}
	}
	log := servertest.StoredEvents(t, store, "th")
	var start int64
	for _, e := range log[1:] {
		if e.Event.Type == instanceai.TypeRunStart {
			start = e.Seq
			break
		}
	}
	if start == 0 {
		t.Fatal("the second run has no run-start")
	}
	rows, err := store.(retention.Capper).CapRuns(ctx, "th", 1, 10000, false)
	if err != nil || rows[retention.Events] != start-1 {
		t.Fatalf("CapRuns: %v, %v; want the %d events before the second run", rows, err, start-1)
	}
	last := log[len(log)-1].Seq
	for _, cursor := range []string{"", "2"} {
		c := h.Connect("th", cursor, false)
		frames := c.Until(5*time.Second, func(f servertest.Frame) bool { return f.ID == strconv.FormatInt(last, 10) })
		c.Close()
		var reset instanceai.Reset
		if frames[0].Event != instanceai.ResetFrameType || json.Unmarshal([]byte(frames[0].Data), &reset) != nil ||
			reset.Reason != instanceai.ReasonEventsEvicted || reset.NextEventID != start {
			t.Fatalf("cursor %q: first frame %+v, want the reset of evicted events up to %d", cursor, frames[0].Frame, start)
		}
		if frames[1].ID != strconv.FormatInt(start, 10) || len(frames) != int(last-start)+2 {
			t.Fatalf("cursor %q: %d frames from id %s after the reset, want the run from %d to %d", cursor, len(frames)-1, frames[1].ID, start, last)
		}
	}
}
