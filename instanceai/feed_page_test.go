package instanceai_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// A replay reads the log in pages bounded in bytes: every page but its
// last row holds less than ReplayPageBytes, a row larger than that comes
// alone, and the pages together are the whole log in order. The next
// page is read only when the caller comes back for it.
func TestReplayPagesAreBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	var events []instanceai.Event
	for i, size := range []int{100, 30 << 10, 40 << 10, 200 << 10, 10, 10, 70 << 10, 5 << 10} {
		for range 1 + i%3 {
			ev := toolResult("c", `"`+strings.Repeat("x", size)+`"`)
			ev.RunID, ev.AgentID = "r", "a"
			events = append(events, ev)
		}
	}
	if _, err := store.Append(ctx, "t", events); err != nil {
		t.Fatal(err)
	}
	for _, skip := range []bool{true, false} {
		feed := instanceai.OpenFeed(store, instanceai.NewHub(16), "t", 0)
		feed.SkipDecode = skip
		var last int64
		pages := 0
		for last < int64(len(events)) {
			page, err := feed.Poll(ctx)
			if err != nil || len(page) == 0 {
				t.Fatalf("page %d after %d: %d deliveries, %v", pages, last, len(page), err)
			}
			pages++
			before := 0
			for i, d := range page {
				if d.ID != last+1 || (d.Event == nil) != skip {
					t.Fatalf("delivery %d after %d (decoded %t)", d.ID, last, d.Event != nil)
				}
				var want json.RawMessage
				if want, err = json.Marshal(&events[last]); err != nil {
					t.Fatal(err)
				}
				if string(d.Data) != string(want) {
					t.Fatalf("row %d holds other bytes", d.ID)
				}
				last = d.ID
				if i < len(page)-1 {
					before += len(d.Data)
				}
			}
			if before >= instanceai.ReplayPageBytes {
				t.Fatalf("a page of %d rows holds %d bytes before its last row, bound %d", len(page), before, instanceai.ReplayPageBytes)
			}
		}
		// 100 B + 2×30 KB + 2×40 KB | 40 KB + 200 KB | 5×10 B + 70 KB + 2×5 KB
		if pages != 3 {
			t.Fatalf("%d rows in %d pages, want 3", len(events), pages)
		}
		feed.Close()
	}
}
