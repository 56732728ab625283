package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// While an instance drains before a shutdown, a request that would start a
// run gets 503 server_draining with Retry-After (so a balancer retries it
// elsewhere) and changes nothing; /health says draining; reads go on.
func TestDrainingAnswers503(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{})
	run := h.Chat("th", "simple hi")
	waitRow(t, store, "th", run, rowType(instanceai.TypeRunFinish))
	if err := h.App.Sync(context.Background(), "th"); err != nil {
		t.Fatal(err)
	}
	before := len(servertest.StoredEvents(t, store, "th"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.App.Drain(ctx)

	for _, tc := range []struct{ path, body string }{
		{"/instance-ai/chat/th", `{"message":"simple"}`},
		{"/run-agent", servertest.RunAgentInput("th", "agui-1", "simple", nil)},
	} {
		req, _ := http.NewRequest(http.MethodPost, h.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" ||
			!strings.Contains(string(raw), `"code":"server_draining"`) {
			t.Fatalf("POST %s while draining: %d Retry-After %q %s", tc.path, res.StatusCode, res.Header.Get("Retry-After"), raw)
		}
	}
	if n := len(servertest.StoredEvents(t, store, "th")); n != before {
		t.Fatalf("the log grew from %d to %d events while draining", before, n)
	}
	code, out := h.Do(http.MethodGet, "/health", "")
	if code != http.StatusServiceUnavailable || out["status"] != "draining" {
		t.Fatalf("/health while draining: %d %v", code, out)
	}
	if code, _ := h.Do(http.MethodGet, "/instance-ai/threads/th/status", ""); code != http.StatusOK {
		t.Fatalf("status while draining: %d", code)
	}
}
