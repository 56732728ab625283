package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

const wait = 20 * time.Second

// TestReplayAtEveryCursor: for a finished thread, a connection at any cursor
// gets exactly the stored events after it, in order, each with its id.
func TestReplayAtEveryCursor(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		h.Chat("th", "tools")
		live := h.Connect("th", "", false)
		var last string
		for _, msg := range []string{"simple replay", "tasks"} {
			// Wait for the previous run to finish before sending the next.
			frames := live.Until(wait, servertest.IsType(instanceai.TypeRunFinish))
			last = frames[len(frames)-1].Decoded.RunID
			h.Chat("th", msg)
		}
		live.Until(wait, func(f servertest.Frame) bool {
			return f.Decoded.Type == instanceai.TypeRunFinish && f.Decoded.RunID != last
		})
		if err := h.App.Sync(context.Background(), "th"); err != nil {
			t.Fatal(err)
		}
		log := servertest.StoredEvents(t, store, "th")
		if len(log) < 20 {
			t.Fatalf("only %d stored events", len(log))
		}
		for c := 0; c <= len(log); c++ {
			want := log[c:]
			if len(want) == 0 {
				continue
			}
			conn := h.Connect("th", strconv.Itoa(c), c%2 == 1)
			got := conn.Until(wait, func(f servertest.Frame) bool { return f.ID == strconv.FormatInt(log[len(log)-1].Seq, 10) })
			conn.Close()
			if len(got) != len(want) {
				t.Fatalf("cursor %d: got %d frames, want %d", c, len(got), len(want))
			}
			for i := range want {
				wantData, _ := json.Marshal(&want[i].Event)
				if got[i].ID != strconv.FormatInt(want[i].Seq, 10) || got[i].Data != string(wantData) {
					t.Fatalf("cursor %d frame %d: id %q data %s\nwant id %d data %s", c, i, got[i].ID, got[i].Data, want[i].Seq, wantData)
				}
			}
		}
		// Nothing more arrives after the replay of a finished thread.
		conn := h.Connect("th", strconv.Itoa(len(log)), false)
		if f, ok := conn.FrameWithin(200 * time.Millisecond); ok && !f.IsComment() {
			t.Fatalf("unexpected frame after the end: %+v", f)
		}
	})
}

// textClient folds a stream the way a client that keeps its state across
// reconnects does: deltas append to their segment, a block replaces it, and
// on reconnect the text of segments no block has closed is dropped, since
// the server sends it again whole.
type textClient struct {
	segments  map[string]string // responseId → text
	closed    map[string]bool
	order     []string // responseIds in first-seen order
	known     map[string]bool
	lastID    string
	durable   []string // "id:type" of every structural event, in order
	reconnect int
	dropped   int
	// deltaFrames counts the text-delta frames received: fewer than the
	// agent's deltas when the hub merged a slow reader's queued ones.
	deltaFrames int
}

func newTextClient() *textClient {
	return &textClient{segments: map[string]string{}, closed: map[string]bool{}, known: map[string]bool{}}
}

func (c *textClient) apply(f servertest.Frame) {
	if f.Event != "" {
		return // control frames such as run-sync
	}
	if f.HasID {
		c.lastID = f.ID
	}
	ev := f.Decoded
	switch ev.Type {
	case instanceai.TypeTextDelta:
		c.deltaFrames++
		c.see(ev.ResponseID)
		c.segments[ev.ResponseID] += ev.Payload.(*instanceai.Text).Text
	case instanceai.TypeTextBlock:
		c.see(ev.ResponseID)
		c.segments[ev.ResponseID] = ev.Payload.(*instanceai.Text).Text
		c.closed[ev.ResponseID] = true
	case instanceai.TypeReasoningDelta, instanceai.TypeReasoningBlock, instanceai.TypeStatus:
	default:
		if !f.HasID {
			panic(fmt.Sprintf("structural event without id: %s", f.Data))
		}
		c.durable = append(c.durable, f.ID+":"+string(ev.Type))
	}
}

