package openai_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/instanceai"
)

// cut sends part of a stream and then drops the connection.
func cut(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: "+textChunk("r", "Half an ans")+"\n\n")
	w.(http.Flusher).Flush()
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// stall sends one chunk and then nothing until the client gives up.
func stall(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: "+textChunk("r", "Wait")+"\n\n")
	w.(http.Flusher).Flush()
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

func TestFailures(t *testing.T) {
	ok := answer("ok", "Recovered.", 1, 1)
	modelNotFound := `{"error":{"message":"The model ` + "`ghost`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
	tests := []struct {
		name     string
		script   []http.HandlerFunc
		cfg      func(*openai.Config)
		code     string
		status   int
		requests int
		content  string // part of the error's message
		text     string // text kept from before the failure
		recovers bool
	}{
		{name: "unauthorized", script: []http.HandlerFunc{status(401, `{"error":{"message":"Incorrect API key provided: sk-secret.","code":"invalid_api_key"}}`)},
			code: openai.CodeUnauthorized, status: 401, requests: 1, content: "API key"},
		{name: "model not found", script: []http.HandlerFunc{status(404, modelNotFound)},
			code: openai.CodeModelNotFound, status: 404, requests: 1, content: "gpt-4o, llama3"},
		{name: "path not found", script: []http.HandlerFunc{status(404, `404 page not found`)},
			code: openai.CodeNotFound, status: 404, requests: 1, content: "base URL"},
		{name: "429 then success", script: []http.HandlerFunc{status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "1"), ok},
			requests: 2, recovers: true},
		{name: "429 beyond the bound", script: []http.HandlerFunc{status(429, `{"error":{"message":"quota"}}`, "Retry-After", "3600")},
			code: openai.CodeRateLimited, status: 429, requests: 1, content: "Try again after"},
		{name: "429 as an HTTP date beyond the bound", script: []http.HandlerFunc{status(429, `{}`, "Retry-After", time.Now().Add(2*time.Hour).UTC().Format(http.TimeFormat))},
			code: openai.CodeRateLimited, status: 429, requests: 1, content: "Try again after"},
		{name: "500 then success", script: []http.HandlerFunc{status(500, `{"error":"boom"}`), ok}, requests: 2, recovers: true},
		{name: "500 exhausted", script: []http.HandlerFunc{status(503, `{"object":"error","message":"overloaded"}`)},
			cfg: func(c *openai.Config) { c.MaxRetries = 1 }, code: openai.CodeUpstreamError, status: 503, requests: 2, content: "overloaded"},
		{name: "length", script: []http.HandlerFunc{replay(fixture(t, "finish_length.sse"))},
			code: openai.CodeMaxTokens, requests: 1, text: "Once upon a time"},
		{name: "content filter", script: []http.HandlerFunc{replay(sse(textChunk("r", "Well"), finishChunk("r", "content_filter")))},
			code: openai.CodeContentFilter, requests: 1, text: "Well"},
		{name: "cut stream", script: []http.HandlerFunc{cut}, code: openai.CodeStreamInterrupted, requests: 1, text: "Half an ans"},
		{name: "closed without finish", script: []http.HandlerFunc{replay("data: " + textChunk("r", "So") + "\n\n")},
			code: openai.CodeStreamInterrupted, requests: 1, text: "So"},
		{name: "empty stream retried", script: []http.HandlerFunc{replay(""), ok}, requests: 2, recovers: true},
		{name: "idle timeout", script: []http.HandlerFunc{stall}, cfg: func(c *openai.Config) { c.RequestTimeout = 300 * time.Millisecond },
			code: openai.CodeTimeout, requests: 1, text: "Wait", content: "--openai-timeout"},
		{name: "error in stream", script: []http.HandlerFunc{replay(sse(textChunk("r", "Hm"), `{"error":{"message":"model crashed","type":"server_error","code":null}}`))},
			code: openai.CodeUpstreamError, requests: 1, content: "model crashed", text: "Hm"},
		// A chunk over the bound on one event (and its envelope) is not
		// read whole and not retried: the same request would get it again.
		{name: "a chunk over the bound", script: []http.HandlerFunc{replay(sse(textChunk("r", strings.Repeat("x", 1<<20+64<<10)))), ok},
			cfg: func(c *openai.Config) { c.MaxEventBytes = 1 << 20 }, code: instanceai.CodeEventTooLarge, requests: 1,
			content: "larger than 1 MiB, the bound on one event (--max-event-bytes)"},
		{name: "a chunk over the bound after text", script: []http.HandlerFunc{replay(sse(textChunk("r", "So"), textChunk("r", strings.Repeat("x", 1<<20+64<<10))))},
			cfg: func(c *openai.Config) { c.MaxEventBytes = 1 << 20 }, code: instanceai.CodeEventTooLarge, requests: 1,
			content: "what came before is kept", text: "So"},
		{name: "stream_options refused", script: []http.HandlerFunc{status(400, `{"object":"error","message":"Unrecognized field: stream_options","code":400}`), ok},
			requests: 2, recovers: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.script...)
			f.models = func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o"},{"id":"llama3"}]}`)
			}
			cfg := openai.Config{BaseURL: f.url(), Model: "ghost", APIKey: "sk-secret"}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := newHarness(t, cfg)
			evs := h.play(t, instanceai.StartRequest{Message: "go"})
			if got := len(f.requests()); got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
			if tc.recovers {
				if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted || text(evs, instanceai.TypeTextBlock) != "Recovered." {
					t.Fatalf("did not recover: %s", shape(evs))
				}
				if tc.name == "stream_options refused" {
					reqs := f.requests()
					if reqs[0].StreamOptions == nil || reqs[1].StreamOptions != nil {
						t.Errorf("stream_options: first %v, second %v", reqs[0].StreamOptions, reqs[1].StreamOptions)
					}
				}
				return
			}
			e := errorOf(t, evs)
			if e.Code != tc.code || e.StatusCode != tc.status || e.Provider != "openai-compatible" {
				t.Errorf("error code %q status %d provider %q, want %q %d: %+v", e.Code, e.StatusCode, e.Provider, tc.code, tc.status, e)
			}
			if !strings.Contains(e.Content, tc.content) {
				t.Errorf("message %q does not mention %q", e.Content, tc.content)
			}
			if e.TechnicalDetails == "" {
				t.Errorf("no technical details: %+v", e)
			}
			raw, _ := json.Marshal(evs)
			if bytes.Contains(raw, []byte("sk-secret")) {
				t.Errorf("the API key leaked into the log: %s", raw)
			}
			if got := text(evs, instanceai.TypeTextBlock); got != tc.text {
				t.Errorf("kept text %q, want %q", got, tc.text)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	h := newHarness(t, openai.Config{BaseURL: "http://" + addr + "/v1", Model: "m"})
	e := errorOf(t, h.play(t, instanceai.StartRequest{Message: "x"}))
	if e.Code != openai.CodeConnectionFailed || !strings.Contains(e.Content, "running") || !strings.Contains(e.Content, addr) {
		t.Errorf("error %+v", e)
	}
}

func TestProviderName(t *testing.T) {
	f := newFake(t, status(401, `{}`))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Provider: "lmstudio"})
	if e := errorOf(t, h.play(t, instanceai.StartRequest{Message: "x"})); e.Provider != "lmstudio" || !strings.Contains(e.Content, "No API key") {
		t.Errorf("error %+v", e)
	}
}

