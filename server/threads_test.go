package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

func ids(ts []servertest.Thread) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// errorOf checks an error answer's status, code and field.
func errorOf(t *testing.T, what string, code int, out map[string]any, wantStatus int, wantCode, wantField string) {
	t.Helper()
	e, _ := out["error"].(map[string]any)
	details, _ := e["details"].(map[string]any)
	if code != wantStatus || e["code"] != wantCode || e["message"] == "" || (wantField != "" && details["field"] != wantField) {
		t.Errorf("%s: %d %v, want %d %s field %q", what, code, out, wantStatus, wantCode, wantField)
	}
}

func TestThreadsCreateListRenameDelete(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		if p := h.ListThreads(""); len(p.Threads) != 0 || p.Page != 1 || p.Limit != 20 || p.HasMore || p.Threads == nil {
			t.Fatalf("empty list = %+v", p)
		}

		// Created without a body, with an id and a title, and again.
		before := time.Now()
		anon := h.CreateThread("", http.StatusCreated)
		if !strings.HasPrefix(anon.ID, "thread_") || anon.Title != "" {
			t.Fatalf("thread created without a body = %+v", anon)
		}
		if anon.CreatedAt.Before(before.Add(-time.Minute)) || anon.UpdatedAt.Before(anon.CreatedAt) {
			t.Fatalf("timestamps of a new thread: %+v", anon)
		}
		if th := h.CreateThread(`{}`, http.StatusCreated); !strings.HasPrefix(th.ID, "thread_") || th.ID == anon.ID {
			t.Fatalf("thread created with {} = %+v", th)
		}
		mine := h.CreateThread(`{"id":"mine","title":"  My  plans \t"}`, http.StatusCreated)
		if mine.ID != "mine" || mine.Title != "My  plans" {
			t.Fatalf("thread created with id and title = %+v", mine)
		}
		// The same id again is the same thread, as stored.
		if again := h.CreateThread(`{"id":"mine","title":"other"}`, http.StatusOK); again.ID != "mine" || again.Title != "My  plans" ||
			!again.CreatedAt.Equal(mine.CreatedAt) {
			t.Fatalf("create of an existing id = %+v, want %+v", again, mine)
		}
		for _, c := range []struct{ body, field string }{
			{`{"id":"..bad"}`, "id"}, {`{"id":"` + strings.Repeat("x", 129) + `"}`, "id"},
			{`{"title":"` + strings.Repeat("é", 201) + `"}`, "title"}, {`{"title":"two\nlines"}`, "title"},
			{`{"id":7}`, "id"}, {`{"title":`, ""},
		} {
			code, out := h.Do(http.MethodPost, "/instance-ai/threads", c.body)
			wantCode := "invalid_field"
			if c.field == "" {
				wantCode = "invalid_json"
			}
			errorOf(t, "create "+c.body, code, out, http.StatusBadRequest, wantCode, c.field)
		}

		// Newest first, paged.
		var made []string
		for i := range 5 {
			made = append(made, h.CreateThread(fmt.Sprintf(`{"id":"p%d"}`, i), http.StatusCreated).ID)
		}
		all := h.ListThreads("?limit=100")
		slices.Reverse(made)
		want := append(made, "mine")
		if got := ids(all.Threads); len(got) != 8 || !slices.Equal(got[:6], want) {
			t.Fatalf("threads = %v, want %v then the two unnamed ones", got, want)
		}
		for i := 1; i < len(all.Threads); i++ {
			if all.Threads[i].CreatedAt.After(all.Threads[i-1].CreatedAt) {
				t.Fatalf("not newest first: %+v", all.Threads)
			}
		}
		var paged []string
		for page := 1; page <= 4; page++ {
			p := h.ListThreads(fmt.Sprintf("?limit=3&page=%d", page))
			if p.Page != page || p.Limit != 3 || p.HasMore != (page < 3) || len(p.Threads) > 3 {
				t.Fatalf("page %d = %+v", page, p)
			}
			paged = append(paged, ids(p.Threads)...)
		}
		if !slices.Equal(paged, ids(all.Threads)) {
			t.Fatalf("pages = %v, want %v", paged, ids(all.Threads))
		}
		for _, q := range []struct{ query, field string }{
			{"?limit=0", "limit"}, {"?limit=101", "limit"}, {"?limit=abc", "limit"}, {"?limit=-1", "limit"},
			{"?page=0", "page"}, {"?page=-2", "page"}, {"?page=1.5", "page"}, {"?page=99999999999999999999", "page"},
		} {
			code, out := h.Do(http.MethodGet, "/instance-ai/threads"+q.query, "")
			errorOf(t, "list"+q.query, code, out, http.StatusBadRequest, "invalid_query", q.field)
		}

		// Rename.
		var renamed servertest.Thread
		if code := h.DoInto(http.MethodPatch, "/instance-ai/threads/mine", `{"title":"  Weather → Slack  "}`, &renamed); code != http.StatusOK {
			t.Fatalf("rename: %d", code)
		}
		if renamed.ID != "mine" || renamed.Title != "Weather → Slack" || !renamed.CreatedAt.Equal(mine.CreatedAt) ||
			!renamed.UpdatedAt.After(mine.UpdatedAt) {
			t.Fatalf("renamed = %+v (was %+v)", renamed, mine)
		}
		long := strings.Repeat("ü", 200)
		if code := h.DoInto(http.MethodPatch, "/instance-ai/threads/mine", `{"title":"`+long+`"}`, &renamed); code != http.StatusOK || renamed.Title != long {
			t.Fatalf("rename to 200 characters: %d %q", code, renamed.Title)
		}
		for _, body := range []string{`{}`, `{"title":null}`, `{"title":"   "}`, `{"title":"a` + long + `"}`, `{"title":"tab\there"}`, `{"title":1}`} {
			code, out := h.Do(http.MethodPatch, "/instance-ai/threads/mine", body)
			errorOf(t, "rename "+body, code, out, http.StatusBadRequest, "invalid_field", "title")
		}
		code, out := h.Do(http.MethodPatch, "/instance-ai/threads/nope", `{"title":"x"}`)
		errorOf(t, "rename unknown", code, out, http.StatusNotFound, "thread_not_found", "threadId")
		if th, err := store.GetThread(context.Background(), "mine"); err != nil || th.Title != long {
			t.Fatalf("stored thread after rename = %+v, %v", th, err)
		}

		// Delete.
		h.Chat("p2", "simple")
		if code, out := h.Do(http.MethodDelete, "/instance-ai/threads/p2", ""); code != http.StatusOK || out["ok"] != true {
			t.Fatalf("delete: %d %v", code, out)
		}
		if got := ids(h.ListThreads("?limit=100").Threads); slices.Contains(got, "p2") || len(got) != 7 {
			t.Fatalf("threads after delete = %v", got)
		}
		for _, c := range []struct{ method, path string }{
			{http.MethodDelete, "/instance-ai/threads/p2"}, {http.MethodGet, "/instance-ai/events/p2"},
			{http.MethodPatch, "/instance-ai/threads/p2"}, {http.MethodDelete, "/instance-ai/threads/never"},
		} {
			code, out := h.Do(c.method, c.path, `{"title":"x"}`)
			errorOf(t, c.method+" "+c.path+" after delete", code, out, http.StatusNotFound, "thread_not_found", "threadId")
		}
	})
}

