package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// awaitMetric scrapes until the series has the value, failing the test
// after wait: what a stream's end changes is counted when the server sees
// the connection close, after the client closed it.
func (h *harness) awaitMetric(series string, want float64) {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got, ok := h.scrape()[series]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s = %v (present %v), want %v", series, got, ok, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The HTTP metrics after real requests, served as the command serves
// (Serve, so connections are counted): requests by route template and
// status, the durations of those that are not streams, streams open and
// their durations by surface, runs by agent and status, replayed events.
func TestMetricsHTTP(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Serve: &server.ServeOptions{}})
	before := h.scrape()
	for _, sf := range []string{"native", "agui", "copilotkit", "builder", "publish", "console", "other"} {
		if v, ok := before[`threadline_streams_open{surface="`+sf+`"}`]; !ok || v != 0 {
			t.Fatalf("streams open on %s at start: %v %v", sf, v, ok)
		}
	}

	h.EnsureThread("m1")
	live := h.Connect("m1", "", false)
	h.awaitMetric(`threadline_streams_open{surface="native"}`, 1)
	runID := h.Chat("m1", "simple hi")
	live.Until(wait, servertest.IsRunFinish(runID))
	if err := h.App.Sync(context.Background(), "m1"); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.Do(http.MethodGet, "/instance-ai/threads/m1/status", ""); code != http.StatusOK {
		t.Fatalf("status: %d", code)
	}
	if code, _ := h.Do(http.MethodGet, "/no/such/path", ""); code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", code)
	}
	// The native stream took its connection over: its request is counted
	// when its handler returns, which may be after the client saw it open.
	h.awaitMetric(`threadline_http_requests_total{code="200",method="GET",route="/instance-ai/events/{threadId}"}`, 1)
	mid := h.scrape()
	if got := mid[`threadline_http_connections_open`]; got < 1 {
		t.Fatalf("connections open with a stream open: %v", got)
	}
	for series, want := range map[string]float64{
		`threadline_http_requests_total{code="200",method="GET",route="/instance-ai/threads/{threadId}/status"}`:      1,
		`threadline_http_request_duration_seconds_count{method="GET",route="/instance-ai/threads/{threadId}/status"}`: 1,
		`threadline_http_requests_total{code="200",method="POST",route="/instance-ai/chat/{threadId}"}`:               1,
		`threadline_http_requests_total{code="404",method="GET",route="unmatched"}`:                                   1,
		`threadline_runs_started_total{agent="default"}`:                                                              1,
		`threadline_runs_finished_total{agent="default",status="completed"}`:                                          1,
		`threadline_streams_open{surface="native"}`:                                                                   1,
	} {
		if got := mid[series] - before[series]; got != want {
			t.Errorf("%s grew by %v, want %v", series, got, want)
		}
	}
	// A stream's duration is its client's: it is not a request duration.
	if v, ok := mid[`threadline_http_request_duration_seconds_count{method="GET",route="/instance-ai/events/{threadId}"}`]; ok {
		t.Errorf("the event stream was timed as a request (%v)", v)
	}

	// A second client from the start is sent the stored run from the log.
	stored := len(servertest.StoredEvents(t, store, "m1"))
	replayedBefore := h.scrape()[`threadline_replay_events_total{surface="native"}`]
	again := h.Connect("m1", "", false)
	again.Until(wait, servertest.IsRunFinish(runID))
	h.awaitMetric(`threadline_replay_events_total{surface="native"}`, replayedBefore+float64(stored))

	live.Close()
	again.Close()
	h.awaitMetric(`threadline_streams_open{surface="native"}`, 0)
	h.awaitMetric(`threadline_stream_duration_seconds_count{surface="native"}`, 2)

	// An AG-UI run: its stream is the request, so it is counted when the
	// handler returns, before the client reads the stream's end.
	evs := h.runAgent("m-agui", "agui-run-1", "simple hi", nil)
	if last := evs[len(evs)-1].typ; last != "RUN_FINISHED" {
		t.Fatalf("AG-UI run ended with %s", last)
	}
	after := h.scrape()
	for series, want := range map[string]float64{
		`threadline_http_requests_total{code="200",method="POST",route="/run-agent"}`: 1,
		`threadline_stream_duration_seconds_count{surface="agui"}`:                    1,
		`threadline_streams_open{surface="agui"}`:                                     0,
		`threadline_runs_started_total{agent="default"}`:                              2,
		`threadline_runs_finished_total{agent="default",status="completed"}`:          2,
	} {
		if got := after[series] - before[series]; got != want {
			t.Errorf("%s grew by %v, want %v", series, got, want)
		}
	}
	if _, ok := after[`threadline_http_request_duration_seconds_count{method="POST",route="/run-agent"}`]; ok {
		t.Error("the AG-UI run's stream was timed as a request")
	}

	// CopilotKit's connect replays the finished run from the log.
	if err := h.App.Sync(context.Background(), "m-agui"); err != nil {
		t.Fatal(err)
	}
	runRows := len(servertest.StoredEvents(t, store, "m-agui"))
	req, _ := http.NewRequest(http.MethodPost, h.URL+"/copilotkit/agent/default/connect", strings.NewReader(`{"threadId":"m-agui"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "RUN_FINISHED") {
		t.Fatalf("connect: %d %s", res.StatusCode, body)
	}
	last := h.scrape()
	for series, want := range map[string]float64{
		`threadline_replay_events_total{surface="copilotkit"}`:                                                 float64(runRows),
		`threadline_stream_duration_seconds_count{surface="copilotkit"}`:                                       1,
		`threadline_http_requests_total{code="200",method="POST",route="/copilotkit/agent/{agentId}/connect"}`: 1,
	} {
		if got := last[series] - before[series]; got != want {
			t.Errorf("%s grew by %v, want %v", series, got, want)
		}
	}
}

// Thread ids, unknown paths and invented methods never become label
// values: however many there are, the route label is the template (or
// "unmatched") and the method one of a fixed set.
func TestMetricsRouteCardinality(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	const n = 60
	for i := range n {
		h.Do(http.MethodGet, fmt.Sprintf("/instance-ai/threads/card-%d/status", i), "")
		h.Do(http.MethodGet, fmt.Sprintf("/no/such/path-%d", i), "")
		req, _ := http.NewRequest(fmt.Sprintf("M%d", i), h.URL+"/health", nil)
		res, err := h.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	m := h.scrape()
	var statusSeries, unmatched, other float64
	for series, v := range m {
		if !strings.HasPrefix(series, "threadline_http_requests_total{") {
			continue
		}
		if strings.Contains(series, "card-") || strings.Contains(series, "path-") || strings.Contains(series, `method="M`) {
			t.Fatalf("a raw path or method became a label: %s", series)
		}
		switch {
		case strings.Contains(series, `route="/instance-ai/threads/{threadId}/status"`):
			statusSeries++
			if v != n {
				t.Errorf("%s = %v, want %d", series, v, n)
			}
		case strings.Contains(series, `route="unmatched"`) && strings.Contains(series, `method="GET"`):
			unmatched += v
		case strings.Contains(series, `method="other"`):
			other += v
		}
	}
	if statusSeries != 1 || unmatched != n || other != n {
		t.Fatalf("status route series %v, unmatched GETs %v, other methods %v; want 1, %d, %d", statusSeries, unmatched, other, n, n)
	}
}

