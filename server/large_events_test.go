package server_test

import (
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// A thread of events larger than a replay page replays byte for byte on
// every store: on SQLite and PostgreSQL the large ones are left out of
// the pages and read in parts as they are written, on the memory store
// written from where they lie.
func TestLargeEventsReplayWhole(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{Config: server.Config{MaxBody: 2 << 20}})
		var runs []string
		for i, size := range []int{300_000, 70_000, 1_200_000} {
			// Multi-byte text, so that a part ending inside a character
			// would show.
			runID := h.Chat("big", "simple "+strings.Repeat("ü☃", size/5)+string(rune('a'+i)))
			h.Connect("big", "", false).Until(wait, servertest.IsRunFinish(runID))
			runs = append(runs, runID)
		}
		stored := servertest.StoredEvents(t, store, "big")
		large := 0
		for _, r := range stored {
			if len(r.Data) > instanceai.LargeRowBytes {
				large++
			}
		}
		if large < 3 {
			t.Fatalf("%d events larger than a page, want at least 3", large)
		}
		frames := h.Connect("big", "", false).Until(wait, servertest.IsRunFinish(runs[len(runs)-1]))
		var got []servertest.Frame
		for _, f := range frames {
			if f.HasID {
				got = append(got, f)
			}
		}
		if len(got) != len(stored) {
			t.Fatalf("replayed %d events, stored %d", len(got), len(stored))
		}
		for i, f := range got {
			if f.Data != string(stored[i].Data) {
				t.Fatalf("event %d (%d bytes stored) replayed as %d other bytes", stored[i].Seq, len(stored[i].Data), len(f.Data))
			}
		}
	})
}
