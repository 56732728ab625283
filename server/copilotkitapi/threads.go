package copilotkitapi

import (
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

// Thread listing bounds, as the native thread list has them.
const (
	defaultThreadsLimit = 20
	maxThreadsLimit     = 100
	maxThreadBody       = 64 << 10
)

// agentIDPattern is the runtime's rule for an agentId in the thread
// routes (isValidIdentifier in @copilotkitnext/runtime 1.54.1).
var agentIDPattern = regexp.MustCompile(`^[\w.@:=-]{1,128}$`)

// registerThreads mounts the thread routes. CopilotKit's Node runtime
// serves them only with its hosted platform; here they are the caller's
// Threadline threads, whatever agent ran on them.
func (h *Handler) registerThreads(authed *mux.Router) {
	b := h.cfg.Base
	authed.HandleFunc(b+"/threads", h.listThreads).Methods(http.MethodGet)
	authed.HandleFunc(b+"/threads/subscribe", h.subscribeThreads).Methods(http.MethodPost)
	authed.HandleFunc(b+"/threads/{threadId}", h.updateThread).Methods(http.MethodPatch)
	authed.HandleFunc(b+"/threads/{threadId}/archive", h.archiveThread).Methods(http.MethodPost)
	authed.HandleFunc(b+"/threads/{threadId}", h.deleteThread).Methods(http.MethodDelete)
}

// threadRecord is a thread as CopilotKit's client reads it (ThreadRecord
// in @copilotkitnext/core 1.54.1): times are strings, a thread without a
// title has a null name.
type threadRecord struct {
	ID             string  `json:"id"`
	OrganizationID string  `json:"organizationId"`
	AgentID        string  `json:"agentId"`
	CreatedByID    string  `json:"createdById"`
	Name           *string `json:"name"`
	Archived       bool    `json:"archived"`
	CreatedAt      string  `json:"createdAt"`
	UpdatedAt      string  `json:"updatedAt"`
}

func record(t instanceai.Thread, agentID string) threadRecord {
	r := threadRecord{ID: t.ID, AgentID: agentID, CreatedByID: t.OwnerID, Archived: t.Archived,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	if t.Title != "" {
		r.Name = &t.Title
	}
	return r
}

type threadPage struct {
	Threads []threadRecord `json:"threads"`
	// JoinCode is null: Threadline has no realtime channel for thread
	// metadata, and the client only subscribes when it gets one.
	JoinCode   *string `json:"joinCode"`
	NextCursor *string `json:"nextCursor"`
}

// listThreads answers GET threads?agentId&includeArchived&limit&cursor:
// the caller's threads, newest first; the cursor is opaque to the client.
func (h *Handler) listThreads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, offset := defaultThreadsLimit, 0
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxThreadsLimit {
			httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, "invalid_query", "limit",
				"limit must be an integer from 1 to %d, got %q", maxThreadsLimit, raw))
			return
		}
		limit = n
	}
	if raw := q.Get("cursor"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, "invalid_query", "cursor",
				"cursor must be a nextCursor this route answered, got %q", raw))
			return
		}
		offset = n
	}
	var all bool
	switch raw := q.Get("includeArchived"); raw {
	case "", "false":
	case "true":
		all = true
	default:
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, "invalid_query", "includeArchived",
			"includeArchived must be true or false, got %q", raw))
		return
	}
	agentID := q.Get("agentId")
	if !agentIDPattern.MatchString(agentID) {
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, "invalid_query", "agentId",
			"agentId is required: 1-128 letters, digits or any of _ . @ : = -"))
		return
	}
	// One row more than the page tells whether another page follows.
	// A token limited to some threads lists only those, paged as they are.
	rows, err := h.core.ListThreads(r.Context(), instanceai.ThreadQuery{OwnerID: auth.UserFrom(r.Context()),
		Limit: limit + 1, Offset: offset, IncludeArchived: all})
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	page := threadPage{Threads: []threadRecord{}}
	for _, t := range rows[:min(len(rows), limit)] {
		page.Threads = append(page.Threads, record(t, agentID))
	}
	if len(rows) > limit {
		next := strconv.Itoa(offset + limit)
		page.NextCursor = &next
	}
	httpjson.Write(w, http.StatusOK, page)
}

