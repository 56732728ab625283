package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/instanceai"
)

// echoTool answers with its arguments under "echo" and counts its calls.
func echoTool(name string, approval bool, calls *atomic.Int32) tools.Tool {
	return tools.Tool{Name: name, Description: "Echoes " + name + ".", NeedsApproval: approval,
		Execute: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			calls.Add(1)
			return json.Marshal(map[string]json.RawMessage{"echo": args})
		}}
}

func registry(t *testing.T, ts ...tools.Tool) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewChecksConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  openai.Config
		want string
	}{
		{openai.Config{Model: "m"}, "BaseURL"},
		{openai.Config{BaseURL: "localhost:1234/v1", Model: "m"}, "BaseURL"},
		{openai.Config{BaseURL: "ftp://x/v1", Model: "m"}, "BaseURL"},
		{openai.Config{BaseURL: "http://x/v1"}, "Model"},
		{openai.Config{BaseURL: "http://x/v1", Model: "m", MaxSteps: -1}, "MaxSteps"},
		{openai.Config{BaseURL: "http://x/v1", Model: "m", RequestOptions: json.RawMessage(`[1]`)}, "RequestOptions must be a JSON object"},
		{openai.Config{BaseURL: "http://x/v1", Model: "m", RequestOptions: json.RawMessage(`{"stream":false}`)}, `must not set "stream"`},
	} {
		if _, err := openai.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestTextAndUsage(t *testing.T) {
	f := newFake(t, replay(fixture(t, "openai_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url() + "/", Model: "gpt-4o", APIKey: "sk-test", SystemPrompt: "Be brief."})
	evs := h.play(t, instanceai.StartRequest{Message: "Hi"})
	if got := text(evs, instanceai.TypeTextBlock); got != "Hello! How can I help?" {
		t.Errorf("text = %q", got)
	}
	fin := finishOf(t, evs)
	if fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	want := []instanceai.TokenUsage{{Provider: "openai-compatible", Model: "gpt-4o", InputTokens: 19, OutputTokens: 10, TotalTokens: 29}}
	if !slices.Equal(fin.Usage, want) {
		t.Errorf("usage = %+v, want %+v", fin.Usage, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Model != "gpt-4o" || !r.Stream || r.StreamOptions == nil || string(*r.StreamOptions) != `{"include_usage":true}` || r.auth != "Bearer sk-test" {
		t.Errorf("request: model %q stream %v options %v auth %q", r.Model, r.Stream, r.StreamOptions, r.auth)
	}
	if got, want := r.summary(), []string{"system:Be brief.", "user:Hi"}; !slices.Equal(got, want) {
		t.Errorf("messages = %q, want %q", got, want)
	}
	if len(r.Tools) != 0 {
		t.Errorf("tools sent without any configured: %+v", r.Tools)
	}
}

// TestRequestOptions checks that configured options reach every request
// beside the fields the agent sets.
func TestRequestOptions(t *testing.T) {
	f := newFake(t, replay(fixture(t, "openai_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "gpt-4o",
		RequestOptions: json.RawMessage(`{"temperature":0.2,"max_tokens":64,"logit_bias":{"2":5}}`)})
	if fin := finishOf(t, h.play(t, instanceai.StartRequest{Message: "Hi"})); fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q", fin.Status)
	}
	r := f.requests()[0]
	if r.Model != "gpt-4o" || !r.Stream || len(r.summary()) != 1 ||
		string(r.raw["temperature"]) != "0.2" || string(r.raw["max_tokens"]) != "64" || string(r.raw["logit_bias"]) != `{"2":5}` {
		t.Fatalf("request %s", r.body)
	}
}

func TestReasoning(t *testing.T) {
	f := newFake(t, replay(fixture(t, "lmstudio_reasoning_content.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "qwen/qwen3-8b"})
	evs := h.play(t, instanceai.StartRequest{Message: "2+2?"})
	if got := text(evs, instanceai.TypeReasoningBlock); got != "The user asks for 2+2." {
		t.Errorf("reasoning = %q", got)
	}
	if got := text(evs, instanceai.TypeTextBlock); got != "2 + 2 = 4" {
		t.Errorf("text = %q", got)
	}
	if f := finishOf(t, evs); f.Status != instanceai.RunCompleted || len(f.Usage) != 0 {
		t.Errorf("run-finish %+v", f)
	}
}

// TestToolLoop: Ollama calls a server tool twice in one chunk; both run,
// their results go back, and the second answer ends the run. Usage is
// summed over both model calls.
func TestToolLoop(t *testing.T) {
	var calls atomic.Int32
	f := newFake(t, replay(fixture(t, "ollama_reasoning_tools.sse")), replay(fixture(t, "openai_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "qwen3:8b", Tools: registry(t, echoTool("get_weather", false, &calls))})
	evs := h.play(t, instanceai.StartRequest{Message: "Weather in Paris and Tokyo?"})
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	if calls.Load() != 2 {
		t.Errorf("tool ran %d times, want 2", calls.Load())
	}
	results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
	if len(results) != 2 || results[0].ToolCallID != "call_h2k1x9qa" || string(results[1].Result) != `{"echo":{"city":"Tokyo","unit":"celsius"}}` {
		t.Errorf("results = %+v", results)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Function.Name != "get_weather" || reqs[0].Tools[0].Type != "function" {
		t.Errorf("tools = %+v", reqs[0].Tools)
	}
	want := []string{
		"user:Weather in Paris and Tokyo?",
		`assistant: [call_h2k1x9qa get_weather {"city":"Paris"}] [call_8zt0m3lc get_weather {"city":"Tokyo","unit":"celsius"}]`,
		`tool(call_h2k1x9qa):{"echo":{"city":"Paris"}}`,
		`tool(call_8zt0m3lc):{"echo":{"city":"Tokyo","unit":"celsius"}}`,
	}
	if got := reqs[1].summary(); !slices.Equal(got, want) {
		t.Errorf("second request messages:\n got %q\nwant %q", got, want)
	}
	if got := reqs[1].Messages[1].Content; got != nil {
		t.Errorf("assistant tool_calls message content = %q, want null", *got)
	}
	fin := finishOf(t, evs)
	wantUsage := []instanceai.TokenUsage{{Provider: "openai-compatible", Model: "qwen3:8b", InputTokens: 88 + 19, OutputTokens: 41 + 10, TotalTokens: 129 + 29}}
	if !slices.Equal(fin.Usage, wantUsage) {
		t.Errorf("usage = %+v, want %+v", fin.Usage, wantUsage)
	}
}

// TestParallelFragmentedCalls: vLLM streams two calls in interleaved
// argument fragments.
func TestParallelFragmentedCalls(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, replay(fixture(t, "vllm_parallel_tools.sse")), answer("r2", "Found it.", 1, 1))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m",
		Tools: registry(t, echoTool("search_nodes", false, &n), echoTool("get_workflow", false, &n))})
	evs := h.play(t, instanceai.StartRequest{Message: "find"})
	calls := ofType[*instanceai.ToolCall](evs, instanceai.TypeToolCall)
	if len(calls) != 2 || string(calls[0].Args) != `{"query":"slack"}` || string(calls[1].Args) != `{"id":"wf_42"}` {
		t.Errorf("calls = %+v", calls)
	}
	if n.Load() != 2 || len(ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)) != 2 {
		t.Errorf("executions %d, log %s", n.Load(), shape(evs))
	}
	if got := text(evs, instanceai.TypeTextBlock); !strings.HasSuffix(got, "Found it.") {
		t.Errorf("text = %q", got)
	}
}

// TestInvalidArguments: broken JSON becomes a tool-error and the model is
// told; the call with empty arguments runs with {}.
func TestInvalidArguments(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, replay(fixture(t, "invalid_tool_args.sse")), answer("r2", "Sorry.", 1, 1))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m",
		Tools: registry(t, echoTool("create_workflow", false, &n), echoTool("list_workflows", false, &n))})
	evs := h.play(t, instanceai.StartRequest{Message: "make one"})
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || errs[0].ToolCallID != "call_Qz1" || !strings.Contains(errs[0].Error, "invalid arguments") {
		t.Fatalf("tool errors = %+v", errs)
	}
	if n.Load() != 1 {
		t.Errorf("executions = %d, want 1 (list_workflows)", n.Load())
	}
	msgs := f.requests()[1].summary()
	if !slices.ContainsFunc(msgs, func(s string) bool {
		return strings.HasPrefix(s, "tool(call_Qz1):Error: invalid arguments") && strings.Contains(s, "JSON object")
	}) {
		t.Errorf("model not told about the bad arguments: %q", msgs)
	}
	if !slices.Contains(msgs, `assistant: [call_Qz1 create_workflow {}] [call_Qz2 list_workflows {}]`) {
		t.Errorf("assistant message: %q", msgs)
	}
}

// A tool result whose tool-result event would be over the bound on one
// event is neither stored nor sent to the model: the call is a tool-error
// that says how large the result was and names the bound, the model reads
// it, and the run goes on. A result under the bound is a result.
func TestToolResultOverTheBound(t *testing.T) {
	const maxEvent = 1 << 20
	sized := func(name string, n int) tools.Tool {
		return tools.Tool{Name: name, Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.Marshal(strings.Repeat("x", n))
		}}
	}
	f := newFake(t, replay(sse(callChunk("r1", 0, "c1", "big", `{}`), callChunk("r1", 1, "c2", "small", `{}`), finishChunk("r1", "tool_calls"))),
		answer("r2", "I will ask for less.", 1, 1))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", MaxEventBytes: maxEvent,
		Tools: registry(t, sized("big", maxEvent), sized("small", maxEvent-2<<10))})
	evs := h.play(t, instanceai.StartRequest{Message: "x"})
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted {
		t.Fatalf("the run ended %q: %s", fin.Status, shape(evs))
	}
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || errs[0].ToolCallID != "c1" {
		t.Fatalf("tool errors = %+v, want one for c1", errs)
	}
	for _, want := range []string{fmt.Sprint(maxEvent+2, " bytes"), "over 1 MiB, the bound on one event (--max-event-bytes)"} {
		if !strings.Contains(errs[0].Error, want) {
			t.Errorf("the tool-error %q does not say %q", errs[0].Error, want)
		}
	}
	if results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult); len(results) != 1 || results[0].ToolCallID != "c2" {
		t.Fatalf("tool results: %d, want c2's alone", len(results))
	}
	msgs := f.requests()[1].summary()
	if !slices.ContainsFunc(msgs, func(s string) bool { return strings.HasPrefix(s, "tool(c1):Error: The tool's result was") }) {
		t.Errorf("the model was not told: %.200q", msgs)
	}
	for _, m := range msgs {
		if strings.HasPrefix(m, "tool(c1):") && len(m) > 4<<10 {
			t.Errorf("the model was handed the result (%d bytes)", len(m))
		}
	}
}

func TestUnknownTool(t *testing.T) {
	f := newFake(t, replay(sse(callChunk("r1", 0, "c1", "nope", `{}`), finishChunk("r1", "tool_calls"))), answer("r2", "ok", 1, 1))
	var n atomic.Int32
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: registry(t, echoTool("real", false, &n))})
	evs := h.play(t, instanceai.StartRequest{Message: "x"})
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || !strings.Contains(errs[0].Error, `no tool named "nope"`) || !strings.Contains(errs[0].Error, "real") {
		t.Fatalf("tool errors = %+v", errs)
	}
	if msgs := f.requests()[1].summary(); !strings.HasPrefix(msgs[len(msgs)-1], "tool(c1):Error: There is no tool") {
		t.Errorf("messages %q", msgs)
	}
}

