// Package nativeapi serves the native Instance AI protocol over HTTP: start and
// cancel runs, and the per-thread SSE event stream with replay.
package nativeapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/server/httpmetrics"
	"github.com/threadline/threadline/server/internal/follow"
	"github.com/threadline/threadline/ssestream"
)

// Config tunes the native API.
type Config struct {
	// MaxBody is the request body limit in bytes; larger bodies get 413.
	MaxBody int64
	// ChatMaxBody is the limit of a chat's body, which may carry files
	// (httpjson.DefaultChatMaxBody when 0).
	ChatMaxBody int64
	// Heartbeat is the pause between `: ping` comments (15 s).
	Heartbeat time.Duration
	// WriteTimeout bounds each SSE flush.
	WriteTimeout time.Duration
	// MessagesMaxBytes bounds what one /messages page holds past its
	// newest message (history.DefaultMaxBytes when 0).
	MessagesMaxBytes int
	Logger           *slog.Logger
}

// API is the native Instance AI HTTP surface.
type API struct {
	core    *instanceai.Core
	cfg     Config
	streams streams
}

// New returns the API over the core.
func New(core *instanceai.Core, cfg Config) *API {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = httpjson.DefaultMaxBody
	}
	if cfg.ChatMaxBody <= 0 {
		cfg.ChatMaxBody = httpjson.DefaultChatMaxBody
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = ssestream.DefaultHeartbeat
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = ssestream.DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MessagesMaxBytes <= 0 {
		cfg.MessagesMaxBytes = history.DefaultMaxBytes
	}
	return &API{core: core, cfg: cfg}
}

// Register mounts the routes under /instance-ai.
func (a *API) Register(r *mux.Router) {
	s := r.PathPrefix("/instance-ai").Subrouter()
	s.HandleFunc("/chat/{threadId}", a.chat).Methods(http.MethodPost)
	s.HandleFunc("/chat/{threadId}/cancel", a.cancel).Methods(http.MethodPost)
	s.HandleFunc("/events/{threadId}", a.events).Methods(http.MethodGet)
	a.registerControl(s)
	a.registerThreads(s)
}

// threadID reads and checks the {threadId} path variable.
func threadID(r *http.Request) (string, error) {
	id := mux.Vars(r)["threadId"]
	if !instanceai.ValidThreadID(id) {
		return "", httpjson.NewError(http.StatusBadRequest, "invalid_thread_id", "threadId", "threadId %s", instanceai.ThreadIDRule)
	}
	return id, nil
}

// ownedThread loads a thread the caller owns; anything else is a 404, so a
// thread id reveals nothing about other users' threads.
func (a *API) ownedThread(r *http.Request) (instanceai.Thread, error) {
	id, err := threadID(r)
	if err != nil {
		return instanceai.Thread{}, err
	}
	return a.core.Thread(r.Context(), id, auth.UserFrom(r.Context()))
}

type chatRequest struct {
	Message string `json:"message"`
	// Attachments are n8n's InstanceAiAttachment list: files, checked by
	// chatAttachments.
	Attachments []json.RawMessage `json:"attachments"`
	// Agent names one of the agent's upstreams (an n8n webhook); "" is the
	// default.
	Agent string `json:"agent"`
}

type chatResponse struct {
	RunID string `json:"runId"`
}

func (a *API) chat(w http.ResponseWriter, r *http.Request) {
	if err := a.startChat(w, r); err != nil {
		httpjson.WriteError(w, err)
	}
}

