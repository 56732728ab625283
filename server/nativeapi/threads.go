package nativeapi

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

// Thread listing bounds.
const (
	DefaultThreadsLimit = 20
	MaxThreadsLimit     = 100
)

// registerThreads mounts the thread collection: list, create, rename and
// delete, each scoped to the caller's own threads.
func (a *API) registerThreads(s *mux.Router) {
	s.HandleFunc("/threads", a.listThreads).Methods(http.MethodGet)
	s.HandleFunc("/threads", a.createThread).Methods(http.MethodPost)
	s.HandleFunc("/threads/{threadId}", a.renameThread).Methods(http.MethodPatch)
	s.HandleFunc("/threads/{threadId}", a.deleteThread).Methods(http.MethodDelete)
}

// threadJSON is a thread as the API shows it.
type threadJSON struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Archived  bool      `json:"archived"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func threadView(t instanceai.Thread) threadJSON {
	return threadJSON{ID: t.ID, Title: t.Title, Archived: t.Archived, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
}

type threadList struct {
	Threads []threadJSON `json:"threads"`
	Page    int          `json:"page"`
	Limit   int          `json:"limit"`
	HasMore bool         `json:"hasMore"`
}

// boolParam reads an optional boolean query parameter: true or false.
func boolParam(r *http.Request, name string) (bool, error) {
	switch raw := r.URL.Query().Get(name); raw {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, httpjson.NewError(http.StatusBadRequest, "invalid_query", name, "%s must be true or false, got %q", name, raw)
	}
}

// positiveParam reads an optional positive integer query parameter.
func positiveParam(r *http.Request, name string, def, maxValue int) (int, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxValue {
		return 0, httpjson.NewError(http.StatusBadRequest, "invalid_query", name,
			"%s must be an integer from 1 to %d, got %q", name, maxValue, raw)
	}
	return n, nil
}

func (a *API) listThreads(w http.ResponseWriter, r *http.Request) {
	list, err := a.threadPage(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, list)
}

func (a *API) threadPage(r *http.Request) (threadList, error) {
	limit, err := positiveParam(r, "limit", DefaultThreadsLimit, MaxThreadsLimit)
	if err != nil {
		return threadList{}, err
	}
	// The offset (page-1)*limit must fit in an int.
	page, err := positiveParam(r, "page", 1, math.MaxInt/MaxThreadsLimit)
	if err != nil {
		return threadList{}, err
	}
	all, err := boolParam(r, "includeArchived")
	if err != nil {
		return threadList{}, err
	}
	// One row more than the page tells whether another page follows.
	// A token limited to some threads lists only those, paged as they are.
	rows, err := a.core.ListThreads(r.Context(), instanceai.ThreadQuery{OwnerID: auth.UserFrom(r.Context()),
		Limit: limit + 1, Offset: (page - 1) * limit, IncludeArchived: all})
	if err != nil {
		return threadList{}, err
	}
	out := threadList{Threads: []threadJSON{}, Page: page, Limit: limit, HasMore: len(rows) > limit}
	for _, t := range rows[:min(len(rows), limit)] {
		out.Threads = append(out.Threads, threadView(t))
	}
	return out, nil
}

// cleanTitle is instanceai.CleanTitle with its error naming the field.
func cleanTitle(title string) (string, error) {
	title, err := instanceai.CleanTitle(title)
	if err != nil {
		return "", httpjson.NewError(http.StatusBadRequest, "invalid_field", "title", "title %v", err)
	}
	return title, nil
}

type createThreadRequest struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

func (a *API) createThread(w http.ResponseWriter, r *http.Request) {
	status, t, err := a.ensureThread(w, r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, status, threadView(t))
}

// ensureThread creates the thread, or finds the caller's thread with that
// id. Thread ids are global, so an id already taken by another user is a
// 409 whose message says no more than that the id is not available: not
// whose it is, nor anything about the thread.
func (a *API) ensureThread(w http.ResponseWriter, r *http.Request) (int, instanceai.Thread, error) {
	var req createThreadRequest
	// The body is optional: no body creates an untitled thread.
	if r.ContentLength != 0 {
		if err := httpjson.Decode(w, r, a.cfg.MaxBody, &req); err != nil {
			return 0, instanceai.Thread{}, err
		}
	}
	id := req.ID
	if id == "" {
		id = instanceai.NewID("thread_")
	} else if !instanceai.ValidThreadID(id) {
		return 0, instanceai.Thread{}, httpjson.NewError(http.StatusBadRequest, "invalid_field", "id", "id %s", instanceai.ThreadIDRule)
	}
	title, err := cleanTitle(req.Title)
	if err != nil {
		return 0, instanceai.Thread{}, err
	}
	if !instanceai.ThreadAllowed(r.Context(), id) {
		// A token limited to other threads creates none, and is told so
		// as about another user's thread elsewhere: not found.
		return 0, instanceai.Thread{}, httpjson.FromCore(&instanceai.ThreadNotFoundError{ThreadID: id})
	}
	user := auth.UserFrom(r.Context())
	t, created, err := a.core.EnsureThread(r.Context(), instanceai.Thread{ID: id, OwnerID: user, Title: title})
	switch {
	case err != nil:
		return 0, instanceai.Thread{}, err
	case t.OwnerID != user:
		return 0, instanceai.Thread{}, httpjson.NewError(http.StatusConflict, "thread_id_unavailable", "id",
			"thread id %q is not available; choose another id, or send none to get a generated one", id)
	case created:
		return http.StatusCreated, t, nil
	}
	return http.StatusOK, t, nil
}

type renameRequest struct {
	Title *string `json:"title"`
}

func (a *API) renameThread(w http.ResponseWriter, r *http.Request) {
	t, err := a.rename(w, r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, threadView(t))
}

func (a *API) rename(w http.ResponseWriter, r *http.Request) (instanceai.Thread, error) {
	t, err := a.ownedThread(r)
	if err != nil {
		return t, err
	}
	var req renameRequest
	if err := httpjson.Decode(w, r, a.cfg.MaxBody, &req); err != nil {
		return t, err
	}
	if req.Title == nil {
		return t, httpjson.NewError(http.StatusBadRequest, "invalid_field", "title", "title is required")
	}
	title, err := cleanTitle(*req.Title)
	if err != nil {
		return t, err
	}
	if title == "" {
		return t, httpjson.NewError(http.StatusBadRequest, "invalid_field", "title", "title must not be empty")
	}
	user := auth.UserFrom(r.Context())
	if err := a.core.Rename(r.Context(), t.ID, user, "", title); err != nil {
		return t, err
	}
	// Owned a moment ago: a miss now is a delete that came in between.
	return a.core.Thread(r.Context(), t.ID, user)
}

func (a *API) deleteThread(w http.ResponseWriter, r *http.Request) {
	if err := a.delete(r); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]bool{"ok": true})
}

// delete removes a thread the caller owns (Core.DeleteThread).
func (a *API) delete(r *http.Request) error {
	t, err := a.ownedThread(r)
	if err != nil {
		return err
	}
	return a.core.DeleteThread(r.Context(), t.ID)
}
