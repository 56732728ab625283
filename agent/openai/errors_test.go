package openai

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUpstreamMessage reads the error bodies of several servers; the code
// may be a string (OpenAI), a number (llama-server, vLLM) or null.
func TestUpstreamMessage(t *testing.T) {
	recorded := func(name string) string {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	tests := []struct {
		body    string
		want    upstreamError
		context bool
		missing bool
	}{
		{recorded("llamacpp_error_400.json"),
			upstreamError{msg: "Expected 'messages' to be an array", code: "400", typ: "invalid_request_error"}, false, false},
		{recorded("llamacpp_error_500.json"),
			upstreamError{msg: "[json.exception.parse_error.101] parse error at line 1, column 61: syntax error while parsing object key - unexpected end of input; expected string literal", code: "500", typ: "server_error"}, false, false},
		{recorded("llamacpp_error_context.json"),
			upstreamError{msg: "request (3028 tokens) exceeds the available context size (2048 tokens), try increasing it", code: "400", typ: "exceed_context_size_error"}, true, false},
		{recorded("llamacpp_error_model_not_found.json"),
			upstreamError{msg: "model 'no-such-model' not found", code: "400", typ: "invalid_request_error"}, false, true},
		{`{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			upstreamError{msg: "This model's maximum context length is 8192 tokens.", code: CodeContextLength, typ: "invalid_request_error"}, true, false},
		{`{"error":{"message":"The model ghost does not exist","code":"model_not_found"}}`,
			upstreamError{msg: "The model ghost does not exist", code: CodeModelNotFound}, false, true},
		{`{"error":{"message":"boom","code":null}}`, upstreamError{msg: "boom"}, false, false},
		{`{"error":"boom"}`, upstreamError{msg: "boom"}, false, false},
		{`{"object":"error","message":"Unrecognized field","type":"BadRequestError","code":400}`,
			upstreamError{msg: "Unrecognized field", code: "400", typ: "BadRequestError"}, false, false},
		{`404 page not found`, upstreamError{}, false, false},
	}
	for _, tc := range tests {
		got := upstreamMessage([]byte(tc.body))
		if got != tc.want {
			t.Errorf("upstreamMessage(%s) = %+v, want %+v", tc.body, got, tc.want)
		}
		if got.contextExceeded() != tc.context || got.modelMissing() != tc.missing {
			t.Errorf("%s: contextExceeded %v modelMissing %v, want %v %v", tc.body, got.contextExceeded(), got.modelMissing(), tc.context, tc.missing)
		}
	}
}
