// Package endpoint is what the agents that stream from an HTTP upstream
// (n8n webhooks, AG-UI agents) share: a list of named URLs, and one
// streaming POST bounded by a connect timeout and an idle timeout whose
// expiry the caller can tell from the run's own cancel.
package endpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/tracing"
)

// Named is one named upstream URL.
type Named struct {
	Name string
	URL  string
}

// Check validates a list of named URLs: at least one; names non-empty and
// unique; URLs absolute http(s) (example shows one in the error). field
// names the list in errors, e.g. "n8n: Config.Webhooks".
func Check(field string, list []Named, example string) error {
	if len(list) == 0 {
		return fmt.Errorf("%s: at least one is required", field)
	}
	seen := map[string]bool{}
	for i, n := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(n.Name) == "" {
			return fmt.Errorf("%s.Name: is required", f)
		}
		if seen[n.Name] {
			return fmt.Errorf("%s.Name: %q is used by another entry; names must be unique", f, n.Name)
		}
		seen[n.Name] = true
		u, err := url.Parse(n.URL)
		if err != nil {
			return fmt.Errorf("%s.URL: %q is not a URL: %v", f, Redact(n.URL), err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.URL: %q must be an absolute http(s) URL, like %s", f, Redact(n.URL), example)
		}
	}
	return nil
}

// Names returns the names, in order.
func Names(list []Named) []string {
	out := make([]string, len(list))
	for i, n := range list {
		out[i] = n.Name
	}
	return out
}

// Pick returns the entry name names, the first for "".
func Pick(list []Named, name string) (Named, error) {
	if name == "" {
		return list[0], nil
	}
	for _, n := range list {
		if n.Name == name {
			return n, nil
		}
	}
	return Named{}, &instanceai.UnknownAgentError{Name: name, Known: Names(list)}
}

// Redact drops credentials and the query (which may hold a key) from a
// URL before it goes into an event or a log.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the upstream URL"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

// Causes of a stream's end that are not the run's.
var (
	ErrConnectTimeout = errors.New("no response headers within the connect timeout")
	ErrIdleTimeout    = errors.New("the stream was idle for longer than the idle timeout")
)

// Conn is how an agent reaches its upstreams: the HTTP client, the
// headers sent with every request (credentials: never logged), and the
// two timeouts that bound a stream.
type Conn struct {
	Client *http.Client
	Header http.Header
	// ConnectTimeout bounds the wait for the response headers,
	// IdleTimeout the silence on the body.
	ConnectTimeout time.Duration
	IdleTimeout    time.Duration
}

// NewConn returns c with its header cloned and its zero fields set: a
// client without a total timeout (a stream may last long; the timeouts
// bound it) and the given default timeouts. Negative timeouts are an
// error naming the agent.
func NewConn(agent string, c Conn, connect, idle time.Duration) (Conn, error) {
	if c.ConnectTimeout < 0 || c.IdleTimeout < 0 {
		return Conn{}, fmt.Errorf("%s: Config: ConnectTimeout and IdleTimeout must not be negative", agent)
	}
	c.Header = c.Header.Clone()
	// The calls carry the run's trace context (traceparent) and get
	// client spans; without tracing the wrapper only passes through.
	c.Client = tracing.Client(c.Client)
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = connect
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = idle
	}
	return c, nil
}

// Stream is an answer being read: Body restarts the idle timer on every
// byte.
type Stream struct {
	Response *http.Response
	Body     io.Reader
	ctx      context.Context
	cancel   context.CancelCauseFunc
	idle     *idleReader
}

// Open POSTs body to url in a context of its own, so that the timeouts can
// abort it with a cause of their own; ctx's cancel aborts it as well. A
// request that gets no answer is an *OpenError.
func (c Conn) Open(ctx context.Context, url string, body []byte, contentType, accept string) (*Stream, error) {
	reqCtx, cancel := context.WithCancelCause(ctx)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return nil, err
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", accept)
	connect := time.AfterFunc(c.ConnectTimeout, func() { cancel(ErrConnectTimeout) })
	resp, err := c.Client.Do(req)
	connect.Stop()
	if err != nil {
		err = &OpenError{Err: err, TimedOut: errors.Is(context.Cause(reqCtx), ErrConnectTimeout)}
		cancel(nil)
		return nil, err
	}
	s := &Stream{Response: resp, ctx: reqCtx, cancel: cancel}
	s.idle = &idleReader{r: resp.Body, d: c.IdleTimeout, timer: time.AfterFunc(c.IdleTimeout, func() { cancel(ErrIdleTimeout) })}
	s.Body = s.idle
	return s, nil
}

// OpenError is a request that got no answer.
type OpenError struct {
	Err error
	// TimedOut is set when the connect timeout cut it.
	TimedOut bool
}

func (e *OpenError) Error() string { return e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

// Idle reports whether the idle timeout cut the stream.
func (s *Stream) Idle() bool { return errors.Is(context.Cause(s.ctx), ErrIdleTimeout) }

// Close stops the timers and closes the answer.
func (s *Stream) Close() {
	s.idle.timer.Stop()
	s.cancel(nil)
	s.Response.Body.Close()
}

// idleReader restarts the idle timer whenever bytes arrive, so a stream
// that stalls is cut while one that trickles keeps going.
type idleReader struct {
	r     io.Reader
	d     time.Duration
	timer *time.Timer
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}