func (a *API) startChat(w http.ResponseWriter, r *http.Request) error {
	id, err := threadID(r)
	if err != nil {
		return err
	}
	var req chatRequest
	if err := httpjson.Decode(w, r, a.cfg.ChatMaxBody, &req); err != nil {
		return err
	}
	atts, err := chatAttachments(req.Attachments)
	if err != nil {
		return err
	}
	if strings.TrimSpace(req.Message) == "" && len(atts) == 0 {
		// n8n takes a message of files alone (its message defaults to "").
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "message", "message is required and must not be empty when there is no attachment")
	}
	if strings.ContainsRune(req.Message, 0) {
		// PostgreSQL keeps no NUL in text: refused on every store alike,
		// before anything is stored.
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "message", "message must not contain U+0000")
	}
	// A refused chat leaves no thread behind.
	if err := a.core.CheckAgent(req.Agent); err != nil {
		return httpjson.AtField(err, "agent")
	}
	user := auth.UserFrom(r.Context())
	t, err := a.core.OpenThread(r.Context(), id, user)
	if err != nil {
		return err
	}
	run, err := a.core.Chat(r.Context(), t, instanceai.StartRequest{ThreadID: id, UserID: user, Message: req.Message, Attachments: atts, AgentName: req.Agent})
	if err != nil {
		return httpjson.AtField(err, "agent")
	}
	httpjson.Write(w, http.StatusOK, chatResponse{RunID: run.ID})
	return nil
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	t, err := a.ownedThread(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	outcome, err := a.core.Cancel(t.ID)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, controlStatus(outcome), cancelResponse{OK: true, Status: string(outcome)})
}

// controlStatus is the HTTP status of a cancel's or an answer's outcome:
// 200 once applied, 202 when stored for the owner to apply.
func controlStatus(outcome instanceai.ControlOutcome) int {
	if outcome == instanceai.Accepted {
		return http.StatusAccepted
	}
	return http.StatusOK
}

// cancelResponse is the answer to a cancel: status "applied" (200) when
// none of the thread's work runs any more, "accepted" (202) when the
// cancel is recorded and the instance that runs the work stops it at its
// next lease renewal.
type cancelResponse struct {
	OK     bool   `json:"ok"`
	Status string `json:"status"`
}

// cursor reads the replay cursor: the Last-Event-ID header wins over the
// lastEventId query parameter; neither means from the start.
func cursor(r *http.Request) (int64, error) {
	field, raw := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if raw == "" {
		field, raw = "lastEventId", r.URL.Query().Get("lastEventId")
	}
	if raw == "" {
		return 0, nil
	}
	n, ok := ssestream.ParseEventID(raw)
	if !ok {
		return 0, httpjson.NewError(http.StatusBadRequest, "invalid_cursor", field,
			"%s must be a non-negative integer event id, got %q", field, raw)
	}
	return n, nil
}

func (a *API) events(w http.ResponseWriter, r *http.Request) {
	t, err := a.ownedThread(r)
	if err == nil {
		var after int64
		var filter func(*instanceai.Delivery) bool
		if after, err = cursor(r); err == nil {
			if filter, err = channelFilter(r); err == nil {
				a.stream(w, r, t.ID, after, filter)
				return
			}
		}
	}
	httpjson.WriteError(w, err)
}

// stream serves the thread's events after the cursor; filter, when set,
// picks the deliveries of one channel. On HTTP/1 the stream takes the
// connection over and the handler returns (see serveHijacked), which keeps
// an idle stream's memory small; elsewhere (HTTP/2) it runs in the handler.
func (a *API) stream(w http.ResponseWriter, r *http.Request, threadID string, after int64, filter func(*instanceai.Delivery) bool) {
	// Before the stream opens: a client that sees it open and then starts
	// a run on another instance gets every frame of it.
	a.core.Follow(r.Context(), threadID)
	opts := ssestream.Options{WriteTimeout: a.cfg.WriteTimeout}
	s, err := ssestream.Hijack(w, r, opts)
	if err == nil {
		a.serveHijacked(r.Context(), s, threadID, after, filter)
		return
	}
	if !errors.Is(err, http.ErrNotSupported) {
		return // the connection failed and is closed
	}
	if s, err = ssestream.Open(w, opts); err != nil {
		return
	}
	ctx := r.Context()
	loop := a.loop(ctx, s, threadID, after, filter)
	a.restore(loop.Feed, threadID, func() context.Context { return ctx })
	err = loop.Run(ctx)
	loop.Feed.Close()
	a.streamEnded(threadID, loop.Feed, err)
}

// loop is the stream's loop: the thread's feed after the cursor to s,
// the deliveries filter picks (all when nil).
func (a *API) loop(ctx context.Context, s *ssestream.Stream, threadID string, after int64, filter func(*instanceai.Delivery) bool) *follow.Loop {
	return &follow.Loop{
		Feed:      a.feed(ctx, threadID, after),
		Heartbeat: a.cfg.Heartbeat,
		Send:      func(batch []instanceai.Delivery) error { return a.send(s, threadID, batch, filter) },
		Ping:      s.Ping,
	}
}