// waitConfirmation polls for the thread's pending confirmation.
func waitConfirmation(t *testing.T, h *harness) instanceai.Confirmation {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cs, err := h.runs.Awaited(context.Background(), thread)
		if err != nil {
			t.Fatal(err)
		}
		// The question is stored before its request is queued; a
		// shutdown in between stops the run. A client learns of it from
		// the log, so the tests answer once it is there.
		if len(cs) > 0 && h.asked(t, cs[0]) {
			return cs[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no confirmation was requested")
	return instanceai.Confirmation{}
}

// asked reports whether the confirmation's request is in the log.
func (h *harness) asked(t *testing.T, c instanceai.Confirmation) bool {
	t.Helper()
	evs, err := h.store.RunEvents(context.Background(), thread, c.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if r, ok := e.Event.Payload.(*instanceai.ConfirmationRequest); ok && r.RequestID == c.RequestID {
			return true
		}
	}
	return false
}

func TestApproval(t *testing.T) {
	for _, approve := range []bool{true, false} {
		name := map[bool]string{true: "approve", false: "deny"}[approve]
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			f := newFake(t, replay(sse(callChunk("r1", 0, "c1", "delete_workflow", `{"id":"wf_1"}`), finishChunk("r1", "tool_calls"))), answer("r2", "Done.", 1, 1))
			destructive := echoTool("delete_workflow", true, &n)
			destructive.Severity = instanceai.SeverityDestructive
			h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: registry(t, destructive)})
			run := h.start(t, instanceai.StartRequest{Message: "delete it"})
			c := waitConfirmation(t, h)
			var req instanceai.ConfirmationRequest
			if err := json.Unmarshal(c.Request, &req); err != nil {
				t.Fatal(err)
			}
			if req.ToolCallID != "c1" || req.ToolName != "delete_workflow" || req.Severity != instanceai.SeverityDestructive || !strings.Contains(req.Message, "delete_workflow") || !strings.Contains(req.Message, "wf_1") {
				t.Errorf("confirmation request %+v", req)
			}
			if _, _, err := h.runs.Answer(context.Background(), user, c.RequestID, instanceai.Answer{Approved: approve, UserInput: "not now"}); err != nil {
				t.Fatal(err)
			}
			evs := h.wait(t, run)
			if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted {
				t.Fatalf("status %q: %s", fin.Status, shape(evs))
			}
			results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
			if len(results) != 1 {
				t.Fatalf("results %+v", results)
			}
			tool := f.requests()[1].summary()[2]
			if approve {
				if n.Load() != 1 || string(results[0].Result) != `{"echo":{"id":"wf_1"}}` {
					t.Errorf("approved: executions %d result %s", n.Load(), results[0].Result)
				}
			} else {
				if n.Load() != 0 || !strings.Contains(string(results[0].Result), `"denied":true`) {
					t.Errorf("denied: executions %d result %s", n.Load(), results[0].Result)
				}
				if !strings.Contains(tool, "did not approve") || !strings.Contains(tool, "not now") {
					t.Errorf("model not told of the denial: %q", tool)
				}
			}
		})
	}
}