// subscribeThreads is the runtime's route for a websocket of thread
// metadata, which Threadline does not serve: it answers as the Node
// runtime does without its hosted platform.
func (h *Handler) subscribeThreads(w http.ResponseWriter, _ *http.Request) {
	httpjson.WriteError(w, httpjson.NewError(http.StatusUnprocessableEntity, "not_supported", "",
		"Threadline serves no realtime channel of thread metadata: list the threads again to refresh them"))
}

// threadMutation is the body of PATCH, archive and DELETE.
type threadMutation struct {
	AgentID  string  `json:"agentId"`
	Name     *string `json:"name"`
	Archived *bool   `json:"archived"`
}

// ownedThread reads the mutation's body and finds the caller's thread.
func (h *Handler) ownedThread(w http.ResponseWriter, r *http.Request) (instanceai.Thread, threadMutation, error) {
	var m threadMutation
	// DELETE may come without a body.
	if r.ContentLength != 0 {
		if err := httpjson.Decode(w, r, maxThreadBody, &m); err != nil {
			return instanceai.Thread{}, m, err
		}
	}
	if m.AgentID != "" && !agentIDPattern.MatchString(m.AgentID) {
		return instanceai.Thread{}, m, httpjson.NewError(http.StatusBadRequest, "invalid_field", "agentId",
			"agentId must be 1-128 letters, digits or any of _ . @ : = -")
	}
	if m.AgentID == "" {
		m.AgentID = DefaultAgentID
	}
	t, err := h.core.Thread(r.Context(), mux.Vars(r)["threadId"], auth.UserFrom(r.Context()))
	return t, m, err
}

// updateThread renames the thread (name) and archives or unarchives it
// (archived), and answers the thread as it is now.
func (h *Handler) updateThread(w http.ResponseWriter, r *http.Request) {
	t, m, err := h.ownedThread(w, r)
	if err == nil && m.Name == nil && m.Archived == nil {
		err = httpjson.NewError(http.StatusBadRequest, "invalid_field", "name", "name or archived is required")
	}
	if err == nil && m.Name != nil {
		err = h.rename(r, t, *m.Name)
	}
	if err == nil && m.Archived != nil {
		err = h.core.Archive(r.Context(), t.ID, *m.Archived)
	}
	if err == nil {
		t, err = h.core.Thread(r.Context(), t.ID, auth.UserFrom(r.Context()))
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, record(t, m.AgentID))
}

func (h *Handler) rename(r *http.Request, t instanceai.Thread, name string) error {
	title, err := instanceai.CleanTitle(name)
	if err == nil && title == "" {
		err = errEmptyName
	}
	if err != nil {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "name", "name %v", err)
	}
	return h.core.Rename(r.Context(), t.ID, auth.UserFrom(r.Context()), "", title)
}

var errEmptyName = errors.New("must not be empty")

// archiveThread answers as the runtime does: {threadId, archived: true}.
func (h *Handler) archiveThread(w http.ResponseWriter, r *http.Request) {
	t, _, err := h.ownedThread(w, r)
	if err == nil {
		err = h.core.Archive(r.Context(), t.ID, true)
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"threadId": t.ID, "archived": true})
}

// deleteThread removes the thread with its log, as the native DELETE does
// (the run under way is cancelled first), and answers as the runtime does.
func (h *Handler) deleteThread(w http.ResponseWriter, r *http.Request) {
	t, _, err := h.ownedThread(w, r)
	if err == nil {
		err = h.core.DeleteThread(r.Context(), t.ID)
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"threadId": t.ID, "deleted": true})
}