// restore makes the feed restate runs to its client: a run-sync of each
// run it may hold wrongly when the replay is over, and of a run whose
// block needs a repair. ctx is the context of the feed's reads.
func (a *API) restore(feed *instanceai.Feed, threadID string, ctx func() context.Context) {
	feed.BeforeLive = func(h instanceai.Handoff) []instanceai.Delivery {
		return a.runSyncFrames(ctx(), threadID, h)
	}
	feed.Restate = func(runID string, upTo int64) []instanceai.Delivery {
		return a.restate(ctx(), threadID, runID, upTo)
	}
}

// streamEnded logs why a stream ended: its feed failing, or (at debug
// level) a write; a client that went away or a shutdown is not news.
func (a *API) streamEnded(threadID string, feed *instanceai.Feed, err error) {
	var werr *follow.WriteError
	switch {
	case err == nil || errors.Is(err, context.Canceled):
	case errors.As(err, &werr):
		a.cfg.Logger.Debug("event stream write failed", "thread", threadID, "err", werr.Err)
	default:
		a.cfg.Logger.Info("event stream ended", "thread", threadID, "last", feed.Last(), "reason", err)
	}
}

// feed opens the thread's feed after the cursor for the stream of the
// request ctx is of, whose replay the metrics count.
func (a *API) feed(ctx context.Context, threadID string, after int64) *instanceai.Feed {
	f := a.core.Feed(threadID, after)
	f.SkipDecode = true // the stored bytes go out as they are
	f.Replayed = httpmetrics.ReplayCounter(ctx)
	return f
}

// send writes a batch of deliveries of the thread and flushes it. It lets
// go of each delivery as it takes it: a row's bytes share their page's
// memory with the rows read with it, which a stream waiting on a client
// that stopped reading in the middle of a large event would hold else.
func (a *API) send(s *ssestream.Stream, threadID string, batch []instanceai.Delivery, filter func(*instanceai.Delivery) bool) error {
	for i := range batch {
		taken := batch[i]
		batch[i] = instanceai.Delivery{}
		d := &taken
		if filter != nil && !filter(d) {
			continue
		}
		if d.Kind.Extension() {
			// n8n's clients know only n8n's types. A stored one (an
			// upstream AG-UI agent's event) still moves the cursor, so
			// the ids a client sees stay those of the log, one by one.
			if d.ID > 0 && d.Reset == nil {
				if err := s.ID(d.ID); err != nil {
					return err
				}
			}
			continue
		}
		var err error
		switch {
		case d.Reset != nil:
			// Always with its id, 0 included: a reset to the start of the
			// log must move the client's cursor back too.
			err = s.EventWithID(d.ID, d.Type, d.Data)
		case d.Type != "":
			err = s.Event(d.ID, d.Type, d.Data)
		case d.Wire != nil:
			err = s.Frame(d.ID, d.Wire)
		case d.Data == nil && d.Size > 0:
			// A large row the feed left in the log: read in parts as it
			// is written.
			seq := d.ID
			err = s.DataParts(seq, d.Size, func(off, n int) ([]byte, error) { return a.rowPart(threadID, seq, off, n) })
		default:
			// A row of the log, let go of (see DataReloadable).
			data, seq := d.Data, d.ID
			d.Data = nil
			err = s.DataReloadable(seq, data, func() ([]byte, error) { return a.row(threadID, seq) })
		}
		if err != nil {
			return err
		}
	}
	return s.Flush()
}

// rowPart reads n bytes of one row of the thread's log from off.
func (a *API) rowPart(threadID string, seq int64, off, n int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.WriteTimeout)
	defer cancel()
	return a.core.ReadRowPart(ctx, threadID, seq, off, n)
}

// row reads the bytes of one row of the thread's log again.
func (a *API) row(threadID string, seq int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.WriteTimeout)
	defer cancel()
	return a.core.ReadRow(ctx, threadID, seq)
}
