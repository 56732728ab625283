package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/upstream/upstreamtest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// hugeLine answers every request with a stream whose second line is 2 MiB:
// an n8n item (ndjson) or a Chat Completions chunk (sse).
func hugeLine(t *testing.T, sse bool) string {
	t.Helper()
	big := strings.Repeat("x", 2<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"id":"r","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"`+big+`"},"finish_reason":null}]}`+"\n\n")
			return
		}
		meta := `"metadata":{"nodeId":"a","nodeName":"AI Agent","runIndex":0,"itemIndex":0}`
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, `{"type":"begin",`+meta+"}\n"+`{"type":"item",`+meta+`,"content":"`+big+"\"}\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// --max-event-bytes reaches every agent that reads a stream: an upstream
// event over it ends the run with event_too_large naming the bound as
// set, not the default.
func TestMaxEventBytesReachesTheAgents(t *testing.T) {
	limits := []string{"-max-event-bytes", "1048576", "-max-segment-bytes", "524288"}
	for _, tc := range []struct {
		name    string
		args    func(t *testing.T) []string
		message string
	}{
		{"agui", func(t *testing.T) []string {
			return []string{"-agent", "agui", "-agui-agents", "big=" + upstreamtest.Start(t).URL}
		}, upstreamtest.HugeLine},
		{"n8n", func(t *testing.T) []string {
			return []string{"-agent", "n8n", "-n8n-webhooks", "main=" + hugeLine(t, false)}
		}, "hi"},
		{"openai", func(t *testing.T) []string {
			return []string{"-agent", "openai", "-openai-model", "m", "-openai-base-url", hugeLine(t, true) + "/v1"}
		}, "hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := startServe(t, append(tc.args(t), limits...)...)
			chat, err := http.Post(url+"/instance-ai/chat/t1", "application/json", strings.NewReader(`{"message":"`+tc.message+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			chat.Body.Close()
			// The stream replays the thread from its start.
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/instance-ai/events/t1", nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil || res.StatusCode != http.StatusOK {
				cancel()
				t.Fatalf("stream: %v %v", res, err)
			}
			stream := servertest.ReadStream(t, res, cancel, servertest.DefaultBacklog)
			var failure *instanceai.ErrorPayload
			for _, f := range stream.Until(30*time.Second, servertest.IsType(instanceai.TypeRunFinish)) {
				if p, ok := f.Decoded.Payload.(*instanceai.ErrorPayload); ok {
					failure = p
				}
			}
			if failure == nil || failure.Code != instanceai.CodeEventTooLarge ||
				!strings.Contains(failure.Content, "1 MiB, the bound on one event (--max-event-bytes)") {
				t.Fatalf("error %+v, want %s naming the bound as set", failure, instanceai.CodeEventTooLarge)
			}
		})
	}
}
