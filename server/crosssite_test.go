package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// TestCrossSiteRequestsAreRefused replays, against a single-user server as
// `threadline serve` configures it, what a page on another site can make a
// browser send: form posts (text/plain, urlencoded) that would start runs,
// a bodiless no-cors fetch that would cancel or delete, and requests
// through a rebound DNS name. None of them may act or read; the API's own
// clients still work.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{CheckHost: true}})
	h.EnsureThread("victim")
	send := func(method, path, host, ctype, origin, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, h.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := h.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode >= 400 {
			if code, _ := readJSONError(t, res); code == "" {
				t.Errorf("%s %s: %d without a JSON error", method, path, res.StatusCode)
			}
		} else {
			res.Body.Close()
		}
		return res.StatusCode
	}
	const evil = "https://evil.example"
	for _, c := range []struct {
		name, method, path, host, ctype, origin, body string
		want                                          int
	}{
		{"a text/plain form starts a run", "POST", "/instance-ai/chat/victim", "", "text/plain", evil, `{"message":"simple pwned"}`, http.StatusForbidden},
		{"the same without an Origin", "POST", "/instance-ai/chat/victim", "", "text/plain", "", `{"message":"simple pwned"}`, http.StatusUnsupportedMediaType},
		{"a urlencoded form on AG-UI", "POST", "/run-agent", "", "application/x-www-form-urlencoded", "", `threadId=victim`, http.StatusUnsupportedMediaType},
		{"a no-cors fetch cancels", "POST", "/instance-ai/chat/victim/cancel", "", "", evil, "", http.StatusForbidden},
		{"a no-cors fetch deletes", "DELETE", "/instance-ai/threads/victim", "", "", evil, "", http.StatusForbidden},
		{"a builder form", "POST", "/generate", "", "text/plain", "", `{"description":"x"}`, http.StatusUnsupportedMediaType},
		{"DNS rebinding reads the threads", "GET", "/instance-ai/threads", "attacker.example:8080", "", "", "", http.StatusForbidden},
		{"DNS rebinding reads the stream", "GET", "/instance-ai/events/victim", "attacker.example", "", "", "", http.StatusForbidden},
		{"DNS rebinding posts JSON", "POST", "/instance-ai/chat/victim", "attacker.example", "application/json", "http://attacker.example", `{"message":"simple"}`, http.StatusForbidden},
		{"DNS rebinding reads the health", "GET", "/health", "attacker.example", "", "", "", http.StatusForbidden},
		{"a kubelet's liveness probe by pod IP", "GET", "/livez", "10.1.2.3:8080", "", "", "", http.StatusOK},
		{"a kubelet's readiness probe by pod IP", "GET", "/readyz", "10.1.2.3:8080", "", "", "", http.StatusOK},
		{"the console's own request", "POST", "/instance-ai/threads", "", "application/json", h.URL, `{"id":"mine"}`, http.StatusCreated},
		{"a JSON client without an Origin", "PATCH", "/instance-ai/threads/mine", "", "application/json", "", `{"title":"ok"}`, http.StatusOK},
	} {
		if got := send(c.method, c.path, c.host, c.ctype, c.origin, c.body); got != c.want {
			t.Errorf("%s: %s %s answered %d, want %d", c.name, c.method, c.path, got, c.want)
		}
	}
	// Nothing the refused requests asked for happened.
	if st := h.ThreadStatus("victim"); st.HasActiveRun || st.RunID != "" {
		t.Fatalf("a refused request started a run: %+v", st)
	}
	if rows := servertest.StoredEvents(t, h.Store, "victim"); len(rows) != 0 {
		t.Fatalf("the victim's thread has %d events, want none", len(rows))
	}
	if page := h.ListThreads(""); len(page.Threads) != 2 {
		t.Fatalf("threads %+v, want victim and mine", page.Threads)
	}
}
