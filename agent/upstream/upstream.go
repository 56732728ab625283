// Package upstream is the agent that runs each Threadline run on an
// upstream AG-UI agent: any server that answers AG-UI's RunAgentInput with
// an AG-UI event stream (CopilotKit's built-in agent, Mastra, LangGraph,
// CrewAI, Pydantic AI, ADK, …). What the upstream streams is written into
// the run's durable log, so its clients can reload, resume by cursor and
// follow the run from any instance, which AG-UI's own SSE binding cannot.
//
// # Request
//
// A run is one POST of a RunAgentInput (AG-UI 1.0, Accept:
// text/event-stream): the thread id; the Threadline run's id; the
// conversation (the client's AG-UI messages when it sent them, else the
// thread's conversation folded from the log) with the run's user message
// last; the client's tools, context, state and forwardedProps as it sent
// them ({} for an absent state). An upstream run that ends on an interrupt
// is asked of a person as a confirmation; the answers go back as the
// resume[] of the next POST on the same thread, whose events continue the
// same Threadline run.
//
// # Response
//
// The body is read with ssestream.Reader, each frame's data decoded as an
// AG-UI event and translated by mapping.AGUIToInstance. The upstream's
// RUN_FINISHED ends the run (completed), its RUN_ERROR ends it with the
// upstream's message and code. A body that is not an event stream, a
// frame that is not an AG-UI event, events out of AG-UI's order, anything
// after the run's end, a stream that ends without one, and silence longer
// than the idle timeout end the run with an error naming the upstream and
// the cause. A frame, or a line of one, over the bound on one event and
// its envelope (Config.MaxEventBytes) ends it with
// instanceai.CodeEventTooLarge as soon as the reader crosses that bound.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/threadline/threadline/agent/conversation"
	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/internal/endpoint"
	"github.com/threadline/threadline/agent/internal/healthcache"
	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/ssestream"
)

// Provider names this agent in error events.
const Provider = "ag-ui"

// Codes of the error events of runs that fail on the upstream's side (the
// upstream's own RUN_ERROR keeps its code).
const (
	CodeConnectionFailed  = "connection_failed"
	CodeTimeout           = "timeout"
	CodeNotFound          = "not_found"
	CodeUnauthorized      = "unauthorized"
	CodeUpstreamError     = "upstream_error"
	CodeHTTPError         = "http_error"
	CodeNotEventStream    = "not_event_stream"
	CodeInvalidEvent      = "invalid_event"
	CodeStreamInterrupted = "stream_interrupted"
	CodeRunError          = "upstream_run_error"
)

// Defaults of Config.
const (
	DefaultConnectTimeout = 30 * time.Second
	DefaultIdleTimeout    = 120 * time.Second
	DefaultHealthTimeout  = 5 * time.Second
)

// Upstream is one named AG-UI agent endpoint: Name is what
// StartRequest.AgentName selects, URL where a RunAgentInput is POSTed.
type Upstream = endpoint.Named

// Config configures the agent.
type Config struct {
	// Upstreams lists the agents; the first is the default. At least one;
	// names unique and non-empty; URLs absolute http(s).
	Upstreams []Upstream
	// Header holds headers sent with every request (the upstream's auth).
	// Their values are secrets: no log or event shows them.
	Header http.Header
	// Store is where the thread's conversation is read from.
	Store instanceai.Store
	// HTTPClient sends the requests; nil means a client without a total
	// timeout (a run may stream long; the timeouts below bound it).
	HTTPClient *http.Client
	// ConnectTimeout bounds the wait for the response headers, IdleTimeout
	// the silence on the stream (comments count); 0 means the defaults.
	ConnectTimeout time.Duration
	IdleTimeout    time.Duration
	// HealthTimeout bounds one reachability probe; 0 means the default.
	HealthTimeout time.Duration
	// HealthCacheTTL is how long /llm/health answers from its last probe;
	// 0 means healthcache.DefaultTTL (5 s).
	HealthCacheTTL time.Duration
	// MaxEventBytes is the core's bound on one event (--max-event-bytes;
	// 0 means instanceai.DefaultMaxEventBytes). One SSE frame of the
	// upstream's stream, or one line, may be that and its envelope
	// (bound.Envelope): a larger one ends the run with
	// instanceai.CodeEventTooLarge as soon as it crosses the bound, rather
	// than be held whole for the core to refuse.
	MaxEventBytes int
	Logger        *slog.Logger
}

