package instanceai_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/storage"
)

// checkpointStores opens each store that keeps checkpoints, fresh and
// migrated.
var checkpointStores = []struct {
	name string
	spec func(t testing.TB) string
}{
	{"sqlite", func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "pieces.db") }},
	{"postgres", func(t testing.TB) string { return testpg.FreshDSN(t) }},
}

func openCheckpointStore(t testing.TB, spec string) instanceai.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// emitSynced hands ev, as user u's event of run r's orchestrator on
// thread t, to w and waits until it is handled.
func emitSynced(t *testing.T, w *instanceai.Writer, ev instanceai.Event) {
	t.Helper()
	ev.RunID, ev.AgentID, ev.UserID, ev.TS = "r", instanceai.OrchestratorAgentID("r"), "u", 1
	if err := w.Enqueue("t", ev); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
}

func textOfPieces(pieces []instanceai.Checkpoint) string {
	var b strings.Builder
	for _, c := range pieces {
		b.WriteString(c.Text)
	}
	return b.String()
}

// TestWriterCheckpointsOpenText: while a segment streams, its text goes
// into pieces whenever CheckpointBytes of it wait, each piece the text
// since the last; the log gets nothing until the segment closes, then its
// one whole block, and the pieces are gone.
func TestWriterCheckpointsOpenText(t *testing.T) {
	for _, st := range checkpointStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			store := openCheckpointStore(t, st.spec(t))
			cs := store.(instanceai.CheckpointStore)
			w := instanceai.NewWriter(store, instanceai.NewHub(0), instanceai.WriterConfig{
				IdleFlush: time.Hour, CheckpointBytes: 100, CheckpointInterval: -1})
			defer w.Close(ctx)
			emitSynced(t, w, instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}})
			var sent strings.Builder
			for i := range 40 {
				chunk := strings.Repeat(string(rune('a'+i%26)), 9) + "é"
				sent.WriteString(chunk)
				emitSynced(t, w, instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "resp", Payload: &instanceai.Text{Text: chunk}})
			}
			pieces, err := cs.RunCheckpoints(ctx, "t", "r")
			if err != nil {
				t.Fatal(err)
			}
			kept := textOfPieces(pieces)
			if !strings.HasPrefix(sent.String(), kept) || sent.Len()-len(kept) >= 100 {
				t.Fatalf("pieces hold %d of the %d bytes sent (want all but less than 100, as a prefix)", len(kept), sent.Len())
			}
			for i, c := range pieces {
				if c.Piece != i || c.Since != pieces[0].Since || c.ResponseID != "resp" || c.Kind != instanceai.TypeTextDelta || c.UserID != "u" {
					t.Fatalf("piece %d: %+v", i, c)
				}
			}
			if rows, _ := store.ReadAfter(ctx, "t", 0, 0); len(rows) != 1 {
				t.Fatalf("the log holds %d rows while the segment is open, want the run-start only", len(rows))
			}

			emitSynced(t, w, instanceai.Event{Type: instanceai.TypeRunFinish, Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}})
			rows, err := store.ReadAfter(ctx, "t", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 || rows[1].Event.Type != instanceai.TypeTextBlock || rows[1].Event.Payload.(*instanceai.Text).Text != sent.String() {
				t.Fatalf("log after the close: %+v", rows)
			}
			if pieces, _ := cs.RunCheckpoints(ctx, "t", "r"); len(pieces) != 0 {
				t.Fatalf("%d pieces left after the block was stored", len(pieces))
			}
		})
	}
}

// TestWriterCheckpointsByAge: a slow stream that never reaches
// CheckpointBytes is stored once its oldest text has waited
// CheckpointInterval.
func TestWriterCheckpointsByAge(t *testing.T) {
	ctx := context.Background()
	store := openCheckpointStore(t, checkpointStores[0].spec(t))
	w := instanceai.NewWriter(store, instanceai.NewHub(0), instanceai.WriterConfig{
		IdleFlush: time.Hour, CheckpointBytes: -1, CheckpointInterval: 50 * time.Millisecond})
	defer w.Close(ctx)
	for i, ev := range []instanceai.Event{
		{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}},
		{Type: instanceai.TypeTextDelta, ResponseID: "resp", Payload: &instanceai.Text{Text: "slow "}},
		{Type: instanceai.TypeTextDelta, ResponseID: "resp", Payload: &instanceai.Text{Text: "text"}},
	} {
		if i == 2 {
			time.Sleep(60 * time.Millisecond) // the first delta has waited past the interval
		}
		emitSynced(t, w, ev)
	}
	pieces, err := store.(instanceai.CheckpointStore).RunCheckpoints(ctx, "t", "r")
	if err != nil {
		t.Fatal(err)
	}
	if got := textOfPieces(pieces); got != "slow text" {
		t.Fatalf("pieces hold %q, want %q", got, "slow text")
	}
}

