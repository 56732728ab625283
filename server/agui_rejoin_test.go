package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/server/servertest"
)

// rejoinRequest opens GET /agui/threads/{thread}/events; header and query
// are the Last-Event-ID header and ?lastEventId ("" sends none), accept ""
// sends no Accept header.
func (h *harness) rejoinRequest(ctx context.Context, thread, header, query, accept string) *http.Response {
	h.t.Helper()
	url := h.URL + "/agui/threads/" + thread + "/events"
	if query != "" {
		url += "?lastEventId=" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if header != "" {
		req.Header.Set("Last-Event-ID", header)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := h.Client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// aguiReader reads an AG-UI stream event by event.
type aguiReader struct {
	t   *testing.T
	res *http.Response
	br  *bufio.Reader
	got []aguiEvent
}

// openRejoin opens a rejoin stream that must be accepted.
func (h *harness) openRejoin(ctx context.Context, thread, header string) *aguiReader {
	h.t.Helper()
	res := h.rejoinRequest(ctx, thread, header, "", "text/event-stream")
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		h.t.Fatalf("rejoin %s: %d %s", thread, res.StatusCode, raw)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		h.t.Fatalf("Content-Type %q", ct)
	}
	h.t.Cleanup(func() { res.Body.Close() })
	return &aguiReader{t: h.t, res: res, br: bufio.NewReader(res.Body)}
}

// next returns the next event; ok is false at the end of the stream.
func (r *aguiReader) next() (aguiEvent, bool) {
	r.t.Helper()
	for {
		var msg strings.Builder
		for {
			line, err := r.br.ReadString('\n')
			if err == io.EOF && msg.Len() == 0 && line == "" {
				return aguiEvent{}, false
			}
			if err != nil {
				r.t.Fatalf("read stream after %v: %v", types(r.got), err)
			}
			if line == "\n" {
				break
			}
			msg.WriteString(line)
		}
		evs, err := parseAGUIStream([]byte(msg.String() + "\n"))
		if err != nil {
			r.t.Fatalf("%v", err)
		}
		if len(evs) == 1 {
			r.got = append(r.got, evs[0])
			return evs[0], true
		}
	}
}

// until reads until stop is true of an event (included).
func (r *aguiReader) until(stop func(aguiEvent) bool) {
	r.t.Helper()
	for {
		ev, ok := r.next()
		if !ok {
			r.t.Fatalf("stream ended early: %v", types(r.got))
		}
		if stop(ev) {
			return
		}
	}
}

// rest reads to the end of the stream and returns every event read.
func (r *aguiReader) rest() []aguiEvent {
	r.t.Helper()
	for {
		if _, ok := r.next(); !ok {
			return r.got
		}
	}
}

// checkRejoined checks a whole rejoin stream: the verifier's rules,
// RUN_STARTED for the run then MESSAGES_SNAPSHOT, no null anywhere, and
// ids that increase and never go below the cursor. It returns the
// snapshot's messages.
func checkRejoined(t *testing.T, events []aguiEvent, thread, runID string, cursor int64) []map[string]any {
	t.Helper()
	if err := verifyAGUI(events); err != nil {
		t.Fatalf("rejoin stream breaks the AG-UI rules: %v\n%v", err, types(events))
	}
	if len(events) < 3 || events[1].typ != "MESSAGES_SNAPSHOT" {
		t.Fatalf("rejoin stream %v: want RUN_STARTED, MESSAGES_SNAPSHOT, …", types(events))
	}
	if events[0].str("threadId") != thread || events[0].str("runId") != runID {
		t.Fatalf("RUN_STARTED %s, want thread %s run %s", events[0].raw, thread, runID)
	}
	last := cursor - 1
	for i, ev := range events {
		if path := nullPath(ev.body, ev.typ); path != "" {
			t.Errorf("event %d: %s is null", i, path)
		}
		if ev.id == 0 {
			continue
		}
		if ev.id <= last {
			t.Errorf("event %d (%s) has id %d after id %d (cursor %d)", i, ev.typ, ev.id, last, cursor)
		}
		last = ev.id
	}
	var msgs []map[string]any
	for _, m := range events[1].body["messages"].([]any) {
		msgs = append(msgs, m.(map[string]any))
	}
	return msgs
}

func nullPath(v any, path string) string {
	switch x := v.(type) {
	case nil:
		return path
	case map[string]any:
		for k, e := range x {
			if p := nullPath(e, path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range x {
			if p := nullPath(e, path+"["+strconv.Itoa(i)+"]"); p != "" {
				return p
			}
		}
	}
	return ""
}

// messageSummary is "role:id:text" per message.
func messageSummary(msgs []map[string]any) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		content, _ := m["content"].(string)
		out[i] = fmt.Sprintf("%s:%s:%s", m["role"], m["id"], content)
	}
	return out
}

// runText is the orchestrator text a client holds at the end of a rejoin:
// the run's assistant messages in the snapshot (named after its responses,
// which the reference agent names after the run), then the text streamed.
func runText(msgs []map[string]any, events []aguiEvent, runID string) string {
	var b strings.Builder
	for _, m := range msgs {
		id, _ := m["id"].(string)
		if m["role"] == "assistant" && strings.HasPrefix(id, runID+":") && m["subagentRunId"] == nil {
			s, _ := m["content"].(string)
			b.WriteString(s)
		}
	}
	for _, ev := range events {
		if ev.typ == "TEXT_MESSAGE_CONTENT" && ev.str("subagentRunId") == "" {
			b.WriteString(ev.str("delta"))
		}
	}
	return b.String()
}

// ofRole returns the messages of a role.
func ofRole(msgs []map[string]any, role string) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		if m["role"] == role {
			out = append(out, m)
		}
	}
	return out
}

