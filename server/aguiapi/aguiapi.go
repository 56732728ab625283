// Package aguiapi serves AG-UI 1.0 over HTTP: POST /run-agent streams one
// instance-ai run as AG-UI events, GET /health and GET /status report on the
// server, and CORS lets browser clients on configured origins call them.
//
// It lives apart from package agui because it drives the mapping package,
// which itself imports the agui wire types.
package aguiapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/agui/aguiproto"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/internal/version"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/ssestream"
)

// Config tunes the AG-UI handlers.
type Config struct {
	// MaxBody is the request body limit in bytes; larger bodies get 413.
	MaxBody int64
	// Heartbeat is the pause between `: ping` comments on an idle stream.
	Heartbeat time.Duration
	// WriteTimeout bounds each SSE flush.
	WriteTimeout time.Duration
	// HistoryMaxBytes bounds what a rejoin's MESSAGES_SNAPSHOT holds past
	// its newest message (history.DefaultMaxBytes when 0).
	HistoryMaxBytes int
	// Agents names the agents /health and /status report.
	Agents []string
	// AgentStatus, when set, says how each of Agents is doing ("ready",
	// "unreachable", "unknown"), for /status: an agent whose upstreams
	// can fail to answer reports them. Agents it does not name are ready.
	AgentStatus func() map[string]string
	// Tasks, when set, adds agents that count their own work to /health
	// and /status: the builder's generator, validator and orchestrator,
	// each with the tasks it works on now.
	Tasks func() map[string]int
	// AllowedOrigins is reported by /status (CORS itself is the CORS
	// middleware's job).
	AllowedOrigins []string
	// AgentName is the configured agent (script, openai, n8n), named by
	// /llm/health when that agent has no LLM to probe.
	AgentName string
	// LLMHealth, when set, answers GET /llm/health (the openai agent's
	// probe of its model server); without it /llm/health says that the
	// configured agent uses no LLM.
	LLMHealth http.Handler
	// MCPStatus, when set, is /status's mcp_servers: the state of each
	// MCP server whose tools the agent offers.
	MCPStatus func() any
	// Version is reported by /health; empty means version.String().
	Version string
	Logger  *slog.Logger
	// Now is the clock (tests may fix it).
	Now func() time.Time
}

// Handler serves the AG-UI endpoints.
type Handler struct {
	core    *instanceai.Core
	cfg     Config
	started time.Time
}

// New returns the AG-UI handler over the core.
func New(core *instanceai.Core, cfg Config) *Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpjson.DefaultMaxBody
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = ssestream.DefaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HistoryMaxBytes <= 0 {
		cfg.HistoryMaxBytes = history.DefaultMaxBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Agents == nil {
		cfg.Agents = []string{}
	}
	if cfg.AllowedOrigins == nil {
		cfg.AllowedOrigins = []string{}
	}
	if cfg.Version == "" {
		cfg.Version = version.String()
	}
	return &Handler{core: core, cfg: cfg, started: cfg.Now()}
}

// Register mounts POST /run-agent and the rejoin stream on authed (routes
// that act for a user) and GET /health, GET /status and GET /llm/health on
// public.
func (h *Handler) Register(authed, public *mux.Router) {
	authed.HandleFunc("/run-agent", h.runAgent).Methods(http.MethodPost)
	authed.HandleFunc("/agui/threads/{threadId}/events", h.rejoin).Methods(http.MethodGet)
	public.HandleFunc("/health", h.health).Methods(http.MethodGet)
	public.HandleFunc("/status", h.status).Methods(http.MethodGet)
	if h.cfg.LLMHealth != nil {
		public.Handle("/llm/health", h.cfg.LLMHealth).Methods(http.MethodGet)
	} else {
		public.HandleFunc("/llm/health", h.noLLM).Methods(http.MethodGet)
	}
}

// OnDisconnectContinue, as forwardedProps.onDisconnect, keeps the run going
// when the client goes away; by default a disconnect cancels it.
const OnDisconnectContinue = "continue"

