package server_test

import (
	"bufio"
	"context"
	"encoding/json"
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

func TestRunAgentScenarios(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})

		t.Run("simple", func(t *testing.T) {
			evs := h.runAgent("ag-simple", "agrun-1", "hello there", nil)
			if evs[0].str("threadId") != "ag-simple" || evs[0].str("runId") != "agrun-1" {
				t.Fatalf("RUN_STARTED ids: %s", evs[0].raw)
			}
			last := evs[len(evs)-1]
			if last.typ != "RUN_FINISHED" || last.str("runId") != "agrun-1" {
				t.Fatalf("last event: %s", last.raw)
			}
			var text strings.Builder
			for _, e := range evs {
				if e.typ == "TEXT_MESSAGE_CONTENT" {
					text.WriteString(e.str("delta"))
				}
			}
			if !strings.Contains(text.String(), "hello there") {
				t.Fatalf("assistant text %q does not echo the message; types %v", text.String(), types(evs))
			}
			ids := 0
			for _, e := range evs {
				if e.id > 0 {
					ids++
				}
			}
			if ids == 0 {
				t.Fatalf("no event carries the id of a durable instance-ai event")
			}
		})

		t.Run("tools", func(t *testing.T) {
			evs := h.runAgent("ag-tools", "agrun-2", "tools", nil)
			for _, typ := range []string{"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"} {
				if countType(evs, typ) == 0 {
					t.Fatalf("no %s in %v", typ, types(evs))
				}
			}
			if last := evs[len(evs)-1]; last.typ != "RUN_FINISHED" {
				t.Fatalf("last event %s", last.raw)
			}
		})

		t.Run("tasks", func(t *testing.T) {
			evs := h.runAgent("ag-tasks", "agrun-3", "tasks", nil)
			if countType(evs, "STATE_SNAPSHOT") == 0 {
				t.Fatalf("no STATE_SNAPSHOT in %v", types(evs))
			}
			if last := evs[len(evs)-1]; last.typ != "RUN_FINISHED" {
				t.Fatalf("last event %s", last.raw)
			}
		})

		t.Run("error", func(t *testing.T) {
			evs := h.runAgent("ag-error", "agrun-4", "error", nil)
			last := evs[len(evs)-1]
			if last.typ != "RUN_ERROR" || last.str("message") == "" {
				t.Fatalf("last event %s; types %v", last.raw, types(evs))
			}
		})

		t.Run("background agents keep the run open", func(t *testing.T) {
			evs := h.runAgent("ag-background", "agrun-bg", "background", nil)
			if countType(evs, "SUBAGENT_STARTED") == 0 || countType(evs, "SUBAGENT_FINISHED")+countType(evs, "SUBAGENT_ERROR") == 0 {
				t.Fatalf("no sub-agent lifecycle in %v", types(evs))
			}
			if last := evs[len(evs)-1]; last.typ != "RUN_FINISHED" {
				t.Fatalf("last event %s", last.raw)
			}
		})

		t.Run("confirmation ends the run with an interrupt", func(t *testing.T) {
			evs := h.runAgent("ag-confirm", "agrun-cf", "confirm", nil)
			last := evs[len(evs)-1]
			outcome, _ := last.body["outcome"].(map[string]any)
			if last.typ != "RUN_FINISHED" || outcome["type"] != "interrupt" {
				t.Fatalf("last event %s", last.raw)
			}
			if st := h.ThreadStatus("ag-confirm"); !st.IsSuspended {
				t.Fatalf("native status after the interrupt: %+v", st)
			}
			h.Cancel("ag-confirm")
		})

		t.Run("state", func(t *testing.T) {
			evs := h.runAgent("ag-state", "agrun-5", "hello", map[string]any{"state": map[string]any{"count": 3}})
			if len(evs) < 2 || evs[1].typ != "STATE_SNAPSHOT" {
				t.Fatalf("second event is not STATE_SNAPSHOT: %v", types(evs))
			}
			if snap, _ := evs[1].body["snapshot"].(map[string]any); snap["count"] != float64(3) {
				t.Fatalf("snapshot %s", evs[1].raw)
			}
		})

		t.Run("native view of the same thread", func(t *testing.T) {
			evs := h.runAgent("ag-native", "agrun-6", "hello native", nil)
			st := h.ThreadStatus("ag-native")
			if st.HasActiveRun {
				t.Fatalf("status after the stream ended: %+v", st)
			}
			c := h.Connect("ag-native", "", false)
			frames := c.Until(5*time.Second, isType(instanceai.TypeRunFinish))
			if frames[0].Decoded.Type != instanceai.TypeRunStart {
				t.Fatalf("native stream starts with %s", frames[0].Decoded.Type)
			}
			var maxID int64
			for _, e := range evs {
				maxID = max(maxID, e.id)
			}
			if last := frames[len(frames)-1]; last.ID != strconv.FormatInt(maxID, 10) {
				t.Fatalf("native run-finish id %s, highest AG-UI id %d", last.ID, maxID)
			}
		})

		t.Run("second run on the thread maps only its own events", func(t *testing.T) {
			h.runAgent("ag-twice", "agrun-7", "first message", nil)
			evs := h.runAgent("ag-twice", "agrun-8", "second message", nil)
			for _, e := range evs {
				if e.typ == "TEXT_MESSAGE_CONTENT" && strings.Contains(e.str("delta"), "first message") {
					t.Fatalf("the second run's stream carries the first run's text: %s", e.raw)
				}
			}
		})
	})
}