// Agent runs the runs of a thread on upstream AG-UI agents. It is safe for
// concurrent runs.
type Agent struct {
	conn          endpoint.Conn
	upstreams     []Upstream
	store         instanceai.Store
	healthTimeout time.Duration
	healthTTL     time.Duration
	// health is the last /llm/health probe, shared by its callers.
	health   healthcache.Cache[Health]
	maxEvent int
	log      *slog.Logger
	seen     reachability
}

// New checks cfg and returns the agent.
func New(cfg Config) (*Agent, error) {
	if err := endpoint.Check("ag-ui: Config.Upstreams", cfg.Upstreams, "http://localhost:8000/agent"); err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		return nil, errors.New("ag-ui: Config.Store: is required (the conversation is read from it)")
	}
	if cfg.HealthTimeout < 0 || cfg.HealthCacheTTL < 0 {
		return nil, errors.New("ag-ui: Config.HealthTimeout and Config.HealthCacheTTL: must not be negative")
	}
	if cfg.MaxEventBytes < 0 {
		return nil, errors.New("ag-ui: Config.MaxEventBytes: must not be negative")
	}
	conn, err := endpoint.NewConn("ag-ui", endpoint.Conn{Client: cfg.HTTPClient, Header: cfg.Header,
		ConnectTimeout: cfg.ConnectTimeout, IdleTimeout: cfg.IdleTimeout}, DefaultConnectTimeout, DefaultIdleTimeout)
	if err != nil {
		return nil, err
	}
	a := &Agent{conn: conn, upstreams: slices.Clone(cfg.Upstreams), store: cfg.Store, healthTimeout: cfg.HealthTimeout,
		healthTTL: cfg.HealthCacheTTL, maxEvent: bound.Event(cfg.MaxEventBytes), log: cfg.Logger}
	if a.healthTimeout == 0 {
		a.healthTimeout = DefaultHealthTimeout
	}
	if a.healthTTL == 0 {
		a.healthTTL = healthcache.DefaultTTL
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a, nil
}

// Names returns the upstream names, in order (instanceai.NamedAgent).
func (a *Agent) Names() []string { return endpoint.Names(a.upstreams) }

func (a *Agent) upstream(name string) (Upstream, error) {
	return endpoint.Pick(a.upstreams, name)
}

// Run sends the run to the upstream run.AgentName names and writes what it
// streams into the run. Failures come back as *instanceai.ProviderError,
// which the registry turns into the error event and run-finish{error}.
func (a *Agent) Run(ctx context.Context, run *instanceai.Run) error {
	up, err := a.upstream(run.AgentName)
	if err != nil {
		return err
	}
	if err := run.Sync(ctx); err != nil {
		return err
	}
	input, err := a.input(ctx, run)
	if err != nil {
		return err
	}
	return a.drive(ctx, run, up, input, run.History != nil, mapping.NewAGUIToInstance(run.ID, run.AgentID, up.Name))
}

// drive streams upstream runs into the Threadline run until one ends
// without an interrupt: each interrupt is asked of a person, and the next
// upstream run carries the answers. clientHistory says the conversation
// is the client's own, sent as it is, not read from the log.
func (a *Agent) drive(ctx context.Context, run *instanceai.Run, up Upstream, input agui.RunAgentInput, clientHistory bool, tr *mapping.AGUIToInstance) error {
	for {
		if err := a.stream(ctx, run, up, input, tr); err != nil {
			return err
		}
		switch end := tr.End().(type) {
		case *agui.RunError:
			addUsage(run, end.Usage)
			code := end.Code
			if code == "" {
				code = CodeRunError
			}
			return &instanceai.ProviderError{Provider: Provider, Code: code,
				Message: fmt.Sprintf("The AG-UI agent %q failed: %s", up.Name, orDefault(end.Message, "(no message)"))}
		case *agui.RunFinished:
			addUsage(run, end.Usage)
			if end.Outcome == nil || end.Outcome.Type != agui.OutcomeInterrupt {
				return nil
			}
			p := pendingInterrupts{Upstream: up.Name, RunID: instanceai.NewID(run.ID + "-"), Tools: input.Tools,
				Context: input.Context, State: input.State, ForwardedProps: input.ForwardedProps}
			if clientHistory {
				p.ClientHistory = input.Messages
			}
			resume, err := a.askRest(ctx, run, end.Outcome.Interrupts, p)
			if err != nil {
				return err
			}
			tr.Continue()
			if input, err = a.next(ctx, run, input, p.RunID, resume, clientHistory); err != nil {
				return err
			}
		}
	}
}

