package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The HTTP, run and bus measurements land in their series: a stream is
// counted as a request but timed apart, an agent without a name takes
// the default agent's, and every surface has its series from the start.
func TestHTTPRunAndBusSeries(t *testing.T) {
	m := New()
	m.DefaultAgent("script")
	m.Request("/x/{id}", "GET", 200, 10*time.Millisecond, false)
	m.Request("/x/{id}/events", "GET", 200, time.Minute, true)
	closed := m.StreamOpened("native")
	m.StreamOpened("agui")(2 * time.Second)
	m.Replayed("native", 7)
	done := m.ConnOpened()
	m.ConnOpened()()
	m.RunStarted("")
	m.RunStarted("sales")
	m.RunFinished("", "completed")
	m.BusLag(3 * time.Millisecond)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`threadline_http_requests_total{code="200",method="GET",route="/x/{id}"} 1`,
		`threadline_http_requests_total{code="200",method="GET",route="/x/{id}/events"} 1`,
		`threadline_http_request_duration_seconds_count{method="GET",route="/x/{id}"} 1`,
		`threadline_streams_open{surface="native"} 1`,
		`threadline_streams_open{surface="agui"} 0`,
		`threadline_streams_open{surface="console"} 0`,
		`threadline_stream_duration_seconds_count{surface="agui"} 1`,
		`threadline_replay_events_total{surface="native"} 7`,
		`threadline_replay_events_total{surface="publish"} 0`,
		`threadline_http_connections_open 1`,
		`threadline_runs_started_total{agent="script"} 1`,
		`threadline_runs_started_total{agent="sales"} 1`,
		`threadline_runs_finished_total{agent="script",status="completed"} 1`,
		`threadline_bus_lag_seconds_count 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(text, `threadline_http_request_duration_seconds_count{method="GET",route="/x/{id}/events"}`) {
		t.Error("a stream was timed as a request")
	}
	closed(time.Second)
	done()
}