// countType counts a run's stored events of a type.
func countStored(events []instanceai.Event, typ instanceai.EventType) int {
	n := 0
	for _, ev := range events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// storedRun returns the stored events of one run and the highest seq of
// the thread's log.
func storedRun(t *testing.T, store instanceai.Store, thread, runID string) ([]instanceai.Event, int64) {
	t.Helper()
	var evs []instanceai.Event
	var last int64
	for _, r := range servertest.StoredEvents(t, store, thread) {
		last = r.Seq
		if r.Event.RunID == runID {
			evs = append(evs, r.Event)
		}
	}
	return evs, last
}

// waitRow polls the log for the first row of the run that match accepts and
// returns its seq.
func waitRow(t *testing.T, store instanceai.Store, thread, runID string, match func(instanceai.Event) bool) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range servertest.StoredEvents(t, store, thread) {
			if r.Event.RunID == runID && match(r.Event) {
				return r.Seq
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no matching row of run %s within 20s", runID)
	return 0
}

// waitConfirmation waits for the run's confirmation-request to be stored
// and returns it.
func waitConfirmation(t *testing.T, store instanceai.Store, thread, runID string) *instanceai.ConfirmationRequest {
	t.Helper()
	var req *instanceai.ConfirmationRequest
	waitRow(t, store, thread, runID, func(ev instanceai.Event) bool {
		req, _ = ev.Payload.(*instanceai.ConfirmationRequest)
		return req != nil
	})
	return req
}

func rowType(typ instanceai.EventType) func(instanceai.Event) bool {
	return func(ev instanceai.Event) bool { return ev.Type == typ }
}

// TestAGUIRejoinFinishedRun: rejoining a thread whose latest run is over is
// RUN_STARTED, the whole conversation and the run's terminal event, whatever
// the cursor.
func TestAGUIRejoinFinishedRun(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		first := h.Chat("th", "tools")
		waitRow(t, store, "th", first, rowType(instanceai.TypeRunFinish))
		// The title derived from the first message is queued by the chat
		// request and may be stored after the run's finish: let it land.
		if err := h.App.Sync(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		events := h.openRejoin(ctx, "th", "").rest()
		msgs := checkRejoined(t, events, "th", first, 0)
		if got := types(events); len(got) != 3 || got[2] != "RUN_FINISHED" {
			t.Fatalf("finished run rejoined as %v", got)
		}
		runEvents, last := storedRun(t, store, "th", first)
		text := agenttree.Fold(runEvents).TextContent
		// The conversation as the live stream built it: the user's
		// message, the run's answers, and its calls' results as tool
		// messages.
		if got := messageSummary(msgs); got[0] != "user:"+msgs[0]["id"].(string)+":tools" {
			t.Errorf("snapshot %q, want the user's message first", got)
		}
		if text == "" || runText(msgs, nil, first) != text {
			t.Errorf("assistant text %q, want %q", runText(msgs, nil, first), text)
		}
		if n, want := len(ofRole(msgs, "tool")), countStored(runEvents, instanceai.TypeToolResult)+countStored(runEvents, instanceai.TypeToolError); n != want {
			t.Errorf("snapshot has %d tool messages, want one per result (%d): %q", n, want, messageSummary(msgs))
		}
		if events[2].id != last {
			t.Errorf("terminal frame id %d, want the log's last seq %d", events[2].id, last)
		}

		// A failed run ends the rejoined stream with RUN_ERROR; an early
		// cursor still gets the whole conversation.
		second := h.Chat("th", "error")
		waitRow(t, store, "th", second, rowType(instanceai.TypeRunFinish))
		events = h.openRejoin(ctx, "th", "1").rest()
		msgs = checkRejoined(t, events, "th", second, 1)
		if got := types(events); len(got) != 3 || got[2] != "RUN_ERROR" {
			t.Fatalf("failed run rejoined as %v", got)
		}
		users := ofRole(msgs, "user")
		if len(users) != 2 || users[1]["content"] != "error" || runText(msgs, nil, first) != text {
			t.Errorf("snapshot %q: want both runs' conversation", messageSummary(msgs))
		}
	})
}

// TestAGUIRejoinMidRun: two clients rejoin a `long` run under way, one
// with no cursor and one at the run's run-start; each stream is one valid
// AG-UI run whose text, snapshot plus streamed, is the whole run's text.
func TestAGUIRejoinMidRun(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		earlier := h.Chat("th", "simple hi")
		waitRow(t, store, "th", earlier, rowType(instanceai.TypeRunFinish))
		runID := h.Chat("th", "long 100000")
		startSeq := waitRow(t, store, "th", runID, rowType(instanceai.TypeRunStart))
		time.Sleep(150 * time.Millisecond) // let text stream before the rejoin

		fromZero := h.openRejoin(ctx, "th", "")
		later := h.openRejoin(ctx, "th", strconv.FormatInt(startSeq, 10))
		contents := 0
		for _, r := range []*aguiReader{fromZero, later} {
			contents = 0
			r.until(func(ev aguiEvent) bool {
				if ev.typ == "TEXT_MESSAGE_CONTENT" {
					contents++
				}
				return contents >= 20
			})
		}
		h.Cancel("th")
		zeroEvents, laterEvents := fromZero.rest(), later.rest()

		runEvents, last := storedRun(t, store, "th", runID)
		full := agenttree.Fold(runEvents).TextContent
		earlierEvents, _ := storedRun(t, store, "th", earlier)
		earlierText := agenttree.Fold(earlierEvents).TextContent
		if !strings.HasPrefix(full, "chunk 0. chunk 1. ") {
			t.Fatalf("stored run text starts %.40q", full)
		}
		for _, c := range []struct {
			name        string
			events      []aguiEvent
			cursor      int64
			earlierText string // the earlier run's text in the snapshot
		}{
			// Earlier runs are not in the tail: the snapshot has them
			// whatever the cursor.
			{"no cursor", zeroEvents, 0, earlierText},
			{"run-start cursor", laterEvents, startSeq, earlierText},
		} {
			msgs := checkRejoined(t, c.events, "th", runID, c.cursor)
			if len(ofRole(msgs, "user")) != 2 || runText(msgs, nil, earlier) != c.earlierText || runText(msgs, nil, runID) != "" {
				t.Errorf("%s: snapshot %q, want both users' messages and the earlier run's text %q", c.name, messageSummary(msgs), c.earlierText)
			}
			if text := runText(msgs, c.events, runID); text != full {
				t.Errorf("%s: client text (%d bytes) differs from the run's (%d bytes)", c.name, len(text), len(full))
			}
			// The text streamed before the rejoin comes back as one content.
			for _, ev := range c.events {
				if ev.typ == "TEXT_MESSAGE_CONTENT" {
					if !strings.HasPrefix(ev.str("delta"), "chunk 0. chunk 1. ") {
						t.Errorf("%s: first content %.40q, want the text so far", c.name, ev.str("delta"))
					}
					break
				}
			}
			end := c.events[len(c.events)-1]
			if end.typ != "RUN_FINISHED" || end.id != last {
				t.Errorf("%s: last event %s id %d, want RUN_FINISHED with id %d", c.name, end.raw, end.id, last)
			}
			if out, _ := end.body["outcome"].(map[string]any); out["type"] != "cancelled" {
				t.Errorf("%s: outcome %v, want cancelled", c.name, end.body["outcome"])
			}
		}
	})
}

