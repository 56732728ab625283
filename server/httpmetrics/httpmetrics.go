// Package httpmetrics measures the HTTP side of the server for its
// metrics: each request by route template (never the raw path, whose
// thread ids would make a series per thread) and status, the time of the
// requests that are not streams, the streams open by surface, the
// connections held, and the replayed events each surface served.
//
// Streams are told apart because their duration is their client's, not
// the server's: an event stream lasts as long as someone watches. They
// are counted with the other requests, left out of the request duration,
// and timed apart, by surface.
package httpmetrics

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
)

// Unmatched is the route label of requests no route took: unknown paths
// and methods, and those refused before routing (a Host not allowed).
const Unmatched = "unmatched"

// Other is the surface of routes outside the named surfaces (/health,
// /metrics, the OpenAPI document) and of unmatched requests.
const Other = "other"

// Recorder receives the measurements; package metrics implements it.
type Recorder interface {
	// Request counts a finished request; took is its duration, which
	// the recorder times unless the request was a stream.
	Request(route, method string, code int, took time.Duration, stream bool)
	// StreamOpened counts an open stream until closed is called, with
	// how long it lasted.
	StreamOpened(surface string) (closed func(lasted time.Duration))
	// Replayed counts events a surface replayed from the log.
	Replayed(surface string, events int)
	// ConnOpened counts a held connection until closed is called.
	ConnOpened() (closed func())
}

// route is what the router found for a request: filled in by Route on
// the way in, read by Middleware on the way out.
type route struct {
	template, surface string
}

type routeKey struct{}

type recorderKey struct{}

// Route is a middleware for the root router that names each matched
// request's route template and surface (surface maps a template to it).
// It runs after routing, so the match costs nothing more.
func Route(surface func(template string) string) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if rt, ok := r.Context().Value(routeKey{}).(*route); ok {
				if cur := mux.CurrentRoute(r); cur != nil {
					if t, err := cur.GetPathTemplate(); err == nil {
						rt.template, rt.surface = t, surface(t)
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Middleware measures every request next serves; next must route with
// Route installed, else every request is Unmatched.
func Middleware(rec Recorder, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rt := &route{template: Unmatched, surface: Other}
		ctx := context.WithValue(context.WithValue(r.Context(), routeKey{}, rt), recorderKey{}, rec)
		mw := &writer{ResponseWriter: w, rec: rec, rt: rt, start: start}
		next.ServeHTTP(mw, r.WithContext(ctx))
		code := mw.status
		if code == 0 {
			code = http.StatusOK // nothing written: net/http answers 200
		}
		rec.Request(rt.template, method(r.Method), code, time.Since(start), mw.stream)
		// A hijacked stream goes on past its handler: its connection's
		// Close ends it.
		if mw.closed != nil && !mw.hijacked {
			mw.closed(time.Since(start))
		}
	})
}

// ReplayCounter returns what counts the events replayed from the log to
// the client of the request ctx belongs to, under its surface; nil outside
// Middleware. It holds the surface and the recorder, not ctx: a stream
// that outlives its handler keeps it.
func ReplayCounter(ctx context.Context) func(events int) {
	rt, _ := ctx.Value(routeKey{}).(*route)
	rec, _ := ctx.Value(recorderKey{}).(Recorder)
	if rt == nil || rec == nil {
		return nil
	}
	// The route is named before the handler runs, which is where this
	// is called from.
	surface := rt.surface
	return func(events int) { rec.Replayed(surface, events) }
}

// methods are the method labels; any other method is "other", so that a
// client inventing methods cannot add series.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

func method(m string) string {
	if methods[m] {
		return m
	}
	return "other"
}

// IsStream reports whether a response with these headers is a stream: SSE,
// or AG-UI's protobuf binding.
func IsStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return strings.HasPrefix(ct, "text/event-stream") || strings.HasPrefix(ct, "application/vnd.ag-ui.event+proto")
}

// writer notes the status and whether the response became a stream.
// Unwrap lets http.ResponseController reach the connection's Flush,
// deadlines and Hijack through it.
type writer struct {
	http.ResponseWriter
	rec      Recorder
	rt       *route
	start    time.Time
	status   int
	stream   bool
	hijacked bool
	closed   func(time.Duration)
}

func (w *writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if code == http.StatusOK && IsStream(w.Header()) {
			w.opened()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *writer) opened() {
	w.stream = true
	w.closed = w.rec.StreamOpened(w.rt.surface)
}

// Hijack hands the connection over to a stream that writes its own
// response on it (the native event stream): the stream is open until the
// connection is closed.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return conn, rw, err
	}
	w.status, w.hijacked = http.StatusOK, true
	w.opened()
	closed, start := w.closed, w.start
	return &streamConn{Conn: conn, closed: func() { closed(time.Since(start)) }}, rw, nil
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush forwards to the wrapped writer, for code that asserts
// http.Flusher rather than using a ResponseController.
func (w *writer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// streamConn ends its stream's count at its first Close.
type streamConn struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *streamConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.closed)
	return err
}

// Listen wraps ln so that rec counts the connections it holds, from
// Accept to Close (a connection a stream took over included).
func Listen(ln net.Listener, rec Recorder) net.Listener { return &listener{Listener: ln, rec: rec} }

type listener struct {
	net.Listener
	rec Recorder
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: c, closed: l.rec.ConnOpened()}, nil
}

// heldConn ends its count at its first Close.
type heldConn struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *heldConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.closed)
	return err
}

// Code is the status label of code.
func Code(code int) string { return strconv.Itoa(code) }
