package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// postRunAgentError posts an AG-UI run and returns its error answer.
func postRunAgentError(t *testing.T, srv *servertest.Server, body string) (int, map[string]any) {
	t.Helper()
	res := srv.PostRunAgent(t.Context(), body, "text/event-stream")
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("run-agent %s: %d, non-JSON answer %q", body, res.StatusCode, raw)
	}
	return res.StatusCode, out
}

// postRunAgentRefused posts body, which the interrupt contract refuses,
// and returns the RUN_ERROR the stream holds: its code and field.
func postRunAgentRefused(t *testing.T, srv *servertest.Server, body string) (code, field, raw string) {
	t.Helper()
	res := srv.PostRunAgent(t.Context(), body, "text/event-stream")
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	raw = string(b)
	var data string
	ok := strings.Count(raw, "data: ") == 1
	if i := strings.Index(raw, "data: "); ok {
		data, _, _ = strings.Cut(raw[i+len("data: "):], "\n")
	}
	var ev struct {
		Type, Code string
		Metadata   map[string]map[string]any
	}
	if res.StatusCode != http.StatusOK || !ok || json.Unmarshal([]byte(data), &ev) != nil || ev.Type != "RUN_ERROR" {
		t.Fatalf("run-agent %s: %d %q, want a stream of one RUN_ERROR", body, res.StatusCode, raw)
	}
	field, _ = ev.Metadata["instance-ai"]["field"].(string)
	return ev.Code, field, raw
}

func wantNoThreads(t *testing.T, srv *servertest.Server, after string) {
	t.Helper()
	if page := srv.ListThreads(""); len(page.Threads) != 0 {
		t.Fatalf("%s left threads behind: %+v", after, page.Threads)
	}
}

// TestRefusedRunsCreateNoThread: a chat or an AG-UI run refused for its
// agent, or an AG-UI resume of a thread with nothing to resume, leaves the
// thread list as it was.
func TestRefusedRunsCreateNoThread(t *testing.T) {
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	code, out := srv.Do(http.MethodPost, "/instance-ai/chat/fresh", `{"message":"simple","agent":"nope"}`)
	wantError(t, "chat with an unknown agent", code, out, http.StatusBadRequest, "unknown_agent", "agent")
	wantNoThreads(t, srv, "a chat with an unknown agent")

	code, out = postRunAgentError(t, srv, servertest.RunAgentInput("fresh", "r1", "simple", map[string]any{"forwardedProps": map[string]any{"agent": "nope"}}))
	wantError(t, "run-agent with an unknown agent", code, out, http.StatusBadRequest, "unknown_agent", "forwardedProps.agent")
	wantNoThreads(t, srv, "a run-agent with an unknown agent")

	if code, field, _ := postRunAgentRefused(t, srv, servertest.RunAgentInput("fresh", "r2", "", map[string]any{
		"messages": []any{}, "resume": []any{map[string]any{"interruptId": "cr_none", "status": "resolved", "payload": map[string]any{"approved": true}}}})); code != "interrupt_not_open" || field != "resume[0].interruptId" {
		t.Fatalf("run-agent resuming nothing: %s %q", code, field)
	}
	wantNoThreads(t, srv, "a resume of a thread that does not exist")

	// The same requests done right create the thread.
	srv.Chat("fresh", "simple")
	if page := srv.ListThreads(""); len(page.Threads) != 1 {
		t.Fatalf("threads after a chat: %+v", page.Threads)
	}
}

// TestNULRefused: U+0000 in a chat message, an AG-UI message or a title is
// a 400 naming the field on every store, and nothing is stored; the same
// text without it works and is stored whole.
func TestNULRefused(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		srv := servertest.Start(t, store, servertest.Options{})
		code, out := srv.Do(http.MethodPost, "/instance-ai/chat/nul", `{"message":"simple a\u0000b"}`)
		wantError(t, "chat with U+0000", code, out, http.StatusBadRequest, "invalid_field", "message")
		code, out = postRunAgentError(t, srv, servertest.RunAgentInput("nul", "r1", "simple a\x00b", nil))
		wantError(t, "run-agent with U+0000", code, out, http.StatusBadRequest, "invalid_field", "messages[0].content")
		code, out = srv.Do(http.MethodPost, "/instance-ai/threads", `{"id":"nul","title":"a\u0000b"}`)
		wantError(t, "thread title with U+0000", code, out, http.StatusBadRequest, "invalid_field", "title")
		wantNoThreads(t, srv, "requests with U+0000")

		srv.Chat("nul", "simple a b")
		var msgs struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if code := srv.DoInto(http.MethodGet, "/instance-ai/threads/nul/messages", "", &msgs); code != http.StatusOK ||
			len(msgs.Messages) == 0 || msgs.Messages[0].Content != "simple a b" {
			t.Fatalf("messages: %d %+v", code, msgs)
		}
	})
}