// /llm/health is public: however many clients poll it at once, the model
// server gets one probe, and the next only once the answer is older than
// HealthCacheTTL.
func TestHealthProbesAreSharedAndSpaced(t *testing.T) {
	var probes atomic.Int32
	release := make(chan struct{})
	f := newFake(t, ok200)
	f.models = func(w http.ResponseWriter, r *http.Request) {
		if probes.Add(1) == 1 {
			<-release // the first probe is slow: everyone arrives meanwhile
		}
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
	}
	const ttl = time.Second
	a, err := openai.New(openai.Config{BaseURL: f.url(), Model: "m", HealthCacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	get := func() int {
		rec := httptest.NewRecorder()
		a.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/llm/health", nil))
		return rec.Code
	}
	var wg sync.WaitGroup
	codes := make([]int, 40)
	for i := range codes {
		wg.Go(func() { codes[i] = get() })
	}
	for probes.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the others queue behind the probe
	close(release)
	wg.Wait()
	answered := time.Now() // the probe's answer is no older than this
	for i, code := range codes {
		if code != http.StatusOK {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if n := probes.Load(); n != 1 {
		t.Fatalf("40 concurrent requests made %d probes, want 1", n)
	}
	get()
	// Within the TTL unless this machine stalled for a second.
	if within := time.Since(answered) < ttl; within && probes.Load() != 1 {
		t.Fatal("a request within the TTL probed again")
	}
	time.Sleep(ttl + 50*time.Millisecond)
	before := probes.Load()
	if get(); probes.Load() != before+1 {
		t.Fatalf("a request past the TTL: %d probes, want %d", probes.Load(), before+1)
	}
}

func TestHealth(t *testing.T) {
	get := func(t *testing.T, a *openai.Agent) (int, map[string]any) {
		t.Helper()
		rec := httptest.NewRecorder()
		a.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/llm/health", nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: %s", err, rec.Body)
		}
		return rec.Code, body
	}
	var auth atomic.Value
	f := newFake(t, ok200)
	f.models = func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"llama-3.2-3b-instruct","object":"model"}]}`)
	}
	t.Run("available", func(t *testing.T) {
		a, _ := openai.New(openai.Config{BaseURL: f.url(), Model: "llama-3.2-3b-instruct", APIKey: "k"})
		code, body := get(t, a)
		if code != 200 || body["status"] != "available" || body["llm_endpoint"] != f.url() || body["llm_model"] != "llama-3.2-3b-instruct" ||
			body["is_local"] != true || body["model_available"] != true || auth.Load() != "Bearer k" {
			t.Errorf("%d %v", code, body)
		}
		if _, ok := body["response_time_ms"].(float64); !ok {
			t.Errorf("response_time_ms missing: %v", body)
		}
		if _, err := time.Parse(time.RFC3339, body["timestamp"].(string)); err != nil {
			t.Error(err)
		}
	})
	t.Run("model missing", func(t *testing.T) {
		a, _ := openai.New(openai.Config{BaseURL: f.url(), Model: "other"})
		if code, body := get(t, a); code != 200 || body["model_available"] != false {
			t.Errorf("%d %v", code, body)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		bad := newFake(t, ok200)
		bad.models = status(401, `{"error":"bad key"}`)
		a, _ := openai.New(openai.Config{BaseURL: bad.url(), Model: "m"})
		code, body := get(t, a)
		if code != 503 || body["status"] != "unavailable" || !strings.Contains(body["error"].(string), "401") {
			t.Errorf("%d %v", code, body)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		slow := newFake(t, ok200)
		slow.models = func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
		a, _ := openai.New(openai.Config{BaseURL: slow.url(), Model: "m", HealthTimeout: 200 * time.Millisecond})
		code, body := get(t, a)
		if code != 503 || !strings.Contains(body["error"].(string), "did not respond within") {
			t.Errorf("%d %v", code, body)
		}
	})
	t.Run("is_local", func(t *testing.T) {
		a, _ := openai.New(openai.Config{BaseURL: "https://api.openai.com/v1", Model: "m", HTTPClient: &http.Client{Transport: refuse{}}})
		code, body := get(t, a)
		if code != 503 || body["is_local"] != false {
			t.Errorf("%d %v", code, body)
		}
	})
}

func ok200(w http.ResponseWriter, r *http.Request) {}

// refuse is a transport that never reaches the network.
type refuse struct{}

func (refuse) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: io.ErrUnexpectedEOF}
}
