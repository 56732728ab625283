package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

type messagesPage struct {
	ThreadID string `json:"threadId"`
	Messages []struct {
		ID          string               `json:"id"`
		RunID       string               `json:"runId"`
		Role        string               `json:"role"`
		Content     string               `json:"content"`
		Reasoning   string               `json:"reasoning"`
		IsStreaming bool                 `json:"isStreaming"`
		AgentTree   *agenttree.AgentNode `json:"agentTree"`
	} `json:"messages"`
	NextEventID int64 `json:"nextEventId"`
}

func (h *harness) messages(thread, query string) messagesPage {
	h.t.Helper()
	res, err := h.Client.Get(h.URL + "/instance-ai/threads/" + thread + "/messages" + query)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		h.t.Fatalf("messages: %d", res.StatusCode)
	}
	var page messagesPage
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
		h.t.Fatal(err)
	}
	return page
}

func treeJSON(t *testing.T, n *agenttree.AgentNode) string {
	t.Helper()
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSessionRestoreWhileStreaming: a client loads the messages, connects
// with lastEventId = nextEventId-1 and folds what follows into the restored
// tree; at the end its tree equals the fold of the whole stored run, both
// for a finished run and for one caught mid-stream.
func TestSessionRestoreWhileStreaming(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		// Long enough pauses that the messages are loaded mid-run even on a
		// loaded machine.
		h := start(t, store, servertest.Options{AgentDelay: 25 * time.Millisecond})
		for _, msg := range []string{"tools", "long 120"} {
			thread := "restore-" + msg[:4]
			runID := h.Chat(thread, msg)
			// Load the messages once the run has stored a few events.
			var page messagesPage
			var restored *agenttree.State
			for deadline := time.Now().Add(wait); restored == nil; {
				if time.Now().After(deadline) {
					t.Fatalf("%s: no assistant message for the run: %+v", msg, page)
				}
				time.Sleep(20 * time.Millisecond)
				page = h.messages(thread, "")
				for _, m := range page.Messages {
					if m.Role == "assistant" && m.RunID == runID && page.NextEventID > 1 {
						if !m.IsStreaming {
							t.Fatalf("%s: the run is reported finished mid-stream", msg)
						}
						restored = agenttree.StateFromAgentTree(m.AgentTree)
					}
				}
			}
			conn := h.Connect(thread, strconv.FormatInt(page.NextEventID-1, 10), true)
			for _, f := range conn.Until(wait, servertest.IsRunFinish(runID)) {
				if f.Event == "" {
					restored.Apply(f.Decoded)
				}
			}
			if err := h.App.Sync(context.Background(), thread); err != nil {
				t.Fatal(err)
			}
			var all []instanceai.Event
			for _, r := range servertest.StoredEvents(t, store, thread) {
				all = append(all, r.Event)
			}
			if got, want := treeJSON(t, restored.Tree()), treeJSON(t, agenttree.Fold(all)); got != want {
				t.Fatalf("%s: restored tree differs from the stored run:\n got %s\nwant %s", msg, got, want)
			}
			final := h.messages(thread, "")
			last := final.Messages[len(final.Messages)-1]
			if last.IsStreaming || last.Content == "" || final.Messages[0].Role != "user" || final.Messages[0].Content != msg {
				t.Fatalf("%s: messages after the run = %+v", msg, final)
			}
		}
	})
}

func TestMessagesPagination(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	var runs []string
	for i := range 3 {
		runID := h.Chat("th", "simple "+strconv.Itoa(i))
		h.Connect("th", "", false).Until(wait, servertest.IsRunFinish(runID))
		runs = append(runs, runID)
	}
	all := h.messages("th", "")
	if len(all.Messages) != 6 {
		t.Fatalf("%d messages, want 6", len(all.Messages))
	}
	newest := h.messages("th", "?limit=2")
	older := h.messages("th", "?limit=2&page=1")
	if len(newest.Messages) != 2 || newest.Messages[1].RunID != runs[2] || newest.Messages[0].Role != "user" ||
		len(older.Messages) != 2 || older.Messages[1].RunID != runs[1] {
		t.Fatalf("pages: newest %+v older %+v", newest.Messages, older.Messages)
	}
	for _, q := range []string{"?limit=0", "?limit=201", "?page=-1", "?limit=x"} {
		res, err := h.Client.Get(h.URL + "/instance-ai/threads/th/messages" + q)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, res.StatusCode)
		}
	}
}

