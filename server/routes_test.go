package server_test

import (
	"github.com/threadline/threadline/server/servertest"
	"net/http"
	"strings"
	"testing"
)

// TestUnmatchedRoutes checks that a wrong method is a JSON 405 naming the
// allowed ones, and an unknown path a JSON 404.
func TestUnmatchedRoutes(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-routes-0123456789=alice"})
	for _, c := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{http.MethodGet, "/instance-ai/chat/t1", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPost, "/instance-ai/events/t1", http.StatusMethodNotAllowed, "GET"},
		{http.MethodPut, "/instance-ai/threads/t1", http.StatusMethodNotAllowed, "PATCH, DELETE"},
		{http.MethodGet, "/run-agent", http.StatusMethodNotAllowed, "POST"},
		{http.MethodDelete, "/health", http.StatusMethodNotAllowed, "GET"},
		{http.MethodGet, "/no/such/endpoint", http.StatusNotFound, ""},
		{http.MethodPost, "/", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/console/no-such-file.js", http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(c.method, h.URL+c.path, strings.NewReader("{}"))
		res, err := h.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		code, _ := readJSONError(t, res)
		if res.StatusCode != c.code || res.Header.Get("Allow") != c.allow || code == "" {
			t.Errorf("%s %s: %d Allow %q code %q, want %d Allow %q", c.method, c.path, res.StatusCode, res.Header.Get("Allow"), code, c.code, c.allow)
		}
	}
}

// TestConsoleIsPublic: with tokens on, the console's page and files are
// served to anyone (they carry no user data) while the API still asks.
func TestConsoleIsPublic(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-console-0123456789=alice"})
	for path, want := range map[string]int{"/": http.StatusOK, "/console/app.js": http.StatusOK, "/instance-ai/threads": http.StatusUnauthorized} {
		res, err := h.Client.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, res.StatusCode, want)
		}
	}
}
