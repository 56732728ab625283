package storagetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// testHeads: every built-in store reads many threads' heads at once
// (instanceai.HeadReader): each existing thread's highest seq, the same
// NextSeq tells less one, 0 for an empty thread; a missing or deleted
// thread is absent; more threads than one query binds are all answered.
func testHeads(t *testing.T, s instanceai.Store) {
	hr, ok := s.(instanceai.HeadReader)
	if !ok {
		t.Fatal("the store does not implement instanceai.HeadReader")
	}
	ctx := context.Background()
	var ids []string
	for i := range 1200 {
		id := fmt.Sprintf("h%04d", i)
		ids = append(ids, id)
		if i%100 == 0 {
			ensure(t, s, id, "owner")
		}
	}
	ensure(t, s, "busy", "owner")
	ensure(t, s, "gone", "owner")
	if _, err := s.Append(ctx, "busy", TypicalBatch("run-heads", 12)); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if _, err := s.Append(ctx, "gone", TypicalBatch("run-gone", 3)); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if err := s.DeleteThread(ctx, "gone"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	ids = append(ids, "busy", "gone", "missing")
	heads, err := hr.Heads(ctx, ids)
	if err != nil {
		t.Fatalf("Heads: %v", err)
	}
	next, err := s.NextSeq(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := heads["busy"]; !ok || got != next-1 || got == 0 {
		t.Fatalf("head of busy = %d (%v), NextSeq says %d", got, ok, next)
	}
	for _, id := range []string{"gone", "missing", "h0001"} {
		if h, ok := heads[id]; ok {
			t.Fatalf("head of %s = %d, want it absent", id, h)
		}
	}
	for i := 0; i < 1200; i += 100 {
		id := fmt.Sprintf("h%04d", i)
		if h, ok := heads[id]; !ok || h != 0 {
			t.Fatalf("head of the empty thread %s = %d (%v), want 0", id, h, ok)
		}
	}
	if len(heads) != 13 {
		t.Fatalf("Heads answered %d threads, want 13: %v", len(heads), heads)
	}
	if heads, err := hr.Heads(ctx, nil); err != nil || len(heads) != 0 {
		t.Fatalf("Heads of no thread = %v, %v", heads, err)
	}
}
