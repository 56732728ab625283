package instanceai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// newCore builds a Core over a fresh memory store whose agent runs agent,
// and shuts it down when the test ends.
func newCore(t *testing.T, agent instanceai.AgentFunc) (*instanceai.Core, *memory.Store) {
	t.Helper()
	store := memory.New()
	core := instanceai.NewCore(store, agent, instanceai.CoreConfig{SubscriberQueue: 64})
	core.Start(time.Hour)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := core.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return core, store
}

// Another user's thread and a missing one are one answer, whichever door
// asks: Thread, OpenThread, Rename and DeleteThread.
func TestCoreThreadsAreOwned(t *testing.T) {
	ctx := context.Background()
	core, _ := newCore(t, func(context.Context, *instanceai.Run) error { return nil })
	th, err := core.OpenThread(ctx, "th", "alice")
	if err != nil || th.OwnerID != "alice" {
		t.Fatalf("OpenThread for alice = %+v, %v", th, err)
	}
	if again, err := core.OpenThread(ctx, "th", "alice"); err != nil || again.ID != "th" {
		t.Fatalf("OpenThread of her own thread again = %+v, %v", again, err)
	}
	var missing *instanceai.ThreadNotFoundError
	for name, err := range map[string]error{
		"Thread by bob":     func() error { _, err := core.Thread(ctx, "th", "bob"); return err }(),
		"OpenThread by bob": func() error { _, err := core.OpenThread(ctx, "th", "bob"); return err }(),
		"Thread unknown":    func() error { _, err := core.Thread(ctx, "nope", "alice"); return err }(),
		"Rename unknown":    core.Rename(ctx, "nope", "alice", "", "title"),
		"Delete unknown":    core.DeleteThread(ctx, "nope"),
	} {
		if !errors.As(err, &missing) || !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("%s: %v; want *ThreadNotFoundError matching ErrNotFound", name, err)
		}
	}
	if got, err := core.Thread(ctx, "th", "alice"); err != nil || got.OwnerID != "alice" {
		t.Fatalf("Thread for alice = %+v, %v", got, err)
	}
}

// A second chat on a busy thread is refused with the run that holds it.
func TestCoreChatRefusesABusyThread(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	core, store := newCore(t, func(ctx context.Context, _ *instanceai.Run) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	defer close(release)
	th, err := core.OpenThread(ctx, "th", "u")
	if err != nil {
		t.Fatal(err)
	}
	first, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "hello there"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "again"})
	var active *instanceai.RunActiveError
	if !errors.As(err, &active) || !errors.Is(err, instanceai.ErrRunActive) || active.RunID != first.ID || active.ThreadID != "th" {
		t.Fatalf("second chat: %v; want *RunActiveError naming %s", err, first.ID)
	}
	// Only the accepted chat is recorded, and it titled the thread.
	msgs, err := store.ListMessages(ctx, "th")
	if err != nil || len(msgs) != 1 || msgs[0].Content != "hello there" || msgs[0].RunID != first.ID {
		t.Fatalf("messages = %+v, %v", msgs, err)
	}
	if got, _ := store.GetThread(ctx, "th"); got.Title != "hello there" {
		t.Fatalf("title = %q", got.Title)
	}
}

// DeleteThread cancels the live run and has its run-finish stored before
// it deletes: an agent that goes on emitting after the delete is refused,
// and nothing of its run lands in a thread that takes the id next.
func TestCoreDeleteThreadQuiescesTheRun(t *testing.T) {
	ctx := context.Background()
	deleted := make(chan struct{})
	late := make(chan error, 1)
	core, store := newCore(t, func(ctx context.Context, run *instanceai.Run) error {
		<-ctx.Done()
		<-deleted
		late <- run.Emit(instanceai.Event{Type: instanceai.TypeTextDelta, Payload: &instanceai.Text{Text: "too late"}})
		return ctx.Err()
	})
	th, err := core.OpenThread(ctx, "th", "u")
	if err != nil {
		t.Fatal(err)
	}
	run, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if err := core.DeleteThread(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GetThread(ctx, "th"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Fatalf("thread still there: %v", err)
	}
	if core.Active("th") != nil {
		t.Fatal("the deleted thread still has an active run")
	}
	// Another user takes the id; then the old agent tries to go on.
	if _, err := core.OpenThread(ctx, "th", "other"); err != nil {
		t.Fatal(err)
	}
	close(deleted)
	if err := <-late; !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("an emit after the delete: %v; want ErrRunFinished", err)
	}
	<-run.Done()
	if err := core.Writer().Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	rows, err := store.ReadAfter(ctx, "th", 0, 0)
	if err != nil || len(rows) != 0 {
		t.Fatalf("the new thread's log holds %d rows of run %s: %+v, %v", len(rows), run.ID, rows, err)
	}
}