// titleEvents returns the thread-title-updated frames among frames.
func titleEvents(frames []servertest.Frame) []servertest.Frame {
	var out []servertest.Frame
	for _, f := range frames {
		if f.Decoded.Type == instanceai.TypeThreadTitleUpdated {
			out = append(out, f)
		}
	}
	return out
}

func checkTitleEvent(t *testing.T, f servertest.Frame, title, runID, user string) {
	t.Helper()
	p, ok := f.Decoded.Payload.(*instanceai.ThreadTitle)
	if !ok || p.Title != title || f.Decoded.AgentID != "system" || f.Decoded.UserID != user || f.Decoded.TS == 0 || !f.HasID ||
		f.Decoded.RunID == "" || (runID != "" && f.Decoded.RunID != runID) {
		t.Fatalf("title event id %q %+v %+v; want title %q, run %q, user %q", f.ID, f.Decoded, f.Decoded.Payload, title, runID, user)
	}
}

// seenBoth is a stop condition that holds once a and b each held for some
// frame.
func seenBoth(a, b func(servertest.Frame) bool) func(servertest.Frame) bool {
	var sawA, sawB bool
	return func(f servertest.Frame) bool {
		sawA, sawB = sawA || a(f), sawB || b(f)
		return sawA && sawB
	}
}

