package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

func TestRunAgentFrontendTool(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		tools := []any{map[string]any{"name": "pickColor", "description": "Asks the user for a color",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}

		t.Run("round trip", func(t *testing.T) {
			thread := "ag-frontend"
			first := h.runAgent(thread, "run-call", "frontend-tool", map[string]any{"tools": tools})
			var start aguiEvent
			for _, e := range first {
				if e.typ == "TOOL_CALL_START" {
					start = e
				}
			}
			callID := start.str("toolCallId")
			if callID == "" || start.str("toolCallName") != "pickColor" {
				t.Fatalf("no call to the frontend tool: %v", types(first))
			}
			if countType(first, "TOOL_CALL_ARGS") != 1 || countType(first, "TOOL_CALL_END") != 1 || countType(first, "TOOL_CALL_RESULT") != 0 {
				t.Fatalf("frontend call events %v", types(first))
			}
			outcome := outcomeOf(t, first)
			pending, _ := outcome["pendingToolCallIds"].([]any)
			if outcome["type"] != "success" || len(pending) != 1 || pending[0] != callID {
				t.Fatalf("outcome %v, want success pending [%s]", outcome, callID)
			}
			callRun := nativeRuns(t, store, thread)[0]

			messages := []any{
				map[string]any{"id": "u1", "role": "user", "content": "frontend-tool"},
				map[string]any{"id": "a1", "role": "assistant", "toolCalls": []any{map[string]any{"id": callID, "type": "function",
					"function": map[string]any{"name": "pickColor", "arguments": "{}"}}}},
				map[string]any{"id": "t1", "role": "tool", "toolCallId": callID, "content": "teal"},
			}
			second := h.runAgentBody(inputJSON(map[string]any{"threadId": thread, "runId": "run-continue", "messages": messages, "tools": tools}))
			if second[0].str("runId") != "run-continue" {
				t.Fatalf("first event %s", second[0].raw)
			}
			if got := textOf(second); got != "The browser answered: teal" {
				t.Fatalf("continuation text %q", got)
			}
			if o := outcomeOf(t, second); o["type"] != "success" || o["pendingToolCallIds"] != nil {
				t.Fatalf("continuation outcome %v", o)
			}
			if countType(second, "TOOL_CALL_RESULT") != 0 {
				t.Fatalf("the client's own result was streamed back: %v", types(second))
			}

			// The log keeps the result with its call, in the calling run,
			// before the continuation's run-start.
			runs := nativeRuns(t, store, thread)
			if len(runs) != 2 || runs[0] != callRun {
				t.Fatalf("native runs %v", runs)
			}
			sawResult := false
			for _, r := range servertest.StoredEvents(t, store, thread) {
				if p, ok := r.Event.Payload.(*instanceai.ToolResult); ok && p.ToolCallID == callID {
					sawResult = true
					if r.Event.RunID != callRun || string(p.Result) != `"teal"` {
						t.Fatalf("stored result %+v %s", r.Event, p.Result)
					}
				}
				if r.Event.Type == instanceai.TypeRunStart && r.Event.RunID == runs[1] && !sawResult {
					t.Fatal("the continuation started before the result was stored")
				}
			}
			if !sawResult {
				t.Fatal("no tool-result stored for the frontend call")
			}
			code, body := h.Do(http.MethodGet, "/instance-ai/threads/"+thread+"/messages", "")
			if code != http.StatusOK || !strings.Contains(fmt.Sprint(body), "teal") {
				t.Fatalf("messages view %d does not carry the result: %v", code, body)
			}

			// The call is answered: sending the same result again is refused.
			status, _, field := h.runAgentRejected(inputJSON(map[string]any{"threadId": thread, "runId": "run-again", "messages": messages}))
			if status != http.StatusBadRequest || field != "messages[2].toolCallId" {
				t.Fatalf("second answer: %d %q", status, field)
			}
		})

		t.Run("no tools offered", func(t *testing.T) {
			evs := h.runAgent("ag-frontend-none", "run-none", "frontend-tool", nil)
			if countType(evs, "TOOL_CALL_START") != 0 || !strings.Contains(textOf(evs), "No frontend tool was offered") {
				t.Fatalf("types %v, text %q", types(evs), textOf(evs))
			}
			if o := outcomeOf(t, evs); o["type"] != "success" || o["pendingToolCallIds"] != nil {
				t.Fatalf("outcome %v", o)
			}
		})
	})
}
