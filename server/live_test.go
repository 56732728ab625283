package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/threadline/threadline/agent/n8n"
	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// The live tests run the real agents against real upstreams when they are
// named in the environment. Without them (CI has neither a model server nor
// an n8n instance) they run against httptest servers replaying recordings
// of real ones: llama.cpp's llama-server (agent/openai/testdata) and
// n8n 1.123 (agent/n8n/testdata/real).
//
//	THREADLINE_LIVE_OPENAI_BASE_URL=http://localhost:11434/v1 THREADLINE_LIVE_OPENAI_MODEL=llama3.2 \
//	THREADLINE_LIVE_OPENAI_API_KEY=… THREADLINE_LIVE_OPENAI_REQUEST_OPTIONS='{"max_tokens":64}' go test -run TestLive ./server/
//	THREADLINE_LIVE_N8N_WEBHOOK=http://localhost:5678/webhook/threadline-agent go test -run TestLive ./server/
//
// Both drive one message through the native and the AG-UI endpoints and
// check what any working upstream must give: a completed run with text, and
// an AG-UI stream the client's verifier accepts.

func liveRun(t *testing.T, h *harness, thread string) {
	t.Helper()
	h.EnsureThread(thread)
	live := h.Connect(thread, "", false)
	runID := h.Chat(thread, "Say hello in five words.")
	frames := live.Until(wait, servertest.IsRunFinish(runID))
	var text strings.Builder
	for _, f := range frames {
		if p, ok := f.Decoded.Payload.(*instanceai.Text); ok && (f.Decoded.Type == instanceai.TypeTextDelta || f.Decoded.Type == instanceai.TypeTextBlock) {
			text.WriteString(p.Text)
		}
	}
	fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
	if fin.Status != instanceai.RunCompleted || strings.TrimSpace(text.String()) == "" {
		t.Fatalf("native run: status %s (%s), text %q", fin.Status, fin.Reason, text.String())
	}
	t.Logf("native answer: %q, usage %+v", text.String(), fin.Usage)

	evs := h.runAgent("ag-"+thread, "live-1", "Now say goodbye in five words.", nil)
	if err := verifyAGUI(evs); err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.typ != "RUN_FINISHED" || countType(evs, "TEXT_MESSAGE_CONTENT") == 0 {
		t.Fatalf("AG-UI run: %v, last %s", types(evs), last.raw)
	}
}

func TestLiveOpenAI(t *testing.T) {
	base, model := os.Getenv("THREADLINE_LIVE_OPENAI_BASE_URL"), os.Getenv("THREADLINE_LIVE_OPENAI_MODEL")
	if base == "" {
		base, model = replayServer(t, "application/json", map[string]string{
			"/v1/chat/completions": "../agent/openai/testdata/llamacpp_text_stop.sse",
			"/v1/models":           "../agent/openai/testdata/llamacpp_models.json",
		})+"/v1", "tiny"
	}
	store := servertest.OpenStore(t, "memory")
	agent, err := openai.New(openai.Config{BaseURL: base, Model: model,
		APIKey: os.Getenv("THREADLINE_LIVE_OPENAI_API_KEY"), Store: store,
		RequestOptions: json.RawMessage(os.Getenv("THREADLINE_LIVE_OPENAI_REQUEST_OPTIONS"))})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, store, servertest.Options{Agent: agent, Config: server.Config{LLMHealth: agent.HealthHandler()}})
	if code, body := h.Do(http.MethodGet, "/llm/health", ""); code != http.StatusOK {
		t.Fatalf("/llm/health: %d %v", code, body)
	}
	liveRun(t, h, "live-openai")
}

func TestLiveN8N(t *testing.T) {
	url := os.Getenv("THREADLINE_LIVE_N8N_WEBHOOK")
	if url == "" {
		url = replayServer(t, "application/json; charset=utf-8", map[string]string{
			"/webhook/threadline-agent": "../agent/n8n/testdata/real/stream-normal.ndjson",
		}) + "/webhook/threadline-agent"
	}
	agent, err := n8n.New(n8n.Config{Webhooks: []n8n.Webhook{{Name: "live", URL: url}}})
	if err != nil {
		t.Fatal(err)
	}
	liveRun(t, start(t, servertest.OpenStore(t, "memory"), servertest.Options{Agent: agent}), "live-n8n")
}

// replayServer answers each path with a recorded body (SSE recordings
// without their '#' provenance lines), whatever the request; the content
// type of .sse files is text/event-stream, of the others contentType.
func replayServer(t *testing.T, contentType string, bodies map[string]string) string {
	t.Helper()
	recorded := map[string][]byte{}
	for path, file := range bodies {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(file, ".sse") {
			var kept []string
			for _, line := range strings.SplitAfter(string(raw), "\n") {
				if !strings.HasPrefix(line, "#") {
					kept = append(kept, line)
				}
			}
			raw = []byte(strings.Join(kept, ""))
		}
		recorded[path] = raw
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := recorded[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		ct := contentType
		if strings.HasSuffix(bodies[r.URL.Path], ".sse") {
			ct = "text/event-stream"
		}
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