// runRequest is a checked /run-agent request.
type runRequest struct {
	input agui.RunAgentInput
	// message is the text of the last user message ("" when none).
	message string
	// attachments are the last user message's image, audio and document
	// parts.
	attachments []instanceai.Attachment
	// keepOnDisconnect is forwardedProps.onDisconnect == "continue".
	keepOnDisconnect bool
	// agent is forwardedProps.agent: which of the agent's named upstreams
	// answers ("" for the default).
	agent string
	// binding is the wire the request's Accept asked for.
	binding binding
}

// decode reads and checks the request: every error is a 4xx sent before any
// byte of stream.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, protobufOK bool) (runRequest, error) {
	wire, ok := negotiate(r.Header.Values("Accept"), protobufOK)
	if !ok {
		return runRequest{}, notAcceptable(r, protobufOK)
	}
	data, err := httpjson.ReadBody(w, r, h.cfg.MaxBody)
	if err != nil {
		return runRequest{}, err
	}
	// threadId and runId are optional, as the seed's RunAgentInput has
	// them: missing ones are made here and returned on RUN_STARTED.
	in, err := agui.DecodeRunAgentInputWithIDs(data, instanceai.NewID)
	if err == nil {
		err = in.Validate()
	}
	if err != nil {
		var fe *agui.FieldError
		if errors.As(err, &fe) {
			if fe.Status == http.StatusRequestEntityTooLarge {
				return runRequest{}, httpjson.NewError(fe.Status, "too_large", fe.Field, "%s", fe.Error())
			}
			return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", fe.Field, "%s", fe.Error())
		}
		return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_json", "", "invalid RunAgentInput: %v", err)
	}
	if !instanceai.ValidThreadID(in.ThreadID) {
		return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", "threadId",
			"threadId must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit")
	}
	// U+0000 is refused here, on every store alike: PostgreSQL keeps no
	// NUL in text, and the run would go on without its stored message.
	for i, m := range in.Messages {
		if strings.ContainsRune(m.Text(), 0) {
			return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", fmt.Sprintf("messages[%d].content", i),
				"messages[%d].content must not contain U+0000", i)
		}
	}
	req := runRequest{input: in, binding: wire}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == agui.RoleUser {
			req.message = in.Messages[i].Text()
			req.attachments = in.Messages[i].Attachments()
			break
		}
	}
	if len(in.ForwardedProps) > 0 {
		var props struct {
			OnDisconnect any `json:"onDisconnect"`
			Agent        any `json:"agent"`
		}
		if json.Unmarshal(in.ForwardedProps, &props) == nil {
			req.keepOnDisconnect = props.OnDisconnect == OnDisconnectContinue
			switch a := props.Agent.(type) {
			case nil:
			case string:
				req.agent = a
			default:
				return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", "forwardedProps.agent",
					"forwardedProps.agent must be a string naming one of the server's agents")
			}
		}
	}
	return req, nil
}

// source is what a request streams: the native run, the seq the feed
// starts after, the mapper and the AG-UI events to send before the feed's.
type source struct {
	run    *instanceai.Run
	after  int64
	mapper *mapping.InstanceToAGUI
	first  []agui.Event
	// feed is the feed opened before a new run started, nil otherwise.
	feed *instanceai.Feed
}

func (h *Handler) runAgent(w http.ResponseWriter, r *http.Request) { h.serveRun(w, r, RunOptions{}) }

// RunOptions adapt the /run-agent machinery to another surface that starts
// runs with a RunAgentInput (CopilotKit's runtime protocol).
type RunOptions struct {
	// Agent, when set, names the agent from the request (a path's agent
	// id) instead of forwardedProps.agent.
	Agent func(r *http.Request) string
	// KeepOnDisconnect keeps the run going when the client goes away.
	KeepOnDisconnect bool
	// Busy, when set, answers a request refused because a run is active
	// on the thread, in the surface's own way.
	Busy func(w http.ResponseWriter, r *http.Request)
	// Dialect, when set, makes for each stream a rewrite of the events
	// about to be written (another version of AG-UI's events).
	Dialect func() func([]agui.Event) []agui.Event
	// Prepare, when set, adapts the checked input before the run begins
	// (a surface's own way of answering interrupts, say); an error is
	// answered as a request error.
	Prepare func(r *http.Request, in *agui.RunAgentInput) error
	// SSEOnly serves SSE whatever the Accept header asks for beside it: a
	// surface whose clients read no protobuf (or whose Dialect rewrites
	// the events into a version @ag-ui/proto 1.0.0 does not describe).
	SSEOnly bool
}

