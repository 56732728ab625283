package n8napi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/agent/tools/n8napi"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func jsonResponse(status int, body string) *http.Response {
	return &http.Response{
		StatusCode: status,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(body)),
	}
}

// FuzzToolArgs feeds arbitrary arguments to every tool: decoding the model's
// arguments must never panic, and whatever passes validation must produce a
// well-formed request (checked by the transport) and a JSON result.
func FuzzToolArgs(f *testing.F) {
	for _, a := range validArgs {
		f.Add(a)
	}
	for _, a := range []string{
		``, `null`, `[]`, `"x"`, `1`, `{`, `{"id":null}`, `{"id":"a/b"}`, `{"id":"%2e%2e"}`,
		`{"limit":1e309}`, `{"limit":-0}`, `{"limit":250.0}`, `{"nodes":[null]}`, `{"nodes":[{}],"name":"\u0000"}`,
		`{"connections":1,"settings":[]}`, `{"status":"success","workflowId":"1"}`, `{"id":"x","id":"y"}`,
		`{"name":"N","nodes":[],"connections":{},"settings":{}}`, "{\"name\":\"\xff\"}",
	} {
		f.Add(a)
	}
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "n8n.test" || !strings.HasPrefix(r.URL.EscapedPath(), "/api/v1/") ||
			strings.Contains(r.URL.EscapedPath(), "/../") || r.Header.Get("X-N8N-API-KEY") != testKey {
			panic("malformed request: " + r.Method + " " + r.URL.String())
		}
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			if len(b) > 0 && !json.Valid(b) {
				panic("request body is not JSON: " + string(b))
			}
		}
		return jsonResponse(200, `{"data":[],"nextCursor":null}`), nil
	})}
	ts, err := n8napi.Tools(n8napi.Config{BaseURL: "http://n8n.test", APIKey: testKey, HTTPClient: hc})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		for _, tl := range ts {
			out, err := tl.Execute(context.Background(), json.RawMessage(args))
			if err == nil && !json.Valid(out) {
				t.Errorf("%s(%q): result is not JSON: %q", tl.Name, args, out)
			}
			if err != nil && !strings.HasPrefix(err.Error(), tl.Name+": ") {
				t.Errorf("%s(%q): error %q does not name the tool", tl.Name, args, err)
			}
		}
	})
}