func (c *textClient) see(responseID string) {
	if !c.known[responseID] {
		c.known[responseID] = true
		c.order = append(c.order, responseID)
	}
}

func (c *textClient) beforeReconnect() {
	c.reconnect++
	for id := range c.segments {
		if !c.closed[id] {
			delete(c.segments, id)
		}
	}
}

func (c *textClient) text() string {
	var b strings.Builder
	for _, id := range c.order {
		b.WriteString(c.segments[id])
	}
	return b.String()
}

// follow reads the thread until runID finishes, reconnecting with its cursor
// after every `every` frames (0 = never) and whenever the server drops it.
func (h *harness) follow(thread, runID string, every int, pause time.Duration) *textClient {
	h.t.Helper()
	c := newTextClient()
	conn := h.Connect(thread, "", false)
	n := 0
	for {
		f, err := conn.Next(wait)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				c.dropped++
				conn.Close()
				c.beforeReconnect()
				conn = h.Connect(thread, c.lastID, c.reconnect%2 == 0)
				continue
			}
			h.t.Fatalf("stream error: %v", err)
		}
		c.apply(f)
		if f.Decoded.Type == instanceai.TypeRunFinish && f.Decoded.RunID == runID {
			conn.Close()
			return c
		}
		if pause > 0 {
			time.Sleep(pause)
		}
		if n++; every > 0 && n%every == 0 {
			conn.Close()
			c.beforeReconnect()
			conn = h.Connect(thread, c.lastID, c.reconnect%2 == 0)
		}
	}
}

// TestReconnectingClientEndsLikeASteadyOne: during `long 5000`, a client
// that disconnects and reconnects with its cursor again and again ends with
// the same durable events, order and text as one that never disconnected,
// and both match the log.
func TestReconnectingClientEndsLikeASteadyOne(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 200 * time.Microsecond})
		runID := h.Chat("th", "long 5000")
		steadyc, jumpyc := make(chan *textClient, 1), make(chan *textClient, 1)
		go func() { steadyc <- h.follow("th", runID, 0, 0) }()
		go func() { jumpyc <- h.follow("th", runID, 97, 0) }()
		steady, jumpy := <-steadyc, <-jumpyc
		if jumpy.reconnect < 5 {
			t.Fatalf("the jumpy client reconnected only %d times", jumpy.reconnect)
		}
		want := expectedLongText(5000)
		if steady.text() != want {
			t.Fatalf("steady client text differs: %d bytes, want %d", len(steady.text()), len(want))
		}
		if jumpy.text() != want {
			t.Fatalf("reconnecting client text differs: %d bytes, want %d", len(jumpy.text()), len(want))
		}
		if strings.Join(steady.durable, ",") != strings.Join(jumpy.durable, ",") {
			t.Fatalf("durable events differ:\nsteady %v\njumpy  %v", steady.durable, jumpy.durable)
		}
		assertLogText(t, store, "th", want)
	})
}

// TestSlowSubscriberCatchesUp: a subscriber that cannot keep up with a
// tiny queue gets its deltas merged, or is disconnected and reconnects with
// its cursor; either way it ends with everything.
func TestSlowSubscriberCatchesUp(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{SmallBuffers: true, AgentDelay: 200 * time.Microsecond, Config: server.Config{SubscriberQueue: 8}})
		runID := h.Chat("th", "long 3000")
		slow := h.follow("th", runID, 0, 2*time.Millisecond)
		// A reader this slow falls a full queue behind: the hub merges its
		// queued deltas, or, when that is not enough, drops it and it
		// resumes from its cursor. Either way it must end with the text.
		if slow.dropped == 0 && slow.deltaFrames >= 3000 {
			t.Fatalf("the slow subscriber got all %d deltas one by one and was never dropped: it was not slow", slow.deltaFrames)
		}
		if slow.text() != expectedLongText(3000) {
			t.Fatalf("slow subscriber text differs after %d drops and %d delta frames", slow.dropped, slow.deltaFrames)
		}
		t.Logf("%d delta frames for 3000 deltas, %d drops", slow.deltaFrames, slow.dropped)
	})
}

