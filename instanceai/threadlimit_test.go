package instanceai_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// A thread-limited request's pages are pages of the threads it may touch:
// full until the last, each allowed thread once and in the store's order,
// across more than one chunk of the owner's threads.
func TestListAllowedThreadsPagesTheAllowedOnes(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	var want []string
	for i := range 1234 {
		id := fmt.Sprintf("t-%04d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("mine-%04d", i)
		}
		if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "mine-of-another", OwnerID: "v"}); err != nil {
		t.Fatal(err)
	}
	all, err := store.ListThreads(ctx, instanceai.ThreadQuery{OwnerID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range all {
		if strings.HasPrefix(th.ID, "mine-") {
			want = append(want, th.ID)
		}
	}
	limited := instanceai.WithThreadLimit(ctx, func(id string) bool { return strings.HasPrefix(id, "mine-") })
	const limit = 7
	var got []string
	for page := 0; ; page++ {
		rows, err := instanceai.ListAllowedThreads(limited, store, instanceai.ThreadQuery{OwnerID: "u", Limit: limit, Offset: page * limit})
		if err != nil {
			t.Fatal(err)
		}
		for _, th := range rows {
			got = append(got, th.ID)
		}
		if len(rows) < limit {
			if len(got) < len(want) {
				t.Fatalf("page %d holds %d threads, %d allowed ones follow", page, len(rows), len(want)-len(got))
			}
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d threads (%v…), want the %d allowed ones in order", len(got), got[:min(len(got), 5)], len(want))
	}
	// Without a limit, the store's page as it is.
	rows, err := instanceai.ListAllowedThreads(ctx, store, instanceai.ThreadQuery{OwnerID: "u", Limit: limit, Offset: 3})
	if err != nil || len(rows) != limit || rows[0].ID != all[3].ID {
		t.Fatalf("unlimited page: %v %v", rows, err)
	}
}
