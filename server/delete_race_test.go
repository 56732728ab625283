package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// slowOpenStore holds each of one user's EnsureThread answers back for a
// random moment of up to maxDelay, as a loaded server does between a
// chat's check of its thread and its run's start: the window in which a
// deletion, and a new thread on the same id, can happen. opened is told
// when the answer is ready, before the pause.
type slowOpenStore struct {
	instanceai.Store
	user     string
	maxDelay time.Duration
	opened   chan struct{}
}

func (s *slowOpenStore) EnsureThread(ctx context.Context, t instanceai.Thread) (instanceai.Thread, bool, error) {
	th, created, err := s.Store.EnsureThread(ctx, t)
	if t.OwnerID == s.user {
		s.opened <- struct{}{}
		time.Sleep(rand.N(s.maxDelay))
	}
	return th, created, err
}

// TestChatRacingDeleteAndRecreate: a user's chats race the deletion of
// their thread and another user's creation of a thread with the same id.
// Whatever the interleaving, the new owner's thread holds only the new
// owner's events, from seq 1, and no run of the first user stays active;
// each of the first user's chats either started (200) or found no thread
// (404).
func TestChatRacingDeleteAndRecreate(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, base instanceai.Store) {
		store := &slowOpenStore{Store: base, user: "alice", maxDelay: 20 * time.Millisecond, opened: make(chan struct{}, 8)}
		h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob",
			AgentDelay: time.Millisecond})
		alice, bob := h.As(aliceToken), h.As(bobToken)
		const attempts = 30
		aliceRuns := map[string]bool{}
		for i := range attempts {
			thread := fmt.Sprintf("raced-%d", i)
			alice.EnsureThread(thread)
			<-store.opened
			var wg sync.WaitGroup
			var mu sync.Mutex
			for range 3 {
				wg.Go(func() {
					body, _ := json.Marshal(map[string]string{"message": "tools for thread " + thread})
					code, out := alice.Do(http.MethodPost, "/instance-ai/chat/"+thread, string(body))
					switch code {
					case http.StatusOK:
						mu.Lock()
						aliceRuns[out["runId"].(string)] = true
						mu.Unlock()
					case http.StatusNotFound, http.StatusConflict:
					default:
						t.Errorf("alice's chat on %s: %d %v", thread, code, out)
					}
				})
			}
			// Every chat has seen the thread as alice's; the deletion and
			// bob's thread come while their runs start.
			for range 3 {
				<-store.opened
			}
			if code, out := alice.Do(http.MethodDelete, "/instance-ai/threads/"+thread, ""); code != http.StatusOK {
				t.Fatalf("delete %s: %d %v", thread, code, out)
			}
			bob.EnsureThread(thread)
			// One of alice's chats may hold the thread for the moment it
			// takes to find the thread is not hers: bob retries.
			var bobRun string
			for deadline := time.Now().Add(wait); bobRun == ""; {
				code, out := bob.Do(http.MethodPost, "/instance-ai/chat/"+thread, `{"message":"simple hello from bob"}`)
				switch {
				case code == http.StatusOK:
					bobRun = out["runId"].(string)
				case code != http.StatusConflict || time.Now().After(deadline):
					t.Fatalf("bob's chat on %s: %d %v", thread, code, out)
				default:
					time.Sleep(5 * time.Millisecond)
				}
			}
			wg.Wait()
			bob.Connect(thread, "", false).Until(wait, servertest.IsRunFinish(bobRun))
		}
		// Let every run of alice's that did start reach where it would
		// have written into bob's thread.
		time.Sleep(200 * time.Millisecond)
		for i := range attempts {
			thread := fmt.Sprintf("raced-%d", i)
			if err := h.App.Sync(context.Background(), thread); err != nil {
				t.Fatal(err)
			}
			if r := h.App.Active(thread); r != nil && aliceRuns[r.ID] {
				t.Errorf("%s: alice's run %s is still active in bob's thread", thread, r.ID)
			}
			rows := servertest.StoredEvents(t, base, thread)
			if len(rows) == 0 || rows[0].Event.Type != instanceai.TypeRunStart {
				t.Fatalf("%s: bob's thread does not start with his run-start: %d events", thread, len(rows))
			}
			for k, row := range rows {
				if row.Seq != int64(k+1) || row.Event.UserID != "bob" || aliceRuns[row.Event.RunID] {
					t.Fatalf("%s: event %d of bob's thread is seq %d, %s of user %q in run %s",
						thread, k, row.Seq, row.Event.Type, row.Event.UserID, row.Event.RunID)
				}
			}
		}
	})
}

// TestRunOutlivingItsThreadOnAnotherInstance: two instances on one
// database, and no bus between them (it is down, say). Alice's run works
// on A while B deletes her thread and bob creates one with the same id
// and chats on it. A never hears of the delete: the first append of
// alice's run that the log refuses stops it there and then, and bob's
// thread holds only bob's events, from seq 1.
func TestRunOutlivingItsThreadOnAnotherInstance(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		// An agent that calls a tool every few milliseconds until stopped:
		// each call is stored at once.
		agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
			for i := 0; ; i++ {
				if run.Message != "work" {
					return nil
				}
				err := run.Emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{
					ToolCallID: fmt.Sprintf("%s:%d", run.ID, i), ToolName: "step", Args: json.RawMessage(`{}`)}})
				if err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
		tokens := aliceToken + "=alice," + bobToken + "=bob"
		a := start(t, store, servertest.Options{Agent: agent, Tokens: tokens, Config: server.Config{Instance: "inst-a"}})
		b := start(t, store, servertest.Options{Agent: agent, Tokens: tokens, Config: server.Config{Instance: "inst-b"}})
		aliceRun := a.As(aliceToken).Chat("shared", "work")
		a.As(aliceToken).Connect("shared", "", false).Until(wait, isType(instanceai.TypeToolCall))

		if code, out := b.As(aliceToken).Do(http.MethodDelete, "/instance-ai/threads/shared", ""); code != http.StatusOK {
			t.Fatalf("delete on B: %d %v", code, out)
		}
		bob := b.As(bobToken)
		bob.EnsureThread("shared")
		bobRun := bob.Chat("shared", "simple hi")
		bob.Connect("shared", "", false).Until(wait, servertest.IsRunFinish(bobRun))

		deadline := time.Now().Add(wait)
		for a.App.Active("shared") != nil {
			if time.Now().After(deadline) {
				t.Fatalf("alice's run %s still works on A after its thread was deleted", aliceRun)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		for _, h := range []*harness{a, b} {
			if err := h.App.Sync(context.Background(), "shared"); err != nil {
				t.Fatal(err)
			}
		}
		rows := servertest.StoredEvents(t, store, "shared")
		if len(rows) == 0 || rows[0].Event.RunID != bobRun {
			t.Fatalf("bob's thread does not start with his run: %d events", len(rows))
		}
		for k, row := range rows {
			if row.Seq != int64(k+1) || row.Event.UserID != "bob" || row.Event.RunID == aliceRun {
				t.Fatalf("event %d of bob's thread: seq %d, %s of user %q in run %s",
					k, row.Seq, row.Event.Type, row.Event.UserID, row.Event.RunID)
			}
		}
	})
}