// TestRenameEmitsTitleEvent: a rename is announced on the thread's stream
// and stored in its log; during a run it belongs to that run.
func TestRenameEmitsTitleEvent(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
		h.CreateThread(`{"id":"th"}`, http.StatusCreated)
		conn := h.Connect("th", "", false)
		if code := h.DoInto(http.MethodPatch, "/instance-ai/threads/th", `{"title":"Idle rename"}`, nil); code != http.StatusOK {
			t.Fatalf("rename: %d", code)
		}
		idle := conn.Until(wait, isType(instanceai.TypeThreadTitleUpdated))
		checkTitleEvent(t, idle[len(idle)-1], "Idle rename", "", "local")

		runID := h.Chat("th", "long 100000")
		if code := h.DoInto(http.MethodPatch, "/instance-ai/threads/th", `{"title":"Busy rename"}`, nil); code != http.StatusOK {
			t.Fatalf("rename: %d", code)
		}
		busy := titleEvents(conn.Until(wait, func(f servertest.Frame) bool {
			return f.Decoded.Type == instanceai.TypeThreadTitleUpdated && f.Decoded.Payload.(*instanceai.ThreadTitle).Title == "Busy rename"
		}))
		checkTitleEvent(t, busy[len(busy)-1], "Busy rename", runID, "local")
		h.Cancel("th")
		conn.Until(wait, servertest.IsRunFinish(runID))
		if err := h.App.Sync(context.Background(), "th"); err != nil {
			t.Fatal(err)
		}
		var stored []string
		for _, r := range servertest.StoredEvents(t, store, "th") {
			if p, ok := r.Event.Payload.(*instanceai.ThreadTitle); ok {
				stored = append(stored, p.Title)
			}
		}
		if !slices.Equal(stored, []string{"Idle rename", "Busy rename"}) {
			t.Fatalf("stored title events = %v", stored)
		}
	})
}

// recordingStore notes, per thread, the appends tried and the deletes done,
// in order.
type recordingStore struct {
	instanceai.Store
	mu  sync.Mutex
	ops map[string][]string
}

func (s *recordingStore) note(thread, op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[thread] = append(s.ops[thread], op)
}

// AppendEncoded and AppendFenced are the writer's ways into the log.
func (s *recordingStore) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	s.noteAppends(thread, events)
	return s.Store.AppendEncoded(ctx, thread, events, data)
}

func (s *recordingStore) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	s.noteAppends(thread, events)
	return s.Store.AppendFenced(ctx, thread, events, data, fences)
}

func (s *recordingStore) noteAppends(thread string, events []instanceai.Event) {
	for _, ev := range events {
		op := "append " + string(ev.Type)
		if p, ok := ev.Payload.(*instanceai.RunFinish); ok {
			op += " " + p.Status + " " + p.Reason
		}
		s.note(thread, op)
	}
}

func (s *recordingStore) DeleteThread(ctx context.Context, id string) error {
	err := s.Store.DeleteThread(ctx, id)
	if err == nil {
		s.note(id, "deleted")
	}
	return err
}

func (s *recordingStore) history(thread string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ops[thread])
}

// TestDeleteCancelsTheActiveRun: deleting a thread in the middle of a run
// cancels the run, stores its run-finish, then deletes the thread; the
// thread's streams end, nothing is written afterwards, and the id can be
// used again for a new, empty thread.
func TestDeleteCancelsTheActiveRun(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, base instanceai.Store) {
		store := &recordingStore{Store: base, ops: map[string][]string{}}
		h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
		runID := h.Chat("th", "long 100000")
		conn := h.Connect("th", "", false)
		conn.Until(wait, isType(instanceai.TypeTextDelta))
		if code, out := h.Do(http.MethodDelete, "/instance-ai/threads/th", ""); code != http.StatusOK || out["ok"] != true {
			t.Fatalf("delete: %d %v", code, out)
		}
		// The stream ends.
		deadline := time.Now().Add(wait)
		for {
			_, err := conn.Next(wait)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("stream ended with %v", err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stream of the deleted thread is still open")
			}
		}
		if r := h.App.Active("th"); r != nil {
			t.Fatalf("run %s still active after delete", r.ID)
		}
		code, out := h.Do(http.MethodGet, "/instance-ai/events/th", "")
		errorOf(t, "events after delete", code, out, http.StatusNotFound, "thread_not_found", "threadId")
		for _, err := range []error{
			func() error { _, err := base.GetThread(context.Background(), "th"); return err }(),
			func() error { _, err := base.ListMessages(context.Background(), "th"); return err }(),
		} {
			if !errors.Is(err, instanceai.ErrNotFound) {
				t.Fatalf("after delete: %v, want ErrNotFound", err)
			}
		}
		// Give the agent time to misbehave: nothing reaches the store after
		// the delete, and the cancel's run-finish was stored before it.
		time.Sleep(100 * time.Millisecond)
		if err := h.App.Sync(context.Background(), "th"); err != nil {
			t.Fatal(err)
		}
		ops := store.history("th")
		del := slices.Index(ops, "deleted")
		if del < 0 || del != len(ops)-1 {
			t.Fatalf("operations on the thread end with %v, want the delete last", ops[max(0, len(ops)-3):])
		}
		if fin := slices.Index(ops, "append run-finish cancelled user_cancelled"); fin < 0 || fin > del {
			t.Fatalf("no cancelled run-finish stored before the delete: %v", ops[max(0, len(ops)-3):])
		}

		// The id starts over as a new thread.
		next := h.Chat("th", "simple again")
		if next == runID {
			t.Fatal("same run id")
		}
		frames := h.Connect("th", "", false).Until(wait, servertest.IsRunFinish(next))
		if frames[0].ID != "1" || frames[0].Decoded.Type != instanceai.TypeRunStart || frames[0].Decoded.RunID != next {
			t.Fatalf("the recreated thread's log starts with %s %s (id %s)", frames[0].Decoded.Type, frames[0].Decoded.RunID, frames[0].ID)
		}
	})
}

