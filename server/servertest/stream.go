package servertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/ssestream"
)

// Frame is one received SSE frame of the native event stream.
type Frame struct {
	ssestream.Frame
	// Decoded is the frame's data decoded as an instanceai event. It is
	// the zero event for comments and for frames with an SSE event name
	// (run-sync, reset), whose data is not an event.
	Decoded instanceai.Event
}

// IsRunFinish matches the run-finish of the run runID.
func IsRunFinish(runID string) func(Frame) bool {
	return func(f Frame) bool { return f.Decoded.Type == instanceai.TypeRunFinish && f.Decoded.RunID == runID }
}

// IsType matches the events of type typ.
func IsType(typ instanceai.EventType) func(Frame) bool {
	return func(f Frame) bool { return f.Decoded.Type == typ }
}

// ConfirmationRequest matches a confirmation-request and stores its
// request id in *requestID.
func ConfirmationRequest(requestID *string) func(Frame) bool {
	return func(f Frame) bool {
		p, ok := f.Decoded.Payload.(*instanceai.ConfirmationRequest)
		if ok {
			*requestID = p.RequestID
		}
		return ok
	}
}

// Conn is an open SSE connection whose frames are read in the background
// as they arrive, so a test can wait for them with a timeout.
type Conn struct {
	t      testing.TB
	res    *http.Response
	cancel context.CancelFunc
	frames chan frameOrErr
}

type frameOrErr struct {
	f   Frame
	err error
}

// DefaultBacklog is how many frames a connection holds unread before it
// stops reading the socket (and the server's queue fills).
const DefaultBacklog = 1024

// Connect opens GET /instance-ai/events/{thread}; cursor "" sends none,
// and viaQuery sends it as ?lastEventId instead of the Last-Event-ID
// header. Anything but 200 fails the test.
func (s *Server) Connect(thread, cursor string, viaQuery bool) *Conn {
	s.t.Helper()
	query := ""
	if cursor != "" && viaQuery {
		query = "lastEventId=" + cursor
	}
	return s.ConnectQuery(thread, query, cursor, viaQuery)
}

// ConnectQuery is Connect with a raw query string ("" for none); the
// cursor goes in the Last-Event-ID header unless viaQuery.
func (s *Server) ConnectQuery(thread, query, cursor string, viaQuery bool) *Conn {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	url := s.URL + "/instance-ai/events/" + thread
	if query != "" {
		url += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		s.t.Fatalf("events of %s: %v", thread, err)
	}
	if cursor != "" && !viaQuery {
		req.Header.Set("Last-Event-ID", cursor)
	}
	res, err := s.Client.Do(req)
	if err != nil {
		cancel()
		s.t.Fatalf("events of %s: %v", thread, err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cancel()
		s.t.Fatalf("events of %s: status %d", thread, res.StatusCode)
	}
	return ReadStream(s.t, res, cancel, DefaultBacklog)
}

// ReadStream reads the SSE frames of res in the background, keeping up to
// backlog unread; cancel (which may be nil) is called with Close, which
// the test's cleanup calls too. Its status is not checked: it suits a
// stream from any server, the threadline binary's as well.
func ReadStream(tb testing.TB, res *http.Response, cancel context.CancelFunc, backlog int) *Conn {
	if cancel == nil {
		cancel = func() {}
	}
	c := &Conn{t: tb, res: res, cancel: cancel, frames: make(chan frameOrErr, backlog)}
	go c.pump(ssestream.NewReader(res.Body))
	tb.Cleanup(c.Close)
	return c
}

func (c *Conn) pump(rd *ssestream.Reader) {
	defer close(c.frames)
	for {
		f, err := rd.Next()
		if err != nil {
			c.frames <- frameOrErr{err: err}
			return
		}
		fr := Frame{Frame: f}
		if f.Data != "" && f.Event == "" {
			if err := json.Unmarshal([]byte(f.Data), &fr.Decoded); err != nil {
				c.frames <- frameOrErr{err: fmt.Errorf("undecodable frame %q: %w", f.Data, err)}
				return
			}
		}
		c.frames <- frameOrErr{f: fr}
	}
}

// Close ends the connection.
func (c *Conn) Close() {
	c.cancel()
	c.res.Body.Close()
}

// Next returns the next frame, skipping comments, or the error that ended
// the stream (io.EOF at its end). No frame within timeout fails the test.
func (c *Conn) Next(timeout time.Duration) (Frame, error) {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case fe, open := <-c.frames:
			if !open {
				return Frame{}, io.EOF
			}
			if fe.err != nil {
				return Frame{}, fe.err
			}
			if fe.f.IsComment() {
				continue
			}
			return fe.f, nil
		case <-deadline:
			c.t.Fatalf("no frame within %v", timeout)
			return Frame{}, nil
		}
	}
}

// Until reads frames, comments skipped, until one satisfies stop, and
// returns them all (that one included). A stream that ends first, or a
// wait of more than timeout for a frame, fails the test.
func (c *Conn) Until(timeout time.Duration, stop func(Frame) bool) []Frame {
	c.t.Helper()
	var out []Frame
	for {
		f, err := c.Next(timeout)
		if err != nil {
			c.t.Fatalf("stream ended after %d frames: %v", len(out), err)
		}
		out = append(out, f)
		if stop(f) {
			return out
		}
	}
}

// FrameWithin returns the next frame, comments included, if one arrives
// within d; ok is false when none does or the stream ended or failed. It
// is for checking that a stream stays quiet.
func (c *Conn) FrameWithin(d time.Duration) (f Frame, ok bool) {
	select {
	case fe, open := <-c.frames:
		return fe.f, open && fe.err == nil
	case <-time.After(d):
		return Frame{}, false
	}
}