// TestTitleCharacters: a title is one line shown as it is: line and
// paragraph separators, bidirectional controls and other control
// characters are refused on create and rename; other Unicode is kept; a
// title derived from a message drops them.
func TestTitleCharacters(t *testing.T) {
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	srv.EnsureThread("t")
	for _, bad := range []string{"\u2028", "\u2029", "\u202a", "\u202e", "\u2066", "\u2069", "\u0007", "\u0085", "\n"} {
		title, _ := json.Marshal("before" + bad + "after")
		code, out := srv.Do(http.MethodPost, "/instance-ai/threads", `{"title":`+string(title)+`}`)
		wantError(t, "create with "+string(title), code, out, http.StatusBadRequest, "invalid_field", "title")
		code, out = srv.Do(http.MethodPatch, "/instance-ai/threads/t", `{"title":`+string(title)+`}`)
		wantError(t, "rename to "+string(title), code, out, http.StatusBadRequest, "invalid_field", "title")
	}
	const fine = "Café – ünïcode, עברית and 中文 👍"
	if code, out := srv.Do(http.MethodPatch, "/instance-ai/threads/t", `{"title":"`+fine+`"}`); code != http.StatusOK || out["title"] != fine {
		t.Fatalf("rename to %q: %d %v", fine, code, out)
	}
	srv.Chat("derived", "simple \u202eevil\u2028 second")
	var title string
	for _, th := range srv.ListThreads("").Threads {
		if th.ID == "derived" {
			title = th.Title
		}
	}
	if strings.ContainsFunc(title, instanceai.NotInTitle) || title != "simple evil second" {
		t.Fatalf("derived title %q", title)
	}
}

// TestDotSegmentsAnswerJSON: paths with dot segments or empty segments,
// as the command serves them, get the API's JSON 404 or 400, never a
// redirect to a cleaned path.
func TestDotSegmentsAnswerJSON(t *testing.T) {
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Serve: &server.ServeOptions{}})
	srv.EnsureThread("x")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/instance-ai/../instance-ai/threads"}, {http.MethodGet, "//instance-ai/threads"},
		{http.MethodGet, "/instance-ai//threads"}, {http.MethodGet, "/./health"}, {http.MethodGet, "/health/.."},
		{http.MethodGet, "/instance-ai/%2e%2e/instance-ai/threads"}, {http.MethodDelete, "/instance-ai/threads/y/../x"},
		{http.MethodPost, "/instance-ai/chat/x/../x"}, {http.MethodGet, "//"},
	} {
		req, err := http.NewRequest(c.method, srv.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = c.path // sent as it is, not cleaned by the client
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if (res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusBadRequest) || json.Unmarshal(raw, &body) != nil || body.Error.Code == "" {
			t.Fatalf("%s %s: %d (Location %q) %q", c.method, c.path, res.StatusCode, res.Header.Get("Location"), raw)
		}
	}
	if page := srv.ListThreads(""); len(page.Threads) != 1 {
		t.Fatalf("threads after the dot paths: %+v", page.Threads)
	}
}

// wantError checks an error answer's status, code and details.field.
func wantError(t *testing.T, what string, code int, out map[string]any, wantCode int, wantErr, wantField string) {
	t.Helper()
	e, _ := out["error"].(map[string]any)
	details, _ := e["details"].(map[string]any)
	if code != wantCode || e["code"] != wantErr || details["field"] != wantField {
		t.Fatalf("%s: %d %v, want %d %s naming %s", what, code, out, wantCode, wantErr, wantField)
	}
}

// TestResumeOfAnotherUsersThread: a resume of another user's thread is
// answered as one of an unknown thread, even while that thread has a run:
// no runId, no thread created or touched.
func TestResumeOfAnotherUsersThread(t *testing.T) {
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-alice=alice,tok-bob=bob"})
	alice, bob := srv.As("tok-alice"), srv.As("tok-bob")
	alice.Chat("hers", "long 100000")
	defer alice.Cancel("hers")
	resume := servertest.RunAgentInput("hers", "r1", "", map[string]any{
		"messages": []any{}, "resume": []any{map[string]any{"interruptId": "cr_x", "status": "resolved", "payload": map[string]any{"approved": true}}}})
	code, field, raw := postRunAgentRefused(t, bob, resume)
	if code != "interrupt_not_open" || field != "resume[0].interruptId" {
		t.Fatalf("bob resuming alice's thread: %s %q", code, field)
	}
	if strings.Contains(raw, "run_") {
		t.Fatalf("the answer tells of alice's run: %s", raw)
	}
	wantNoThreads(t, bob, "bob's resume")
}
