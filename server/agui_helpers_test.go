package server_test

import (
	"bytes"
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
	"github.com/threadline/threadline/server/servertest"
)

// aguiEvent is one received AG-UI event with the SSE id it came with.
type aguiEvent struct {
	id   int64
	typ  string
	raw  string
	body map[string]any
}

func (e aguiEvent) str(key string) string {
	s, _ := e.body[key].(string)
	return s
}

// runAgent posts a run and reads its whole AG-UI stream, checking the
// framing and the verifier's rules.
func (h *harness) runAgent(thread, runID, message string, extra map[string]any) []aguiEvent {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := h.PostRunAgent(ctx, servertest.RunAgentInput(thread, runID, message, extra), "text/event-stream")
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		h.t.Fatalf("run-agent %q: %d %s", message, res.StatusCode, raw)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		h.t.Fatalf("Content-Type %q", ct)
	}
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatalf("read stream: %v", err)
	}
	events, err := parseAGUIStream(raw)
	if err != nil {
		h.t.Fatalf("%v\nstream:\n%s", err, raw)
	}
	if err := verifyAGUI(events); err != nil {
		h.t.Fatalf("stream breaks the AG-UI rules: %v\nstream:\n%s", err, raw)
	}
	return events
}

// parseAGUIStream splits an SSE body into events. Every message must be
// LF-framed, carry exactly one `data: ` line with a JSON object, and may
// carry an `id: ` line; comments are allowed on their own.
func parseAGUIStream(raw []byte) ([]aguiEvent, error) {
	if bytes.Contains(raw, []byte("\r")) {
		return nil, fmt.Errorf("stream contains CR")
	}
	if len(raw) > 0 && !bytes.HasSuffix(raw, []byte("\n\n")) {
		return nil, fmt.Errorf("stream does not end with a blank line")
	}
	var out []aguiEvent
	for _, msg := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		var ev aguiEvent
		data := 0
		for _, line := range strings.Split(msg, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				n, err := strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
				if err != nil || n <= 0 {
					return nil, fmt.Errorf("bad id line %q", line)
				}
				ev.id = n
			case strings.HasPrefix(line, "data: "):
				data++
				ev.raw = strings.TrimPrefix(line, "data: ")
				if err := json.Unmarshal([]byte(ev.raw), &ev.body); err != nil {
					return nil, fmt.Errorf("data is not a JSON object: %q", line)
				}
				ev.typ = ev.str("type")
			default:
				return nil, fmt.Errorf("unexpected line %q", line)
			}
		}
		switch {
		case data > 1:
			return nil, fmt.Errorf("message with %d data lines: %q", data, msg)
		case data == 0 && ev.id != 0:
			return nil, fmt.Errorf("id without data: %q", msg)
		case data == 1:
			out = append(out, ev)
		}
	}
	return out, nil
}

// verifyAGUI checks the rules @ag-ui/client's verifier enforces on one run:
// RUN_STARTED (or RUN_ERROR) first, exactly one terminal event and it last, no START for
// an open id, no CONTENT/ARGS/END for an id not open, nothing open at
// RUN_FINISHED, no null values at the top level.
func verifyAGUI(events []aguiEvent) error {
	if len(events) == 0 {
		return fmt.Errorf("empty stream")
	}
	if events[0].typ != "RUN_STARTED" && events[0].typ != "RUN_ERROR" {
		return fmt.Errorf("first event is %s", events[0].typ)
	}
	open := map[string]map[string]bool{"text": {}, "tool": {}, "reasoning": {}, "reasoningMsg": {}, "step": {}, "sub": {}}
	kinds := map[string]struct{ kind, key, op string }{
		"TEXT_MESSAGE_START": {"text", "messageId", "start"}, "TEXT_MESSAGE_CONTENT": {"text", "messageId", "use"},
		"TEXT_MESSAGE_END": {"text", "messageId", "end"},
		"TOOL_CALL_START":  {"tool", "toolCallId", "start"}, "TOOL_CALL_ARGS": {"tool", "toolCallId", "use"},
		"TOOL_CALL_END":   {"tool", "toolCallId", "end"},
		"REASONING_START": {"reasoning", "messageId", "start"}, "REASONING_END": {"reasoning", "messageId", "end"},
		"REASONING_MESSAGE_START": {"reasoningMsg", "messageId", "start"}, "REASONING_MESSAGE_CONTENT": {"reasoningMsg", "messageId", "use"},
		"REASONING_MESSAGE_END": {"reasoningMsg", "messageId", "end"},
		"STEP_STARTED":          {"step", "stepName", "start"}, "STEP_FINISHED": {"step", "stepName", "end"},
		"SUBAGENT_STARTED": {"sub", "subagentRunId", "start"}, "SUBAGENT_FINISHED": {"sub", "subagentRunId", "end"},
		"SUBAGENT_ERROR": {"sub", "subagentRunId", "end"},
	}
	for i, ev := range events {
		for k, v := range ev.body {
			if v == nil {
				return fmt.Errorf("event %d (%s): %s is null", i, ev.typ, k)
			}
		}
		if i > 0 && ev.typ == "RUN_STARTED" {
			return fmt.Errorf("event %d: second RUN_STARTED", i)
		}
		terminal := ev.typ == "RUN_FINISHED" || ev.typ == "RUN_ERROR"
		if terminal != (i == len(events)-1) {
			return fmt.Errorf("event %d of %d is %s: exactly one terminal event, last", i, len(events), ev.typ)
		}
		if ev.typ == "RUN_FINISHED" {
			for kind, ids := range open {
				if len(ids) > 0 {
					return fmt.Errorf("RUN_FINISHED with %s still open: %v", kind, ids)
				}
			}
		}
		k, ok := kinds[ev.typ]
		if !ok {
			continue
		}
		id := ev.str(k.key)
		if id == "" {
			return fmt.Errorf("event %d (%s) has no %s", i, ev.typ, k.key)
		}
		switch k.op {
		case "start":
			if open[k.kind][id] {
				return fmt.Errorf("event %d: %s for %q already open", i, ev.typ, id)
			}
			open[k.kind][id] = true
		case "use", "end":
			if !open[k.kind][id] {
				return fmt.Errorf("event %d: %s for %q not open", i, ev.typ, id)
			}
			if k.op == "end" {
				delete(open[k.kind], id)
			}
		}
	}
	return nil
}

func types(events []aguiEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.typ
	}
	return out
}

func countType(events []aguiEvent, typ string) int {
	n := 0
	for _, e := range events {
		if e.typ == typ {
			n++
		}
	}
	return n
}

// waitRunFinish polls the log until the run's run-finish is stored.
func waitRunFinish(t *testing.T, store instanceai.Store, thread string, timeout time.Duration) *instanceai.RunFinish {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range servertest.StoredEvents(t, store, thread) {
			if p, ok := r.Event.Payload.(*instanceai.RunFinish); ok {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no run-finish stored on %s within %v", thread, timeout)
	return nil
}

// readJSONError decodes an error answer and returns its code and field.
func readJSONError(t *testing.T, res *http.Response) (code, field string) {
	t.Helper()
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error answer Content-Type %q", ct)
	}
	var body struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("error answer: %v", err)
	}
	if body.Error.Message == "" {
		t.Fatalf("error answer without message: %+v", body)
	}
	field, _ = body.Error.Details["field"].(string)
	return body.Error.Code, field
}
