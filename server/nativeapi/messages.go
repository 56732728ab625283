package nativeapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/threadline/threadline/instanceai/agenttree"
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
}

type messagesResponse struct {
	ThreadID    string        `json:"threadId"`
	Messages    []richMessage `json:"messages"`
	NextEventID int64         `json:"nextEventId"`
}

// pageParams reads ?limit and ?page (0 = the newest messages).
func pageParams(r *http.Request) (limit, page int, err error) {
	limit, page = messagesDefaultLimit, 0
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > messagesMaxLimit {
			return 0, 0, httpjson.NewError(http.StatusBadRequest, "invalid_field", "limit",
				"limit must be an integer from 1 to %d", messagesMaxLimit)
		}
		limit = n
	}
	if v := q.Get("page"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 0 || n > messagesMaxPage {
			return 0, 0, httpjson.NewError(http.StatusBadRequest, "invalid_field", "page",
				"page must be an integer from 0 to %d", messagesMaxPage)
		}
		page = n
	}
	return limit, page, nil
}

// messages serves the session-restore view: user messages as stored and one
// assistant message per run, folded from the log with the same reducer as
// the browser. nextEventId is read before the log, so a client that then
// connects with lastEventId = nextEventId-1 gets every later event once.
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
	limit, page, err := pageParams(r)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	next, err := a.store.NextSeq(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	users, err := a.store.ListMessages(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	rows, err := a.store.ReadAfter(ctx, t.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	// Fold each run's events, up to the cursor handed out.
	runs := agenttree.FoldRuns(rows, next-1)
	var all []richMessage
	byRun := map[string]bool{}
	assistant := func(r *agenttree.Run) richMessage {
		tree := r.State.Tree()
		return richMessage{ID: r.ID, RunID: r.ID, Role: "assistant", CreatedAt: isoMillis(r.StartedAt),
			Content: tree.TextContent, Reasoning: tree.Reasoning, IsStreaming: r.State.Active(), AgentTree: tree}
	}
	for _, m := range users {
		all = append(all, richMessage{ID: m.ID, RunID: m.RunID, Role: "user", CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339Nano),
			Content: m.Content})
		if r := runs.Get(m.RunID); r != nil && !byRun[m.RunID] {
			byRun[m.RunID] = true
			all = append(all, assistant(r))
		}
	}
	for _, r := range runs.All() {
		if !byRun[r.ID] {
			all = append(all, assistant(r))
		}
	}
	// Page 0 is the newest limit messages, in chronological order.
	end := len(all) - page*limit
	if end < 0 {
		end = 0
	}
	start := max(end-limit, 0)
	msgs := all[start:end]
	if msgs == nil {
		msgs = []richMessage{}
	}
	return &messagesResponse{ThreadID: t.ID, Messages: msgs, NextEventID: next}, nil
}

func isoMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}