func expectedLongText(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "chunk %d. ", i)
	}
	return b.String()
}

func assertLogText(t *testing.T, store instanceai.Store, thread, want string) {
	t.Helper()
	var got strings.Builder
	for _, r := range servertest.StoredEvents(t, store, thread) {
		if r.Event.Type == instanceai.TypeTextBlock {
			got.WriteString(r.Event.Payload.(*instanceai.Text).Text)
		}
	}
	if got.String() != want {
		t.Fatalf("log text differs: %d bytes, want %d", got.Len(), len(want))
	}
}

func TestLiveFramesCarryIDsOnlyWhenDurable(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	runID := h.Chat("th", "tasks")
	frames := h.Connect("th", "", false).Until(wait, servertest.IsRunFinish(runID))
	var prev int64
	for _, f := range frames {
		if f.Event != "" {
			continue // control frames such as run-sync
		}
		d := instanceai.DurabilityOf(f.Decoded.Type)
		if f.HasID != (d != instanceai.Ephemeral) {
			t.Fatalf("%s frame id present=%v", f.Decoded.Type, f.HasID)
		}
		if f.HasID {
			id, _ := strconv.ParseInt(f.ID, 10, 64)
			if id <= prev {
				t.Fatalf("ids not increasing: %d after %d", id, prev)
			}
			prev = id
		}
	}
}

func TestRequestErrors(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 5 * time.Millisecond, Config: server.Config{MaxBody: 1024, ChatMaxBody: 1024}})
		cases := []struct {
			name, method, path, body string
			status                   int
			code, field              string
		}{
			{"malformed json", "POST", "/instance-ai/chat/a", `{"message":`, 400, "invalid_json", ""},
			{"missing message", "POST", "/instance-ai/chat/a", `{}`, 400, "invalid_field", "message"},
			{"empty message", "POST", "/instance-ai/chat/a", `{"message":"   "}`, 400, "invalid_field", "message"},
			{"wrong type", "POST", "/instance-ai/chat/a", `{"message":42}`, 400, "invalid_field", "message"},
			{"empty body", "POST", "/instance-ai/chat/a", ``, 400, "invalid_json", ""},
			{"body too large", "POST", "/instance-ai/chat/a", `{"message":"` + strings.Repeat("x", 2048) + `"}`, 413, "body_too_large", ""},
			{"bad thread id", "POST", "/instance-ai/chat/..bad", `{"message":"hi"}`, 400, "invalid_thread_id", "threadId"},
			{"unknown thread events", "GET", "/instance-ai/events/nope", ``, 404, "thread_not_found", "threadId"},
			{"unknown thread cancel", "POST", "/instance-ai/chat/nope/cancel", ``, 404, "thread_not_found", "threadId"},
		}
		for _, c := range cases {
			code, out := h.Do(c.method, c.path, c.body)
			errObj, _ := out["error"].(map[string]any)
			if code != c.status || errObj["code"] != c.code || errObj["message"] == "" {
				t.Errorf("%s: %d %v, want %d %s", c.name, code, out, c.status, c.code)
				continue
			}
			if c.field != "" {
				details, _ := errObj["details"].(map[string]any)
				if details["field"] != c.field {
					t.Errorf("%s: details %v, want field %s", c.name, details, c.field)
				}
			}
		}
		// Nothing of the rejected requests was stored.
		if _, err := store.GetThread(context.Background(), "a"); !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("a rejected chat created its thread: %v", err)
		}

		// Cursors are checked once the thread exists.
		runID := h.Chat("th", "long 100000")
		for _, c := range []struct{ header, query, field string }{
			{"abc", "", "Last-Event-ID"}, {"-1", "", "Last-Event-ID"}, {"", "1.5", "lastEventId"}, {"", "-3", "lastEventId"},
			// Digits only: no sign, no spaces.
			{"+5", "", "Last-Event-ID"}, {"", "%2B5", "lastEventId"}, {"", "%205", "lastEventId"}, {"", "5%20", "lastEventId"},
		} {
			req, _ := http.NewRequest(http.MethodGet, h.URL+"/instance-ai/events/th?lastEventId="+c.query, nil)
			if c.query == "" {
				req.URL.RawQuery = ""
			}
			if c.header != "" {
				req.Header.Set("Last-Event-ID", c.header)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Error struct {
					Code    string         `json:"code"`
					Details map[string]any `json:"details"`
				} `json:"error"`
			}
			_ = json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			if res.StatusCode != 400 || out.Error.Code != "invalid_cursor" || out.Error.Details["field"] != c.field {
				t.Errorf("cursor %+v: %d %+v", c, res.StatusCode, out)
			}
		}

		// One active run per thread.
		code, out := h.Do("POST", "/instance-ai/chat/th", `{"message":"again"}`)
		errObj, _ := out["error"].(map[string]any)
		details, _ := errObj["details"].(map[string]any)
		if code != http.StatusConflict || errObj["code"] != "run_active" || details["runId"] != runID {
			t.Fatalf("second run: %d %v", code, out)
		}
		h.Cancel("th")
		// After the cancel a new message is accepted.
		next := h.Chat("th", "simple")
		h.Connect("th", "", false).Until(wait, servertest.IsRunFinish(next))
	})
}