// TestRunSyncOnConnect: connecting to a thread with a live run sends one
// id-less run-sync frame with the run's folded tree before the live tail;
// a thread with nothing live gets none.
func TestRunSyncOnConnect(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{AgentDelay: 2 * time.Millisecond})
	runID := h.Chat("th", "long 100000")
	time.Sleep(50 * time.Millisecond)
	conn := h.Connect("th", "", false)
	frames := conn.Until(wait, func(f servertest.Frame) bool { return f.Event == "run-sync" })
	sync := frames[len(frames)-1]
	if sync.HasID {
		t.Fatal("run-sync frame carries an id")
	}
	var payload struct {
		RunID     string               `json:"runId"`
		Status    string               `json:"status"`
		AgentTree *agenttree.AgentNode `json:"agentTree"`
	}
	if err := json.Unmarshal([]byte(sync.Data), &payload); err != nil {
		t.Fatal(err)
	}
	var sent string
	for _, f := range frames {
		if f.Decoded.Type == instanceai.TypeTextDelta {
			sent += f.Decoded.Payload.(*instanceai.Text).Text
		}
	}
	if payload.RunID != runID || payload.Status != "active" || payload.AgentTree == nil || payload.AgentTree.TextContent != sent {
		t.Fatalf("run-sync = %s (text sent before it: %d bytes)", sync.Data, len(sent))
	}
	h.Cancel("th")
	conn.Until(wait, servertest.IsRunFinish(runID))
	conn.Close()

	quiet := h.Connect("th", "", false)
	quiet.Until(wait, servertest.IsRunFinish(runID))
	if f, ok := quiet.FrameWithin(200 * time.Millisecond); ok && f.Event == "run-sync" {
		t.Fatal("run-sync sent for a thread with nothing live")
	}
}

// A /messages page holds no more than --history-max-bytes past its newest
// message: a thread of large messages is read a few at a time, each page
// naming the olderCursor that reads the ones before it, and the pages
// together are the conversation, in order, each message once.
func TestMessagesByteBudget(t *testing.T) {
	const budget = 6_000
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{HistoryMaxBytes: budget}})
	var runs []string
	for i := range 4 {
		runID := h.Chat("th", "simple "+strconv.Itoa(i)+" "+strings.Repeat("x", 2_500))
		h.Connect("th", "", false).Until(wait, servertest.IsRunFinish(runID))
		runs = append(runs, runID)
	}
	var got []string
	query := "?limit=200"
	for pages := 0; ; pages++ {
		if pages > 8 {
			t.Fatal("the olderCursor chain does not end")
		}
		var page struct {
			messagesPage
			OlderCursor *int `json:"olderCursor"`
		}
		if code := h.DoInto(http.MethodGet, "/instance-ai/threads/th/messages"+query, "", &page); code != http.StatusOK {
			t.Fatalf("%s: %d", query, code)
		}
		size := 0
		var ids []string
		for _, m := range page.Messages {
			size += len(m.Content)
			ids = append(ids, m.Role+":"+m.RunID)
		}
		if len(page.Messages) == 0 || (len(page.Messages) > 1 && size > 2*budget) {
			t.Fatalf("%s: %d messages of %d bytes", query, len(page.Messages), size)
		}
		got = append(ids, got...)
		if page.OlderCursor == nil {
			break
		}
		query = "?limit=200&before=" + strconv.Itoa(*page.OlderCursor)
	}
	var want []string
	for _, r := range runs {
		want = append(want, "user:"+r, "assistant:"+r)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages put together: %v, want %v", got, want)
	}
	for _, q := range []struct{ query, field string }{
		{"?before=-1", "before"}, {"?before=x", "before"}, {"?before=2&page=1", "before"},
	} {
		code, out := h.Do(http.MethodGet, "/instance-ai/threads/th/messages"+q.query, "")
		errorOf(t, "messages"+q.query, code, out, http.StatusBadRequest, "invalid_field", q.field)
	}
}