// RunHandler serves runs as /run-agent does, adapted by opts.
func (h *Handler) RunHandler(opts RunOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveRun(w, r, opts) })
}

func (h *Handler) serveRun(w http.ResponseWriter, r *http.Request, opts RunOptions) {
	req, err := h.decode(w, r, !opts.SSEOnly)
	if err == nil && opts.Agent != nil {
		req.agent = opts.Agent(r)
	}
	if err == nil && opts.Prepare != nil {
		err = opts.Prepare(r, &req.input)
	}
	req.keepOnDisconnect = req.keepOnDisconnect || opts.KeepOnDisconnect
	var src source
	if err == nil {
		src, err = h.begin(r, req)
	}
	var active *instanceai.RunActiveError
	if opts.Busy != nil && errors.As(err, &active) {
		opts.Busy(w, r)
		return
	}
	var dialect func([]agui.Event) []agui.Event
	if opts.Dialect != nil {
		dialect = opts.Dialect()
	}
	var refused *resumeError
	if errors.As(err, &refused) {
		h.refuseResume(w, req.binding, refused, dialect)
		return
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	h.stream(w, r, req, src, dialect)
}

// resumeError is a run request that breaks AG-UI's interrupt contract
// (docs/concepts/interrupts.mdx, Contract rules and Error handling): a
// thread with open interrupts run without a resume that answers every one,
// an interruptId that names no open interrupt (one answered already, say),
// an answer that cannot be read. The contract answers it with RUN_ERROR,
// so it is a stream of that one event rather than an HTTP error; nothing
// of the thread changes, and its interrupts stay open.
type resumeError struct {
	code  string // Code* below
	field string // the input field at fault, e.g. resume[1].interruptId
	msg   string
	// interruptIDs are the thread's open interrupts, when it has any.
	interruptIDs []string
}

// RUN_ERROR codes of a refused resume.
const (
	// CodeInterruptsUnanswered: the thread has open interrupts the input
	// does not answer (no resume, or one that leaves some out).
	CodeInterruptsUnanswered = "interrupts_unanswered"
	// CodeInterruptNotOpen: a resume entry names no open interrupt of the
	// thread (an unknown id, or one already answered: a replayed resume
	// does nothing twice).
	CodeInterruptNotOpen = "interrupt_not_open"
	// CodeInvalidResume: a resume entry cannot be read as an answer.
	CodeInvalidResume = "invalid_resume"
	// CodeInterruptExpired: a resume entry resolves an interrupt past its
	// expiresAt (cancelling one is still allowed, as @ag-ui/client lets a
	// client do to go on with the thread).
	CodeInterruptExpired = "interrupt_expired"
)

func (e *resumeError) Error() string { return e.field + ": " + e.msg }

func newResumeError(code, field string, open []string, format string, args ...any) *resumeError {
	return &resumeError{code: code, field: field, msg: fmt.Sprintf(format, args...), interruptIDs: open}
}

// refuseResume answers a resumeError as AG-UI's interrupt contract says: a
// stream whose one event is RUN_ERROR, its message naming the field, its
// metadata the field and the thread's open interrupts.
func (h *Handler) refuseResume(w http.ResponseWriter, b binding, e *resumeError, dialect func([]agui.Event) []agui.Event) {
	s, err := h.open(w, b)
	if err != nil {
		return
	}
	detail := map[string]any{"field": e.field}
	if len(e.interruptIDs) > 0 {
		detail["interruptIds"] = e.interruptIDs
	}
	ev := &agui.RunError{Message: e.Error(), Code: e.code}
	ev.Timestamp = time.Now().UnixMilli()
	ev.Metadata = map[string]any{mapping.MetadataKey: detail}
	out := &writer{s: s, binding: b, log: h.cfg.Logger, dialect: dialect}
	if out.write(0, []agui.Event{ev}) == nil {
		_ = s.Flush()
	}
}

// begin picks what the request does: answer the pending interrupts of a
// suspended run and stream its rest (resume), continue from the client's
// result of a frontend tool call, or start a run on the last user message.
func (h *Handler) begin(r *http.Request, req runRequest) (source, error) {
	ctx := r.Context()
	id := req.input.ThreadID
	n := len(req.input.Messages)
	toolAnswer := n > 0 && req.input.Messages[n-1].Role == agui.RoleTool
	if len(req.input.Resume) == 0 && !toolAnswer && strings.TrimSpace(req.message) == "" && len(req.attachments) == 0 {
		return source{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", "messages",
			"messages must end the conversation with a user message that has text or a file to run, or with the tool message answering a frontend tool call")
	}
	// A refused request leaves no thread behind: the agent is checked
	// first, and a resume, which answers a run the thread already has,
	// does not create one.
	if err := h.core.CheckAgent(req.agent); err != nil {
		return source{}, httpjson.AtField(err, "forwardedProps.agent")
	}
	user := auth.UserFrom(ctx)
	open := h.core.OpenThread
	if len(req.input.Resume) > 0 {
		open = h.core.Thread
	}
	t, err := open(ctx, id, user)
	var missing *instanceai.ThreadNotFoundError
	if len(req.input.Resume) > 0 && errors.As(err, &missing) {
		// Unknown, or another user's: nothing of it is told, not even
		// whether it has a run.
		return source{}, noPendingInterrupt(id, req.input.Resume)
	}
	if err != nil {
		return source{}, err
	}
	awaited, err := h.core.Awaited(ctx, id)
	if err != nil {
		return source{}, err
	}
	if len(awaited) > 0 || len(req.input.Resume) > 0 {
		return h.resume(ctx, req, user, awaited)
	}
	var result *instanceai.ClientToolResult
	if toolAnswer {
		if a := h.core.Active(id); a != nil {
			return source{}, &instanceai.RunActiveError{ThreadID: id, RunID: a.ID}
		}
		if result, err = h.clientToolResult(ctx, id, n-1, req.input.Messages[n-1]); err != nil {
			return source{}, err
		}
	}
	tools := make([]instanceai.ToolSpec, len(req.input.Tools))
	names := make([]string, len(req.input.Tools))
	for i, tl := range req.input.Tools {
		tools[i] = instanceai.ToolSpec{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters}
		names[i] = tl.Name
	}
	// The feed listens before the run starts, so that none of the run's
	// live-only events is published before the stream listens; every
	// event of the run comes after its Last.
	feed, err := h.core.LiveFeed(ctx, id)
	if err != nil {
		return source{}, err
	}
	// Chat records the user's message (not a tool answer) as the native
	// chat does, so /messages, the title and the model history have it.
	var atts []instanceai.Attachment
	if !toolAnswer {
		atts = req.attachments
	}
	run, err := h.core.Chat(ctx, t, instanceai.StartRequest{ThreadID: id, UserID: user, Message: req.message,
		Attachments: atts, Tools: tools, ToolResult: result, AgentName: req.agent, History: clientHistory(req.input.Messages),
		Context: clientContext(req.input.Context), State: req.input.State, ForwardedProps: req.input.ForwardedProps})
	if err != nil {
		feed.Close()
		return source{}, httpjson.AtField(err, "forwardedProps.agent")
	}
	return source{run: run, after: feed.Last(), feed: feed,
		mapper: mapping.NewInstanceToAGUI(id, req.input.RunID).ClientTools(names...)}, nil
}

// noPendingInterrupt is the answer to a resume of a thread that waits for
// no answer.
func noPendingInterrupt(threadID string, resume []agui.Resume) error {
	return newResumeError(CodeInterruptNotOpen, "resume[0].interruptId", nil,
		"thread %q has no open interrupt; %q cannot be answered (it was answered already, or never was one)", threadID, resume[0].InterruptID)
}

// resume answers every pending interrupt of the thread's suspended run with
// input.resume and returns the rest of that instance-ai run as the new
// AG-UI run.
func (h *Handler) resume(ctx context.Context, req runRequest, user string, awaited []instanceai.Confirmation) (source, error) {
	id := req.input.ThreadID
	resume := req.input.Resume
	if len(awaited) == 0 {
		if a := h.core.Active(id); a != nil {
			return source{}, &instanceai.RunActiveError{ThreadID: id, RunID: a.ID}
		}
		return source{}, noPendingInterrupt(id, resume)
	}
	pending := make([]string, len(awaited))
	byID := make(map[string]*instanceai.Confirmation, len(awaited))
	for i := range awaited {
		pending[i] = awaited[i].RequestID
		byID[awaited[i].RequestID] = &awaited[i]
	}
	answers := make([]instanceai.Answer, len(resume))
	seen := map[string]bool{}
	for i, r := range resume {
		field := fmt.Sprintf("resume[%d].interruptId", i)
		if byID[r.InterruptID] == nil {
			return source{}, newResumeError(CodeInterruptNotOpen, field, pending,
				"%q is not an open interrupt of thread %q (it was answered already, or never was one)", r.InterruptID, id)
		}
		if seen[r.InterruptID] {
			return source{}, newResumeError(CodeInvalidResume, field, pending, "interrupt %q is answered twice", r.InterruptID)
		}
		seen[r.InterruptID] = true
		if r.Status != agui.ResumeCancelled {
			if at := mapping.ConfirmationExpiry(byID[r.InterruptID]); mapping.InterruptExpired(at, time.Now()) {
				return source{}, newResumeError(CodeInterruptExpired, field, pending,
					"interrupt %q expired at %s and can no longer be answered; cancel it to go on with the thread", r.InterruptID, at)
			}
		}
		a, err := answerOf(r)
		if err != nil {
			return source{}, newResumeError(CodeInvalidResume, fmt.Sprintf("resume[%d].payload", i), pending, "%v", err)
		}
		answers[i] = a
	}
	var missing []string
	for _, p := range pending {
		if !seen[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return source{}, newResumeError(CodeInterruptsUnanswered, "resume", missing,
			"thread %q has a run suspended on interrupt(s) %s: resume must answer every open interrupt",
			id, strings.Join(missing, ", "))
	}
	runID := awaited[0].RunID
	next, err := h.core.NextSeq(ctx, id)
	if err != nil {
		return source{}, err
	}
	after := next - 1
	stored, err := h.core.RunEvents(ctx, id, runID)
	if err != nil {
		return source{}, err
	}
	for i, r := range resume {
		_, _, err := h.core.Answer(ctx, user, r.InterruptID, answers[i])
		switch {
		case errors.Is(err, instanceai.ErrNotFound):
			return source{}, newResumeError(CodeInterruptNotOpen, fmt.Sprintf("resume[%d].interruptId", i), nil,
				"%q is not an open interrupt of thread %q", r.InterruptID, id)
		case errors.Is(err, instanceai.ErrAlreadyAnswered), errors.Is(err, instanceai.ErrConfirmationClosed),
			errors.Is(err, instanceai.ErrRunActive):
			return source{}, newResumeError(CodeInterruptNotOpen, fmt.Sprintf("resume[%d].interruptId", i), nil,
				"interrupt %q can no longer be answered: %v", r.InterruptID, err)
		case err != nil:
			return source{}, err
		}
	}
	src := source{run: &instanceai.Run{ID: runID, StartRequest: instanceai.StartRequest{ThreadID: id}}, after: after}
	return src.resumed(id, req.input.RunID, stored), nil
}

// resumed sets the source's mapper to one that has seen the run up to its
// interrupt (so sub-agents, message ids and open calls carry on) and
// resumes it as the AG-UI run runID.
func (s source) resumed(threadID, runID string, stored []instanceai.StoredEvent) source {
	if i := slices.IndexFunc(stored, func(se instanceai.StoredEvent) bool { return se.Seq > s.after }); i >= 0 {
		stored = stored[:i]
	}
	m := mapping.NewInstanceToAGUI(threadID, runID)
	mapping.FoldRun(m, runID, events(stored))
	if !m.Suspended() {
		// The log does not show the run stopped at an interrupt: map the
		// rest on its own.
		s.mapper = mapping.NewInstanceToAGUI(threadID, runID)
		return s
	}
	s.mapper, s.first = m, m.Resume(runID)
	return s
}

// answerOf maps a resume entry to a confirmation answer: resolved carries
// {approved, userInput?}; cancelled denies.
func answerOf(r agui.Resume) (instanceai.Answer, error) {
	if r.Status == agui.ResumeCancelled {
		return instanceai.Answer{Approved: false}, nil
	}
	var p struct {
		Approved  *bool   `json:"approved"`
		UserInput *string `json:"userInput"`
	}
	if len(r.Payload) == 0 || json.Unmarshal(r.Payload, &p) != nil {
		return instanceai.Answer{}, errors.New(`a resolved confirmation needs a payload object {"approved": boolean, "userInput"?: string}`)
	}
	if p.Approved == nil {
		return instanceai.Answer{}, errors.New("payload.approved (boolean) is required")
	}
	a := instanceai.Answer{Approved: *p.Approved}
	if p.UserInput != nil {
		a.UserInput = *p.UserInput
	}
	return a, nil
}

// clientToolResult checks that the tool message at index i answers a call
// left open by the thread's last run, which completed, and returns it.
func (h *Handler) clientToolResult(ctx context.Context, threadID string, i int, msg agui.Message) (*instanceai.ClientToolResult, error) {
	field := fmt.Sprintf("messages[%d].toolCallId", i)
	call, err := h.core.UnansweredCall(ctx, threadID, msg.ToolCallID)
	if err != nil {
		return nil, err
	}
	if call == nil {
		return nil, httpjson.NewError(http.StatusBadRequest, "invalid_field", field,
			"the tool message does not answer a call left open by the thread's last run (%q)", msg.ToolCallID)
	}
	if msg.Error != "" {
		call.Content = msg.Error
		if t := msg.Text(); t != "" {
			call.Content = t
		}
	} else {
		call.Content = msg.Text()
	}
	return call, nil
}

// stream maps the run's events to AG-UI until the mapper's terminal event.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, req runRequest, src source, dialect func([]agui.Event) []agui.Event) {
	ctx := r.Context()
	threadID := req.input.ThreadID
	run, mapper := src.run, src.mapper
	if src.feed != nil {
		defer src.feed.Close() // the stream may end before it reads it
	}
	log := h.cfg.Logger.With("thread", threadID, "run", run.ID, "aguiRun", req.input.RunID)
	s, err := h.open(w, req.binding)
	if err != nil {
		h.disconnected(ctx, req, run, log)
		return
	}
	out := &writer{s: s, binding: req.binding, log: log, state: req.input.State, dialect: dialect}
	if len(src.first) > 0 {
		if out.write(0, src.first) != nil || s.Flush() != nil {
			h.disconnected(ctx, req, run, log)
			return
		}
	}
	if h.follow(ctx, out, threadID, run.ID, src.after, mapper, log.With("stream", "run-agent"), src.feed) {
		h.disconnected(ctx, req, run, log)
	}
}

// disconnected handles a client gone before the terminal event: the run is
// cancelled unless the client asked for it to continue.
func (h *Handler) disconnected(ctx context.Context, req runRequest, run *instanceai.Run, log *slog.Logger) {
	if errors.Is(context.Cause(ctx), instanceai.ErrShuttingDown) {
		return // the server is stopping: the registry ends the run (service_shutdown)
	}
	if req.keepOnDisconnect {
		log.Info("AG-UI client disconnected; the run continues (onDisconnect: continue)")
		return
	}
	if a := h.core.Active(run.ThreadID); a != nil && a.ID != run.ID {
		return // a later run owns the thread now
	}
	log.Info("AG-UI client disconnected; cancelling the run")
	h.core.Cancel(run.ThreadID)
}

// open starts the response of a stream in binding b.
func (h *Handler) open(w http.ResponseWriter, b binding) (*ssestream.Stream, error) {
	if b == bindingProtobuf {
		return ssestream.Open(w, ssestream.Options{WriteTimeout: h.cfg.WriteTimeout, Binary: true, ContentType: aguiproto.MediaType})
	}
	return ssestream.Open(w, ssestream.Options{WriteTimeout: h.cfg.WriteTimeout})
}

// writer frames AG-UI events as `data: <json>` SSE messages, or as
// @ag-ui/proto's length-prefixed messages.
type writer struct {
	s       *ssestream.Stream
	binding binding
	// log reports events the protobuf binding cannot carry (nil: none).
	log *slog.Logger
	// state is input.state, sent as STATE_SNAPSHOT right after RUN_STARTED.
	state     json.RawMessage
	stateSent bool
	// dialect, when set, rewrites the events before they go out.
	dialect func([]agui.Event) []agui.Event
}

// write sends events; id (the seq of the instance-ai event they were mapped
// from, 0 for none) goes on the last of them, so a cursor taken from it
// covers them all.
func (o *writer) write(id int64, events []agui.Event) error {
	if o.dialect != nil {
		events = o.dialect(events)
	}
	for i, ev := range events {
		var frameID int64
		if i == len(events)-1 {
			frameID = id
		}
		if err := o.frame(frameID, ev); err != nil {
			return err
		}
		if ev.Type() == agui.TypeRunStarted && len(o.state) > 0 && !o.stateSent {
			o.stateSent = true
			snap := &agui.StateSnapshot{Snapshot: o.state}
			snap.Timestamp = ev.Common().Timestamp
			if err := o.frame(0, snap); err != nil {
				return err
			}
		}
	}
	return nil
}

// frame writes one event. On the SSE binding id goes on the frame's `id:`
// line; the protobuf binding has no such line, so there it follows the
// event's bytes inside the frame as a FrameCursor (see aguiproto), which
// AG-UI's decoders skip as they skip `id:`.
func (o *writer) frame(id int64, ev agui.Event) error {
	if o.binding == bindingProtobuf {
		wire, err := aguiproto.AppendFrame(nil, ev, id)
		if errors.Is(err, aguiproto.ErrNoProtobufForm) {
			// Only an upstream's verbatim event can be one: a client
			// would drop it as unknown, so the stream goes on without it.
			if o.log != nil {
				o.log.Warn("AG-UI event left out of a protobuf stream", "type", ev.Type(), "err", err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		return o.s.Frame(0, wire)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return o.s.Frame(id, ssestream.DataFrame(data))
}

// healthResponse is the seed's two health answers in one: the AG-UI
// server's {status, timestamp, active_runs, agents} and the standard API's
// version.
type healthResponse struct {
	Status     string   `json:"status"`
	Timestamp  string   `json:"timestamp"`
	Version    string   `json:"version"`
	ActiveRuns int      `json:"active_runs"`
	Agents     []string `json:"agents"`
}

// health answers 503 "draining" once the instance drains before a
// shutdown, so that a load balancer stops sending it new work.
func (h *Handler) health(w http.ResponseWriter, _ *http.Request) {
	status, code := "healthy", http.StatusOK
	if h.core.Draining() {
		status, code = "draining", http.StatusServiceUnavailable
	}
	httpjson.Write(w, code, healthResponse{
		Status: status, Timestamp: h.cfg.Now().UTC().Format(time.RFC3339Nano), Version: h.cfg.Version,
		ActiveRuns: h.core.ActiveRuns(), Agents: h.agentNames(),
	})
}

// agentNames lists the configured agents, then those Tasks counts.
func (h *Handler) agentNames() []string {
	names := slices.Clone(h.cfg.Agents)
	if h.cfg.Tasks != nil {
		for _, name := range slices.Sorted(maps.Keys(h.cfg.Tasks())) {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

type statusResponse struct {
	Server struct {
		Running    bool   `json:"running"`
		ActiveRuns int    `json:"active_runs"`
		Uptime     string `json:"uptime"`
		// Version is the build's, as /health reports it.
		Version string `json:"version"`
	} `json:"server"`
	Agents map[string]agentStatus `json:"agents"`
	Config struct {
		AllowedOrigins []string `json:"allowed_origins"`
		// AGUIVersion is where the seed puts it.
		AGUIVersion string `json:"ag_ui_version"`
	} `json:"config"`
	// AGUIVersion at the top level is where earlier releases put it; it
	// stays for the clients that read it there.
	AGUIVersion string `json:"ag_ui_version"`
	// MCPServers is the state of each MCP server, by name (only when
	// MCP servers are configured).
	MCPServers any `json:"mcp_servers,omitempty"`
}

type agentStatus struct {
	Status      string `json:"status"`
	ActiveTasks int    `json:"active_tasks"`
}

func (h *Handler) status(w http.ResponseWriter, _ *http.Request) {
	var out statusResponse
	active := h.core.ActiveRuns()
	out.Server.Running = true
	out.Server.ActiveRuns = active
	out.Server.Uptime = h.cfg.Now().Sub(h.started).Round(time.Second).String()
	out.Server.Version = h.cfg.Version
	// The run registry counts runs, not runs per named upstream: with one
	// agent its count is exact; with several (n8n webhooks) each reports
	// the total, an upper bound.
	out.Agents = make(map[string]agentStatus, len(h.cfg.Agents))
	var states map[string]string
	if h.cfg.AgentStatus != nil {
		states = h.cfg.AgentStatus()
	}
	for _, name := range h.cfg.Agents {
		status := states[name]
		if status == "" {
			status = "ready"
		}
		out.Agents[name] = agentStatus{Status: status, ActiveTasks: active}
	}
	if h.cfg.Tasks != nil {
		for name, n := range h.cfg.Tasks() {
			out.Agents[name] = agentStatus{Status: "ready", ActiveTasks: n}
		}
	}
	out.Config.AllowedOrigins = h.cfg.AllowedOrigins
	out.Config.AGUIVersion = agui.ProtocolVersion
	out.AGUIVersion = agui.ProtocolVersion
	if h.cfg.MCPStatus != nil {
		out.MCPServers = h.cfg.MCPStatus()
	}
	httpjson.Write(w, http.StatusOK, out)
}

// llmHealthResponse is the seed's /llm/health answer.
type llmHealthResponse struct {
	Status      string `json:"status"`
	LLMEndpoint string `json:"llm_endpoint"`
	LLMModel    string `json:"llm_model"`
	IsLocal     bool   `json:"is_local"`
	Timestamp   string `json:"timestamp"`
	Agent       string `json:"agent,omitempty"`
	Error       string `json:"error"`
}

// noLLM answers /llm/health for an agent without a model server of its
// own: 503 "unavailable", as the seed's clients take it (no LLM operation
// can be checked here), with an error that says why and what to do rather
// than a bare 404.
func (h *Handler) noLLM(w http.ResponseWriter, _ *http.Request) {
	agent := h.cfg.AgentName
	msg := "the configured agent uses no LLM that this server can probe"
	if agent != "" {
		msg = fmt.Sprintf("the configured agent is %s, which uses no LLM that this server can probe", agent)
	}
	switch agent {
	case "n8n":
		msg += ": the model, if any, is configured in the n8n workflow; check that workflow's executions in n8n"
	default:
		msg += "; to use a model, start the server with --agent openai --openai-model NAME (and --openai-base-url for a local server)"
	}
	w.Header().Set("Cache-Control", "no-store")
	httpjson.Write(w, http.StatusServiceUnavailable, llmHealthResponse{
		Status: "unavailable", Timestamp: h.cfg.Now().UTC().Format(time.RFC3339Nano), Agent: agent, Error: msg,
	})
}
