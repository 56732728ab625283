// Package accesslog writes one log line per HTTP request: method, path,
// status, bytes and duration. It never logs the query string or headers,
// where tokens travel (?access_token= for browser EventSource, the
// Authorization header). A stream's line is written when its handler
// returns: at the stream's end, or, for a native event stream that took
// its connection over, when it was handed over (status 200, "hijacked").
package accesslog

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Middleware logs each request through logger at info level.
func Middleware(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http answers 200
		}
		logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int64("bytes", rec.bytes),
			slog.Duration("took", time.Since(start).Round(time.Microsecond)),
			slog.Bool("hijacked", rec.hijacked),
		)
	})
}

// recorder notes the status and body size. Unwrap lets
// http.ResponseController reach the connection's Flush, deadlines and
// Hijack through it.
type recorder struct {
	http.ResponseWriter
	status   int
	bytes    int64
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Hijack hands the connection over (a native event stream), noting it: the
// stream then writes its own 200 response on the connection.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked, r.status = true, http.StatusOK
	}
	return conn, rw, err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush forwards to the wrapped writer, for code that asserts
// http.Flusher rather than using a ResponseController.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
