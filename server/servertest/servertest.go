// Package servertest starts an in-process Threadline server for tests, as
// net/http/httptest does for a handler: over a chosen store, with the
// reference agent or another, and with the helpers the tests of the HTTP
// surfaces share (JSON requests that fail the test on an unexpected
// status, SSE connections read frame by frame, the store matrix the server
// tests run on).
//
// Every helper reports to the testing.TB the server was started with, so
// a failure names the request or the stream that went wrong.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/auth"
)

// Options shape the server Start builds. The zero value is the reference
// agent without delay, no authentication and the server's defaults.
type Options struct {
	// Agent serves the chats; nil means the reference agent (agent/script).
	Agent instanceai.Agent
	// AgentDelay is the reference agent's pause between its events; it is
	// ignored when Agent is set.
	AgentDelay time.Duration
	// Tokens turns authentication on: "token1=alice,token2=bob", as
	// --tokens takes it. The server's own requests carry no token; As
	// gives a copy whose requests do.
	Tokens string
	// PublishTokens are tokens that may only publish, as --publish-tokens.
	PublishTokens string
	// QueryToken accepts ?access_token= on GET requests (with Tokens).
	QueryToken bool
	// Logs, if set, receives the server's log at debug level.
	Logs io.Writer
	// SmallBuffers shrinks the sockets' kernel buffers on both ends, so a
	// client that reads slowly makes the server's queue fill instead of
	// the kernel's.
	SmallBuffers bool
	// Config is passed to server.New as it is, except that Tokens and
	// Logs, when set, replace its Auth and Logger.
	Config server.Config
	// WrapHandler, if set, wraps the application's handler before it is
	// served, to serve a variant of it (a route taken away, say).
	WrapHandler func(http.Handler) http.Handler
	// Serve, if set, serves the application with server.Serve and these
	// options on a loopback listener, as the command does (its timeouts,
	// connection caps and shutdown), instead of with httptest's server. It
	// excludes WrapHandler and SmallBuffers; a zero Timeout is 10 s.
	Serve *server.ServeOptions
}

// Server is a running in-process Threadline server. Its cleanup, registered
// on the test, shuts the application down (failing the test if that fails)
// and closes the listener.
type Server struct {
	// App is the wired application: its Core and Metrics are there for
	// the test to inspect.
	App *server.Server
	// Store is the store the server was started on, and Hub the hub its
	// core fans live frames out through (Config.Hub, or one Start made):
	// the test's own, to read, write or publish behind the server's back.
	Store instanceai.Store
	Hub   *instanceai.Hub
	// URL is the server's base URL, without a trailing slash.
	URL string
	// Client sends every request of the helpers; As replaces it by one
	// that adds a bearer token.
	Client *http.Client

	t testing.TB
}

// Start serves a new application on store with o until the test ends.
func Start(t testing.TB, store instanceai.Store, o Options) *Server {
	t.Helper()
	cfg := o.Config
	if o.Tokens != "" || o.PublishTokens != "" {
		entries, err := auth.ParseList(o.Tokens, "tokens")
		publishers, perr := auth.ParseList(o.PublishTokens, "publish tokens")
		for i := range publishers {
			publishers[i].Scope = auth.ScopePublish
		}
		if err == nil {
			err = perr
		}
		if err == nil {
			cfg.Auth, err = auth.New(append(entries, publishers...))
		}
		if err != nil {
			t.Fatalf("servertest: tokens %q: %v", o.Tokens, err)
		}
		if o.QueryToken {
			cfg.Auth.AllowQueryToken()
		}
	}
	if o.Logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(o.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	agent := o.Agent
	if agent == nil {
		agent = &script.Agent{Delay: o.AgentDelay}
	}
	if cfg.Hub == nil {
		cfg.Hub = instanceai.NewHub(cfg.SubscriberQueue)
	}
	app := server.New(store, agent, cfg)
	if o.Serve != nil {
		s := serve(t, app, *o.Serve)
		s.Store, s.Hub = store, cfg.Hub
		return s
	}
	var handler http.Handler = app.Handler()
	if o.WrapHandler != nil {
		handler = o.WrapHandler(handler)
	}
	srv := httptest.NewUnstartedServer(handler)
	client := http.DefaultClient
	if o.SmallBuffers {
		srv.Listener = smallBufferListener{srv.Listener}
		client = &http.Client{Transport: &http.Transport{DialContext: dialSmallReadBuffer}}
	}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Shutdown(ctx); err != nil {
			t.Errorf("servertest: shutdown: %v", err)
		}
		srv.Close()
	})
	return &Server{App: app, Store: store, Hub: cfg.Hub, URL: srv.URL, Client: client, t: t}
}

// serve runs app.Serve with opts until the test ends.
func serve(t testing.TB, app *server.Server, opts server.ServeOptions) *Server {
	t.Helper()
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servertest: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, ln, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("servertest: serve: %v", err)
			}
		case <-time.After(opts.Timeout + 5*time.Second):
			t.Errorf("servertest: serve did not end")
		}
	})
	return &Server{App: app, URL: "http://" + ln.Addr().String(), Client: &http.Client{}, t: t}
}

// Remote returns a Server for one that runs elsewhere at url (a threadline
// process the test started, say): every helper works; App, Store and Hub
// are nil.
func Remote(t testing.TB, url string) *Server {
	return &Server{URL: url, Client: &http.Client{}, t: t}
}

// As returns a copy of s whose requests (Do, Chat, Connect, … and Client)
// all carry the bearer token.
func (s *Server) As(token string) *Server {
	c := *s
	base := s.Client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Client = &http.Client{Transport: bearer{token: token, base: base}}
	return &c
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

// smallBufferListener shrinks the write buffer of every accepted socket.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// dialSmallReadBuffer dials with a small read buffer on the client's end.
func dialSmallReadBuffer(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	return c, err
}

// WithTest returns a copy of s whose helpers report to t: a subtest's own
// t, say, so that a failure stops the subtest rather than its parent.
func (s *Server) WithTest(t testing.TB) *Server {
	c := *s
	c.t = t
	return &c
}
