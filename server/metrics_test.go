package server_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// scrape reads /metrics and returns each sample line's value by its name
// and labels as the exposition format prints them.
func (h *harness) scrape() map[string]float64 {
	h.t.Helper()
	return scrapeWith(h.t, h.Client, h.URL)
}

// scrapeWith reads base's /metrics with client, as scrape does.
func scrapeWith(t *testing.T, client *http.Client, base string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("/metrics: %d %s", res.StatusCode, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetrics(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	before := h.scrape()
	h.EnsureThread("metrics")
	live := h.Connect("metrics", "", false)
	runID := h.Chat("metrics", "tools")
	live.Until(wait, servertest.IsRunFinish(runID))
	if err := h.App.Sync(context.Background(), "metrics"); err != nil {
		t.Fatal(err)
	}
	// The stream subscribes once its replay is over, which may come after
	// it sent the whole run (a run quicker than the replay's start).
	deadline := time.Now().Add(wait)
	for h.App.Subscribers() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	after := h.scrape()
	stored := servertest.StoredEvents(t, h.Store, "metrics")

	if got := after[`threadline_events_published_total{type="run-start"}`] - before[`threadline_events_published_total{type="run-start"}`]; got != 1 {
		t.Fatalf("run-start events counted %v, want 1", got)
	}
	if got := after[`threadline_events_published_total{type="tool-call"}`]; got != 3 {
		t.Fatalf("tool-call events counted %v, want 3", got)
	}
	if got := after[`threadline_events_published_total{type="text-delta"}`]; got < 2 {
		t.Fatalf("text-delta events counted %v", got)
	}
	// The tools scenario ends two calls with a result and one with an error.
	if got := after[`threadline_tool_call_seconds_count{outcome="result",tool="workflows"}`] +
		after[`threadline_tool_call_seconds_count{outcome="result",tool="build-workflow"}`]; got != 2 {
		t.Fatalf("tool results timed %v, want 2", got)
	}
	if got := after[`threadline_tool_call_seconds_count{outcome="error",tool="executions"}`]; got != 1 {
		t.Fatalf("tool errors timed %v, want 1", got)
	}
	if got := after[`threadline_run_first_text_seconds_count`]; got != 1 {
		t.Fatalf("first-text observations %v, want 1", got)
	}
	if got := after[`threadline_writer_batch_rows_sum`]; got != float64(len(stored)) {
		t.Fatalf("rows committed %v, stored %d", got, len(stored))
	}
	if got := after[`threadline_subscribers`]; got != 1 {
		t.Fatalf("subscribers %v, want 1 (the open stream)", got)
	}
	if _, ok := after[`threadline_active_runs`]; !ok {
		t.Fatal("no active-runs gauge")
	}
}

func TestMetricsNeedATokenWhenAuthIsOn(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-a=alice"})
	code, _ := h.Do(http.MethodGet, "/metrics", "")
	if code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d", code)
	}
	if m := h.As("tok-a").scrape(); len(m) == 0 {
		t.Fatal("no metrics with a token")
	}
}

// namedAgent is an agent with named upstreams that records which one a
// run asked for.
type namedAgent struct{ picked chan string }

func (a *namedAgent) Names() []string { return []string{"support", "sales"} }

func (a *namedAgent) Run(ctx context.Context, run *instanceai.Run) error {
	a.picked <- run.AgentName
	return nil
}

func TestAgentNames(t *testing.T) {
	agent := &namedAgent{picked: make(chan string, 4)}
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Agent: agent})

	code, body := h.Do(http.MethodPost, "/instance-ai/chat/named", `{"message":"hi","agent":"billing"}`)
	if code != http.StatusBadRequest || fieldOf(body) != "agent" || !strings.Contains(body["error"].(map[string]any)["message"].(string), "support, sales") {
		t.Fatalf("unknown agent: %d %v", code, body)
	}
	h.Chat("named", "plain")
	if got := <-agent.picked; got != "" {
		t.Fatalf("default run picked %q", got)
	}
	waitRunFinish(t, h.Store, "named", wait)
	code, body = h.Do(http.MethodPost, "/instance-ai/chat/named2", `{"message":"hi","agent":"sales"}`)
	if code != http.StatusOK {
		t.Fatalf("named agent: %d %v", code, body)
	}
	if got := <-agent.picked; got != "sales" {
		t.Fatalf("run picked %q, want sales", got)
	}

	for _, c := range []struct {
		props map[string]any
		want  int
	}{
		{map[string]any{"agent": "billing"}, http.StatusBadRequest},
		{map[string]any{"agent": 7}, http.StatusBadRequest},
	} {
		status, errCode, field := h.runAgentRejected(servertest.RunAgentInput("ag-named", "r1", "hi", map[string]any{"forwardedProps": c.props}))
		if status != c.want || field != "forwardedProps.agent" {
			t.Fatalf("forwardedProps %v: %d %s %s", c.props, status, errCode, field)
		}
	}
	evs := h.runAgent("ag-named", "r2", "hi", map[string]any{"forwardedProps": map[string]any{"agent": "support"}})
	if got := <-agent.picked; got != "support" || evs[len(evs)-1].typ != "RUN_FINISHED" {
		t.Fatalf("AG-UI run picked %q, ended %s", got, evs[len(evs)-1].typ)
	}

	code, body = h.Do(http.MethodGet, "/status", "")
	agents, _ := body["agents"].(map[string]any)
	// The named upstreams, and the builder's agents beside them.
	if code != http.StatusOK || len(agents) != 5 || agents["support"] == nil || agents["sales"] == nil ||
		agents["generator"] == nil || agents["validator"] == nil || agents["orchestrator"] == nil {
		t.Fatalf("/status lists %v", body)
	}
}