// Cancel ends the run with run-finish cancelled, written through.
func TestCoreCancel(t *testing.T) {
	ctx := context.Background()
	core, store := newCore(t, func(ctx context.Context, _ *instanceai.Run) error {
		<-ctx.Done()
		return ctx.Err()
	})
	th, _ := core.OpenThread(ctx, "th", "u")
	run, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "u", Message: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := core.Runs().Cancel("th", instanceai.ReasonUserCancelled); got == nil || got.ID != run.ID {
		t.Fatalf("Cancel returned %v; want run %s", got, run.ID)
	}
	select {
	case <-run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled run did not end")
	}
	if err := core.Writer().Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	rows, err := store.RunEvents(ctx, "th", run.ID)
	if err != nil || len(rows) == 0 {
		t.Fatalf("run events: %v, %v", rows, err)
	}
	last := rows[len(rows)-1].Event
	fin, ok := last.Payload.(*instanceai.RunFinish)
	if !ok || fin.Status != instanceai.RunCancelled || fin.Reason != instanceai.ReasonUserCancelled {
		t.Fatalf("last event = %s %+v; want run-finish cancelled/%s", last.Type, last.Payload, instanceai.ReasonUserCancelled)
	}
	if got, _, _ := core.Runs().Cancel("th", instanceai.ReasonUserCancelled); got != nil {
		t.Fatal("a second cancel found a run")
	}
}

// slowMessages is a store whose AddMessage takes a while, as a database's
// does under load: time enough for a quick agent to finish its run.
type slowMessages struct{ *memory.Store }

func (s slowMessages) AddMessage(ctx context.Context, m instanceai.Message) error {
	time.Sleep(20 * time.Millisecond)
	return s.Store.AddMessage(ctx, m)
}

// The title a chat gives its thread is in the run, after its run-start and
// before its run-finish, even when the agent is done at once and the
// message is slow to store.
func TestCoreChatTitlesInsideTheRun(t *testing.T) {
	ctx := context.Background()
	store := slowMessages{memory.New()}
	core := instanceai.NewCore(store, instanceai.AgentFunc(func(context.Context, *instanceai.Run) error { return nil }),
		instanceai.CoreConfig{SubscriberQueue: 64})
	t.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	for i := range 5 {
		id := "th" + string(rune('a'+i))
		th, err := core.OpenThread(ctx, id, "u")
		if err != nil {
			t.Fatal(err)
		}
		run, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: id, UserID: "u", Message: "quick one"})
		if err != nil {
			t.Fatal(err)
		}
		<-run.Done()
		if err := core.Writer().Sync(ctx, id); err != nil {
			t.Fatal(err)
		}
		rows, err := store.RunEvents(ctx, id, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		var types []instanceai.EventType
		for _, r := range rows {
			types = append(types, r.Event.Type)
		}
		want := []instanceai.EventType{instanceai.TypeRunStart, instanceai.TypeThreadTitleUpdated, instanceai.TypeRunFinish}
		if len(types) != len(want) || types[0] != want[0] || types[1] != want[1] || types[2] != want[2] {
			t.Fatalf("run %d: events %v; want %v", i, types, want)
		}
	}
}

