package server_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// A cursor beyond the thread's log (a thread deleted and created again
// under the same id, with the client still holding the old thread's
// cursor) gets a reset frame with id 0 and then the whole log, then the
// live tail: the client's next run arrives whole, run-start to
// run-finish. AG-UI's rejoin ends with RUN_ERROR{code: cursor_ahead}.
func TestCursorAheadOfTheLogIsReset(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		first := h.Chat("again", "simple old")
		old := h.Connect("again", "", false)
		oldFrames := old.Until(wait, servertest.IsRunFinish(first))
		old.Close()
		cursor := oldFrames[len(oldFrames)-1].ID
		if code, _ := h.Do("DELETE", "/instance-ai/threads/again", ""); code != 200 {
			t.Fatalf("delete: %d", code)
		}
		h.EnsureThread("again")
		c := h.Connect("again", cursor, false)
		defer c.Close()
		r := c.Until(wait, func(f servertest.Frame) bool { return f.Event == instanceai.ResetFrameType })
		if len(r) != 1 || r[0].ID != "0" || !r[0].HasID {
			t.Fatalf("first frames %+v, want the reset with id 0 first", r)
		}
		var body instanceai.Reset
		if err := json.Unmarshal([]byte(r[0].Data), &body); err != nil {
			t.Fatal(err)
		}
		cur, _ := strconv.ParseInt(cursor, 10, 64)
		if want := (instanceai.Reset{Reason: instanceai.ReasonCursorAhead, ThreadID: "again", LastEventID: cur, NextEventID: 1}); body != want {
			t.Fatalf("reset %s, want %+v", r[0].Data, want)
		}
		run := h.Chat("again", "simple new")
		frames := c.Until(wait, servertest.IsRunFinish(run))
		if frames[0].Decoded.Type != instanceai.TypeRunStart || frames[0].ID != "1" {
			t.Fatalf("after the reset: %s id %s first, want the new run's run-start with id 1", frames[0].Decoded.Type, frames[0].ID)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		events := h.openRejoin(ctx, "again", "99999").rest()
		if err := verifyAGUI(events); err != nil {
			t.Fatalf("rejoin breaks the AG-UI rules: %v\n%v", err, types(events))
		}
		if end := events[len(events)-1]; end.typ != "RUN_ERROR" || end.str("code") != instanceai.ReasonCursorAhead {
			t.Fatalf("rejoin %v ends with %s, want RUN_ERROR code cursor_ahead", types(events), end.raw)
		}
	})
}