// TestAGUIRejoinReopensToolCall: a rejoin at a cursor where a tool call is
// open opens it again before the tail continues it, and the run's text
// and results before the cursor are in the snapshot. The agent holds the
// call open until the rejoin has opened, so the run cannot be over first.
func TestAGUIRejoinReopensToolCall(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		release := make(chan struct{})
		agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
			seg := func(n int, text string) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: fmt.Sprintf("%s:seg:%d", run.ID, n), Payload: &instanceai.Text{Text: text}}
			}
			call := func(id string) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: id, ToolName: "workflows", Args: json.RawMessage(`{"a":1}`)}}
			}
			result := func(id, r string) instanceai.Event {
				return instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: id, Result: json.RawMessage(r)}}
			}
			for _, ev := range []instanceai.Event{seg(1, "Checking a few things."), call(run.ID + ":tc:1"), result(run.ID+":tc:1", `{"count":2}`),
				{Type: instanceai.TypeToolInputStart, Payload: &instanceai.ToolInputStart{ToolCallID: run.ID + ":tc:2", ToolName: "workflows"}}} {
				if err := run.Emit(ev); err != nil {
					return err
				}
			}
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			for _, ev := range []instanceai.Event{call(run.ID + ":tc:2"), result(run.ID+":tc:2", `{"id":"wf"}`), seg(2, "Done.")} {
				if err := run.Emit(ev); err != nil {
					return err
				}
			}
			return nil
		})
		h := start(t, store, servertest.Options{Agent: agent})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		runID := h.Chat("th", "tools")
		cursor := waitRow(t, store, "th", runID, rowType(instanceai.TypeToolInputStart))
		rd := h.openRejoin(ctx, "th", strconv.FormatInt(cursor, 10))
		rd.until(func(ev aguiEvent) bool { return ev.typ == "TOOL_CALL_START" })
		close(release)
		events := rd.rest()
		msgs := checkRejoined(t, events, "th", runID, cursor)
		if events[2].typ != "TOOL_CALL_START" || events[2].str("toolCallId") != runID+":tc:2" {
			t.Fatalf("after the snapshot: %s, want the open tool call opened again", events[2].raw)
		}
		for _, ev := range events[3:] {
			if ev.typ == "TOOL_CALL_START" && ev.str("toolCallId") == runID+":tc:1" {
				t.Errorf("a tool call finished before the cursor was sent again")
			}
		}
		runEvents, last := storedRun(t, store, "th", runID)
		full := agenttree.Fold(runEvents).TextContent
		got := messageSummary(msgs)
		if len(got) != 3 || got[1] != "assistant:"+runID+":seg:1:Checking a few things." || got[2] != "tool:result:"+runID+":tc:1:{\"count\":2}" {
			t.Errorf("snapshot %q, want the user message, the text and the result before the cursor", got)
		}
		if text := runText(msgs, events, runID); text != full || full != "Checking a few things.Done." {
			t.Errorf("client text %q, want %q", text, full)
		}
		if end := events[len(events)-1]; end.typ != "RUN_FINISHED" || end.id != last {
			t.Errorf("last event %s id %d, want RUN_FINISHED id %d", end.raw, end.id, last)
		}
	})
}