// TestClientToolLeftOpen: a call to a client tool ends the run with the
// call open; the next run continues from the client's result.
func TestClientToolLeftOpen(t *testing.T) {
	var n atomic.Int32
	f := newFake(t,
		replay(sse(textChunk("r1", "Asking."), callChunk("r1", 0, "c1", "show_diff", `{"a":1}`), callChunk("r1", 1, "c2", "server_side", `{}`), finishChunk("r1", "tool_calls"))),
		answer("r2", "Thanks.", 1, 1))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: registry(t, echoTool("server_side", false, &n))})
	run := h.start(t, instanceai.StartRequest{Message: "diff please",
		Tools: []instanceai.ToolSpec{{Name: "show_diff", Description: "Shows a diff", Parameters: json.RawMessage(`{"type":"object"}`)}}})
	evs := h.wait(t, run)
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
	if len(results) != 1 || results[0].ToolCallID != "c2" || n.Load() != 1 {
		t.Errorf("want only the server tool settled, got %+v (executions %d)", results, n.Load())
	}
	if len(f.requests()) != 1 {
		t.Fatalf("the run called the model again with a client call open")
	}
	if names := f.requests()[0].Tools; len(names) != 2 || names[1].Function.Name != "show_diff" {
		t.Errorf("tools = %+v", names)
	}

	// The client answers: the next run sends the result as the tool message,
	// and the conversation ends with it. /run-agent names the earlier user
	// message as the run's message, which the model must not be sent a
	// second time after the tool answer: it would take it as a new request.
	next := h.play(t, instanceai.StartRequest{Message: "diff please", Tools: []instanceai.ToolSpec{{Name: "show_diff"}},
		ToolResult: &instanceai.ClientToolResult{RunID: run.ID, AgentID: run.AgentID, ToolCallID: "c1", ToolName: "show_diff", Content: "shown"}})
	if fin := finishOf(t, next); fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(next))
	}
	want := []string{"user:diff please", `assistant:Asking. [c1 show_diff {"a":1}] [c2 server_side {}]`, "tool(c1):shown", `tool(c2):{"echo":{}}`}
	if got := f.requests()[1].summary(); !slices.Equal(got, want) {
		t.Errorf("continuation messages:\n got %q\nwant %q", got, want)
	}
}

