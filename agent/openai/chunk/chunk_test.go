package chunk

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// fixture reads the data payloads of a recorded-shape SSE fixture. Lines
// starting with # describe where the shape comes from; every fixture must
// have them.
func fixture(tb testing.TB, name string) [][]byte {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("# source: ")) {
		tb.Fatalf("%s: must start with a '# source: ' comment", name)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			out = append(out, []byte(strings.TrimPrefix(data, " ")))
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// summary renders an event as "type@responseId payload".
func summary(tb testing.TB, ev instanceai.Event) string {
	tb.Helper()
	p, err := json.Marshal(ev.Payload)
	if err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("%s@%s %s", ev.Type, ev.ResponseID, p)
}

// check validates every event as the caller would publish it, and
// returns the summaries.
func check(tb testing.TB, evs []instanceai.Event) []string {
	tb.Helper()
	var out []string
	for _, ev := range evs {
		if ev.RunID != "" || ev.AgentID != "" {
			tb.Errorf("translator set RunID/AgentID: %+v", ev)
		}
		if ev.ResponseID == "" {
			tb.Errorf("event without responseId: %+v", ev)
		}
		ev.RunID, ev.AgentID = "run-1", "orchestrator-run-1"
		if err := ev.Validate(); err != nil {
			tb.Errorf("invalid event %s: %v", summary(tb, ev), err)
		}
		out = append(out, summary(tb, ev))
	}
	return out
}

// runChunks pushes payloads and returns the events of all of them.
func runChunks(tb testing.TB, tr *Translator, payloads ...[]byte) []instanceai.Event {
	tb.Helper()
	var all []instanceai.Event
	for _, p := range payloads {
		evs, err := tr.Push(p)
		if err != nil {
			tb.Fatalf("Push(%s): %v", p, err)
		}
		all = append(all, evs...)
	}
	return all
}

func TestOpenAITranslatorFixtures(t *testing.T) {
	const (
		oa   = "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"
		lms  = "chatcmpl-k3q9z1r0x7o2w5p8h4m6"
		oll  = "chatcmpl-529"
		vllm = "chatcmpl-7f1c2d8e9a3b4c5d"
		syn  = "openai-response-1"
		bad  = "chatcmpl-C1x2y3z4"
		lng  = "chatcmpl-D9len0001"
		// Recorded from llama-server: "chatcmpl-" + 32 random alphanumerics.
		lcText = "chatcmpl-gHVFeGOG7acxwnAzRId9ScJt2gMLDTgL"
		lcStop = "chatcmpl-09vvzXvvle5AMIUvfDN4dE5ys4QyQtQA"
		lcTool = "chatcmpl-n17d7KPavPhKiw5PejsDjodHzophVolN"
	)
	tests := []struct {
		fixture string
		want    []string
		finish  string
		usage   Usage
	}{
		{
			fixture: "openai_text_usage.sse",
			want: []string{
				`text-delta@` + oa + ` {"text":"Hello"}`,
				`text-delta@` + oa + ` {"text":"! How can I help?"}`,
			},
			finish: FinishStop,
			usage:  Usage{PromptTokens: 19, CompletionTokens: 10, TotalTokens: 29},
		},
		{
			fixture: "lmstudio_reasoning_content.sse",
			want: []string{
				`reasoning-delta@` + lms + ` {"text":"The user"}`,
				`reasoning-delta@` + lms + ` {"text":" asks for 2+2."}`,
				`text-delta@` + lms + ` {"text":"2 + 2 = "}`,
				`text-delta@` + lms + ` {"text":"4"}`,
			},
			finish: FinishStop,
		},
		{
			fixture: "ollama_reasoning_tools.sse",
			want: []string{
				`reasoning-delta@` + oll + ` {"text":"Need the weather"}`,
				`reasoning-delta@` + oll + ` {"text":" for two cities."}`,
				`tool-input-start@` + oll + ` {"toolCallId":"call_h2k1x9qa","toolName":"get_weather"}`,
				`tool-input-start@` + oll + ` {"toolCallId":"call_8zt0m3lc","toolName":"get_weather"}`,
				`tool-call@` + oll + ` {"toolCallId":"call_h2k1x9qa","toolName":"get_weather","args":{"city":"Paris"}}`,
				`tool-call@` + oll + ` {"toolCallId":"call_8zt0m3lc","toolName":"get_weather","args":{"city":"Tokyo","unit":"celsius"}}`,
			},
			finish: FinishToolCalls,
			usage:  Usage{PromptTokens: 88, CompletionTokens: 41, TotalTokens: 129},
		},
		{
			fixture: "vllm_parallel_tools.sse",
			want: []string{
				`tool-input-start@` + vllm + ` {"toolCallId":"chatcmpl-tool-1a2b3c","toolName":"search_nodes"}`,
				`tool-input-start@` + vllm + ` {"toolCallId":"chatcmpl-tool-4d5e6f","toolName":"get_workflow"}`,
				`tool-call@` + vllm + ` {"toolCallId":"chatcmpl-tool-1a2b3c","toolName":"search_nodes","args":{"query":"slack"}}`,
				`tool-call@` + vllm + ` {"toolCallId":"chatcmpl-tool-4d5e6f","toolName":"get_workflow","args":{"id":"wf_42"}}`,
			},
			finish: FinishToolCalls,
		},
		{
			fixture: "think_split.sse",
			want: []string{
				`reasoning-delta@` + syn + ` {"text":"Let me"}`,
				`reasoning-delta@` + syn + ` {"text":" count: 3 \u003c 4."}`,
				`text-delta@` + syn + ` {"text":"\n\nThe answer is "}`,
				`text-delta@` + syn + ` {"text":"\u003cb\u003e4\u003c/b\u003e."}`,
			},
			finish: FinishStop,
		},
		{
			fixture: "invalid_tool_args.sse",
			want: []string{
				`tool-input-start@` + bad + ` {"toolCallId":"call_Qz1","toolName":"create_workflow"}`,
				`tool-input-start@` + bad + ` {"toolCallId":"call_Qz2","toolName":"list_workflows"}`,
				`tool-error@` + bad + ` {"toolCallId":"call_Qz1","error":"invalid arguments for tool \"create_workflow\": not valid JSON (unexpected end of JSON input); arguments must be a JSON object, got {\"name\": \"Daily report"}`,
				`tool-call@` + bad + ` {"toolCallId":"call_Qz2","toolName":"list_workflows","args":{}}`,
			},
			finish: FinishToolCalls,
		},
		{
			fixture: "finish_length.sse",
			want: []string{
				`text-delta@` + lng + ` {"text":"Once upon a"}`,
				`text-delta@` + lng + ` {"text":" time"}`,
			},
			finish: FinishLength,
		},
		{
			// llama-server: role chunk with content null (no event), one
			// delta per token, "length" on an empty delta, and a usage chunk
			// whose extra timings and prompt_tokens_details are ignored.
			fixture: "llamacpp_text_usage.sse",
			want: []string{
				`text-delta@` + lcText + ` {"text":"alph"}`,
				`text-delta@` + lcText + ` {"text":" Ana"}`,
				`text-delta@` + lcText + ` {"text":"нове"}`,
				`text-delta@` + lcText + ` {"text":" Bool"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
				`text-delta@` + lcText + ` {"text":" Pakistan"}`,
			},
			finish: FinishLength,
			usage:  Usage{PromptTokens: 52, CompletionTokens: 16, TotalTokens: 68},
		},
		{
			// The stop string is not streamed but its token is counted.
			fixture: "llamacpp_text_stop.sse",
			want: []string{
				`text-delta@` + lcStop + ` {"text":"alph"}`,
				`text-delta@` + lcStop + ` {"text":" Ana"}`,
				`text-delta@` + lcStop + ` {"text":"нове"}`,
				`text-delta@` + lcStop + ` {"text":" Bool"}`,
			},
			finish: FinishStop,
			usage:  Usage{PromptTokens: 52, CompletionTokens: 5, TotalTokens: 57},
		},
		{
			// The tool call's id has no "call_" prefix and is kept as sent;
			// eight argument fragments assemble into {"city" :"{"}.
			fixture: "llamacpp_tool_call.sse",
			want: []string{
				`tool-input-start@` + lcTool + ` {"toolCallId":"0VelHYnJjwkUexTakHk8e9nQzM9C4mBn","toolName":"get_weather"}`,
				`tool-call@` + lcTool + ` {"toolCallId":"0VelHYnJjwkUexTakHk8e9nQzM9C4mBn","toolName":"get_weather","args":{"city":"{"}}`,
			},
			finish: FinishToolCalls,
			usage:  Usage{PromptTokens: 136, CompletionTokens: 33, TotalTokens: 169},
		},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.fixture, ".sse"), func(t *testing.T) {
			payloads := fixture(t, tc.fixture)
			if last := payloads[len(payloads)-1]; string(last) != DoneMarker {
				t.Fatalf("fixture does not end with [DONE]: %s", last)
			}
			tr := NewTranslator()
			got := check(t, runChunks(t, tr, payloads...))
			if !slices.Equal(got, tc.want) {
				t.Errorf("events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
			}
			if tr.FinishReason() != tc.finish {
				t.Errorf("FinishReason() = %q, want %q", tr.FinishReason(), tc.finish)
			}
			if tr.Usage() != tc.usage {
				t.Errorf("Usage() = %+v, want %+v", tr.Usage(), tc.usage)
			}
			if !tr.Done() {
				t.Error("Done() = false after [DONE]")
			}
		})
	}
}

func TestOpenAITranslatorChunkErrors(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    string
	}{
		{"truncated JSON", `{"id":"x","choices":[{"delta":{"content":"hi"`, "malformed chunk"},
		{"not an object", `hello`, "malformed chunk"},
		{"choices of the wrong type", `{"id":"x","choices":"nope"}`, "malformed chunk"},
		{"JSON null", `null`, "want a JSON object"},
		{"server error object", `{"error":{"message":"model overloaded","type":"server_error","code":503}}`, "server error: model overloaded (code 503)"},
		// llama-server's shape when generation fails after the stream has
		// begun (format_error_response in tools/server/server-common.cpp):
		// an integer code and no param.
		{"llama-server error object", `{"error":{"code":500,"message":"Failed to decode","type":"server_error"}}`, "server error: Failed to decode (code 500)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTranslator()
			evs, err := tr.Push([]byte(tc.payload))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Push error = %v, want one containing %q", err, tc.want)
			}
			if len(evs) != 0 {
				t.Errorf("events on error: %v", evs)
			}
			// The translator stays usable.
			got := check(t, runChunks(t, tr, []byte(`{"id":"r","choices":[{"index":0,"delta":{"content":"ok"}}]}`)))
			if want := []string{`text-delta@r {"text":"ok"}`}; !slices.Equal(got, want) {
				t.Errorf("after error: got %v, want %v", got, want)
			}
		})
	}
}

func TestOpenAITranslatorToolCallShapes(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		finish bool // call Finish instead of sending [DONE]
		want   []string
	}{
		{
			name: "no id: synthetic id, empty arguments",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ping","arguments":""}}]}}]}`,
				`{"id":"r","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
			want: []string{
				`tool-input-start@r {"toolCallId":"openai-call-1","toolName":"ping"}`,
				`tool-call@r {"toolCallId":"openai-call-1","toolName":"ping","args":{}}`,
			},
		},
		{
			name: "stream ends without finish_reason or [DONE]",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{\"x\":"}}]}}]}`,
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" 1 }"}}]}}]}`,
			},
			finish: true,
			want: []string{
				`tool-input-start@r {"toolCallId":"c1","toolName":"a"}`,
				`tool-call@r {"toolCallId":"c1","toolName":"a","args":{"x":1}}`,
			},
		},
		{
			name: "index 0 reused with new ids: separate calls",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{}"}}]}}]}`,
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c2","function":{"name":"b","arguments":"{\"k\":true}"}}]}}]}`,
				`{"id":"r","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			},
			want: []string{
				`tool-input-start@r {"toolCallId":"c1","toolName":"a"}`,
				`tool-input-start@r {"toolCallId":"c2","toolName":"b"}`,
				`tool-call@r {"toolCallId":"c1","toolName":"a","args":{}}`,
				`tool-call@r {"toolCallId":"c2","toolName":"b","args":{"k":true}}`,
			},
		},
		{
			name: "no index field: each named fragment is a call, others continue the last",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"id":"c1","function":{"name":"a","arguments":"{\"n\":"}},{"function":{"arguments":"1}"}},{"id":"c2","function":{"name":"b","arguments":""}}]}}]}`,
			},
			want: []string{
				`tool-input-start@r {"toolCallId":"c1","toolName":"a"}`,
				`tool-input-start@r {"toolCallId":"c2","toolName":"b"}`,
				`tool-call@r {"toolCallId":"c1","toolName":"a","args":{"n":1}}`,
				`tool-call@r {"toolCallId":"c2","toolName":"b","args":{}}`,
			},
		},
		{
			name: "name arrives after the id",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"arguments":""}}]}}]}`,
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"late","arguments":"{}"}}]}}]}`,
			},
			want: []string{
				`tool-input-start@r {"toolCallId":"c1","toolName":"late"}`,
				`tool-call@r {"toolCallId":"c1","toolName":"late","args":{}}`,
			},
		},
		{
			name: "no name ever: tool-error",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"arguments":"{}"}}]}}]}`,
			},
			want: []string{
				`tool-error@r {"toolCallId":"c1","error":"tool call has no function name"}`,
			},
		},
		{
			name: "arguments valid JSON but not an object: tool-error",
			chunks: []string{
				`{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"[1,2]"}}]}}]}`,
			},
			want: []string{
				`tool-input-start@r {"toolCallId":"c1","toolName":"a"}`,
				`tool-error@r {"toolCallId":"c1","error":"invalid arguments for tool \"a\": arguments must be a JSON object, got [1,2]"}`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTranslator()
			var payloads [][]byte
			for _, c := range tc.chunks {
				payloads = append(payloads, []byte(c))
			}
			evs := runChunks(t, tr, payloads...)
			if tc.finish {
				evs = append(evs, tr.Finish()...)
			} else {
				evs = append(evs, runChunks(t, tr, []byte(DoneMarker))...)
			}
			got := check(t, evs)
			if !slices.Equal(got, tc.want) {
				t.Errorf("events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
			}
		})
	}
}