// The bus lag is measured where frames arrive from another instance: on
// B, which streams a run of A's, and not on A, which hears only itself.
func TestMetricsBusLagAcrossInstances(t *testing.T) {
	for _, bc := range clusterBuses {
		t.Run(bc.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			ps := cluster(t, store, bc.spec(t), 2, time.Millisecond)
			a, b := ps[0], ps[1]
			if code := a.post("/instance-ai/threads", `{"id":"lag"}`); code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("create thread: %d", code)
			}
			// The stream opens once B follows the thread on the bus.
			onB := b.stream("lag", "")
			run := a.chat("lag", "simple hi")
			onB.Until(wait, servertest.IsRunFinish(run))
			mb := scrapeWith(t, http.DefaultClient, b.URL)
			ma := scrapeWith(t, http.DefaultClient, a.URL)
			n := mb[`threadline_bus_lag_seconds_count`]
			if n < 1 {
				t.Fatalf("B observed %v bus lags", n)
			}
			if avg := mb[`threadline_bus_lag_seconds_sum`] / n; avg < 0 || avg > wait.Seconds() {
				t.Fatalf("B's mean bus lag %vs", avg)
			}
			if got := ma[`threadline_bus_lag_seconds_count`]; got != 0 {
				t.Fatalf("A observed %v bus lags of its own frames", got)
			}
			if got := ma[`threadline_runs_finished_total{agent="script",status="completed"}`]; got != 1 {
				t.Errorf("A's finished runs: %v", got)
			}
			t.Logf("B: %v frame messages, mean lag %.2f ms", n, 1000*mb[`threadline_bus_lag_seconds_sum`]/n)
		})
	}
}

// Every metric the server exposes is in the tables of docs/operations.md.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	// A run with tools, followed on a stream that then closes, gives the
	// vectors their series (a vector without one is not exposed).
	h.EnsureThread("doc")
	live := h.Connect("doc", "", false)
	live.Until(wait, servertest.IsRunFinish(h.Chat("doc", "tools")))
	live.Close()
	h.awaitMetric(`threadline_stream_duration_seconds_count{surface="native"}`, 1)
	families := 0
	for _, mf := range mustGather(t, h) {
		if !strings.HasPrefix(mf, "threadline_") {
			continue
		}
		families++
		if !strings.Contains(string(doc), "`"+mf+"`") && !strings.Contains(string(doc), "`"+mf+"{") {
			t.Errorf("%s is not in docs/operations.md", mf)
		}
	}
	if families < 16 {
		t.Fatalf("only %d threadline_ metric families", families)
	}
}

// mustGather names the metric families the server's registry holds.
func mustGather(t *testing.T, h *harness) []string {
	t.Helper()
	mfs, err := h.App.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	return out
}
