// Package mcptools offers the tools of MCP servers to the LLM agent: it
// reads an mcpServers configuration file, keeps one client session per
// server (starting the stdio ones as child processes, restarting a server
// that dies with backoff), and turns each server tool into a tools.Tool
// named <server>__<tool>, whose approval follows the tool's annotations
// and the configured policy.
//
// A call runs with the run's context, so a cancelled run cancels the MCP
// request (the SDK sends notifications/cancelled); it is bounded by the
// server's timeout. The server's progress notifications become status
// events of the run, and its elicitation requests confirmation-requests
// (see elicit.go).
package mcptools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/internal/version"
)

// Defaults of Options.
const (
	DefaultConnectTimeout = 30 * time.Second
	DefaultMinBackoff     = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	// DefaultMaxMessageBytes bounds one message of a server: the go-sdk's
	// bound on one stdio line (mcp.DefaultMaxLineLength, 16 MiB), which
	// its CommandTransport does not let a client change, so a server is
	// bounded alike over either transport. It is above the bound on one
	// event because a message may carry images, which go to the model and
	// are not stored; what is stored is bounded by the agent.
	DefaultMaxMessageBytes = mcp.DefaultMaxLineLength
)

// Server states reported by Status.
const (
	StateConnecting = "connecting"
	StateConnected  = "connected"
	StateRestarting = "restarting"
	StateDisabled   = "disabled"
	StateClosed     = "closed"
)

// Options tune the Manager.
type Options struct {
	Logger *slog.Logger
	// ConnectTimeout bounds starting a server, its initialize handshake
	// and the listing of its tools; default 30 s.
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before restarting a server
	// that died or could not be started: MinBackoff after the first
	// failure, doubling up to MaxBackoff; defaults 1 s and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// HTTPClient reaches the url servers (http.DefaultClient's transport
	// when nil).
	HTTPClient *http.Client
	// MaxMessageBytes bounds one message an HTTP server sends: a JSON
	// answer's body, or one event of an SSE answer; default
	// DefaultMaxMessageBytes. A stdio server's messages are bounded by the
	// go-sdk at DefaultMaxMessageBytes whatever this says. A message over
	// the bound is not read further: the call is a tool-error naming the
	// bound, and the server, whose connection the go-sdk then gives up, is
	// restarted.
	MaxMessageBytes int
}

// Manager owns the sessions of the configured servers. Its methods are
// safe for concurrent use. After Close, calls fail and Status reports the
// servers closed.
type Manager struct {
	opts    Options
	log     *slog.Logger
	servers []*server // by name
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	tokens  atomic.Int64
	started atomic.Bool
}

// New prepares the servers of f; Start connects them.
func New(f File, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel}
	for _, name := range slices.Sorted(maps.Keys(f.Servers)) {
		cfg := f.Servers[name]
		if cfg.Timeout <= 0 {
			cfg.Timeout = DefaultTimeout
		}
		s := &server{m: m, name: name, cfg: cfg, calls: map[string]*inflight{}, state: StateConnecting,
			changed: make(chan struct{}), log: m.log.With("mcp_server", name)}
		if cfg.Disabled {
			s.state = StateDisabled
		}
		s.client = mcp.NewClient(&mcp.Implementation{Name: "threadline", Version: version.String()}, &mcp.ClientOptions{
			ElicitationHandler:          s.elicit,
			ProgressNotificationHandler: s.progress,
			ToolListChangedHandler:      s.toolsChanged,
			// No roots: Threadline has no files of its own to offer.
			Capabilities: &mcp.ClientCapabilities{},
		})
		m.servers = append(m.servers, s)
	}
	return m
}