func TestOpenAITranslatorResponsesAndUsage(t *testing.T) {
	var n int
	tr := &Translator{NewID: func(kind string) string { n++; return fmt.Sprintf("my-%s-%d", kind, n) }}
	evs := runChunks(t, tr,
		[]byte(`{"choices":[{"index":0,"delta":{"content":"one"}},{"index":1,"delta":{"content":"other choice"}}]}`),
		// Running usage totals on every chunk: the last one counts.
		[]byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`),
		[]byte(`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`),
		[]byte(DoneMarker),
		[]byte(``),
		[]byte(`{"id":"second","choices":[{"index":0,"delta":{"content":"two"}}]}`),
		[]byte(`{"id":"second","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`),
	)
	// reasoning and reasoning_content carrying the same text count once.
	evs = append(evs, runChunks(t, tr,
		[]byte(`{"id":"second","choices":[{"index":0,"delta":{"reasoning":"why","reasoning_content":"why"}}]}`))...)
	if tr.Done() {
		t.Error("Done() = true while the second response is open")
	}
	if tr.FinishReason() != "" {
		t.Errorf("FinishReason() = %q for a response that has not finished", tr.FinishReason())
	}
	evs = append(evs, tr.Finish()...)
	got := check(t, evs)
	want := []string{`text-delta@my-response-1 {"text":"one"}`, `text-delta@second {"text":"two"}`,
		`reasoning-delta@second {"text":"why"}`}
	if !slices.Equal(got, want) {
		t.Errorf("events: got %v, want %v", got, want)
	}
	if u, want := tr.Usage(), (Usage{PromptTokens: 15, CompletionTokens: 5, TotalTokens: 20}); u != want {
		t.Errorf("Usage() = %+v, want %+v", u, want)
	}
	if tr.ResponseID() != "second" {
		t.Errorf("ResponseID() = %q, want second", tr.ResponseID())
	}
}

func TestOpenAITranslatorThinkTags(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"tag in one chunk", []string{"<think>hm</think>Hi"},
			[]string{`reasoning-delta@r {"text":"hm"}`, `text-delta@r {"text":"Hi"}`}},
		{"open tag split byte by byte", []string{"<", "t", "h", "i", "n", "k", ">", "a", "<", "/", "think>b"},
			[]string{`reasoning-delta@r {"text":"a"}`, `text-delta@r {"text":"b"}`}},
		{"lookalike is text", []string{"a <thin", "g> b"},
			[]string{`text-delta@r {"text":"a "}`, `text-delta@r {"text":"\u003cthing\u003e b"}`}},
		{"unfinished tag at end of stream is text", []string{"x <thi"},
			[]string{`text-delta@r {"text":"x "}`, `text-delta@r {"text":"\u003cthi"}`}},
		{"unclosed think stays reasoning", []string{"<think>still going</th"},
			[]string{`reasoning-delta@r {"text":"still going"}`, `reasoning-delta@r {"text":"\u003c/th"}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTranslator()
			var evs []instanceai.Event
			for _, c := range tc.chunks {
				b, _ := json.Marshal(map[string]any{"id": "r", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": c}}}})
				evs = append(evs, runChunks(t, tr, b)...)
			}
			evs = append(evs, tr.Finish()...)
			got := check(t, evs)
			if !slices.Equal(got, tc.want) {
				t.Errorf("events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
			}
		})
	}
}

// merged joins adjacent text/reasoning deltas of the same type.
func merged(evs []instanceai.Event) []string {
	var out []string
	var last instanceai.EventType
	for _, ev := range evs {
		p, ok := ev.Payload.(*instanceai.Text)
		if !ok {
			continue
		}
		if len(out) > 0 && ev.Type == last {
			out[len(out)-1] += p.Text
			continue
		}
		out = append(out, string(ev.Type)+":"+p.Text)
		last = ev.Type
	}
	return out
}

func FuzzOpenAITranslator(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("..", "testdata"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		// The directory also holds recorded HTTP error bodies (.json) and a
		// README; only the streams are seeds.
		if !strings.HasSuffix(e.Name(), ".sse") {
			continue
		}
		f.Add(bytes.Join(fixture(f, e.Name()), []byte("\n")), uint8(3))
	}
	f.Add([]byte("<think>a</think>b<th"), uint8(1))
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"x","arguments":"{\"a\":"}}]}}]}`), uint8(7))

	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		// Each line is one data payload.
		tr := NewTranslator()
		var evs []instanceai.Event
		for _, line := range bytes.Split(data, []byte("\n")) {
			out, err := tr.Push(line)
			if err != nil && len(out) != 0 {
				t.Fatalf("events returned with an error: %v", out)
			}
			evs = append(evs, out...)
		}
		evs = append(evs, tr.Finish()...)
		for _, ev := range evs {
			if p, ok := ev.Payload.(*instanceai.ToolCall); ok {
				if !json.Valid(p.Args) || !bytes.HasPrefix(p.Args, []byte("{")) {
					t.Fatalf("tool-call args not a JSON object: %q", p.Args)
				}
			}
			ev.RunID, ev.AgentID = "run", "agent"
			if err := ev.Validate(); err != nil {
				t.Fatalf("invalid event %+v: %v", ev, err)
			}
		}

		// The same text as content, whole or cut into pieces, yields the
		// same text and reasoning: chunk boundaries never change the result.
		content := func(s string) []byte {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": s}}}})
			return b
		}
		runes := []rune(string(data))
		s := string(runes)
		whole := NewTranslator()
		wholeEvs := runChunks(t, whole, content(s))
		wholeEvs = append(wholeEvs, whole.Finish()...)
		cut := NewTranslator()
		var cutEvs []instanceai.Event
		n := int(step%16) + 1
		for i := 0; i < len(runes); i += n {
			cutEvs = append(cutEvs, runChunks(t, cut, content(string(runes[i:min(i+n, len(runes))])))...)
		}
		cutEvs = append(cutEvs, cut.Finish()...)
		if w, c := merged(wholeEvs), merged(cutEvs); !slices.Equal(w, c) {
			t.Fatalf("split content changed the result:\nwhole %q\n  cut %q", w, c)
		}
	})
}
