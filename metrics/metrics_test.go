package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestToolLabelsAreBounded checks that tool names past the bound share one
// label, so a model inventing names cannot grow the series without end.
func TestToolLabelsAreBounded(t *testing.T) {
	m := New()
	for i := 0; i < maxToolLabels+10; i++ {
		m.ToolCallFinished(fmt.Sprintf("tool_%d", i), "result", time.Millisecond)
	}
	m.ToolCallFinished("tool_0", "error", time.Millisecond)
	m.CaptureObject("tool_call")
	m.CaptureMalformed("oversize")
	m.Gauges(func() int { return 3 }, func() int { return 1 })

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`threadline_tool_call_seconds_count{outcome="result",tool="other"} 10`,
		`threadline_tool_call_seconds_count{outcome="error",tool="tool_0"} 1`,
		`threadline_capture_objects_total{kind="tool_call"} 1`,
		`threadline_capture_malformed_total{reason="oversize"} 1`,
		"threadline_subscribers 3",
		"threadline_active_runs 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := strings.Count(text, `threadline_tool_call_seconds_count{outcome="result"`); n != maxToolLabels+1 {
		t.Errorf("%d result series, want %d", n, maxToolLabels+1)
	}
}