// stream POSTs one RunAgentInput and translates the upstream's events
// into the run until the upstream's run ends.
func (a *Agent) stream(ctx context.Context, run *instanceai.Run, up Upstream, input agui.RunAgentInput, tr *mapping.AGUIToInstance) error {
	body, err := json.Marshal(input)
	if err != nil {
		return err
	}
	st, err := a.conn.Open(ctx, up.URL, body, "application/json", "text/event-stream")
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		a.seen.set(up.Name, false)
		var oe *endpoint.OpenError
		if errors.As(err, &oe) && oe.TimedOut {
			return &instanceai.ProviderError{Provider: Provider, Code: CodeTimeout,
				Message: fmt.Sprintf("The AG-UI agent %q did not answer within %s. Check that it is up; an agent that "+
					"answers only when its run is done must stream its events instead.", up.Name, a.conn.ConnectTimeout),
				Details: scrub(err.Error(), up.URL)}
		}
		return &instanceai.ProviderError{Provider: Provider, Code: CodeConnectionFailed,
			Message: fmt.Sprintf("Could not reach the AG-UI agent %q. Check that it is running and that its URL's host and port are right.", up.Name),
			Details: scrub(err.Error(), up.URL)}
	}
	defer st.Close()
	resp := st.Response
	a.seen.set(up.Name, true)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(up, resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &instanceai.ProviderError{Provider: Provider, Code: CodeNotEventStream, StatusCode: resp.StatusCode,
			Message: fmt.Sprintf("The AG-UI agent %q answered with %q instead of an event stream (text/event-stream). "+
				"Check that the URL is the agent's AG-UI endpoint and that it serves AG-UI over SSE.", up.Name, orDefault(mt, "no content type")),
			Details: fmt.Sprintf("POST %s: HTTP %d: %s", endpoint.Redact(up.URL), resp.StatusCode, prefix(b, 512))}
	}

	// One frame carries one AG-UI event, which becomes one event of the
	// log: the frame, and so each of its lines, is bounded by the event's
	// bound and its envelope.
	limit := bound.Stream(a.maxEvent)
	rd := ssestream.NewReaderWith(st.Body, ssestream.ReaderOptions{MaxLine: limit, MaxFrame: limit, DispatchAtEOF: true})
	for tr.End() == nil {
		data, err := rd.NextData()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return a.cutShort(up, st.Idle(), err)
		}
		events, err := tr.PushJSON([]byte(data))
		if err != nil {
			return &instanceai.ProviderError{Provider: Provider, Code: CodeInvalidEvent,
				Message: fmt.Sprintf("The AG-UI agent %q sent an event Threadline cannot accept, so the run was stopped; "+
					"what it sent before is kept. Check the agent's AG-UI integration.", up.Name),
				Details: fmt.Sprintf("%v; the event: %s", err, prefix([]byte(data), 512))}
		}
		for _, ev := range events {
			if err := run.Emit(ev); err != nil {
				return err
			}
		}
	}
	// The upstream's run is over: anything more on this stream breaks
	// AG-UI's rules, which a stream ended right away does not.
	if data, err := rd.NextData(); err == nil {
		return &instanceai.ProviderError{Provider: Provider, Code: CodeInvalidEvent,
			Message: fmt.Sprintf("The AG-UI agent %q sent events after its run had ended; they were not kept.", up.Name),
			Details: "after " + string(tr.End().Type()) + ": " + prefix([]byte(data), 512)}
	}
	return nil
}