// TestCancelMidRun: cancel stops the agent at once; in-flight tool calls get
// a cancelled result; run-finish{cancelled, user_cancelled} is the run's
// last event; cancel is idempotent.
func TestCancelMidRun(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		// An agent whose tool call is in flight until the cancel, which
		// then misbehaves: it goes on emitting after its run ended.
		late := make(chan error, 1)
		agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
			done := instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "call_done",
				ToolName: "lookup", Args: json.RawMessage(`{}`)}}
			if err := run.Emit(done); err != nil {
				return err
			}
			if err := run.Emit(instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{
				ToolCallID: "call_done", Result: json.RawMessage(`{"ok":true}`)}}); err != nil {
				return err
			}
			if err := run.Emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolCallID: "call_busy",
				ToolName: "lookup", Args: json.RawMessage(`{}`)}}); err != nil {
				return err
			}
			<-ctx.Done()
			late <- run.Emit(instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{
				ToolCallID: "call_busy", Result: json.RawMessage(`{"late":true}`)}})
			return ctx.Err()
		})
		h := start(t, store, servertest.Options{Agent: agent})
		runID := h.Chat("th", "tools")
		conn := h.Connect("th", "", false)
		conn.Until(wait, func(f servertest.Frame) bool {
			p, ok := f.Decoded.Payload.(*instanceai.ToolCall)
			return ok && p.ToolCallID == "call_busy"
		})
		for range 2 {
			h.Cancel("th")
		}
		rest := conn.Until(wait, servertest.IsRunFinish(runID))
		finish := rest[len(rest)-1].Decoded.Payload.(*instanceai.RunFinish)
		if finish.Status != instanceai.RunCancelled || finish.Reason != instanceai.ReasonUserCancelled {
			t.Fatalf("run-finish = %+v", finish)
		}
		// Refused either way: as finished, or as cancelled when the agent
		// got there between the cancel and the run-finish (Run.Emit).
		if err := <-late; err == nil || !errors.Is(err, instanceai.ErrRunFinished) && !strings.Contains(err.Error(), "run cancelled") {
			t.Fatalf("an emit after the cancel: %v; want ErrRunFinished or the cancellation", err)
		}
		if err := h.App.Sync(context.Background(), "th"); err != nil {
			t.Fatal(err)
		}
		log := servertest.StoredEvents(t, store, "th")
		if last := log[len(log)-1].Event; last.Type != instanceai.TypeRunFinish {
			t.Fatalf("an event was stored after run-finish: %s", last.Type)
		}
		// Every tool call has exactly one outcome, and the one in flight at
		// the cancel got a cancelled result.
		outcomes := map[string]int{}
		cancelled := 0
		for _, r := range log {
			switch p := r.Event.Payload.(type) {
			case *instanceai.ToolCall:
				outcomes[p.ToolCallID] += 0
			case *instanceai.ToolResult:
				outcomes[p.ToolCallID]++
				if strings.Contains(string(p.Result), `"status":"cancelled"`) {
					cancelled++
				}
			case *instanceai.ToolError:
				outcomes[p.ToolCallID]++
			}
		}
		for id, n := range outcomes {
			if n != 1 {
				t.Errorf("tool call %s has %d outcomes", id, n)
			}
		}
		if cancelled != 1 {
			t.Fatalf("%d cancelled tool results, want 1 (the call in flight)", cancelled)
		}
	})
}