func TestStepLimit(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, replay(sse(callChunk("r", 0, "", "again", `{}`), finishChunk("r", "tool_calls"), usageChunk("r", 5, 1))))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", MaxSteps: 2, Tools: registry(t, echoTool("again", false, &n))})
	evs := h.play(t, instanceai.StartRequest{Message: "loop"})
	e := errorOf(t, evs)
	if e.Code != openai.CodeStepLimit || !strings.Contains(e.Content, "2 model calls") {
		t.Errorf("error %+v", e)
	}
	if len(f.requests()) != 2 || n.Load() != 2 {
		t.Errorf("requests %d executions %d, want 2 and 2", len(f.requests()), n.Load())
	}
	// Ids the server left out are made up, and unique across steps.
	calls := ofType[*instanceai.ToolCall](evs, instanceai.TypeToolCall)
	if len(calls) != 2 || calls[0].ToolCallID == calls[1].ToolCallID {
		t.Errorf("calls %+v", calls)
	}
	if u := finishOf(t, evs).Usage; len(u) != 1 || u[0].InputTokens != 10 {
		t.Errorf("usage %+v", u)
	}
}

// TestHistoryFromStore: the second run's request carries the first run.
func TestHistoryFromStore(t *testing.T) {
	f := newFake(t, answer("r1", "Hello Ana.", 1, 1), answer("r2", "You are Ana.", 1, 1))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m"})
	h.play(t, instanceai.StartRequest{Message: "I am Ana"})
	h.play(t, instanceai.StartRequest{Message: "Who am I?"})
	want := []string{"user:I am Ana", "assistant:Hello Ana.", "user:Who am I?"}
	if got := f.requests()[1].summary(); !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
}

