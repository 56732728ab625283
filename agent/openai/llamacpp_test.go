package openai_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/instanceai"
)

// The tests below replay recordings of a real llama.cpp llama-server (see
// agent/openai/testdata/README.md): its streams carry a role chunk with
// "content":null, a usage chunk with a non-standard "timings" object, tool
// call ids without a "call_" prefix, and its error bodies carry an integer
// "code".

// llamaText is the text of llamacpp_text_usage.sse: 16 tokens of a
// random-weight model.
var llamaText = "alph Anaнове Bool" + strings.Repeat(" Pakistan", 12)

// TestLlamaCppLength: the recorded stream stops at max_tokens, so the run
// fails with max_tokens, keeps the text and still reports the usage.
func TestLlamaCppLength(t *testing.T) {
	f := newFake(t, replay(fixture(t, "llamacpp_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "tiny"})
	evs := h.play(t, instanceai.StartRequest{Message: "Say hello."})
	e := errorOf(t, evs)
	if e.Code != openai.CodeMaxTokens || !strings.Contains(e.TechnicalDetails, "after 16 tokens") {
		t.Errorf("error %+v", e)
	}
	if got := text(evs, instanceai.TypeTextBlock); got != llamaText {
		t.Errorf("kept text %q, want %q", got, llamaText)
	}
	want := []instanceai.TokenUsage{{Provider: "openai-compatible", Model: "tiny", InputTokens: 52, OutputTokens: 16, TotalTokens: 68}}
	if got := finishOf(t, evs).Usage; !slices.Equal(got, want) {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
}

// TestLlamaCppStop: finish_reason stop (a stop string) completes the run.
func TestLlamaCppStop(t *testing.T) {
	f := newFake(t, replay(fixture(t, "llamacpp_text_stop.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "tiny"})
	evs := h.play(t, instanceai.StartRequest{Message: "Say hello."})
	fin := finishOf(t, evs)
	if fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	if got := text(evs, instanceai.TypeTextBlock); got != "alph Anaнове Bool" {
		t.Errorf("text = %q", got)
	}
	want := []instanceai.TokenUsage{{Provider: "openai-compatible", Model: "tiny", InputTokens: 52, OutputTokens: 5, TotalTokens: 57}}
	if !slices.Equal(fin.Usage, want) {
		t.Errorf("usage = %+v, want %+v", fin.Usage, want)
	}
}

// TestLlamaCppToolCall: the fragmented call reaches the registered tool with
// the recorded arguments, and the follow-up request sends the call back
// under llama-server's own id.
func TestLlamaCppToolCall(t *testing.T) {
	const id = "0VelHYnJjwkUexTakHk8e9nQzM9C4mBn"
	var n atomic.Int32
	f := newFake(t, replay(fixture(t, "llamacpp_tool_call.sse")), replay(fixture(t, "llamacpp_text_stop.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "tiny", Tools: registry(t, echoTool("get_weather", false, &n))})
	evs := h.play(t, instanceai.StartRequest{Message: "What is the weather in Paris?"})
	fin := finishOf(t, evs)
	if fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	starts := ofType[*instanceai.ToolInputStart](evs, instanceai.TypeToolInputStart)
	calls := ofType[*instanceai.ToolCall](evs, instanceai.TypeToolCall)
	if len(starts) != 1 || starts[0].ToolCallID != id || starts[0].ToolName != "get_weather" {
		t.Errorf("tool-input-start = %+v", starts)
	}
	if len(calls) != 1 || calls[0].ToolCallID != id || calls[0].ToolName != "get_weather" || string(calls[0].Args) != `{"city":"{"}` {
		t.Errorf("tool-call = %+v", calls)
	}
	results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
	if n.Load() != 1 || len(results) != 1 || results[0].ToolCallID != id || string(results[0].Result) != `{"echo":{"city":"{"}}` {
		t.Errorf("executions %d, results %+v", n.Load(), results)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	want := []string{
		"user:What is the weather in Paris?",
		"assistant: [" + id + ` get_weather {"city":"{"}]`,
		"tool(" + id + `):{"echo":{"city":"{"}}`,
	}
	if got := reqs[1].summary(); !slices.Equal(got, want) {
		t.Errorf("second request messages:\n got %q\nwant %q", got, want)
	}
	wantUsage := []instanceai.TokenUsage{{Provider: "openai-compatible", Model: "tiny", InputTokens: 136 + 52, OutputTokens: 33 + 5, TotalTokens: 169 + 57}}
	if !slices.Equal(fin.Usage, wantUsage) {
		t.Errorf("usage = %+v, want %+v", fin.Usage, wantUsage)
	}
}

// TestLlamaCppErrorBodies: llama-server's error bodies ({"error":{"code":
// <int>,...}}) end the run with the server's message and a code that says
// what went wrong.
func TestLlamaCppErrorBodies(t *testing.T) {
	tests := []struct {
		fixture  string
		status   int
		code     string
		requests int
		content  []string
	}{
		{"llamacpp_error_400.json", 400, openai.CodeBadRequest, 1,
			[]string{"Expected 'messages' to be an array", "HTTP 400"}},
		// A 5xx is retried (MaxRetries 1 here) before it is reported.
		{"llamacpp_error_500.json", 500, openai.CodeUpstreamError, 2,
			[]string{"parse error at line 1, column 61", "HTTP 500"}},
		// llama-server's wording is not OpenAI's ("context length"); its
		// type exceed_context_size_error says it.
		{"llamacpp_error_context.json", 400, openai.CodeContextLength, 1,
			[]string{"exceeds the available context size (2048 tokens)", "context window"}},
		// The router answers an unknown model with 400, not 404; the hint
		// lists the models of the recorded /v1/models answer.
		{"llamacpp_error_model_not_found.json", 400, openai.CodeModelNotFound, 1,
			[]string{"model 'no-such-model' not found", "the server lists: tiny."}},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.fixture, ".json"), func(t *testing.T) {
			body := fixture(t, tc.fixture)
			if !json.Valid([]byte(body)) {
				t.Fatalf("fixture is not JSON: %s", body)
			}
			f := newFake(t, status(tc.status, body))
			models := fixture(t, "llamacpp_models.json")
			f.models = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, models)
			}
			h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "no-such-model", MaxRetries: 1})
			evs := h.play(t, instanceai.StartRequest{Message: "go"})
			e := errorOf(t, evs)
			if e.Code != tc.code || e.StatusCode != tc.status {
				t.Errorf("error code %q status %d, want %q %d: %+v", e.Code, e.StatusCode, tc.code, tc.status, e)
			}
			for _, c := range tc.content {
				if !strings.Contains(e.Content, c) {
					t.Errorf("message %q does not mention %q", e.Content, c)
				}
			}
			if !strings.Contains(e.TechnicalDetails, strings.TrimSpace(body)) {
				t.Errorf("technical details %q do not repeat the body", e.TechnicalDetails)
			}
			if got := len(f.requests()); got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
		})
	}
}
