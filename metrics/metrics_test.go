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

// TestRetention checks the retention series: rows by table, threads, the
// last pass's time and the log's size.
func TestRetention(t *testing.T) {
	m := New()
	m.RetentionDeleted(map[string]int64{"threads": 2, "events": 30, "messages": 0})
	m.RetentionDeleted(map[string]int64{"threads": 1, "events": 5})
	m.RetentionPass(time.Unix(1700000000, 0), 1234, 56789)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`threadline_retention_deleted_rows_total{table="threads"} 3`,
		`threadline_retention_deleted_rows_total{table="events"} 35`,
		"threadline_retention_threads_pruned_total 3",
		"threadline_retention_last_run_timestamp_seconds 1.7e+09",
		"threadline_event_log_events 1234",
		"threadline_event_log_bytes 56789",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(text, `table="messages"`) {
		t.Error("a table with no rows deleted has a series")
	}
}