func TestStreamHeadersFirstCommentAndHeartbeat(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{Heartbeat: 40 * time.Millisecond}})
	h.Chat("th", "simple")
	res, err := http.Get(h.URL + "/instance-ai/events/th")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	for k, v := range map[string]string{
		"Content-Type": "text/event-stream; charset=UTF-8", "Cache-Control": "no-cache, no-transform",
		"X-Accel-Buffering": "no",
	} {
		if got := res.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// The stream owns its connection (see nativeapi's hijacked streams):
	// no chunked encoding, the body runs to the end of the connection,
	// which Go's client reads as Connection: close.
	if !res.Close || len(res.TransferEncoding) > 0 || res.ContentLength != -1 || res.Header.Get("Date") == "" {
		t.Errorf("close %v, transfer encoding %v, content length %d, date %q; want a body to the end of the connection",
			res.Close, res.TransferEncoding, res.ContentLength, res.Header.Get("Date"))
	}
	buf := make([]byte, len(": connected\n\n"))
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != ": connected\n\n" {
		t.Fatalf("first bytes %q, %v", buf, err)
	}
	// Read until the run is over and the stream idles into pings.
	deadline := time.Now().Add(wait)
	var seen strings.Builder
	chunk := make([]byte, 4096)
	for !strings.Contains(seen.String(), "\"run-finish\"") || !strings.HasSuffix(seen.String(), ": ping\n\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat after the run: %q", seen.String())
		}
		n, err := res.Body.Read(chunk)
		if err != nil {
			t.Fatal(err)
		}
		seen.Write(chunk[:n])
	}
	if strings.Contains(seen.String(), "\r") {
		t.Fatal("stream contains CR characters")
	}
}

// TestShutdownFlushesOpenSegments: a graceful shutdown in the middle of a
// stream stores the open text as a block and ends the run cancelled with
// reason service_shutdown.
func TestShutdownFlushesOpenSegments(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
		runID := h.Chat("th", "long 100000")
		conn := h.Connect("th", "", false)
		var live strings.Builder
		for live.Len() < 200 {
			f, err := conn.Next(wait)
			if err != nil {
				t.Fatal(err)
			}
			if f.Decoded.Type == instanceai.TypeTextDelta {
				live.WriteString(f.Decoded.Payload.(*instanceai.Text).Text)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.App.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		log := servertest.StoredEvents(t, store, "th")
		var block string
		for _, r := range log {
			if r.Event.Type == instanceai.TypeTextBlock {
				block += r.Event.Payload.(*instanceai.Text).Text
			}
		}
		if !strings.HasPrefix(block, live.String()) {
			t.Fatalf("stored block (%d bytes) does not hold the streamed text (%d bytes)", len(block), live.Len())
		}
		last := log[len(log)-1].Event
		fin, ok := last.Payload.(*instanceai.RunFinish)
		if !ok || last.RunID != runID || fin.Status != instanceai.RunCancelled || fin.Reason != instanceai.ReasonServiceShutdown {
			t.Fatalf("last stored event = %s %+v", last.Type, last.Payload)
		}
	})
}
