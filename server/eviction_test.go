package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// evictedThread runs `tools` on a memory store that keeps 6 events per
// thread, so the thread's first events are gone, and returns the harness,
// the log as kept and the run id.
func evictedThread(t *testing.T) (*harness, instanceai.Store, []instanceai.StoredEvent) {
	t.Helper()
	store := servertest.OpenStore(t, "memory?max-events=6")
	h := start(t, store, servertest.Options{})
	run := h.Chat("ev", "tools")
	waitRow(t, store, "ev", run, rowType(instanceai.TypeRunFinish))
	if err := h.App.Sync(context.Background(), "ev"); err != nil {
		t.Fatal(err)
	}
	kept := servertest.StoredEvents(t, store, "ev")
	if len(kept) != 6 || kept[0].Seq < 3 {
		t.Fatalf("the store kept %d events from seq %d; the test needs the start evicted", len(kept), kept[0].Seq)
	}
	return h, store, kept
}

// A cursor before the oldest kept event gets a reset frame with the id
// just before it, then exactly the kept log; a cursor inside the window
// gets no reset. Both channels carry it.
func TestEvictedCursorGetsResetFrame(t *testing.T) {
	h, _, kept := evictedThread(t)
	oldest, last := kept[0].Seq, kept[len(kept)-1].Seq
	untilLast := func(f servertest.Frame) bool { return f.ID == strconv.FormatInt(last, 10) }
	for _, tc := range []struct{ cursor, query string }{{"", ""}, {"1", ""}, {strconv.FormatInt(oldest-2, 10), ""}, {"1", "channel=tools"}} {
		c := h.ConnectQuery("ev", tc.query, tc.cursor, false)
		frames := c.Until(5*time.Second, untilLast)
		c.Close()
		r := frames[0]
		if r.Event != instanceai.ResetFrameType || r.ID != strconv.FormatInt(oldest-1, 10) {
			t.Fatalf("cursor %q: first frame %+v, want a reset with id %d", tc.cursor, r.Frame, oldest-1)
		}
		var body instanceai.Reset
		if err := json.Unmarshal([]byte(r.Data), &body); err != nil {
			t.Fatal(err)
		}
		cur, _ := strconv.ParseInt(tc.cursor, 10, 64)
		want := instanceai.Reset{Reason: instanceai.ReasonEventsEvicted, ThreadID: "ev", LastEventID: cur, NextEventID: oldest}
		if body != want {
			t.Fatalf("cursor %q: reset %s, want %+v", tc.cursor, r.Data, want)
		}
		next := oldest
		for _, f := range frames[1:] {
			if f.ID != strconv.FormatInt(next, 10) {
				t.Fatalf("cursor %q: frame id %q after the reset, want %d", tc.cursor, f.ID, next)
			}
			next++
			if tc.query == "" {
				continue
			}
			for next <= last && instanceai.DurabilityOf(kept[next-oldest].Event.Type) == instanceai.Coalesced {
				next++ // blocks belong to the text channel
			}
		}
	}
	// Inside the window: no reset, the log after the cursor.
	c := h.Connect("ev", strconv.FormatInt(oldest-1, 10), true)
	frames := c.Until(5*time.Second, untilLast)
	if frames[0].Event != "" || frames[0].ID != strconv.FormatInt(oldest, 10) || len(frames) != len(kept) {
		t.Fatalf("cursor %d: %d frames from %+v, want the %d kept events", oldest-1, len(frames), frames[0].Frame, len(kept))
	}
}

// A live run whose events after an AG-UI client's cursor were evicted ends
// that client's stream with RUN_ERROR{code: events_evicted}, a valid end
// of an AG-UI run, instead of mapping a run with a hole in it.
func TestAGUIRejoinAfterEvictionEndsWithRunError(t *testing.T) {
	h, store, _ := evictedThread(t)
	run := h.Chat("ev", "confirm")
	waitRow(t, store, "ev", run, rowType(instanceai.TypeConfirmRequest))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := h.openRejoin(ctx, "ev", "1").rest()
	if err := verifyAGUI(events); err != nil {
		t.Fatalf("stream breaks the AG-UI rules: %v\n%v", err, types(events))
	}
	end := events[len(events)-1]
	if end.typ != "RUN_ERROR" || end.str("code") != instanceai.ReasonEventsEvicted {
		t.Fatalf("stream %v ends with %s, want RUN_ERROR code events_evicted", types(events), end.raw)
	}
	// The run itself goes on: the answer still resumes it.
	code, out := h.Do(http.MethodGet, "/instance-ai/threads/ev/status", "")
	if code != http.StatusOK || out["isSuspended"] != true {
		t.Fatalf("status %d %v, want the run still suspended", code, out)
	}
}

// An AG-UI run stream that falls behind (a tiny queue, a client that does
// not read) picks up again from its cursor; when the store has evicted
// what it missed, the stream ends with RUN_ERROR{code: events_evicted}.
func TestAGUIRunStreamAfterEvictionEndsWithRunError(t *testing.T) {
	store := servertest.OpenStore(t, "memory?max-events=1")
	// The client reads nothing until the run is over, however long a busy
	// machine makes it: the server's writes wait for it longer than the
	// default, which closes the stream of a client that reads nothing
	// for 10 s.
	h := start(t, store, servertest.Options{SmallBuffers: true, AgentDelay: 200 * time.Microsecond,
		Config: server.Config{SubscriberQueue: 1, StreamWriteTimeout: 2 * time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := h.PostRunAgent(ctx, servertest.RunAgentInput("ev", "agui-run", "long 2000", nil), "text/event-stream")
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run-agent: %d", res.StatusCode)
	}
	// Not reading: the server's writes block, its queue of one overflows.
	waitRunFinish(t, store, "ev", time.Minute)
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	events, err := parseAGUIStream(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyAGUI(events); err != nil {
		t.Fatalf("stream breaks the AG-UI rules: %v\n%v", err, types(events))
	}
	end := events[len(events)-1]
	if end.typ != "RUN_ERROR" || end.str("code") != instanceai.ReasonEventsEvicted {
		t.Fatalf("stream of %d events ends with %s, want RUN_ERROR code events_evicted", len(events), end.raw)
	}
}