// Start connects every enabled server and lists its tools, the servers in
// parallel, each within ConnectTimeout. A server that fails does not stop
// the others: it is restarted in the background with backoff, and offers
// its tools (Current) once it answers. Start returns the servers'
// failures joined, for the log.
func (m *Manager) Start(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("mcptools: Start called twice")
	}
	errs := make([]error, len(m.servers))
	var wg sync.WaitGroup
	for i, s := range m.servers {
		if s.cfg.Disabled {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.connect(ctx, true)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("MCP server %q: %w", s.name, errs[i])
			}
		}()
	}
	wg.Wait()
	for i, s := range m.servers {
		if s.cfg.Disabled {
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.supervise(m.ctx, errs[i])
		}()
	}
	return errors.Join(errs...)
}

// Current returns the tools the servers offer now, in server then tool
// order: each server's as it last listed them (at its start, each restart,
// and each tools/list_changed it sends), kept while it restarts (a call
// then fails at once, naming the server's state). Their names are
// <server>__<tool>, sanitised to [a-zA-Z0-9_-]{1,64}; a name that would
// repeat another of the server's gets a hash suffix. It is the source of
// the agent's registry (tools.Registry.WithSource).
func (m *Manager) Current() []tools.Tool {
	var out []tools.Tool
	for _, s := range m.servers {
		s.mu.Lock()
		out = append(out, s.offered...)
		s.mu.Unlock()
	}
	return out
}

// Tools returns Current, or an error when two servers' tools have one
// name (as sanitised).
func (m *Manager) Tools() ([]tools.Tool, error) {
	out := m.Current()
	seen := map[string]bool{}
	for _, t := range out {
		if seen[t.Name] {
			return nil, fmt.Errorf("two MCP tools have the same name %q", t.Name)
		}
		seen[t.Name] = true
	}
	return out, nil
}