// TestAGUIRejoinErrors: the answers before any stream.
func TestAGUIRejoinErrors(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob"})
		alice, bob := h.As(aliceToken), h.As(bobToken)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runID := alice.Chat("th-a", "simple hi")
		waitRow(t, store, "th-a", runID, rowType(instanceai.TypeRunFinish))
		if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "empty", OwnerID: "alice"}); err != nil {
			t.Fatal(err)
		}

		cases := []struct {
			name                  string
			h                     *harness
			thread, header, query string
			accept                string
			status                int
			code, field           string
		}{
			{"no token", h, "th-a", "", "", "", http.StatusUnauthorized, "", ""},
			{"another user's thread", bob, "th-a", "", "", "", http.StatusNotFound, "thread_not_found", "threadId"},
			{"unknown thread", alice, "nope", "", "", "", http.StatusNotFound, "thread_not_found", "threadId"},
			{"invalid thread id", alice, "-bad", "", "", "", http.StatusNotFound, "thread_not_found", "threadId"},
			{"thread without a run", alice, "empty", "", "", "", http.StatusNotFound, "run_not_found", "threadId"},
			{"json only", alice, "th-a", "", "", "application/json", http.StatusNotAcceptable, "not_acceptable", "Accept"},
			{"bad header", alice, "th-a", "abc", "", "", http.StatusBadRequest, "invalid_cursor", "Last-Event-ID"},
			{"negative header", alice, "th-a", "-1", "3", "", http.StatusBadRequest, "invalid_cursor", "Last-Event-ID"},
			{"bad query", alice, "th-a", "", "1.5", "", http.StatusBadRequest, "invalid_cursor", "lastEventId"},
			{"negative query", alice, "th-a", "", "-2", "", http.StatusBadRequest, "invalid_cursor", "lastEventId"},
			{"signed header", alice, "th-a", "+5", "", "", http.StatusBadRequest, "invalid_cursor", "Last-Event-ID"},
			{"spaced query", alice, "th-a", "", "%205", "", http.StatusBadRequest, "invalid_cursor", "lastEventId"},
		}
		for _, c := range cases {
			res := c.h.rejoinRequest(ctx, c.thread, c.header, c.query, c.accept)
			if res.StatusCode != c.status {
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				t.Errorf("%s: %d %s, want %d", c.name, res.StatusCode, raw, c.status)
				continue
			}
			if c.code == "" {
				res.Body.Close()
				continue
			}
			if code, field := readJSONError(t, res); code != c.code || field != c.field {
				t.Errorf("%s: error %s naming %q, want %s naming %q", c.name, code, field, c.code, c.field)
			}
		}

		// The owner gets the stream; the header wins over a bad query.
		res := alice.rejoinRequest(ctx, "th-a", "2", "abc", "*/*")
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		events, err := parseAGUIStream(raw)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("owner rejoin: %d %v\n%s", res.StatusCode, err, raw)
		}
		checkRejoined(t, events, "th-a", runID, 2)
	})
}

// TestAGUIRejoinWaitingForConfirmation: a run suspended on a confirmation
// rejoins as a run that ends with its interrupt.
func TestAGUIRejoinWaitingForConfirmation(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runID := h.Chat("th", "confirm")
		waitRow(t, store, "th", runID, rowType(instanceai.TypeConfirmRequest))
		events := h.openRejoin(ctx, "th", "").rest()
		checkRejoined(t, events, "th", runID, 0)
		end := events[len(events)-1]
		out, _ := end.body["outcome"].(map[string]any)
		if end.typ != "RUN_FINISHED" || out["type"] != "interrupt" {
			t.Fatalf("rejoin of a suspended run ends with %s", end.raw)
		}
		h.Do(http.MethodPost, "/instance-ai/chat/th/cancel", "")
	})
}
