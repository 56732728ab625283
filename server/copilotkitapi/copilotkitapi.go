// Package copilotkitapi serves CopilotKit's runtime protocol (the REST
// transport of @copilotkitnext/runtime 1.54.1, docs/PROTOCOLS.md §5) on
// Threadline's core, so that a CopilotKit frontend's runtimeUrl can point
// at Threadline: its runs are durable, and any instance serves them.
//
// Routes, under the base path: GET info lists the agents (the default one
// as "default", CopilotKit's default agent id, and each named one);
// POST agent/:agentId/run starts a run as /run-agent does and streams it
// in the AG-UI dialect of @ag-ui/client 0.0.48, which CopilotKit 1.54.1
// pins; POST agent/:agentId/connect replays the thread run by run and
// follows the run under way; POST agent/:agentId/stop/:threadId cancels
// the thread's run.
package copilotkitapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/aguiapi"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/ssestream"
)

// DefaultAgentID is the agent id CopilotKit's client uses when the app
// names none.
const DefaultAgentID = "default"

// DefaultBase is where the runtime is served unless configured.
const DefaultBase = "/copilotkit"

// Config configures the surface.
type Config struct {
	// Base is the path the runtime is served under (DefaultBase when "").
	Base string
	// Version is reported by info.
	Version string
	// Agent is the configured agent's name (script, openai, …), and Named
	// the names of its upstreams when it has several (n8n webhooks, AG-UI
	// agents): each is an agent id besides "default".
	Agent string
	Named []string
	// MaxBody bounds a request body as it does /run-agent's
	// (httpjson.DefaultMaxBody when 0); the single route's envelope may
	// be that much larger than the body it carries.
	MaxBody int64
}

// Handler serves the runtime protocol.
type Handler struct {
	core *instanceai.Core
	runs *aguiapi.Handler
	cfg  Config
	// run serves agent/:agentId/run, on its route and the single route.
	run http.Handler
}

// New returns the surface; runs serves the runs as /run-agent does.
func New(core *instanceai.Core, runs *aguiapi.Handler, cfg Config) *Handler {
	if cfg.Base == "" {
		cfg.Base = DefaultBase
	}
	cfg.Base = strings.TrimSuffix(cfg.Base, "/")
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpjson.DefaultMaxBody
	}
	h := &Handler{core: core, runs: runs, cfg: cfg}
	h.run = h.knownAgent(runs.RunHandler(aguiapi.RunOptions{
		Agent: func(r *http.Request) string { return h.agentName(mux.Vars(r)["agentId"]) },
		// The Node runtime keeps a run going when its client leaves; only
		// stop ends it.
		KeepOnDisconnect: true,
		// It answers a run on a busy thread with an empty stream, which
		// its client takes without an error.
		Busy:    emptyStream,
		Dialect: Dialect,
		Prepare: h.resumeCommand,
		// Its client reads SSE only, and its dialect is not the AG-UI
		// 1.0 that @ag-ui/proto describes.
		SSEOnly: true,
	}))
	return h
}

// Register mounts the routes on the router of authenticated routes.
func (h *Handler) Register(authed *mux.Router) {
	b := h.cfg.Base
	authed.HandleFunc(b+"/info", h.info).Methods(http.MethodGet)
	authed.Handle(b+"/agent/{agentId}/run", h.run).Methods(http.MethodPost)
	authed.Handle(b+"/agent/{agentId}/connect", h.knownAgent(http.HandlerFunc(h.connect))).Methods(http.MethodPost)
	authed.Handle(b+"/agent/{agentId}/stop/{threadId}", h.knownAgent(http.HandlerFunc(h.stop))).Methods(http.MethodPost)
	authed.HandleFunc(b+"/transcribe", transcribe).Methods(http.MethodPost)
	h.registerThreads(authed)
	authed.HandleFunc(b, h.single).Methods(http.MethodPost)
}

