package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/metrics"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/ssestream"
	"github.com/threadline/threadline/storage"
)

// backends opens a fresh, migrated store of each kind.
var backends = []struct {
	name string
	open func(t *testing.T) instanceai.Store
}{
	{"memory", func(t *testing.T) instanceai.Store { return openStore(t, "memory") }},
	{"sqlite", func(t *testing.T) instanceai.Store {
		return openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "threadline.db"))
	}},
	{"postgres", func(t *testing.T) instanceai.Store { return openStore(t, testpg.FreshDSN(t)) }},
}

func openStore(t *testing.T, spec string) instanceai.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("open %s: %v", spec, err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// forEachStore runs fn as a subtest on every backend.
func forEachStore(t *testing.T, fn func(t *testing.T, store instanceai.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}

type harness struct {
	t      *testing.T
	app    *server.Server
	srv    *httptest.Server
	client *http.Client
}

type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

type options struct {
	// agent replaces the reference agent when set.
	agent     instanceai.Agent
	delay     time.Duration
	queue     int
	heartbeat time.Duration
	maxBody   int64
	// smallBuffers shrinks the sockets' kernel buffers, so a client that
	// reads slowly makes the server's queue fill instead of the kernel's.
	smallBuffers bool
	// tokens turns authentication on: "token1=alice,token2=bob", as
	// --tokens takes it. Requests of h carry no token; h.as(token) sends one.
	tokens string
	// logs, if set, receives the server's log.
	logs io.Writer
	// queryToken accepts ?access_token= on GET requests.
	queryToken bool
	// metrics and llmHealth are passed to the server as they are.
	metrics   *metrics.Metrics
	llmHealth http.Handler
}

func start(t *testing.T, store instanceai.Store, o options) *harness {
	t.Helper()
	var authn *auth.Authenticator
	if o.tokens != "" {
		entries, err := auth.ParseList(o.tokens, "tokens")
		if err == nil {
			authn, err = auth.New(entries)
		}
		if err != nil {
			t.Fatal(err)
		}
		if o.queryToken {
			authn.AllowQueryToken()
		}
	}
	var logger *slog.Logger
	if o.logs != nil {
		logger = slog.New(slog.NewTextHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var agent instanceai.Agent = &script.Agent{Delay: o.delay}
	if o.agent != nil {
		agent = o.agent
	}
	app := server.New(store, agent, server.Config{
		SubscriberQueue: o.queue, Heartbeat: o.heartbeat, MaxBody: o.maxBody, Auth: authn, Logger: logger,
		Metrics: o.metrics, LLMHealth: o.llmHealth,
	})
	srv := httptest.NewUnstartedServer(app.Handler())
	client := http.DefaultClient
	if o.smallBuffers {
		srv.Listener = smallBufferListener{srv.Listener}
		client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4096)
			}
			return c, err
		}}}
	}
	srv.Start()
	h := &harness{t: t, app: app, srv: srv, client: client}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	})
	return h
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// as returns the harness acting with a bearer token: every request it
// sends, through do, chat, connect or client, carries the token.
func (h *harness) as(token string) *harness {
	c := *h
	base := h.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.client = &http.Client{Transport: bearer{token: token, base: base}}
	return &c
}

// do sends a request and decodes a JSON answer.
func (h *harness) do(method, path, body string) (int, map[string]any) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			h.t.Fatalf("%s %s: non-JSON answer %q", method, path, raw)
		}
	}
	return res.StatusCode, out
}

func (h *harness) chat(thread, message string) string {
	h.t.Helper()
	body, _ := json.Marshal(map[string]string{"message": message})
	code, out := h.do(http.MethodPost, "/instance-ai/chat/"+thread, string(body))
	if code != http.StatusOK {
		h.t.Fatalf("chat %q: %d %v", message, code, out)
	}
	runID, _ := out["runId"].(string)
	if runID == "" {
		h.t.Fatalf("chat answer has no runId: %v", out)
	}
	return runID
}

// frame is a received SSE frame with its decoded event.
type frame struct {
	ssestream.Frame
	ev instanceai.Event
}

type conn struct {
	t      *testing.T
	res    *http.Response
	rd     *ssestream.Reader
	cancel context.CancelFunc
	frames chan frameOrErr
}

type frameOrErr struct {
	f   frame
	err error
}

// connect opens the thread's event stream; cursor "" means none, and
// viaQuery sends it as ?lastEventId instead of the header.
func (h *harness) connect(thread, cursor string, viaQuery bool) *conn {
	h.t.Helper()
	query := ""
	if cursor != "" && viaQuery {
		query = "lastEventId=" + cursor
	}
	return h.connectQuery(thread, query, cursor, viaQuery)
}

// connectQuery opens the thread's event stream with a raw query string;
// cursor goes in the Last-Event-ID header unless viaQuery.
func (h *harness) connectQuery(thread, query, cursor string, viaQuery bool) *conn {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	url := h.srv.URL + "/instance-ai/events/" + thread
	if query != "" {
		url += "?" + query
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if cursor != "" && !viaQuery {
		req.Header.Set("Last-Event-ID", cursor)
	}
	res, err := h.client.Do(req)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		h.t.Fatalf("events: status %d", res.StatusCode)
	}
	c := &conn{t: h.t, res: res, rd: ssestream.NewReader(res.Body), cancel: cancel, frames: make(chan frameOrErr, 1024)}
	go c.pump()
	h.t.Cleanup(c.close)
	return c
}

func (c *conn) pump() {
	defer close(c.frames)
	for {
		f, err := c.rd.Next()
		if err != nil {
			c.frames <- frameOrErr{err: err}
			return
		}
		fr := frame{Frame: f}
		if f.Data != "" && f.Event == "" {
			if err := json.Unmarshal([]byte(f.Data), &fr.ev); err != nil {
				c.frames <- frameOrErr{err: fmt.Errorf("undecodable frame %q: %w", f.Data, err)}
				return
			}
		}
		c.frames <- frameOrErr{f: fr}
	}
}

func (c *conn) close() {
	c.cancel()
	c.res.Body.Close()
}

// next returns the next frame, skipping comments; ok is false when the
// stream ended (err says why) and it fails the test after timeout.
func (c *conn) next(timeout time.Duration) (frame, error) {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case fe, open := <-c.frames:
			if !open {
				return frame{}, io.EOF
			}
			if fe.err != nil {
				return frame{}, fe.err
			}
			if fe.f.IsComment() {
				continue
			}
			return fe.f, nil
		case <-deadline:
			c.t.Fatalf("no frame within %v", timeout)
			return frame{}, nil
		}
	}
}

// until reads frames until one satisfies stop (included).
func (c *conn) until(timeout time.Duration, stop func(frame) bool) []frame {
	c.t.Helper()
	var out []frame
	for {
		f, err := c.next(timeout)
		if err != nil {
			c.t.Fatalf("stream ended after %d frames: %v", len(out), err)
		}
		out = append(out, f)
		if stop(f) {
			return out
		}
	}
}

func isRunFinish(runID string) func(frame) bool {
	return func(f frame) bool { return f.ev.Type == instanceai.TypeRunFinish && f.ev.RunID == runID }
}

// replay returns every stored event of the thread, in order, via the store.
func replay(t *testing.T, store instanceai.Store, thread string) []instanceai.StoredEvent {
	t.Helper()
	rows, err := store.ReadAfter(context.Background(), thread, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
