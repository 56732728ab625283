package history_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/storage/memory"
)

// thread writes a conversation: u1 answered by r1, u2 by r2, u3 whose run
// has not started, and r4, a run no stored message names. r1's text is
// large.
func thread(t *testing.T) *memory.Store {
	t.Helper()
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, m := range []struct{ id, run, text string }{{"u1", "r1", "one"}, {"u2", "r2", "two"}, {"u3", "r3", "three"}} {
		if err := store.AddMessage(ctx, instanceai.Message{ID: m.id, ThreadID: "th", RunID: m.run, Role: "user", Content: m.text,
			CreatedAt: at.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id, text string) []instanceai.Event {
		agent := instanceai.OrchestratorAgentID(id)
		return []instanceai.Event{
			{Type: instanceai.TypeRunStart, RunID: id, AgentID: agent, Payload: &instanceai.RunStart{MessageID: "m"}},
			{Type: instanceai.TypeTextBlock, RunID: id, AgentID: agent, ResponseID: "x", Payload: &instanceai.Text{Text: text}},
			{Type: instanceai.TypeRunFinish, RunID: id, AgentID: agent, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}},
		}
	}
	var events []instanceai.Event
	events = append(events, run("r1", strings.Repeat("a", 10_000))...)
	events = append(events, run("r2", "short")...)
	events = append(events, run("r4", "orphan")...)
	if _, err := store.Append(ctx, "th", events); err != nil {
		t.Fatal(err)
	}
	return store
}

func names(entries []history.Entry) []string {
	var out []string
	for _, e := range entries {
		if e.User != nil {
			out = append(out, e.User.ID)
		} else {
			out = append(out, e.RunID)
		}
	}
	return out
}

func TestLoadListsTheConversation(t *testing.T) {
	ctx := context.Background()
	store := thread(t)
	ix, err := history.Load(ctx, store, "th", 9)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(ix.Entries), []string{"u1", "r1", "u2", "r2", "u3", "r4"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	if e := ix.Entries[1]; e.Size < 10_000 || ix.Entries[0].Size != 3 || ix.Entries[0].User.Content != "" {
		t.Fatalf("sizes: u1 %d (content %q), r1 %d", ix.Entries[0].Size, ix.Entries[0].User.Content, e.Size)
	}
	if ix.LatestRun() != "r4" {
		t.Fatalf("latest run %q", ix.LatestRun())
	}
	// As of seq 4 only r1 and r2's run-start are in the log.
	early, err := history.Load(ctx, store, "th", 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(early.Entries), []string{"u1", "r1", "u2", "r2", "u3"}; !slices.Equal(got, want) {
		t.Fatalf("entries as of 4: %v, want %v", got, want)
	}
}

func TestWindowBoundsCountAndBytes(t *testing.T) {
	store := thread(t)
	ix, err := history.Load(context.Background(), store, "th", 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		end, limit, maxBytes, want int
	}{
		{6, 0, 0, 0},      // everything
		{6, 2, 0, 4},      // the newest two
		{6, 0, 1_000, 2},  // u2 … r4: r1 does not fit
		{2, 0, 1_000, 1},  // r1 alone: the newest is always there
		{6, 10, 1, 5},     // r4 alone
		{0, 10, 1_000, 0}, // nothing before the start
		{99, 1, 0, 5},     // an end past the list is its end
	} {
		if got := ix.Window(c.end, c.limit, c.maxBytes); got != c.want {
			t.Errorf("Window(%d, %d, %d) = %d, want %d", c.end, c.limit, c.maxBytes, got, c.want)
		}
	}
}

// Read reads the window's user messages whole and folds its runs alone.
func TestReadFoldsTheWindowOnly(t *testing.T) {
	ctx := context.Background()
	store := thread(t)
	ix, err := history.Load(ctx, store, "th", 9)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ix.Read(ctx, store, "th", ix.Entries[3:5])
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Users) != 1 || got.Users["u3"].Content != "three" {
		t.Fatalf("users %+v", got.Users)
	}
	if len(got.Runs.All()) != 1 || got.Runs.Get("r2").State.Tree().TextContent != "short" {
		t.Fatalf("runs %+v", got.Runs.All())
	}
	rows, err := ix.RunRows(ctx, store, "th", "r4")
	if err != nil || len(rows) != 3 || rows[0].Seq != 7 || rows[0].Event.Type != instanceai.TypeRunStart {
		t.Fatalf("r4's rows: %+v, %v", rows, err)
	}
}

// countingStore is a memory store that counts the bytes of the rows its
// reads return.
type countingStore struct {
	*memory.Store
	read int
}

func (c *countingStore) count(rows []instanceai.StoredRow) {
	for _, r := range rows {
		c.read += len(r.Data)
	}
}

func (c *countingStore) ReadPage(ctx context.Context, threadID string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	rows, err := c.Store.ReadPage(ctx, threadID, q)
	c.count(rows)
	return rows, err
}

func (c *countingStore) ReadRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	rows, err := c.Store.ReadRowsAfter(ctx, threadID, after, limit, maxBytes)
	c.count(rows)
	return rows, err
}

func (c *countingStore) ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	rows, err := c.Store.ReadAfter(ctx, threadID, after, limit)
	for _, r := range rows {
		c.read += len(r.Data)
	}
	return rows, err
}