// TestHistoryFromClient: run.History replaces the stored conversation.
func TestHistoryFromClient(t *testing.T) {
	f := newFake(t, answer("r1", "a", 1, 1), answer("r2", "b", 1, 1))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m"})
	h.play(t, instanceai.StartRequest{Message: "stored"})
	h.play(t, instanceai.StartRequest{Message: "now", History: []instanceai.HistoryMessage{
		{Role: instanceai.RoleUser, Content: "earlier"},
		{Role: instanceai.RoleAssistant, ToolCalls: []instanceai.HistoryToolCall{{ID: "x", Name: "t", Arguments: json.RawMessage(`{"k":1}`)}}},
		{Role: instanceai.RoleTool, ToolCallID: "x", Content: "42"},
	}})
	want := []string{"user:earlier", `assistant: [x t {"k":1}]`, "tool(x):42", "user:now"}
	if got := f.requests()[1].summary(); !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
}

// TestCancelAbortsUpstream: cancelling the run mid-stream closes the
// upstream request at once.
func TestCancelAbortsUpstream(t *testing.T) {
	aborted := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+textChunk("r", "Thinking")+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(aborted)
		case <-time.After(20 * time.Second):
		}
	})
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m"})
	run := h.start(t, instanceai.StartRequest{Message: "x"})
	waitFor(t, func() bool { return len(f.requests()) == 1 })
	time.Sleep(20 * time.Millisecond) // let the first chunk arrive; not required
	h.runs.Cancel(thread, instanceai.ReasonUserCancelled)
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not aborted")
	}
	evs := h.wait(t, run)
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCancelled {
		t.Errorf("status %q", fin.Status)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResumeAfterRestart: the server stops while a run waits for approval;
// a new process gets the answer and continues the run from the log.
func TestResumeAfterRestart(t *testing.T) {
	var n atomic.Int32
	f := newFake(t,
		replay(sse(textChunk("r1", "Deleting."), callChunk("r1", 0, "c1", "delete_workflow", `{"id":"wf_1"}`), finishChunk("r1", "tool_calls"))),
		answer("r2", "Deleted.", 1, 1))
	cfg := openai.Config{BaseURL: f.url(), Model: "m", Tools: registry(t, echoTool("delete_workflow", true, &n))}
	h := newHarness(t, cfg)
	run := h.start(t, instanceai.StartRequest{Message: "delete wf_1"})
	c := waitConfirmation(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.stop(t, ctx)

	// The next process.
	runs := h.next(t, cfg)
	if _, _, err := runs.Answer(ctx, user, c.RequestID, instanceai.Answer{Approved: true}); err != nil {
		t.Fatal(err)
	}
	evs := h.resumed(t, runs, run.ID)
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted || n.Load() != 1 {
		t.Fatalf("status %q executions %d: %s", fin.Status, n.Load(), shape(evs))
	}
	want := []string{"user:delete wf_1", `assistant:Deleting. [c1 delete_workflow {"id":"wf_1"}]`, `tool(c1):{"echo":{"id":"wf_1"}}`}
	if got := f.requests()[1].summary(); !slices.Equal(got, want) {
		t.Errorf("resumed request:\n got %q\nwant %q", got, want)
	}
}