// cutShort explains a stream that ended (or failed) before its run did.
func (a *Agent) cutShort(up Upstream, idle bool, err error) error {
	if errors.Is(err, ssestream.ErrLineTooLong) || errors.Is(err, ssestream.ErrFrameTooLarge) {
		return &instanceai.ProviderError{Provider: Provider, Code: instanceai.CodeEventTooLarge,
			Message: fmt.Sprintf("The AG-UI agent %q sent one event larger than %s; the run was stopped and what came before is kept.",
				up.Name, bound.Named(a.maxEvent)),
			Details: fmt.Sprintf("an SSE frame of the stream, or a line of it, passed %d bytes (the event's bound and %d bytes for its envelope): %v",
				bound.Stream(a.maxEvent), bound.Envelope, err)}
	}
	if idle {
		return &instanceai.ProviderError{Provider: Provider, Code: CodeTimeout,
			Message: fmt.Sprintf("The AG-UI agent %q sent nothing for %s, so the run was stopped; what it sent before is kept. "+
				"A slow model may need a longer idle timeout, or the agent may send SSE comments as keepalives.", up.Name, a.conn.IdleTimeout),
			Details: scrub(err.Error(), up.URL)}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &instanceai.ProviderError{Provider: Provider, Code: CodeStreamInterrupted,
			Message: fmt.Sprintf("The AG-UI agent %q closed its stream before ending its run (no RUN_FINISHED or RUN_ERROR); "+
				"what it sent before is kept.", up.Name)}
	}
	return &instanceai.ProviderError{Provider: Provider, Code: CodeStreamInterrupted,
		Message: fmt.Sprintf("The stream from the AG-UI agent %q broke off; what it sent before is kept.", up.Name),
		Details: scrub(err.Error(), up.URL)}
}

// statusError explains a non-2xx answer.
func statusError(up Upstream, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	details := fmt.Sprintf("POST %s: HTTP %d", endpoint.Redact(up.URL), resp.StatusCode)
	if s := strings.TrimSpace(string(b)); s != "" {
		details += ": " + prefix([]byte(s), 1024)
	}
	pe := &instanceai.ProviderError{Provider: Provider, StatusCode: resp.StatusCode, Details: details}
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
		pe.Code = CodeNotFound
		pe.Message = fmt.Sprintf("The AG-UI agent %q has no AG-UI endpoint at its URL (HTTP %d). Check the URL's path: "+
			"it must accept a POST of a RunAgentInput.", up.Name, code)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		pe.Code = CodeUnauthorized
		pe.Message = fmt.Sprintf("The AG-UI agent %q refused the request (HTTP %d). Check the header configured for it "+
			"(--agui-header).", up.Name, code)
	case code >= 500:
		pe.Code = CodeUpstreamError
		pe.Message = fmt.Sprintf("The AG-UI agent %q failed (HTTP %d). Check its logs.", up.Name, code)
	default:
		pe.Code = CodeHTTPError
		pe.Message = fmt.Sprintf("The AG-UI agent %q rejected the request (HTTP %d).", up.Name, code)
	}
	return pe
}

func addUsage(run *instanceai.Run, usage []agui.Usage) {
	for _, u := range usage {
		total := u.TotalTokens
		if total == 0 {
			total = u.InputTokens + u.OutputTokens
		}
		run.AddUsage(instanceai.TokenUsage{Provider: u.Provider, Model: u.Model, InputTokens: u.InputTokens,
			OutputTokens: u.OutputTokens, TotalTokens: total})
	}
}

// scrub replaces the URL in an error's text with its redacted form.
func scrub(text, raw string) string {
	return strings.ReplaceAll(text, raw, endpoint.Redact(raw))
}

// prefix is at most n bytes of b, cut at a rune boundary, as text.
func prefix(b []byte, n int) string {
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	for n > 0 && b[n]&0xC0 == 0x80 {
		n--
	}
	return strings.ToValidUTF8(string(b[:n]), "\uFFFD") + "…"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var (
	_ instanceai.NamedAgent = (*Agent)(nil)
	_ instanceai.Resumer    = (*Agent)(nil)
)

// conversation is the thread's conversation before the run, as AG-UI
// messages, from the log; currentRunID "" means the whole thread. tr, when
// set, is a client's tool result the run answers, in the client's own text,
// which the log may not hold yet.
func (a *Agent) conversation(ctx context.Context, threadID, currentRunID string, tr *instanceai.ClientToolResult) ([]agui.Message, error) {
	history, err := conversation.Load(ctx, a.store, threadID, currentRunID)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		history = conversation.WithToolResult(history, tr.ToolCallID, tr.Content)
	}
	return messages(history, "m"), nil
}