func TestRunAgentAccept(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	for i, accept := range []string{"", "*/*", "text/*", "text/event-stream", "application/json, text/event-stream;q=0.5"} {
		res := h.PostRunAgent(context.Background(), servertest.RunAgentInput("ag-accept", "r"+string(rune('a'+i)), "hi", nil), accept)
		body := bufio.NewReader(res.Body)
		var sawTerminal bool
		for {
			line, err := body.ReadString('\n')
			if strings.Contains(line, `"type":"RUN_FINISHED"`) {
				sawTerminal = true
			}
			if err != nil {
				break
			}
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") || !sawTerminal {
			t.Fatalf("Accept %q: %d %q terminal=%v", accept, res.StatusCode, res.Header.Get("Content-Type"), sawTerminal)
		}
	}
	for _, accept := range []string{"application/json", "text/html", "text/event-stream;q=0"} {
		res := h.PostRunAgent(context.Background(), servertest.RunAgentInput("ag-accept", "rx", "hi", nil), accept)
		if res.StatusCode != http.StatusNotAcceptable {
			t.Fatalf("Accept %q: status %d", accept, res.StatusCode)
		}
		if code, _ := readJSONError(t, res); code != "not_acceptable" {
			t.Fatalf("Accept %q: code %q", accept, code)
		}
	}
}

func TestRunAgentRejectsBadRequests(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{AgentDelay: 5 * time.Millisecond, Config: server.Config{MaxBody: 2048, ChatMaxBody: 2048}})
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"not JSON", `{"threadId":`, http.StatusBadRequest, "body"},
		// A missing threadId or runId is made by the server (seed 003):
		// TestRunAgentSeedInput and TestRunAgentOneIDMissing.
		{"no messages", `{"threadId":"t","runId":"r"}`, http.StatusBadRequest, "messages"},
		{"no user message", `{"threadId":"t","runId":"r","messages":[{"id":"1","role":"assistant","content":"hi"}]}`, http.StatusBadRequest, "messages"},
		{"bad role", `{"threadId":"t","runId":"r","messages":[{"id":"1","role":"robot","content":"hi"}]}`, http.StatusBadRequest, "messages[0].role"},
		{"bad thread id", `{"threadId":"-x y","runId":"r","messages":[{"id":"1","role":"user","content":"hi"}]}`, http.StatusBadRequest, "threadId"},
		{"too large", servertest.RunAgentInput("t", "r", strings.Repeat("x", 4096), nil), http.StatusRequestEntityTooLarge, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := h.PostRunAgent(context.Background(), c.body, "text/event-stream")
			if res.StatusCode != c.status {
				res.Body.Close()
				t.Fatalf("status %d, want %d", res.StatusCode, c.status)
			}
			if _, field := readJSONError(t, res); field != c.field {
				t.Fatalf("field %q, want %q", field, c.field)
			}
		})
	}

	t.Run("snake_case input", func(t *testing.T) {
		body := `{"thread_id":"ag-snake","run_id":"r-s","forwarded_props":{},"messages":[{"role":"user","content":"hello snake"}]}`
		res := h.PostRunAgent(context.Background(), body, "text/event-stream")
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		raw, _ := io.ReadAll(res.Body)
		evs, err := parseAGUIStream(raw)
		if err == nil {
			err = verifyAGUI(evs)
		}
		if err != nil || evs[0].str("threadId") != "ag-snake" || evs[0].str("runId") != "r-s" {
			t.Fatalf("snake_case run: %v\n%s", err, raw)
		}
	})

	t.Run("active run", func(t *testing.T) {
		h.Chat("ag-busy", "long 100000")
		res := h.PostRunAgent(context.Background(), servertest.RunAgentInput("ag-busy", "r-busy", "hi", nil), "text/event-stream")
		if res.StatusCode != http.StatusConflict {
			res.Body.Close()
			t.Fatalf("status %d, want 409", res.StatusCode)
		}
		if code, _ := readJSONError(t, res); code != "run_active" {
			t.Fatalf("code %q", code)
		}
		h.Do(http.MethodPost, "/instance-ai/chat/ag-busy/cancel", "")
	})
}

func TestRunAgentOtherUsersThread(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-alice=alice,tok-bob=bob"})
	alice, bob := h.As("tok-alice"), h.As("tok-bob")
	alice.runAgent("ag-private", "r1", "hello", nil)
	res := bob.PostRunAgent(context.Background(), servertest.RunAgentInput("ag-private", "r2", "hello", nil), "text/event-stream")
	if res.StatusCode != http.StatusNotFound {
		res.Body.Close()
		t.Fatalf("bob on alice's thread: %d", res.StatusCode)
	}
	readJSONError(t, res)
	res = h.PostRunAgent(context.Background(), servertest.RunAgentInput("ag-private", "r3", "hello", nil), "text/event-stream")
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", res.StatusCode)
	}
}

