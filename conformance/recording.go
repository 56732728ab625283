package conformance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/threadline/threadline/ssestream"
)

// TimedFrame is an SSE frame with the time it arrived, counted from the
// response headers (zero for frames parsed from a fixture).
type TimedFrame struct {
	ssestream.Frame
	At time.Duration
}

// Recording is one SSE response as a client received it: what the checkers
// judge.
type Recording struct {
	Status int
	Header http.Header
	// Body is every byte of the body read, as received.
	Body   []byte
	Frames []TimedFrame
	// Elapsed is how long the body was read.
	Elapsed time.Duration
}

// Data returns the frames that carry data (comments and empty frames left
// out), in order.
func (r *Recording) Data() []TimedFrame {
	var out []TimedFrame
	for _, f := range r.Frames {
		if f.Data != "" || f.Event != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseRecording builds a recording from a stored body, as fixtures are:
// status 200, the given header, frames without times.
func ParseRecording(header http.Header, body []byte) (*Recording, error) {
	rec := &Recording{Status: http.StatusOK, Header: header, Body: body}
	rd := ssestream.NewReader(bytes.NewReader(body))
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rec, nil
		}
		if err != nil {
			return rec, err
		}
		rec.Frames = append(rec.Frames, TimedFrame{Frame: f})
	}
}

// teeReader keeps a copy of what is read. The reading goroutine may still
// be in a Read when Record returns, hence the lock.
type teeReader struct {
	r   io.Reader
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.mu.Lock()
	t.buf.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

// Record reads an SSE response until stop returns true for a frame (the
// frame is kept), the body ends, or ctx ends (then the recording so far is
// returned with ctx's error). The caller closes res.Body.
func Record(ctx context.Context, res *http.Response, stop func(TimedFrame) bool) (*Recording, error) {
	start := time.Now()
	var raw bytes.Buffer
	var mu sync.Mutex
	rec := &Recording{Status: res.StatusCode, Header: res.Header.Clone()}
	rd := ssestream.NewReader(teeReader{r: res.Body, mu: &mu, buf: &raw})
	type next struct {
		f   ssestream.Frame
		err error
	}
	frames := make(chan next)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			f, err := rd.Next()
			select {
			case frames <- next{f, err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	finish := func(err error) (*Recording, error) {
		rec.Elapsed = time.Since(start)
		mu.Lock()
		rec.Body = append([]byte(nil), raw.Bytes()...)
		mu.Unlock()
		return rec, err
	}
	for {
		select {
		case <-ctx.Done():
			return finish(ctx.Err())
		case n := <-frames:
			if errors.Is(n.err, io.EOF) {
				return finish(nil)
			}
			if n.err != nil {
				return finish(n.err)
			}
			tf := TimedFrame{Frame: n.f, At: time.Since(start)}
			rec.Frames = append(rec.Frames, tf)
			if stop != nil && stop(tf) {
				return finish(nil)
			}
		}
	}
}
