package server

import (
	"context"
	"testing"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/metrics"
	"github.com/threadline/threadline/storage/memory"
)

// Every route the server registers has a surface among the metrics' own,
// and the streaming routes the surface of their API.
func TestMetricsSurfaceOfEveryRoute(t *testing.T) {
	s := New(memory.New(), &script.Agent{}, Config{})
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	surface := surfaces("/copilotkit")
	known := map[string]bool{}
	for _, sf := range metrics.Surfaces {
		known[sf] = true
	}
	for _, rt := range s.Routes() {
		if sf := surface(rt.Path); !known[sf] {
			t.Errorf("%s %s: surface %q is not one of %v", rt.Method, rt.Path, sf, metrics.Surfaces)
		}
	}
	for template, want := range map[string]string{
		"/instance-ai/events/{threadId}":                  "native",
		"/run-agent":                                      "agui",
		"/agui/threads/{threadId}/events":                 "agui",
		"/copilotkit":                                     "copilotkit",
		"/copilotkit/agent/{agentId}/connect":             "copilotkit",
		"/publish/threads/{threadId}/runs/{runId}/events": "publish",
		"/generate":                                       "builder",
		"/projects/{name}/workflows":                      "builder",
		"/":                                               "console",
		"/console/{file:.+}":                              "console",
		"/health":                                         "other",
		"/readyz":                                         "other",
		"/metrics":                                        "other",
		"/generated":                                      "other",
	} {
		if got := surface(template); got != want {
			t.Errorf("surface(%q) = %q, want %q", template, got, want)
		}
	}
}
