// Package aguihttp serves AG-UI 1.0 over HTTP: POST /run-agent streams one
// instance-ai run as AG-UI events, GET /health and GET /status report on the
// server, and CORS lets browser clients on configured origins call them.
//
// It lives apart from package agui because it drives the mapping package,
// which itself imports the agui wire types.
package aguihttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/httpjson"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/httpapi"
	"github.com/threadline/threadline/mapping"
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
	// Agents names the agents /health and /status report.
	Agents []string
	// AllowedOrigins is reported by /status (CORS itself is the CORS
	// middleware's job).
	AllowedOrigins []string
	Logger         *slog.Logger
	// Now is the clock (tests may fix it).
	Now func() time.Time
}

// Handler serves the AG-UI endpoints.
type Handler struct {
	store   instanceai.Store
	hub     *instanceai.Hub
	runs    *instanceai.Runs
	cfg     Config
	started time.Time
}

// New returns the AG-UI handler over the native core.
func New(store instanceai.Store, hub *instanceai.Hub, runs *instanceai.Runs, cfg Config) *Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpapi.DefaultMaxBody
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = ssestream.DefaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
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
	return &Handler{store: store, hub: hub, runs: runs, cfg: cfg, started: cfg.Now()}
}

// Register mounts POST /run-agent on authed (routes that act for a user)
// and GET /health and GET /status on public.
func (h *Handler) Register(authed, public *mux.Router) {
	authed.HandleFunc("/run-agent", h.runAgent).Methods(http.MethodPost)
	public.HandleFunc("/health", h.health).Methods(http.MethodGet)
	public.HandleFunc("/status", h.status).Methods(http.MethodGet)
}

// OnDisconnectContinue, as forwardedProps.onDisconnect, keeps the run going
// when the client goes away; by default a disconnect cancels it.
const OnDisconnectContinue = "continue"

// threadIDPattern is the native thread id rule: the AG-UI threadId is the
// native thread id.
var threadIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// acceptsEventStream reports whether an Accept header admits
// text/event-stream (a missing header admits anything).
func acceptsEventStream(header []string) bool {
	if len(header) == 0 {
		return true
	}
	for _, h := range header {
		for _, part := range strings.Split(h, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			if q, ok := params["q"]; ok {
				if v, err := strconv.ParseFloat(q, 64); err != nil || v <= 0 {
					continue
				}
			}
			switch mt {
			case "text/event-stream", "text/*", "*/*":
				return true
			}
		}
	}
	return false
}

// runRequest is a checked /run-agent request.
type runRequest struct {
	input   agui.RunAgentInput
	message string
	// keepOnDisconnect is forwardedProps.onDisconnect == "continue".
	keepOnDisconnect bool
}

// decode reads and checks the request: every error is a 4xx sent before any
// byte of stream.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request) (runRequest, error) {
	if !acceptsEventStream(r.Header.Values("Accept")) {
		return runRequest{}, httpjson.NewError(http.StatusNotAcceptable, "not_acceptable", "Accept",
			"this endpoint streams text/event-stream; the Accept header %q does not admit it", r.Header.Get("Accept"))
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return runRequest{}, httpjson.NewError(http.StatusRequestEntityTooLarge, "body_too_large", "",
				"request body exceeds the limit of %d bytes", h.cfg.MaxBody)
		}
		return runRequest{}, httpjson.NewError(http.StatusBadRequest, "unreadable_body", "", "could not read the request body: %v", err)
	}
	in, err := agui.DecodeRunAgentInput(data)
	if err == nil {
		err = in.Validate()
	}
	if err != nil {
		var fe *agui.FieldError
		if errors.As(err, &fe) {
			return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", fe.Field, "%s", fe.Error())
		}
		return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_json", "", "invalid RunAgentInput: %v", err)
	}
	if !threadIDPattern.MatchString(in.ThreadID) {
		return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", "threadId",
			"threadId must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit")
	}
	req := runRequest{input: in}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == agui.RoleUser {
			req.message = in.Messages[i].Text()
			break
		}
	}
	if strings.TrimSpace(req.message) == "" {
		return runRequest{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", "messages",
			"messages must end the conversation with a user message that has text to run")
	}
	if len(in.ForwardedProps) > 0 {
		var props struct {
			OnDisconnect any `json:"onDisconnect"`
		}
		if json.Unmarshal(in.ForwardedProps, &props) == nil {
			req.keepOnDisconnect = props.OnDisconnect == OnDisconnectContinue
		}
	}
	return req, nil
}

func (h *Handler) runAgent(w http.ResponseWriter, r *http.Request) {
	req, err := h.decode(w, r)
	var run *instanceai.Run
	var after int64
	if err == nil {
		run, after, err = h.start(r, req)
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	h.stream(w, r, req, run, after)
}

// start starts the native run and returns it with the seq the feed starts
// after: every event of the run has a greater one.
func (h *Handler) start(r *http.Request, req runRequest) (*instanceai.Run, int64, error) {
	ctx := r.Context()
	id := req.input.ThreadID
	user := httpapi.UserFrom(ctx)
	t, _, err := h.store.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: user})
	if err != nil {
		return nil, 0, err
	}
	if t.OwnerID != user {
		return nil, 0, httpjson.NewError(http.StatusNotFound, "thread_not_found", "threadId", "thread %q not found", id)
	}
	next, err := h.store.NextSeq(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	run, err := h.runs.Start(instanceai.StartRequest{ThreadID: id, UserID: user, Message: req.message})
	if errors.Is(err, instanceai.ErrRunActive) {
		e := httpjson.NewError(http.StatusConflict, "run_active", "",
			"thread %q already has an active run; cancel it or wait for it to finish", id)
		e.Detail.Details = map[string]any{"runId": run.ID}
		return nil, 0, e
	}
	if err != nil {
		return nil, 0, err
	}
	return run, next - 1, nil
}

