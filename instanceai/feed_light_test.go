package instanceai_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/sqlite"
)

// A feed that skips decoding leaves rows larger than a replay page in the
// log (Data nil, Size set) for its stream to read in parts, and still
// judges them: a large block of a run the replay leaves unfinished closes
// its segment (its envelope is read from the block's head), so the hub's
// open text of it is not sent as well.
func TestFeedLeavesLargeRowsInTheLog(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(64)
	writer, gate, enqueue := gatedWriter(t, store, hub)
	text := strings.Repeat("a long answer ☃ ", 10_000) // 170 KB
	enqueue(textDelta("x", text))
	if err := writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	enqueue(toolCall("c1")) // closes the segment: its block is stored, its publish waits
	waitUntil(t, "the block and the call are stored", func() bool {
		next, err := store.NextSeq(ctx, "t")
		return err == nil && next == 3
	})

	feed := instanceai.OpenFeed(store, hub, "t", 0)
	feed.SkipDecode = true
	defer feed.Close()
	got := available(t, feed)
	close(gate.release)
	if err := writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	got = append(got, available(t, feed)...)
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("deliveries %v, want the block and the call once each", ids(got))
	}
	block, call := got[0], got[1]
	if block.Kind != instanceai.TypeTextBlock || block.Data != nil || block.Size <= len(text) {
		t.Fatalf("the block: kind %s, %d bytes of data, size %d; want it left in the log", block.Kind, len(block.Data), block.Size)
	}
	if call.Kind != instanceai.TypeToolCall || len(call.Data) == 0 || call.Size != 0 {
		t.Fatalf("the call: kind %s, %d bytes, size %d", call.Kind, len(call.Data), call.Size)
	}
}
