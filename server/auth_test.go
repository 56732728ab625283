package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-fedcba9876543210"
)

func decodeJSON(t *testing.T, res *http.Response, out any) {
	t.Helper()
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatalf("%s: answer is not JSON: %v", res.Request.URL, err)
	}
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// TestAuthentication: with tokens configured every /instance-ai route needs
// a valid bearer token; each user sees only their own threads, another
// user's thread is a 404 exactly like an unknown one, and the events of a
// run carry the user id of the token that started it.
func TestAuthentication(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		logs := &servertest.LogBuffer{}
		h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob", Logs: logs})
		alice, bob := h.As(aliceToken), h.As(bobToken)

		// Without a valid token: 401 with a Bearer challenge, before any
		// other check (the thread and the body are never looked at).
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/instance-ai/threads", ""}, {"POST", "/instance-ai/threads", `{"id":"x"}`},
			{"PATCH", "/instance-ai/threads/x", `{"title":"t"}`}, {"DELETE", "/instance-ai/threads/x", ""},
			{"POST", "/instance-ai/chat/x", `{"message":"simple"}`}, {"POST", "/instance-ai/chat/x/cancel", ""},
			{"GET", "/instance-ai/events/x", ""}, {"POST", "/instance-ai/chat/..bad", `{`},
		} {
			for _, header := range []string{"", "Bearer wrong-token-000000", "Basic " + aliceToken, "Bearer", "Bearer " + aliceToken + "x",
				"Bearer " + aliceToken[:len(aliceToken)-1], aliceToken} {
				req, _ := http.NewRequest(c.method, h.URL+c.path, strings.NewReader(c.body))
				if header != "" {
					req.Header.Set("Authorization", header)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var out struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				decodeJSON(t, res, &out)
				challenge := res.Header.Get("WWW-Authenticate")
				if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer") ||
					(out.Error.Code != "unauthorized" && out.Error.Code != "invalid_token") || out.Error.Message == "" {
					t.Errorf("%s %s with %q: %d %q %+v", c.method, c.path, header, res.StatusCode, challenge, out)
				}
			}
		}
		if _, err := store.GetThread(context.Background(), "x"); err == nil {
			t.Fatal("an unauthenticated request created a thread")
		}
		// The scheme is case-insensitive.
		req, _ := http.NewRequest("GET", h.URL+"/instance-ai/threads", nil)
		req.Header.Set("Authorization", "bearer "+aliceToken)
		if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("lower-case scheme: %v %v", res.StatusCode, err)
		} else {
			res.Body.Close()
		}

		// Each user works in their own threads.
		run := alice.Chat("a1", "simple from alice")
		alice.CreateThread(`{"id":"a2","title":"Alice's secret plan"}`, http.StatusCreated)
		bob.Chat("b1", "simple from bob")
		frames := alice.Connect("a1", "", false).Until(wait, servertest.IsRunFinish(run))
		for _, f := range frames {
			if f.Event != "" {
				continue // a run-sync frame carries no event
			}
			if f.Decoded.UserID != "alice" {
				t.Fatalf("alice's run has a %s event of user %q", f.Decoded.Type, f.Decoded.UserID)
			}
		}
		if th, err := store.GetThread(context.Background(), "a1"); err != nil || th.OwnerID != "alice" {
			t.Fatalf("a1 = %+v, %v; want owner alice", th, err)
		}
		if got := ids(alice.ListThreads("").Threads); !slices.Equal(got, []string{"a2", "a1"}) {
			t.Fatalf("alice's threads = %v", got)
		}
		if got := ids(bob.ListThreads("").Threads); !slices.Equal(got, []string{"b1"}) {
			t.Fatalf("bob's threads = %v", got)
		}

		// Bob on alice's thread gets what he gets for a thread that does not
		// exist, on every endpoint that names a thread.
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/instance-ai/chat/%s", `{"message":"simple hijack"}`},
			{"POST", "/instance-ai/chat/%s/cancel", ""},
			{"GET", "/instance-ai/events/%s", ""},
			{"PATCH", "/instance-ai/threads/%s", `{"title":"mine now"}`},
			{"DELETE", "/instance-ai/threads/%s", ""},
			{"GET", "/instance-ai/threads/%s/status", ""},
		} {
			for _, victim := range []string{"a1", "a2"} {
				code, out := bob.Do(c.method, strings.Replace(c.path, "%s", victim, 1), c.body)
				errorOf(t, "bob "+c.method+" "+c.path+" "+victim, code, out, http.StatusNotFound, "thread_not_found", "threadId")
				if c.method == "POST" && !strings.HasSuffix(c.path, "/cancel") {
					continue // a chat to an unknown thread creates it
				}
				unknownCode, unknown := bob.Do(c.method, strings.Replace(c.path, "%s", "zz", 1), c.body)
				msg := func(m map[string]any, id string) string {
					e, _ := m["error"].(map[string]any)
					s, _ := e["message"].(string)
					return strings.ReplaceAll(s, id, "ID")
				}
				if code != unknownCode || msg(out, victim) != msg(unknown, "zz") {
					t.Errorf("bob %s %s: %d %v for alice's thread, %d %v for an unknown one", c.method, c.path, code, out, unknownCode, unknown)
				}
			}
		}
		// Taking alice's id for a new thread is refused without a word of
		// what the thread is.
		code, out := bob.Do("POST", "/instance-ai/threads", `{"id":"a2"}`)
		errorOf(t, "bob creates a2", code, out, http.StatusConflict, "thread_id_unavailable", "id")
		if body, _ := jsonString(out); strings.Contains(body, "alice") || strings.Contains(body, "secret") {
			t.Errorf("the refusal tells about alice's thread: %s", body)
		}
		// Nothing bob tried changed alice's threads: no rename, no delete, no
		// run.
		if got := alice.ListThreads("").Threads; len(got) != 2 || got[0].Title != "Alice's secret plan" {
			t.Fatalf("alice's threads after bob's attempts = %+v", got)
		}
		if r := h.App.Active("a1"); r != nil {
			t.Fatalf("bob started run %s in alice's thread", r.ID)
		}
		if err := h.App.Sync(context.Background(), "a1"); err != nil {
			t.Fatal(err)
		}
		for _, r := range servertest.StoredEvents(t, store, "a1") {
			if r.Event.UserID != "alice" && r.Event.UserID != "" {
				t.Fatalf("alice's log holds a %s event of user %q", r.Event.Type, r.Event.UserID)
			}
		}

		// No token shows up in the server's log.
		for _, token := range []string{aliceToken, bobToken} {
			if strings.Contains(logs.String(), token) {
				t.Fatalf("the server log contains a token:\n%s", logs.String())
			}
		}
	})
}
