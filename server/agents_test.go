package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/threadline/threadline/agent/n8n"
	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/metrics"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// The fakes below replay the upstream wire formats of PROTOCOLS §3: an
// OpenAI-compatible Chat Completions stream (the chunk shapes of
// agent/openai/testdata, whose headers name their sources) and an n8n
// streaming webhook (agent/n8n/testdata, documented in its
// README). The agents' own packages test every variant and failure; these
// tests prove the agents work through the native and AG-UI endpoints.

// fakeLLM answers each chat completion request with the next scripted
// stream and records the requests.
type fakeLLM struct {
	mu       sync.Mutex
	streams  [][]string // SSE data payloads per request
	requests []llmRequest
}

// llmRequest is the part of a chat completion request the tests read.
type llmRequest struct {
	Messages []map[string]any `json:"messages"`
	Tools    []map[string]any `json:"tools"`
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"test-model","object":"model","owned_by":"test"}]}`)
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	var req llmRequest
	err := json.NewDecoder(r.Body).Decode(&req)
	f.requests = append(f.requests, req)
	var stream []string
	if len(f.streams) > 0 {
		stream, f.streams = f.streams[0], f.streams[1:]
	}
	f.mu.Unlock()
	if err != nil || stream == nil {
		http.Error(w, `{"error":{"message":"unexpected request"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, data := range append(stream, "[DONE]") {
		fmt.Fprintf(w, "data: %s\n\n", data)
		w.(http.Flusher).Flush()
	}
}

func (f *fakeLLM) script(streams ...[]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams = append(f.streams, streams...)
}

// messages returns the messages of request i as "role:content" lines, tool
// calls as "assistant→name".
func (f *fakeLLM) messages(i int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.requests[i].Messages {
		line := fmt.Sprintf("%v:%v", m["role"], m["content"])
		if calls, ok := m["tool_calls"].([]any); ok {
			for _, c := range calls {
				line += fmt.Sprintf("→%v", c.(map[string]any)["function"].(map[string]any)["name"])
			}
		}
		out = append(out, line)
	}
	return out
}

func chunk(delta string, finish string) string {
	fin := "null"
	if finish != "" {
		fin = `"` + finish + `"`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"test-model","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, delta, fin)
}

func textChunk(s string) string {
	b, _ := json.Marshal(map[string]string{"content": s})
	return chunk(string(b), "")
}

func usageChunk(in, out int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"test-model","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, out, in+out)
}

// toolStep is a model response that calls lookup, its arguments split over
// two fragments as OpenAI and vLLM send them.
func toolStep() []string {
	return []string{
		textChunk("Let me check. "),
		chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"answer\"}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
		usageChunk(10, 5),
	}
}

func answerStep(text string, in, out int) []string {
	return []string{textChunk(text[:len(text)/2]), textChunk(text[len(text)/2:]), chunk(`{}`, "stop"), usageChunk(in, out)}
}

func startOpenAI(t *testing.T, store instanceai.Store) (*harness, *fakeLLM) {
	t.Helper()
	llm := &fakeLLM{}
	agent := lookupAgent(t, llm, store)
	return start(t, store, servertest.Options{Agent: agent, Config: server.Config{LLMHealth: agent.HealthHandler()}}), llm
}

// lookupAgent is the OpenAI-compatible agent on the model server llm
// (served for the test), with one tool, lookup, that answers 42.
func lookupAgent(t *testing.T, llm http.Handler, store instanceai.Store) *openai.Agent {
	t.Helper()
	upstream := httptest.NewServer(llm)
	t.Cleanup(upstream.Close)
	registry, err := tools.NewRegistry(tools.Tool{
		Name: "lookup", Description: "Looks a question up.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`),
		Execute: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"answer":42}`), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := openai.New(openai.Config{BaseURL: upstream.URL + "/v1", Model: "test-model", Tools: registry, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return agent
}

func TestOpenAIAgentThroughBothProtocols(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h, llm := startOpenAI(t, store)

		// Native: a tool loop of two model calls, then a follow-up that
		// carries the first exchange as history.
		llm.script(toolStep(), answerStep("The answer is 42.", 20, 7))
		h.EnsureThread("oa")
		live := h.Connect("oa", "", false)
		runID := h.Chat("oa", "What is the answer?")
		frames := live.Until(wait, servertest.IsRunFinish(runID))
		var text strings.Builder
		var calls, results []string
		for _, f := range frames {
			switch p := f.Decoded.Payload.(type) {
			case *instanceai.Text:
				// Deltas, or the stored block when the stream caught up
				// from the log: the feed sends each text once.
				text.WriteString(p.Text)
			case *instanceai.ToolCall:
				calls = append(calls, p.ToolName+string(p.Args))
			case *instanceai.ToolResult:
				results = append(results, string(p.Result))
			}
		}
		fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
		if text.String() != "Let me check. The answer is 42." || fmt.Sprint(calls) != `[lookup{"q":"answer"}]` || fmt.Sprint(results) != `[{"answer":42}]` {
			t.Fatalf("native run: text %q calls %v results %v", text.String(), calls, results)
		}
		if fin.Status != instanceai.RunCompleted || len(fin.Usage) != 1 ||
			fin.Usage[0] != (instanceai.TokenUsage{Provider: "openai-compatible", Model: "test-model", InputTokens: 30, OutputTokens: 12, TotalTokens: 42}) {
			t.Fatalf("run-finish %+v", fin)
		}
		if got := strings.Join(llm.messages(1), " | "); got != `user:What is the answer? | assistant:Let me check. →lookup | tool:{"answer":42}` {
			t.Fatalf("second model call sent %s", got)
		}

		llm.script(answerStep("Still 42.", 40, 3))
		runID = h.Chat("oa", "And now?")
		live.Until(wait, servertest.IsRunFinish(runID))
		if got := strings.Join(llm.messages(2), " | "); got != `user:What is the answer? | assistant:Let me check. →lookup | tool:{"answer":42} | assistant:The answer is 42. | user:And now?` {
			t.Fatalf("follow-up sent %s", got)
		}

		// AG-UI: the same loop as AG-UI events, usage on RUN_FINISHED.
		llm.script(toolStep(), answerStep("The answer is 42.", 20, 7))
		evs := h.runAgent("ag-oa", "r1", "What is the answer?", nil)
		if err := verifyAGUI(evs); err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		usage, _ := last.body["usage"].([]any)
		if last.typ != "RUN_FINISHED" || len(usage) != 1 || usage[0].(map[string]any)["totalTokens"] != float64(42) {
			t.Fatalf("AG-UI run ended %s", last.raw)
		}
		if countType(evs, "TOOL_CALL_START") != 1 || countType(evs, "TOOL_CALL_RESULT") != 1 {
			t.Fatalf("AG-UI events %v", types(evs))
		}

		// A client that sends one message at a time gets the thread's
		// stored conversation, its own earlier messages included.
		llm.script(answerStep("Yes.", 50, 1))
		if evs := h.runAgent("ag-oa", "r1b", "Sure?", nil); evs[len(evs)-1].typ != "RUN_FINISHED" {
			t.Fatalf("follow-up ended %s", evs[len(evs)-1].raw)
		}
		if got := strings.Join(llm.messages(5), " | "); got != `user:What is the answer? | assistant:Let me check. →lookup | tool:{"answer":42} | assistant:The answer is 42. | user:Sure?` {
			t.Fatalf("AG-UI follow-up sent %s", got)
		}

		code, restored := h.Do(http.MethodGet, "/instance-ai/threads/ag-oa/messages", "")
		msgs, _ := restored["messages"].([]any)
		if code != http.StatusOK || len(msgs) != 4 || msgs[0].(map[string]any)["content"] != "What is the answer?" || msgs[2].(map[string]any)["content"] != "Sure?" {
			t.Fatalf("AG-UI runs' messages: %d %v", code, restored)
		}

		// AG-UI input.messages is the history the model gets.
		llm.script(answerStep("Noted.", 5, 1))
		body := inputJSON(map[string]any{"threadId": "ag-oa-2", "runId": "r2", "messages": []any{
			map[string]any{"id": "m1", "role": "user", "content": "My name is Ada."},
			map[string]any{"id": "m2", "role": "assistant", "content": "Hello Ada."},
			map[string]any{"id": "m3", "role": "user", "content": "Remember it."},
		}, "context": []any{map[string]any{"description": "Open workflow", "value": "wf-42"}}})
		if evs := h.runAgentBody(body); evs[len(evs)-1].typ != "RUN_FINISHED" {
			t.Fatalf("history run ended %s", evs[len(evs)-1].raw)
		}
		// AG-UI input.context reaches the model as a system message.
		if got := strings.Join(llm.messages(6), " | "); got != "system:Context shared by the user's application:\n- Open workflow: wf-42 | "+
			`user:My name is Ada. | assistant:Hello Ada. | user:Remember it.` {
			t.Fatalf("AG-UI history sent %s", got)
		}

		code, health := h.Do(http.MethodGet, "/llm/health", "")
		if code != http.StatusOK || health["status"] != "available" || health["llm_model"] != "test-model" || health["is_local"] != true {
			t.Fatalf("/llm/health: %d %v", code, health)
		}
	})
}

// ndjsonServer serves an n8n streaming-webhook body in small flushed writes.
func ndjsonServer(t *testing.T, fixture string, piece int) *httptest.Server {
	t.Helper()
	body, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		for i := 0; i < len(body); i += piece {
			w.Write(body[i:min(i+piece, len(body))])
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestN8NAgentThroughBothProtocols(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		m := metrics.New()
		hook := ndjsonServer(t, "../agent/n8n/testdata/split_object.ndjson", 5)
		agent, err := n8n.New(n8n.Config{Webhooks: []n8n.Webhook{{Name: "reviewer", URL: hook.URL + "/webhook/review"}}, Observer: m})
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, store, servertest.Options{Agent: agent, Config: server.Config{Metrics: m}})

		h.EnsureThread("hook")
		live := h.Connect("hook", "", false)
		runID := h.Chat("hook", "Review my change")
		frames := live.Until(wait, servertest.IsRunFinish(runID))
		var text strings.Builder
		var calls []string
		for _, f := range frames {
			switch p := f.Decoded.Payload.(type) {
			case *instanceai.Text:
				text.WriteString(p.Text)
			case *instanceai.ToolCall:
				calls = append(calls, p.ToolName)
			}
		}
		if got := text.String(); got != "Let me look.  Here is the diff." || fmt.Sprint(calls) != "[show_diff]" {
			t.Fatalf("native run: text %q, calls %v", got, calls)
		}
		if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCompleted {
			t.Fatalf("run-finish %+v", fin)
		}

		evs := h.runAgent("ag-hook", "r1", "Review my change", map[string]any{"forwardedProps": map[string]any{"agent": "reviewer"}})
		if err := verifyAGUI(evs); err != nil {
			t.Fatal(err)
		}
		var aguiText strings.Builder
		for _, e := range evs {
			if e.typ == "TEXT_MESSAGE_CONTENT" {
				aguiText.WriteString(e.str("delta"))
			}
		}
		if aguiText.String() != "Let me look.  Here is the diff." || countType(evs, "TOOL_CALL_START") != 1 || evs[len(evs)-1].typ != "RUN_FINISHED" {
			t.Fatalf("AG-UI run: text %q, events %v", aguiText.String(), types(evs))
		}

		got := h.scrape()
		if got[`threadline_capture_objects_total{kind="tool_call"}`] != 2 || got[`threadline_capture_objects_total{kind="regular_message"}`] != 2 {
			t.Fatalf("capture metrics: tool_call %v, regular_message %v", got[`threadline_capture_objects_total{kind="tool_call"}`], got[`threadline_capture_objects_total{kind="regular_message"}`])
		}
	})
}

// TestRealAgentsInterop runs the real @ag-ui/client against both agents.
func TestRealAgentsInterop(t *testing.T) {
	node := interopNode(t)
	h, llm := startOpenAI(t, servertest.OpenStore(t, "memory"))
	llm.script(toolStep(), answerStep("The answer is 42.", 20, 7))
	rep := runInterop(t, node, h.URL+"/run-agent", `[{"name":"openai","message":"What is the answer?"}]`, 1)
	rep.Results[0].succeeded(t, "openai agent")
	if n := countOf(rep.Results[0].Events, "TOOL_CALL_RESULT"); n != 1 {
		t.Fatalf("openai agent: events %v", rep.Results[0].Events)
	}

	hook := ndjsonServer(t, "../agent/n8n/testdata/split_object.ndjson", 7)
	agent, err := n8n.New(n8n.Config{Webhooks: []n8n.Webhook{{Name: "reviewer", URL: hook.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	h = start(t, servertest.OpenStore(t, "memory"), servertest.Options{Agent: agent})
	rep = runInterop(t, node, h.URL+"/run-agent", `[{"name":"n8n","message":"Review my change"}]`, 1)
	rep.Results[0].succeeded(t, "n8n agent")
	if n := countOf(rep.Results[0].Events, "TOOL_CALL_START"); n != 1 {
		t.Fatalf("n8n agent: events %v", rep.Results[0].Events)
	}
}

// A custom control frame an n8n workflow writes on its own line reaches
// AG-UI clients as CUSTOM under its own type, and native clients, who
// know only n8n's event types, never see it.
func TestN8NCustomFrames(t *testing.T) {
	hook := ndjsonServer(t, "../agent/n8n/testdata/control_frames.ndjson", 5)
	agent, err := n8n.New(n8n.Config{Webhooks: []n8n.Webhook{{Name: "builder", URL: hook.URL + "/webhook/build"}}})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Agent: agent})
	h.EnsureThread("hook")
	live := h.Connect("hook", "", false)
	runID := h.Chat("hook", "Build it")
	for _, f := range live.Until(wait, servertest.IsRunFinish(runID)) {
		if f.Decoded.Type == instanceai.TypeCustom || strings.Contains(f.Data, `"progress"`) {
			t.Fatalf("a native stream carried the custom frame: %s", f.Data)
		}
	}
	evs := h.runAgent("ag-hook", "r1", "Build it", nil)
	if err := verifyAGUI(evs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.typ == "CUSTOM" && e.str("name") == "progress" {
			found = strings.Contains(e.raw, `"percent":50`)
		}
	}
	if !found {
		t.Fatalf("no CUSTOM progress frame among %v", types(evs))
	}
}