// The list of a thread's messages reads the rows' sizes, not their bytes,
// and a window reads its own runs' rows and no others: not those of the
// runs after it, nor, for a run in the middle, those of the runs around
// it.
func TestReadsOnlyTheWindowsRows(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{Store: memory.New()}
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	runBytes := map[string]int{}
	for i := range 6 {
		id := "r" + string(rune('0'+i))
		agent := instanceai.OrchestratorAgentID(id)
		events := []instanceai.Event{
			{Type: instanceai.TypeRunStart, RunID: id, AgentID: agent, Payload: &instanceai.RunStart{MessageID: "m"}},
			{Type: instanceai.TypeTextBlock, RunID: id, AgentID: agent, ResponseID: "x", Payload: &instanceai.Text{Text: strings.Repeat("b", 50_000*(i+1))}},
			{Type: instanceai.TypeRunFinish, RunID: id, AgentID: agent, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}},
		}
		if _, err := store.Append(ctx, "th", events); err != nil {
			t.Fatal(err)
		}
	}
	all, err := store.Store.ReadAfter(ctx, "th", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		runBytes[r.Event.RunID] += len(r.Data)
	}
	ix, err := history.Load(ctx, store, "th", int64(len(all)))
	if err != nil {
		t.Fatal(err)
	}
	if store.read != 0 {
		t.Fatalf("Load read %d bytes of rows, want their sizes alone", store.read)
	}
	for i, e := range ix.Entries {
		if e.Size != runBytes[e.RunID] {
			t.Fatalf("entry %d (%s): size %d, its rows hold %d", i, e.RunID, e.Size, runBytes[e.RunID])
		}
	}
	for _, c := range []struct {
		name string
		read func() error
		runs []string
	}{
		{"the newest run", func() error { _, err := ix.Read(ctx, store, "th", ix.Entries[5:]); return err }, []string{"r5"}},
		{"the oldest two", func() error { _, err := ix.Read(ctx, store, "th", ix.Entries[:2]); return err }, []string{"r0", "r1"}},
		{"one in the middle", func() error { _, _, err := ix.ReadEvents(ctx, store, "th", ix.Entries[3:4]); return err }, []string{"r3"}},
		{"rows of a run in the middle", func() error { _, err := ix.RunRows(ctx, store, "th", "r2"); return err }, []string{"r2"}},
		{"rows of an unknown run", func() error { _, err := ix.RunRows(ctx, store, "th", "nope"); return err }, nil},
	} {
		store.read = 0
		if err := c.read(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := 0
		for _, r := range c.runs {
			want += runBytes[r]
		}
		if store.read != want {
			t.Errorf("%s: read %d bytes of rows, want %d (runs %v)", c.name, store.read, want, c.runs)
		}
	}
}
