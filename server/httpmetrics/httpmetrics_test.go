package httpmetrics

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
)

// recorder keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	requests []string // route method code stream
	open     map[string]int
	lasted   []time.Duration
	replayed map[string]int
	conns    int
}

func newRecorder() *recorder {
	return &recorder{open: map[string]int{}, replayed: map[string]int{}}
}

func (r *recorder) Request(route, method string, code int, _ time.Duration, stream bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ""
	if stream {
		s = " stream"
	}
	r.requests = append(r.requests, route+" "+method+" "+Code(code)+s)
}

func (r *recorder) StreamOpened(surface string) func(time.Duration) {
	r.mu.Lock()
	r.open[surface]++
	r.mu.Unlock()
	return func(d time.Duration) {
		r.mu.Lock()
		r.open[surface]--
		r.lasted = append(r.lasted, d)
		r.mu.Unlock()
	}
}

func (r *recorder) Replayed(surface string, n int) {
	r.mu.Lock()
	r.replayed[surface] += n
	r.mu.Unlock()
}

func (r *recorder) ConnOpened() func() {
	r.mu.Lock()
	r.conns++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.conns--
		r.mu.Unlock()
	}
}

// A request is named by its route's template after routing, a request no
// route takes is Unmatched, an unknown method is "other", and an SSE
// response is a stream of the route's surface, counted open until its
// handler returns.
func TestMiddleware(t *testing.T) {
	rec := newRecorder()
	router := mux.NewRouter()
	router.Use(Route(func(template string) string { return "native" }))
	router.HandleFunc("/threads/{id}", func(w http.ResponseWriter, r *http.Request) {
		ReplayCounter(r.Context())(3)
	}).Methods(http.MethodGet)
	router.HandleFunc("/events/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rec.mu.Lock()
		open := rec.open["native"]
		rec.mu.Unlock()
		if open != 1 {
			t.Errorf("streams open inside the handler: %d", open)
		}
	}).Methods(http.MethodGet)
	h := Middleware(rec, router)
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/threads/abc", nil),
		httptest.NewRequest(http.MethodGet, "/events/abc", nil),
		httptest.NewRequest(http.MethodGet, "/nothing/here", nil),
		httptest.NewRequest("BREW", "/threads/abc", nil),
	} {
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	want := []string{
		"/threads/{id} GET 200",
		"/events/{id} GET 200 stream",
		"unmatched GET 404",
		"unmatched other 405",
	}
	if len(rec.requests) != len(want) {
		t.Fatalf("requests %q, want %q", rec.requests, want)
	}
	for i := range want {
		if rec.requests[i] != want[i] {
			t.Errorf("request %d: %q, want %q", i, rec.requests[i], want[i])
		}
	}
	if rec.open["native"] != 0 || len(rec.lasted) != 1 || rec.replayed["native"] != 3 {
		t.Fatalf("open %v, streams ended %d, replayed %v", rec.open, len(rec.lasted), rec.replayed)
	}
	if ReplayCounter(httptest.NewRequest(http.MethodGet, "/", nil).Context()) != nil {
		t.Fatal("a replay counter outside the middleware")
	}
}

// A stream that takes its connection over stays open past its handler,
// until the connection closes; the listener counts the connection from
// Accept to Close.
func TestHijackedStreamAndConnections(t *testing.T) {
	rec := newRecorder()
	router := mux.NewRouter()
	router.Use(Route(func(string) string { return "native" }))
	taken := make(chan net.Conn, 1)
	router.HandleFunc("/events/{id}", func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"))
		taken <- conn
	}).Methods(http.MethodGet)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Middleware(rec, router)}
	go srv.Serve(Listen(ln, rec))
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /events/x HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	conn := <-taken
	await(t, rec, func() bool { return len(rec.requests) == 1 })
	rec.mu.Lock()
	open, conns, req := rec.open["native"], rec.conns, rec.requests[0]
	rec.mu.Unlock()
	if open != 1 || conns != 1 || req != "/events/{id} GET 200 stream" {
		t.Fatalf("after the handler returned: open %d, connections %d, request %q", open, conns, req)
	}
	conn.Close()
	conn.Close() // counted once
	rec.mu.Lock()
	open, conns = rec.open["native"], rec.conns
	rec.mu.Unlock()
	if open != 0 || conns != 0 {
		t.Fatalf("after the stream's connection closed: open %d, connections %d", open, conns)
	}
}

// await waits until cond holds under the recorder's lock.
func await(t *testing.T, rec *recorder, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec.mu.Lock()
		ok := cond()
		rec.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