// ServerStatus is one server's state for /status and /llm/health.
type ServerStatus struct {
	// State is connecting, connected, restarting, disabled or closed.
	State     string `json:"state"`
	Transport string `json:"transport"` // stdio or http
	// Tools is the number of tools offered to the model.
	Tools int `json:"tools"`
	// Attempt counts the failed starts since the server was last
	// connected (restarting).
	Attempt int `json:"attempt,omitempty"`
	// Restarts counts the times the server was connected again after it
	// died.
	Restarts  int    `json:"restarts,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// PID is a stdio server's process id while it is connected.
	PID int `json:"pid,omitempty"`
}

// Status reports every configured server by name.
func (m *Manager) Status() map[string]ServerStatus {
	out := make(map[string]ServerStatus, len(m.servers))
	for _, s := range m.servers {
		out[s.name] = s.status()
	}
	return out
}

// Healthy reports whether every enabled server is connected.
func (m *Manager) Healthy() bool {
	for _, s := range m.servers {
		if st := s.status().State; st != StateConnected && st != StateDisabled {
			return false
		}
	}
	return true
}

// Close ends every session (a stdio server's stdin is closed, then it is
// terminated) and stops the restarts. Calls under way fail.
func (m *Manager) Close() error {
	m.cancel()
	var errs []error
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			sess := s.session
			s.session = nil
			if s.state != StateDisabled {
				s.setStateLocked(StateClosed)
			}
			s.mu.Unlock()
			if sess != nil {
				_ = sess.Close() // the child's exit status after SIGTERM is no news
			}
		}()
	}
	wg.Wait()
	m.wg.Wait()
	return errors.Join(errs...)
}

// Changed returns a channel closed at the named server's next change of
// state (for tests and for waiting on a restart).
func (m *Manager) Changed(name string) <-chan struct{} {
	for _, s := range m.servers {
		if s.name == name {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.changed
		}
	}
	return nil
}

// server is one configured MCP server and its current session.
type server struct {
	m      *Manager
	name   string
	cfg    Server
	client *mcp.Client
	log    *slog.Logger

	mu       sync.Mutex
	session  *mcp.ClientSession
	pid      int
	state    string
	attempt  int
	restarts int
	lastErr  string
	stderr   *tail
	// tools are the server's tools as it last listed them, and offered
	// those of them the policy does not disable, as tools.Tool.
	tools   []*mcp.Tool
	offered []tools.Tool
	// calls are the calls in flight, by progress token.
	calls   map[string]*inflight
	changed chan struct{}
}

// inflight is a call waiting for the server's answer.
type inflight struct {
	token string
	tool  string
	call  *tools.Call // nil outside a run
	// ctx is the call's context.
	ctx context.Context
	// pause and resume stop the call's timeout while a person answers
	// an elicitation, and restart it whole afterwards.
	pause, resume func()
}

func (s *server) setStateLocked(state string) {
	s.state = state
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServerStatus{State: s.state, Transport: "http", Attempt: s.attempt, Restarts: s.restarts, LastError: s.lastErr}
	if s.cfg.stdio() {
		st.Transport = "stdio"
		if s.state == StateConnected {
			st.PID = s.pid
		}
	}
	for _, t := range s.tools {
		if !s.cfg.Tools[t.Name].Disabled {
			st.Tools++
		}
	}
	return st
}

// current returns the live session, or an error naming the server's state.
func (s *server) current() (*mcp.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session != nil && s.state == StateConnected {
		return s.session, nil
	}
	switch s.state {
	case StateRestarting:
		return nil, fmt.Errorf("the MCP server %q is not connected: it is being restarted (attempt %d; last error: %s)", s.name, s.attempt, s.lastErr)
	case StateClosed:
		return nil, fmt.Errorf("the MCP server %q is shut down", s.name)
	}
	return nil, fmt.Errorf("the MCP server %q is not connected (%s)", s.name, s.state)
}

// setToolsLocked records the server's tools as it listed them, and the
// tools.Tool the model is offered for them.
func (s *server) setToolsLocked(listed []*mcp.Tool) {
	s.tools = listed
	s.offered = nil
	taken := map[string]string{}
	for _, t := range listed {
		if s.cfg.Tools[t.Name].Disabled {
			continue
		}
		name := toolName(s.name, t.Name, taken)
		taken[name] = t.Name
		s.offered = append(s.offered, s.tool(name, t))
	}
}

// listTools lists the session's tools, all pages.
func listTools(ctx context.Context, sess *mcp.ClientSession) ([]*mcp.Tool, error) {
	var listed []*mcp.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		listed = append(listed, t)
	}
	return listed, nil
}

// toolsChanged is the server's tools/list_changed: its tools are listed
// again, apart from the session's reading (a request made from inside its
// notification handler would wait on itself).
func (s *server) toolsChanged(context.Context, *mcp.ToolListChangedRequest) {
	go func() {
		sess, err := s.current()
		if err != nil {
			return // a restart lists them anyway
		}
		ctx, cancel := context.WithTimeout(s.m.ctx, s.m.opts.ConnectTimeout)
		defer cancel()
		listed, err := listTools(ctx, sess)
		if err != nil {
			s.log.Warn("MCP server changed its tools, which could not be listed again", "err", err)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.session != sess {
			return // a newer session listed its own
		}
		s.setToolsLocked(listed)
		s.log.Info("MCP server changed its tools", "tools", len(listed))
	}()
}

// connect starts the server (or reaches it) and lists its tools.
func (s *server) connect(ctx context.Context, first bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	var transport mcp.Transport
	var cmd *exec.Cmd
	var errTail *tail
	if s.cfg.stdio() {
		cmd = exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.Cwd
		cmd.Env = os.Environ()
		for _, k := range slices.Sorted(maps.Keys(s.cfg.Env)) {
			cmd.Env = append(cmd.Env, k+"="+s.cfg.Env[k])
		}
		errTail = &tail{log: s.log}
		cmd.Stderr = errTail
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		base := http.DefaultTransport
		if s.m.opts.HTTPClient != nil && s.m.opts.HTTPClient.Transport != nil {
			base = s.m.opts.HTTPClient.Transport
		}
		transport = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, MaxEventSize: s.m.opts.MaxMessageBytes,
			HTTPClient: &http.Client{Transport: boundedBodies{limit: int64(s.m.opts.MaxMessageBytes),
				base: headerTransport{base: base, headers: s.cfg.Headers}}}}
	}
	sess, err := s.client.Connect(ctx, transport, nil)
	if err != nil {
		return withStderr(connectError(ctx, s.m.opts.ConnectTimeout, err), errTail)
	}
	listed, err := listTools(ctx, sess)
	if err != nil {
		_ = sess.Close()
		return withStderr(fmt.Errorf("listing its tools: %w", connectError(ctx, s.m.opts.ConnectTimeout, err)), errTail)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m.ctx.Err() != nil {
		_ = sess.Close()
		return errors.New("closed")
	}
	s.setToolsLocked(listed)
	s.session, s.stderr = sess, errTail
	s.pid = 0
	if cmd != nil && cmd.Process != nil {
		s.pid = cmd.Process.Pid
	}
	if !first || s.state == StateRestarting {
		s.restarts++
	}
	s.attempt, s.lastErr = 0, ""
	s.setStateLocked(StateConnected)
	s.log.Info("MCP server connected", "tools", len(s.tools), "pid", s.pid)
	return nil
}

func connectError(ctx context.Context, timeout time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s: %w", timeout, err)
	}
	return err
}

// supervise keeps the server connected: it waits for the session to end,
// then reconnects with exponential backoff, until the manager closes.
func (s *server) supervise(ctx context.Context, err error) {
	for {
		if err == nil {
			s.mu.Lock()
			sess := s.session
			s.mu.Unlock()
			if sess == nil {
				return
			}
			werr := sess.Wait()
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			errTail := s.stderr
			s.mu.Unlock()
			err = withStderr(fmt.Errorf("the connection ended: %v", cmpErr(werr, "closed by the server")), errTail)
			s.log.Warn("MCP server died; restarting", "err", err)
		}
		s.mu.Lock()
		old := s.session
		s.session = nil
		s.mu.Unlock()
		if old != nil {
			_ = old.Close() // reaps the child; its exit status is in err
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			return // closed meanwhile: the state says so
		}
		s.attempt++
		s.lastErr = err.Error()
		delay := s.backoff(s.attempt)
		s.setStateLocked(StateRestarting)
		s.mu.Unlock()
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		err = s.connect(ctx, false)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("MCP server restart failed", "attempt", s.attempt, "err", err)
		}
	}
}

func (s *server) backoff(attempt int) time.Duration {
	d := s.m.opts.MinBackoff
	for i := 1; i < attempt && d < s.m.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.m.opts.MaxBackoff)
}

func cmpErr(err error, fallback string) string {
	if err == nil {
		return fallback
	}
	return err.Error()
}

// track registers a call in flight under a fresh progress token; in is
// complete before it is shared.
func (s *server) track(in *inflight) func() {
	in.token = "threadline-" + strconv.FormatInt(s.m.tokens.Add(1), 10)
	s.mu.Lock()
	s.calls[in.token] = in
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.calls, in.token)
		s.mu.Unlock()
	}
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(r)
}

// boundedBodies caps the body of every answer that is not an event stream
// at limit bytes: the go-sdk reads a JSON answer (and the body of an
// error) whole, with nothing to bound it; an event stream is bounded per
// event by the transport's MaxEventSize instead.
type boundedBodies struct {
	base  http.RoundTripper
	limit int64
}

func (t boundedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: t.limit, limit: t.limit}
	}
	return resp, nil
}

// errMessageTooLarge is what a capped body's read returns past its bound.
// The go-sdk keeps only its text (it wraps with %v), which call looks for.
var errMessageTooLarge = errors.New("MCP message over the bound on one message")

// cappedBody reads up to limit bytes of a body; a body with more fails
// with errMessageTooLarge once the bound is reached.
type cappedBody struct {
	io.ReadCloser
	left, limit int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the bound: a body that ends here is whole.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("%w (%d bytes)", errMessageTooLarge, b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
