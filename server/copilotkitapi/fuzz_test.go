package copilotkitapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/server/servertest"
)

// FuzzRequestBodies sends arbitrary bytes as the single route's envelope,
// a thread's PATCH body and a connect body: the answer is never a 5xx,
// and the thread the PATCH names is still there.
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []string{
		`{"method":"info"}`,
		`{"method":"agent/stop","params":{"agentId":"default","threadId":"ck-fuzz"}}`,
		`{"method":"agent/connect","params":{"agentId":"default"},"body":{"threadId":"ck-fuzz","lastSeenEventId":"3"}}`,
		`{"method":"agent/run","params":{"agentId":"default"},"body":{"threadId":"ck-fuzz","runId":"r","messages":[{"id":"u","role":"user","content":"simple"}]}}`,
		`{"method":"transcribe","body":{}}`,
		`{"agentId":"default","name":"renamed"}`, `{"archived":true}`, `{"name":"","archived":null}`,
		`{"threadId":"ck-fuzz","lastSeenEventId":null}`, `{"threadId":"ck-fuzz","lastSeenEventId":"-1"}`,
		`{"method":["info"]}`, `{"params":{"agentId":7}}`, `[]`, `"x"`, ``, `{`,
	} {
		f.Add(seed)
	}
	s := servertest.Start(f, servertest.OpenStore(f, "memory"), servertest.Options{})
	s.Chat("ck-fuzz", "simple")
	client := &http.Client{Timeout: 20 * time.Second}
	f.Fuzz(func(t *testing.T, body string) {
		for _, c := range []struct{ method, path string }{
			{http.MethodPost, "/copilotkit"},
			{http.MethodPatch, "/copilotkit/threads/ck-fuzz"},
			{http.MethodPost, "/copilotkit/agent/default/connect"},
		} {
			req, _ := http.NewRequest(c.method, s.URL+c.path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s %q: %v", c.method, c.path, body, err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode >= 500 && !strings.Contains(string(raw), "service_not_configured") {
				t.Fatalf("%s %s %q: %d %s", c.method, c.path, body, res.StatusCode, raw)
			}
		}
		if code := s.WithTest(t).DoInto(http.MethodGet, "/instance-ai/threads/ck-fuzz/status", "", nil); code != http.StatusOK {
			t.Fatalf("after %q the thread answers %d", body, code)
		}
	})
}
