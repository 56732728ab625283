package guard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGuard runs the requests an attacking page can make, and the ones the
// API's clients make, through the guard of a single-user server.
func TestGuard(t *testing.T) {
	cfg := Config{CheckHost: true, AllowedHosts: ParseHosts("threadline.internal:8080, Box.Local"), AllowedOrigins: []string{"https://app.example.com"}}
	reached := false
	h := Middleware(cfg, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	for _, c := range []struct {
		name, method, host, ctype, origin, body string
		code                                    int
		field                                   string
	}{
		{"a JSON chat", "POST", "127.0.0.1:8080", "application/json", "", `{"message":"hi"}`, 200, ""},
		{"JSON with a charset", "POST", "localhost:8080", "application/json; charset=utf-8", "", `{}`, 200, ""},
		{"a bodiless cancel", "POST", "localhost:8080", "", "", "", 200, ""},
		{"a delete", "DELETE", "[::1]:8080", "", "", "", 200, ""},
		{"the console, same origin", "POST", "127.0.0.1:8080", "application/json", "http://127.0.0.1:8080", `{}`, 200, ""},
		{"an allowed origin", "POST", "127.0.0.1:8080", "application/json", "https://app.example.com", `{}`, 200, ""},
		{"a GET from anywhere", "GET", "127.0.0.1:8080", "", "https://evil.example", "", 200, ""},
		{"an allowed host", "GET", "threadline.internal:8080", "", "", "", 200, ""},
		{"an allowed host, any case", "GET", "BOX.local", "", "", "", 200, ""},
		{"a text/plain form", "POST", "127.0.0.1:8080", "text/plain", "", `{"message":"hi"}`, 415, "Content-Type"},
		{"a urlencoded form", "POST", "127.0.0.1:8080", "application/x-www-form-urlencoded", "", `message=hi`, 415, "Content-Type"},
		{"an empty form", "POST", "127.0.0.1:8080", "multipart/form-data; boundary=x", "", "", 415, "Content-Type"},
		{"a body without a type", "PATCH", "127.0.0.1:8080", "", "", `{"title":"x"}`, 415, "Content-Type"},
		{"a cross-site bodiless fetch", "POST", "127.0.0.1:8080", "", "https://evil.example", "", 403, "Origin"},
		{"a cross-site delete", "DELETE", "127.0.0.1:8080", "", "null", "", 403, "Origin"},
		{"DNS rebinding", "GET", "attacker.example", "", "", "", 403, "Host"},
		{"DNS rebinding with a port", "POST", "attacker.example:8080", "application/json", "http://attacker.example:8080", `{}`, 403, "Host"},
	} {
		reached = false
		req := httptest.NewRequest(c.method, "/instance-ai/chat/t1", strings.NewReader(c.body))
		req.Host = c.host
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.code || reached != (c.code == 200) {
			t.Errorf("%s: %d (handler reached %v), want %d", c.name, rec.Code, reached, c.code)
			continue
		}
		if c.field == "" {
			continue
		}
		var body struct {
			Error struct {
				Details struct {
					Field string `json:"field"`
				} `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Details.Field != c.field {
			t.Errorf("%s: body %s, want the field %s named", c.name, rec.Body, c.field)
		}
	}
}

// The probes' paths named in AnyHostPaths answer any Host (a kubelet
// sends the pod's IP), for GET and HEAD only; every other path, and a
// POST to a probe path, is still checked.
func TestAnyHostPaths(t *testing.T) {
	cfg := Config{CheckHost: true, AnyHostPaths: []string{"/livez", "/readyz"}}
	h := Middleware(cfg, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/livez", 200}, {"HEAD", "/readyz", 200}, {"GET", "/readyz", 200},
		{"GET", "/health", 403}, {"GET", "/livez/x", 403}, {"POST", "/livez", 403}, {"GET", "/instance-ai/threads", 403},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		req.Host = "10.1.2.3:8080"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %s from Host %s: %d, want %d", c.method, c.path, req.Host, rec.Code, c.want)
		}
	}
}

// TestHostCheckOff admits any Host when CheckHost is off (tokens are
// configured) and with "*".
func TestHostCheckOff(t *testing.T) {
	for _, cfg := range []Config{{}, {CheckHost: true, AllowedHosts: ParseHosts("*")}} {
		h := Middleware(cfg, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := httptest.NewRequest("GET", "/instance-ai/threads", nil)
		req.Host = "threadline.example.com"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Errorf("%+v: %d", cfg, rec.Code)
		}
	}
}
