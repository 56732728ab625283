package nativeapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/server/httpjson"
)

// Message page limits, as n8n's InstanceAiThreadMessagesQuery sets them.
const (
	messagesDefaultLimit = 50
	messagesMaxLimit     = 200
	messagesMaxPage      = 1000
)

// richMessage is n8n's InstanceAiMessage.
type richMessage struct {
	ID          string               `json:"id"`
	RunID       string               `json:"runId,omitempty"`
	Role        string               `json:"role"`
	CreatedAt   string               `json:"createdAt"`
	Content     string               `json:"content"`
	Reasoning   string               `json:"reasoning"`
	IsStreaming bool                 `json:"isStreaming"`
	AgentTree   *agenttree.AgentNode `json:"agentTree,omitempty"`
	// Attachments are a user message's files, where n8n's InstanceAiMessage
	// carries them.
	Attachments []instanceai.Attachment `json:"attachments,omitempty"`
}

type messagesResponse struct {
	ThreadID    string        `json:"threadId"`
	Messages    []richMessage `json:"messages"`
	NextEventID int64         `json:"nextEventId"`
	// OlderCursor, when there are older messages than these, is the
	// ?before= that reads them: the position of the oldest one here.
	OlderCursor *int `json:"olderCursor,omitempty"`
}

// window is which messages a request asks for: the newest limit before
// position before (a cursor from olderCursor), or page pages of limit
// back from the newest.
type window struct {
	limit, page int
	before      *int
}

// windowParams reads ?limit, ?page (0 = the newest messages) and ?before.
func windowParams(r *http.Request) (window, error) {
	w := window{limit: messagesDefaultLimit}
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > messagesMaxLimit {
			return w, httpjson.NewError(http.StatusBadRequest, "invalid_field", "limit",
				"limit must be an integer from 1 to %d", messagesMaxLimit)
		}
		w.limit = n
	}
	if v := q.Get("page"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 0 || n > messagesMaxPage {
			return w, httpjson.NewError(http.StatusBadRequest, "invalid_field", "page",
				"page must be an integer from 0 to %d", messagesMaxPage)
		}
		w.page = n
	}
	if v := q.Get("before"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 0 {
			return w, httpjson.NewError(http.StatusBadRequest, "invalid_field", "before",
				"before must be a non-negative integer (an olderCursor), got %q", v)
		}
		if q.Has("page") {
			return w, httpjson.NewError(http.StatusBadRequest, "invalid_field", "before",
				"before and page cannot be used together: before continues from an olderCursor")
		}
		w.before = &n
	}
	return w, nil
}

// messages serves the session-restore view: user messages as stored and one
// assistant message per run, folded from the log with the same reducer as
// the browser. nextEventId is read before the log, so a client that then
// connects with lastEventId = nextEventId-1 gets every later event once.
// A page holds at most limit messages and, past its newest message, no
// more than history.DefaultMaxBytes of them: a request holds that much of
// a thread, however long the thread (see history).
func (a *API) messages(w http.ResponseWriter, r *http.Request) {
	resp, err := a.buildMessages(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, resp)
}

func (a *API) buildMessages(r *http.Request) (*messagesResponse, error) {
	t, err := a.ownedThread(r)
	if err != nil {
		return nil, err
	}
	win, err := windowParams(r)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	next, err := a.core.NextSeq(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	ix, err := history.Load(ctx, a.core, t.ID, next-1)
	if err != nil {
		return nil, err
	}
	end := len(ix.Entries) - win.page*win.limit
	if win.before != nil {
		end = min(*win.before, len(ix.Entries))
	}
	end = max(end, 0)
	start := ix.Window(end, win.limit, a.cfg.MessagesMaxBytes)
	entries := ix.Entries[start:end]
	got, err := ix.Read(ctx, a.core, t.ID, entries)
	if err != nil {
		return nil, err
	}
	msgs := make([]richMessage, 0, len(entries))
	for _, e := range entries {
		if e.User != nil {
			m := got.Users[e.User.ID]
			msgs = append(msgs, richMessage{ID: e.User.ID, RunID: e.User.RunID, Role: "user",
				CreatedAt: e.User.CreatedAt.UTC().Format(time.RFC3339Nano), Content: m.Content, Attachments: m.Attachments})
			continue
		}
		run := got.Runs.Get(e.RunID)
		if run == nil {
			continue // evicted by a bounded store between the two reads
		}
		tree := run.State.Tree()
		msgs = append(msgs, richMessage{ID: run.ID, RunID: run.ID, Role: "assistant", CreatedAt: isoMillis(run.StartedAt),
			Content: tree.TextContent, Reasoning: tree.Reasoning, IsStreaming: run.State.Active(), AgentTree: tree})
	}
	resp := &messagesResponse{ThreadID: t.ID, Messages: msgs, NextEventID: next}
	if start > 0 {
		resp.OlderCursor = &start
	}
	return resp, nil
}

func isoMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}