// stream maps the run's events to AG-UI until the mapper's terminal event.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, req runRequest, run *instanceai.Run, after int64) {
	ctx := r.Context()
	threadID := req.input.ThreadID
	log := h.cfg.Logger.With("thread", threadID, "run", run.ID, "aguiRun", req.input.RunID)
	s, err := ssestream.Open(w, ssestream.Options{WriteTimeout: h.cfg.WriteTimeout})
	if err != nil {
		h.disconnected(ctx, req, run, log)
		return
	}
	out := &writer{s: s, state: req.input.State}
	mapper := mapping.NewInstanceToAGUI(threadID, req.input.RunID)
	feed := instanceai.OpenFeed(h.store, h.hub, threadID, after)
	defer func() { feed.Close() }()
	ping := time.NewTicker(h.cfg.Heartbeat)
	defer ping.Stop()
	for !mapper.Finished() {
		batch, err := feed.Next(ctx, ping.C)
		if err != nil {
			if ctx.Err() != nil {
				h.disconnected(ctx, req, run, log)
				return
			}
			if errors.Is(err, instanceai.ErrSubscriberDropped) {
				// Fell behind the live tail: the log has every durable
				// event, so pick up again from the cursor.
				last := feed.Last()
				feed.Close()
				feed = instanceai.OpenFeed(h.store, h.hub, threadID, last)
				continue
			}
			log.Warn("AG-UI stream source failed", "err", err)
			if out.write(0, mapper.Close(err)) != nil || s.Flush() != nil {
				h.disconnected(ctx, req, run, log)
			}
			return
		}
		if batch == nil {
			if s.Ping() != nil {
				h.disconnected(ctx, req, run, log)
				return
			}
			continue
		}
		for _, d := range batch {
			if d.Event == nil || d.Event.RunID != run.ID {
				continue
			}
			if err := out.write(d.ID, mapper.Push(*d.Event)); err != nil {
				h.disconnected(ctx, req, run, log)
				return
			}
		}
		if err := s.Flush(); err != nil {
			if !mapper.Finished() {
				h.disconnected(ctx, req, run, log)
			}
			return
		}
		ping.Reset(h.cfg.Heartbeat)
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
	if a := h.runs.Active(run.ThreadID); a != nil && a.ID != run.ID {
		return // a later run owns the thread now
	}
	log.Info("AG-UI client disconnected; cancelling the run")
	h.runs.Cancel(run.ThreadID, instanceai.ReasonUserCancelled)
}

// writer frames AG-UI events as `data: <json>` SSE messages.
type writer struct {
	s *ssestream.Stream
	// state is input.state, sent as STATE_SNAPSHOT right after RUN_STARTED.
	state     json.RawMessage
	stateSent bool
}

// write sends events; id (the seq of the instance-ai event they were mapped
// from, 0 for none) goes on the last of them, so a cursor taken from it
// covers them all.
func (o *writer) write(id int64, events []agui.Event) error {
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

func (o *writer) frame(id int64, ev agui.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return o.s.Frame(id, ssestream.DataFrame(data))
}

type healthResponse struct {
	Status     string   `json:"status"`
	Timestamp  string   `json:"timestamp"`
	ActiveRuns int      `json:"active_runs"`
	Agents     []string `json:"agents"`
}

func (h *Handler) health(w http.ResponseWriter, _ *http.Request) {
	httpjson.Write(w, http.StatusOK, healthResponse{
		Status: "healthy", Timestamp: h.cfg.Now().UTC().Format(time.RFC3339Nano),
		ActiveRuns: h.runs.Count(), Agents: h.cfg.Agents,
	})
}

type statusResponse struct {
	Server struct {
		Running    bool   `json:"running"`
		ActiveRuns int    `json:"active_runs"`
		Uptime     string `json:"uptime"`
	} `json:"server"`
	Agents map[string]agentStatus `json:"agents"`
	Config struct {
		AllowedOrigins []string `json:"allowed_origins"`
	} `json:"config"`
	AGUIVersion string `json:"ag_ui_version"`
}

type agentStatus struct {
	Status      string `json:"status"`
	ActiveTasks int    `json:"active_tasks"`
}

func (h *Handler) status(w http.ResponseWriter, _ *http.Request) {
	var out statusResponse
	active := h.runs.Count()
	out.Server.Running = true
	out.Server.ActiveRuns = active
	out.Server.Uptime = h.cfg.Now().Sub(h.started).Round(time.Second).String()
	out.Agents = make(map[string]agentStatus, len(h.cfg.Agents))
	for _, name := range h.cfg.Agents {
		out.Agents[name] = agentStatus{Status: "ready", ActiveTasks: active}
	}
	out.Config.AllowedOrigins = h.cfg.AllowedOrigins
	out.AGUIVersion = agui.ProtocolVersion
	httpjson.Write(w, http.StatusOK, out)
}