// openLongRun starts a slow run through /run-agent and returns once its
// first text arrived, with the cancel that drops the connection.
func openLongRun(t *testing.T, h *harness, thread string, extra map[string]any) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := h.PostRunAgent(ctx, servertest.RunAgentInput(thread, "r-"+thread, "long 300", extra), "text/event-stream")
	if res.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("status %d", res.StatusCode)
	}
	t.Cleanup(func() { res.Body.Close() })
	rd := bufio.NewReader(res.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			cancel()
			t.Fatalf("stream ended before any text: %v", err)
		}
		if strings.Contains(line, `"type":"TEXT_MESSAGE_CONTENT"`) {
			return cancel
		}
	}
}

func TestRunAgentDisconnect(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 5 * time.Millisecond})

		t.Run("cancels the run", func(t *testing.T) {
			drop := openLongRun(t, h, "ag-drop", nil)
			drop()
			fin := waitRunFinish(t, store, "ag-drop", 10*time.Second)
			if fin.Status != instanceai.RunCancelled || fin.Reason != instanceai.ReasonUserCancelled {
				t.Fatalf("run-finish %+v, want cancelled", fin)
			}
		})

		t.Run("onDisconnect continue keeps it running", func(t *testing.T) {
			drop := openLongRun(t, h, "ag-keep", map[string]any{"forwardedProps": map[string]any{"onDisconnect": "continue"}})
			drop()
			time.Sleep(50 * time.Millisecond)
			if st := h.ThreadStatus("ag-keep"); !st.HasActiveRun {
				t.Fatalf("run stopped after the disconnect: %+v", st)
			}
			fin := waitRunFinish(t, store, "ag-keep", 20*time.Second)
			if fin.Status != instanceai.RunCompleted {
				t.Fatalf("run-finish %+v, want completed", fin)
			}
		})
	})
}

func TestHealthAndStatus(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok=alice"})
	// No token: both are outside authentication.
	code, health := h.Do(http.MethodGet, "/health", "")
	if code != http.StatusOK || health["status"] != "healthy" || health["active_runs"] != float64(0) {
		t.Fatalf("health: %d %v", code, health)
	}
	if _, err := time.Parse(time.RFC3339Nano, health["timestamp"].(string)); err != nil {
		t.Fatalf("health timestamp: %v", err)
	}
	if _, ok := health["agents"].([]any); !ok {
		t.Fatalf("health agents: %v", health["agents"])
	}
	code, status := h.Do(http.MethodGet, "/status", "")
	if code != http.StatusOK || status["ag_ui_version"] != "1.0" {
		t.Fatalf("status: %d %v", code, status)
	}
	srv, _ := status["server"].(map[string]any)
	if srv["running"] != true || srv["uptime"] == "" {
		t.Fatalf("status.server: %v", srv)
	}
	cfg, _ := status["config"].(map[string]any)
	if origins, ok := cfg["allowed_origins"].([]any); !ok || len(origins) != 0 {
		t.Fatalf("status.config: %v", cfg)
	}
	if _, ok := status["agents"].(map[string]any); !ok {
		t.Fatalf("status.agents: %v", status["agents"])
	}
	raw, _ := json.Marshal(status)
	if strings.Contains(string(raw), "null") {
		t.Fatalf("status has nulls: %s", raw)
	}
}

// TestRunAgentShutdownIsNotACancel: a server shutdown ends the AG-UI stream
// but records the run as ended by the shutdown, not by the user.
func TestRunAgentShutdownIsNotACancel(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
	res := h.PostRunAgent(context.Background(), servertest.RunAgentInput("th", "r1", "long 100000", nil), "text/event-stream")
	defer res.Body.Close()
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "TEXT_MESSAGE_CONTENT") {
		n, err := res.Body.Read(buf)
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
		seen.Write(buf[:n])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.App.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if fin := waitRunFinish(t, store, "th", wait); fin.Status != instanceai.RunCancelled || fin.Reason != instanceai.ReasonServiceShutdown {
		t.Fatalf("run-finish = %+v, want cancelled by service_shutdown", fin)
	}
}

// TestRunAgentEndsWithRunErrorWhenTheAgentPanics: a panicking agent still
// gives the client a valid stream that ends in RUN_ERROR, and the native
// log ends the run with an error.
func TestRunAgentEndsWithRunErrorWhenTheAgentPanics(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Agent: instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_ = run.Emit(instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: run.ID + ":seg:1",
			Payload: &instanceai.Text{Text: "starting"}})
		panic("agent bug")
	})})
	events := h.runAgent("th", "r1", "anything", nil)
	last := events[len(events)-1]
	if last.typ != "RUN_ERROR" || last.str("message") == "" {
		t.Fatalf("last event = %+v", last)
	}
	if fin := waitRunFinish(t, store, "th", wait); fin.Status != instanceai.RunError {
		t.Fatalf("native run-finish = %+v", fin)
	}
}