// TestSweepWritesCheckpointedText: the settlement of a crashed run writes
// the block of each segment its writer checkpointed and never closed, from
// the pieces, before the run's ending; pieces of a segment whose block is
// in the log (the writer died between the block and the deletion) and of
// another run make no block; the run's pieces are gone afterwards.
func TestSweepWritesCheckpointedText(t *testing.T) {
	for _, st := range checkpointStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			store := openCheckpointStore(t, st.spec(t))
			cs := store.(instanceai.CheckpointStore)
			orch := instanceai.OrchestratorAgentID("r")
			events := []instanceai.Event{
				{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}},
				{Type: instanceai.TypeTextBlock, ResponseID: "old", Payload: &instanceai.Text{Text: "closed text"}},
			}
			for i := range events {
				events[i].RunID, events[i].AgentID, events[i].UserID, events[i].TS = "r", orch, "u", 1
			}
			if _, err := store.Append(ctx, "t", events); err != nil {
				t.Fatal(err)
			}
			for _, c := range []instanceai.Checkpoint{
				{RunID: "r", AgentID: orch, Kind: instanceai.TypeTextDelta, ResponseID: "old", Since: 1, Text: "closed "},
				{RunID: "r", AgentID: orch, Kind: instanceai.TypeTextDelta, ResponseID: "new", Since: 2, Text: "Hello, "},
				{RunID: "r", AgentID: orch, Kind: instanceai.TypeTextDelta, ResponseID: "new", Since: 2, Piece: 1, Text: "world"},
				{RunID: "r", AgentID: orch, Kind: instanceai.TypeReasoningDelta, ResponseID: "new", Since: 2, Text: "thinking"},
				{RunID: "other", AgentID: orch, Kind: instanceai.TypeTextDelta, ResponseID: "x", Since: 2, Text: "another run's"},
			} {
				c.UserID, c.TS = "u", 5
				if err := cs.AddCheckpoint(ctx, "t", c); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := store.ClaimThread(ctx, "t", "r", "inst-dead", time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // the dead instance's lease runs out
			core := instanceai.NewCore(store, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }),
				instanceai.CoreConfig{Instance: "inst-b"})
			defer core.Writer().Close(ctx)
			if n, err := core.Runs().Sweep(ctx, store); err != nil || n != 1 {
				t.Fatalf("Sweep = %d, %v; want 1 run settled", n, err)
			}
			rows, err := store.ReadAfter(ctx, "t", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				s := string(r.Event.Type)
				if p, ok := r.Event.Payload.(*instanceai.Text); ok {
					s += ":" + r.Event.ResponseID + "=" + p.Text
					if r.Event.ResponseID == "new" && (r.Event.TS != 5 || r.Event.UserID != "u") {
						t.Fatalf("block %s carries ts %d, user %q", s, r.Event.TS, r.Event.UserID)
					}
				}
				got = append(got, s)
			}
			want := []string{"run-start", "text-block:old=closed text", "reasoning-block:new=thinking", "text-block:new=Hello, world", "run-finish"}
			if strings.Join(got, " | ") != strings.Join(want, " | ") {
				t.Fatalf("log after the sweep:\n got  %v\n want %v", got, want)
			}
			if pieces, _ := cs.RunCheckpoints(ctx, "t", "r"); len(pieces) != 0 {
				t.Fatalf("%d pieces of the settled run left", len(pieces))
			}
			if pieces, _ := cs.RunCheckpoints(ctx, "t", "other"); len(pieces) != 1 {
				t.Fatalf("the other run's pieces: %+v", pieces)
			}
		})
	}
}