// A thread deleted under a live run by someone other than this Core (an
// instance sharing the database) and created again by another user: the
// run's next append is refused, the run stops at once without waiting for
// its lease or a bus message, its background agent too, and the new
// owner's log holds nothing of it.
func TestCoreRunWhoseThreadIsGoneStops(t *testing.T) {
	ctx := context.Background()
	emitted := make(chan struct{}, 1)
	bgStopped := make(chan error, 1)
	core, store := newCore(t, func(ctx context.Context, run *instanceai.Run) error {
		if _, err := run.Spawn(instanceai.AgentSpawned{Role: "helper"}, func(ctx context.Context, _ *instanceai.SubAgent) (string, error) {
			<-ctx.Done()
			bgStopped <- context.Cause(ctx)
			return "", ctx.Err()
		}); err != nil {
			return err
		}
		for i := 0; ; i++ {
			if err := run.Emit(instanceai.Event{Type: instanceai.TypeToolCall,
				Payload: &instanceai.ToolCall{ToolCallID: fmt.Sprint("call-", i), ToolName: "step", Args: json.RawMessage(`{}`)}}); err != nil {
				return err
			}
			select {
			case emitted <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	})
	th, err := core.OpenThread(ctx, "th", "alice")
	if err != nil {
		t.Fatal(err)
	}
	run, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "alice", Message: "work"})
	if err != nil {
		t.Fatal(err)
	}
	<-emitted
	if err := store.DeleteThread(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "bob"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run of a deleted thread is still working")
	}
	select {
	case <-bgStopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the background agent of a deleted thread's run is still working")
	}
	if core.Active("th") != nil {
		t.Fatal("the run of a deleted thread is still the thread's active run")
	}
	if err := core.Writer().Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if rows, err := store.ReadAfter(ctx, "th", 0, 0); err != nil || len(rows) != 0 {
		t.Fatalf("bob's new thread holds %d events: %v", len(rows), err)
	}
	// Bob's own run starts on it at once, from seq 1.
	bobs, err := core.Chat(ctx, instanceai.Thread{ID: "th", OwnerID: "bob"}, instanceai.StartRequest{ThreadID: "th", UserID: "bob", Message: "mine"})
	if err != nil {
		t.Fatalf("bob's chat: %v", err)
	}
	core.Cancel("th")
	<-bobs.Done()
	if err := core.Writer().Sync(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	rows, err := store.ReadAfter(ctx, "th", 0, 0)
	if err != nil || len(rows) == 0 || rows[0].Seq != 1 || rows[0].Event.RunID != bobs.ID {
		t.Fatalf("bob's thread: %d events, %v", len(rows), err)
	}
	for _, r := range rows {
		if r.Event.UserID != "bob" {
			t.Fatalf("bob's thread holds %s of user %q", r.Event.Type, r.Event.UserID)
		}
	}
}

// A chat that found its thread before a deletion and starts after it,
// once another user has taken the id, is refused as a missing thread, and
// one that starts while the deletion works is refused too.
func TestCoreChatAfterDeleteAndRecreateIsRefused(t *testing.T) {
	ctx := context.Background()
	core, store := newCore(t, func(ctx context.Context, _ *instanceai.Run) error { <-ctx.Done(); return ctx.Err() })
	th, err := core.OpenThread(ctx, "th", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := core.DeleteThread(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	var missing *instanceai.ThreadNotFoundError
	if _, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "alice", Message: "late"}); !errors.As(err, &missing) {
		t.Fatalf("chat on a deleted thread: %v; want *ThreadNotFoundError", err)
	}
	if _, err := core.OpenThread(ctx, "th", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Chat(ctx, th, instanceai.StartRequest{ThreadID: "th", UserID: "alice", Message: "late"}); !errors.As(err, &missing) {
		t.Fatalf("chat on a thread another user took: %v; want *ThreadNotFoundError", err)
	}
	if rows, err := store.ReadAfter(ctx, "th", 0, 0); err != nil || len(rows) != 0 {
		t.Fatalf("bob's thread holds %d events: %v", len(rows), err)
	}
	if core.Active("th") != nil {
		t.Fatal("a refused chat left a run")
	}
}