// TestTitleFromFirstMessage: a thread without a title is titled after the
// first line of its first message, announced within the run; the user's
// messages are stored with their run ids.
func TestTitleFromFirstMessage(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		ctx := context.Background()
		h := start(t, store, servertest.Options{})
		first := "  \n\t Build   me a workflow that posts the weather to Slack every single morning at eight\nand more"
		wantTitle := "Build me a workflow that posts the weather to Slack every s…"
		run1 := h.Chat("th", first)
		// The title is announced once the run started: a fast run may
		// finish first.
		frames := h.Connect("th", "", false).Until(wait, seenBoth(servertest.IsRunFinish(run1), isType(instanceai.TypeThreadTitleUpdated)))
		titles := titleEvents(frames)
		if len(titles) != 1 {
			t.Fatalf("%d title events, want 1", len(titles))
		}
		checkTitleEvent(t, titles[0], wantTitle, run1, "local")
		if th := h.ListThreads("").Threads[0]; th.ID != "th" || th.Title != wantTitle {
			t.Fatalf("listed thread = %+v, want title %q", th, wantTitle)
		}

		// A later message neither retitles nor announces anything.
		run2 := h.Chat("th", "simple second")
		h.Connect("th", "", false).Until(wait, servertest.IsRunFinish(run2))
		if err := h.App.Sync(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		var stored int
		for _, r := range servertest.StoredEvents(t, store, "th") {
			if r.Event.Type == instanceai.TypeThreadTitleUpdated {
				stored++
			}
		}
		if stored != 1 {
			t.Fatalf("%d title events stored after the second message, want still 1", stored)
		}
		msgs, err := store.ListMessages(ctx, "th")
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Content != first || msgs[0].RunID != run1 || msgs[1].Content != "simple second" ||
			msgs[1].RunID != run2 || msgs[0].Role != "user" || msgs[1].Role != "user" || msgs[0].ID == msgs[1].ID ||
			!strings.HasPrefix(msgs[0].ID, "msg_") {
			t.Fatalf("stored messages = %+v", msgs)
		}

		// A thread created with a title keeps it; a short message is the
		// title whole.
		h.CreateThread(`{"id":"named","title":"Named"}`, http.StatusCreated)
		h.Chat("named", "simple hello")
		h.Chat("short", "simple hello")
		for id, want := range map[string]string{"named": "Named", "short": "simple hello"} {
			if th, err := store.GetThread(ctx, id); err != nil || th.Title != want {
				t.Fatalf("thread %s = %+v, %v; want title %q", id, th, err, want)
			}
		}
	})
}

// TestDeleteWaitsForBackgroundAgents: a background agent outlives its run's
// run-finish; deleting the thread stops it and waits for its last event, so
// nothing of it reaches the store after the delete (where it could land in
// a new thread of the same id).
func TestDeleteWaitsForBackgroundAgents(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, base instanceai.Store) {
		store := &recordingStore{Store: base, ops: map[string][]string{}}
		// The background agent's steps are five times the orchestrator's
		// (see the script's background scenario): at 100 ms it works on
		// for more than a second after the run's finish, time enough for
		// the finish to reach this client on a busy machine.
		h := start(t, store, servertest.Options{AgentDelay: 100 * time.Millisecond})
		runID := h.Chat("th", "background")
		conn := h.Connect("th", "", false)
		conn.Until(wait, servertest.IsRunFinish(runID))
		if len(h.App.LiveRuns("th")) == 0 {
			t.Fatal("the background agent is not running at the delete")
		}
		if code, _ := h.Do(http.MethodDelete, "/instance-ai/threads/th", ""); code != http.StatusOK {
			t.Fatalf("delete: %d", code)
		}
		if live := h.App.LiveRuns("th"); len(live) != 0 {
			t.Fatalf("runs %v still live after delete", live)
		}
		time.Sleep(300 * time.Millisecond)
		if err := h.App.Sync(context.Background(), "th"); err != nil {
			t.Fatal(err)
		}
		ops := store.history("th")
		del := slices.Index(ops, "deleted")
		if del < 0 || del != len(ops)-1 {
			t.Fatalf("operations on the thread after the delete: %v", ops[max(0, del):])
		}
		if !slices.Contains(ops[:del], "append agent-completed") {
			t.Fatalf("the background agent's agent-completed was not stored before the delete: %v", ops)
		}
	})
}