// failingPieces is a store whose checkpoints fail while down is set, as
// they do while its database is unreachable.
type failingPieces struct {
	instanceai.Store
	instanceai.CheckpointStore
	down atomic.Bool
}

func (f *failingPieces) AddCheckpoint(ctx context.Context, threadID string, c instanceai.Checkpoint) error {
	if f.down.Load() {
		return errors.New("connection refused")
	}
	return f.CheckpointStore.AddCheckpoint(ctx, threadID, c)
}

// TestCheckpointFailuresPause: while pieces cannot be stored, the writer
// pauses them instead of trying (and logging) at every pass, the text keeps
// streaming, and the pieces catch up once the store answers again.
func TestCheckpointFailuresPause(t *testing.T) {
	ctx := context.Background()
	base := openCheckpointStore(t, checkpointStores[0].spec(t))
	store := &failingPieces{Store: base, CheckpointStore: base.(instanceai.CheckpointStore)}
	store.down.Store(true)
	var logs bytes.Buffer
	w := instanceai.NewWriter(store, instanceai.NewHub(0), instanceai.WriterConfig{
		IdleFlush: time.Hour, CheckpointBytes: 10, CheckpointInterval: -1, MaxBackoff: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer w.Close(ctx)
	emitSynced(t, w, instanceai.Event{Type: instanceai.TypeRunStart, Payload: &instanceai.RunStart{MessageID: "m"}})
	var sent strings.Builder
	delta := func() {
		sent.WriteString("twelve bytes")
		emitSynced(t, w, instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "resp", Payload: &instanceai.Text{Text: "twelve bytes"}})
	}
	for range 50 {
		delta()
	}
	if n := strings.Count(logs.String(), "storing a checkpoint of open text failed"); n != 1 {
		t.Fatalf("%d failure lines for 50 passes, want 1:\n%s", n, logs.String())
	}
	store.down.Store(false)
	// The text streams on; once the pause (however far it doubled) is
	// over, the next pass stores everything not stored yet.
	waitUntil(t, "the pieces hold all the text sent", func() bool {
		time.Sleep(10 * time.Millisecond)
		delta()
		pieces, err := store.RunCheckpoints(ctx, "t", "r")
		return err == nil && textOfPieces(pieces) == sent.String()
	})
	if !strings.Contains(logs.String(), "checkpoints of open text are stored again") {
		t.Fatalf("no line says checkpoints resumed:\n%s", logs.String())
	}
}

// Pieces stored before segments had a bound may hold more text than a
// block may: the settlement stores what the bound allows, never a block
// over it.
func TestSweepCutsCheckpointedTextAtTheSegmentBound(t *testing.T) {
	st := checkpointStores[0]
	ctx := context.Background()
	store := openCheckpointStore(t, st.spec(t))
	cs := store.(instanceai.CheckpointStore)
	orch := instanceai.OrchestratorAgentID("r")
	if _, err := store.Append(ctx, "t", []instanceai.Event{{Type: instanceai.TypeRunStart, RunID: "r", AgentID: orch, UserID: "u", TS: 1,
		Payload: &instanceai.RunStart{MessageID: "m"}}}); err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"Hello, ", "world"} {
		if err := cs.AddCheckpoint(ctx, "t", instanceai.Checkpoint{RunID: "r", AgentID: orch, Kind: instanceai.TypeTextDelta,
			ResponseID: "new", Since: 1, Piece: i, Text: text, UserID: "u", TS: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.ClaimThread(ctx, "t", "r", "inst-dead", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the dead instance's lease runs out
	core := instanceai.NewCore(store, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }),
		instanceai.CoreConfig{Instance: "inst-b", Limits: instanceai.Limits{MaxSegmentBytes: 9, MaxEventBytes: 128 << 10}})
	defer core.Writer().Close(ctx)
	if n, err := core.Runs().Sweep(ctx, store); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 run settled", n, err)
	}
	rows, err := store.ReadAfter(ctx, "t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[1].Event.Type != instanceai.TypeTextBlock || rows[1].Event.Payload.(*instanceai.Text).Text != "Hello, wo" {
		t.Fatalf("log after the sweep: %+v; want run-start, the block cut at 9 bytes, run-finish", types(rows))
	}
}
