package accesslog

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) records(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// TestLine: one line per request with method, path, status, bytes and
// duration, and neither the query nor any header (where tokens are).
func TestLine(t *testing.T) {
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	srv := httptest.NewServer(Middleware(logger, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/created":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "hello")
		case "/hijack":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack through the middleware: %v", err)
				return
			}
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nraw")
			conn.Close()
		default:
			// Nothing written: net/http answers 200.
		}
	})))
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/created?access_token=secret-token-123", nil)
	req.Header.Set("Authorization", "Bearer secret-header-456")
	for _, r := range []*http.Request{req, mustGet(t, srv.URL+"/empty"), mustGet(t, srv.URL+"/hijack")} {
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
	}
	// The hijacking handler's line is written when it returns, which can be
	// after its client read the raw answer and the connection's end.
	recs := logs.records(t)
	for deadline := time.Now().Add(5 * time.Second); len(recs) < 3 && time.Now().Before(deadline); recs = logs.records(t) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(recs) != 3 {
		t.Fatalf("%d log lines, want 3: %v", len(recs), recs)
	}
	want := []struct {
		method, path string
		status       float64
		bytes        float64
		hijacked     bool
	}{
		{"POST", "/created", 201, 5, false},
		{"GET", "/empty", 200, 0, false},
		{"GET", "/hijack", 200, 0, true},
	}
	for i, w := range want {
		r := recs[i]
		if r["msg"] != "request" || r["method"] != w.method || r["path"] != w.path || r["status"] != w.status ||
			r["bytes"] != w.bytes || r["hijacked"] != w.hijacked || r["took"] == nil {
			t.Errorf("line %d = %v, want %+v", i, r, w)
		}
	}
	all := logs.b.String()
	for _, secret := range []string{"secret-token-123", "secret-header-456", "access_token"} {
		if strings.Contains(all, secret) {
			t.Fatalf("the access log shows %q:\n%s", secret, all)
		}
	}
}

func mustGet(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