// resumeCommand answers the thread's pending confirmations from
// forwardedProps.command.resume, which CopilotKit's useInterrupt sends to
// resume after an on_interrupt: true or false approve or deny, a string is
// an approval with that text, an object is {approved, userInput?} as it
// is. The run that waited then goes on, streamed as this request's run.
func (h *Handler) resumeCommand(r *http.Request, in *agui.RunAgentInput) error {
	var props struct {
		Command *struct {
			Resume json.RawMessage `json:"resume"`
		} `json:"command"`
	}
	if len(in.ForwardedProps) == 0 || json.Unmarshal(in.ForwardedProps, &props) != nil ||
		props.Command == nil || len(props.Command.Resume) == 0 || len(in.Resume) > 0 {
		return nil
	}
	payload, err := answerPayload(props.Command.Resume)
	if err != nil {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "forwardedProps.command.resume", "%v", err)
	}
	ctx := r.Context()
	var awaited []instanceai.Confirmation
	// Another user's thread, or an unknown one, waits for no answer of
	// this caller's: nothing of its confirmations is told.
	if _, err := h.core.Thread(ctx, in.ThreadID, auth.UserFrom(ctx)); err == nil {
		if awaited, err = h.core.Awaited(ctx, in.ThreadID); err != nil {
			return err
		}
	}
	if len(awaited) == 0 {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "forwardedProps.command.resume",
			"thread %q waits for no answer", in.ThreadID)
	}
	for _, c := range awaited {
		in.Resume = append(in.Resume, agui.Resume{InterruptID: c.RequestID, Status: agui.ResumeResolved, Payload: payload})
	}
	return nil
}

// answerPayload is a resume value as a confirmation's answer.
func answerPayload(v json.RawMessage) (json.RawMessage, error) {
	var b bool
	var s string
	switch {
	case json.Unmarshal(v, &b) == nil:
		return json.Marshal(map[string]bool{"approved": b})
	case json.Unmarshal(v, &s) == nil:
		return json.Marshal(map[string]any{"approved": true, "userInput": s})
	case len(v) > 0 && v[0] == '{':
		return v, nil
	}
	return nil, fmt.Errorf("want true, false, a string or {\"approved\": boolean, \"userInput\"?: string}, got %s", v)
}

// maxConnectBody bounds a connect request: CopilotKit sends no messages
// with it, only the thread and the app's tools, context and properties.
const maxConnectBody = 1 << 20

// connect replays the thread's runs and follows the one under way
// (aguiapi.Handler.Connect), in the dialect runs are served in.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxConnectBody+1))
	var in struct {
		ThreadID string `json:"threadId"`
		// LastSeenEventId is the id of the last frame the client read of
		// this thread's streams (a string, as CopilotKit's client keeps
		// it); null or absent replays the thread.
		LastSeenEventID *string `json:"lastSeenEventId"`
	}
	switch {
	case err != nil || len(data) > maxConnectBody:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Invalid request body", "details": "the body is unreadable or larger than 1 MB"})
		return
	case json.Unmarshal(data, &in) != nil || in.ThreadID == "":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Invalid request body",
			"details": "want a RunAgentInput JSON object with a threadId"})
		return
	}
	var after int64
	if in.LastSeenEventID != nil && *in.LastSeenEventID != "" {
		n, ok := ssestream.ParseEventID(*in.LastSeenEventID)
		if !ok {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Invalid request body",
				"details": fmt.Sprintf("lastSeenEventId must be the id of an event this runtime sent (a non-negative integer), got %q", *in.LastSeenEventID)})
			return
		}
		after = n
	}
	h.runs.Connect(w, r, in.ThreadID, aguiapi.ConnectOptions{Dialect: Dialect, After: after})
}

// agentInfo is one agent of info's answer.
type agentInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	ClassName   string `json:"className"`
}

// agents returns the agent ids: "default" first, then the named ones.
func (h *Handler) agents() map[string]agentInfo {
	out := map[string]agentInfo{DefaultAgentID: {Name: DefaultAgentID, ClassName: "Threadline",
		Description: fmt.Sprintf("Threadline's %s agent (its default)", orName(h.cfg.Agent))}}
	for i, n := range h.cfg.Named {
		d := fmt.Sprintf("Threadline's %s agent %q", orName(h.cfg.Agent), n)
		if i == 0 {
			d += " (the default)"
		}
		out[n] = agentInfo{Name: n, Description: d, ClassName: "Threadline"}
	}
	return out
}

func orName(s string) string {
	if s == "" {
		return "configured"
	}
	return s
}

// agentName is the run's StartRequest.AgentName for an agent id: "" for
// the default one.
func (h *Handler) agentName(id string) string {
	if id == DefaultAgentID {
		return ""
	}
	return id
}

// knownAgent answers an unknown agent id as the Node runtime does.
func (h *Handler) knownAgent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := mux.Vars(r)["agentId"]
		if id != DefaultAgentID && !slices.Contains(h.cfg.Named, id) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "Agent not found",
				"message": fmt.Sprintf("Agent '%s' does not exist", id)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) info(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"version": h.cfg.Version, "agents": h.agents(),
		"audioFileTranscriptionEnabled": false, "mode": "sse", "a2uiEnabled": false})
}

// stop cancels the thread's run, answering as the Node runtime does. The
// run's stream, which the client keeps reading, ends with the run.
func (h *Handler) stop(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := mux.Vars(r)["threadId"]
	noRun := map[string]any{"stopped": false, "message": fmt.Sprintf("No active run for thread '%s'.", id)}
	if !instanceai.ValidThreadID(id) {
		writeJSON(w, http.StatusOK, noRun)
		return
	}
	if _, err := h.core.Thread(ctx, id, auth.UserFrom(ctx)); err != nil {
		// Unknown, or another user's: nothing of it is told.
		writeJSON(w, http.StatusOK, noRun)
		return
	}
	// Whichever instance runs it: the status reads the thread's claim.
	if !h.core.Status(ctx, id).HasActiveRun {
		writeJSON(w, http.StatusOK, noRun)
		return
	}
	if _, err := h.core.Cancel(id); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stopped": true,
		"interrupt": map[string]string{"type": "RUN_ERROR", "message": "Run stopped by user", "code": "STOPPED"}})
}

// transcribe answers as the Node runtime does without a transcription
// service (info says audioFileTranscriptionEnabled: false).
func transcribe(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "service_not_configured",
		"message": "Transcription service is not configured", "retryable": false})
}

// emptyStream is an event stream with nothing in it.
func emptyStream(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Dialect makes a stream's rewrite of AG-UI 1.0 events into what
// @ag-ui/client 0.0.48 accepts: it has no sub-agent events (they go out as
// CUSTOM under their type, the event as value: an unknown type would end
// the client's stream silently) and no interrupt outcome (each interrupt
// goes out before RUN_FINISHED as CUSTOM on_interrupt, which CopilotKit's
// useInterrupt waits for).
func Dialect() func([]agui.Event) []agui.Event {
	return func(in []agui.Event) []agui.Event {
		out := make([]agui.Event, 0, len(in))
		for _, ev := range in {
			switch e := ev.(type) {
			case *agui.SubagentStarted, *agui.SubagentFinished, *agui.SubagentError:
				out = append(out, custom(string(ev.Type()), ev))
			case *agui.Verbatim:
				if strings.HasPrefix(string(e.T), "SUBAGENT_") {
					out = append(out, custom(string(e.T), e))
					continue
				}
				out = append(out, ev)
			case *agui.RunFinished:
				if e.Outcome != nil && e.Outcome.Type == agui.OutcomeInterrupt {
					for _, i := range e.Outcome.Interrupts {
						out = append(out, custom("on_interrupt", i))
					}
				}
				out = append(out, ev)
			default:
				out = append(out, ev)
			}
		}
		return out
	}
}

func custom(name string, v any) *agui.Custom {
	raw, err := json.Marshal(v)
	if err != nil {
		raw = []byte("null")
	}
	return &agui.Custom{Name: name, Value: raw}
}
