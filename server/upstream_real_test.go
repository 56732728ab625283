package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/upstream"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// realAgentsDir holds the pinned real AG-UI agents (CopilotKit's
// BuiltInAgent, Mastra through @ag-ui/mastra), serve.js that serves them,
// and the model's recorded streams under model/.
const realAgentsDir = "../agent/upstream/testdata/real"

// realUpstreams are the served agents: the upstream name Threadline knows
// each by (forwardedProps.agent picks it) and its path on serve.js.
var realUpstreams = []struct{ name, path string }{
	{"copilotkit", "/copilotkit-agent"},
	{"mastra", "/mastra"},
}

// realScenario is one conversation turn the model fake can answer: the
// first scenario whose message is the request's (last) user message names
// the recording, model/<name>.sse, and a request whose last message is a
// tool result gets model/<name>_answer.sse.
type realScenario struct {
	name    string
	message string
	// after, if set, is the scenario whose thread this one continues: its
	// second turn.
	after string
	// only, if set, is the one upstream that can produce the scenario.
	only string
	// tools are the client's frontend tools (JSON), toolResult what the
	// client answers its pending calls with.
	tools      string
	toolResult string
	// results are the tool results the model must get back in the
	// follow-up request, by tool call id (as JSON); none means the
	// scenario has no follow-up.
	results map[string]string
}

var realScenarios = []realScenario{
	{name: "text", message: "Say hello to Threadline."},
	{name: "reasoning", message: "What is 17 times 3? Think first."},
	{name: "parallel_tools", message: "What is the weather in Paris and in Berlin?", results: map[string]string{
		"call_Qm3vT8xLk2Pz9Rb4Nc7Wd1Hs": `{"city":"Paris","temperature":18,"conditions":"sunny"}`,
		"call_Zf6Jp1Yh8Tg3Kq5Bx2Lm9Vr0": `{"city":"Berlin","temperature":12,"conditions":"cloudy"}`,
	}},
	{name: "backend_tool", message: "What is the weather in Lisbon?", results: map[string]string{
		"call_Lh4Xw9Pe2Mq7Ty1Vb6Rk3Ns8": `{"city":"Lisbon","temperature":22,"conditions":"clear"}`,
	}},
	{name: "frontend_tool", message: "Pick a color for the header.", toolResult: "teal",
		tools:   `[{"name":"pickColor","description":"Asks the user for a color","parameters":{"type":"object","properties":{"purpose":{"type":"string"}}}}]`,
		results: map[string]string{"call_Vd8Km2Sx5Qw1Hz7Pr3Ty9Bn4": `"teal"`}},
	// Only CopilotKit's BuiltInAgent offers AGUISendStateSnapshot; Mastra's
	// shared state is its working memory, which needs a Memory with storage.
	{name: "state", message: "Remember that my favourite color is teal.", only: "copilotkit", results: map[string]string{
		"call_Nw2Tk7Ry4Bx9Pq1Hs6Lz3Vm8": `{"success":true,"snapshot":{"favouriteColor":"teal"}}`,
	}},
	// A second turn on the thread of "text" (backend_tool's message and
	// recordings): through Threadline the upstream gets the thread's
	// conversation from the log, and the rejoin afterwards holds both turns.
	{name: "second_turn", after: "text", message: "What is the weather in Lisbon?", results: map[string]string{
		"call_Lh4Xw9Pe2Mq7Ty1Vb6Rk3Ns8": `{"city":"Lisbon","temperature":22,"conditions":"clear"}`,
	}},
}

// realModel is an OpenAI-compatible server that replays the recorded
// Chat Completions streams of model/*.sse. What a request gets wrong (the
// shape the agents must send, the tool results of a follow-up) is kept in
// problems and answered with a 400.
type realModel struct {
	recordings map[string][]byte
	mu         sync.Mutex
	// served lists the requests answered: the recording and the user
	// messages of the request's conversation.
	served   []realServed
	problems []string
}

type realServed struct {
	recording string
	users     []string
}

// realChatRequest is the part of a chat completion request the fake reads.
type realChatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// startRealModel loads the recordings (without their `#` provenance
// lines) and serves them.
func startRealModel(t *testing.T) (*realModel, string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(realAgentsDir, "model", "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s/model: %v", realAgentsDir, err)
	}
	m := &realModel{recordings: map[string][]byte{}}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		for line := range strings.SplitAfterSeq(string(raw), "\n") {
			if !strings.HasPrefix(line, "#") {
				body.WriteString(line)
			}
		}
		if !strings.HasSuffix(strings.TrimSpace(body.String()), "data: [DONE]") {
			t.Fatalf("%s does not end with data: [DONE]", f)
		}
		m.recordings[strings.TrimSuffix(filepath.Base(f), ".sse")] = body.Bytes()
	}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, p := range m.problems {
			t.Errorf("model fake: %s", p)
		}
	})
	return m, srv.URL
}

// servedSince is what the fake answered after the first n requests.
func (m *realModel) servedSince(n int) []realServed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.served[n:])
}

func (m *realModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.served)
}

func (m *realModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model","created":1721172741,"owned_by":"system"}]}`)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions":
		m.fail(w, "unexpected %s %s", r.Method, r.URL.Path)
		return
	}
	var req realChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		m.fail(w, "request body: %v", err)
		return
	}
	if !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage {
		m.fail(w, "want stream: true with stream_options.include_usage (the recordings end with the usage chunk), got %+v", req)
		return
	}
	user, sc, users := "", (*realScenario)(nil), map[string]bool{}
	var userOrder []string
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			user = realText(msg.Content)
			userOrder = append(userOrder, user)
			if users[user] {
				// Every turn has a user message of its own: one that
				// comes twice was sent again.
				m.fail(w, "the conversation has the user message %q twice: %s", user, realRoles(req))
				return
			}
			users[user] = true
		}
	}
	for i := range realScenarios {
		if realScenarios[i].message == user && sc == nil {
			sc = &realScenarios[i]
		}
	}
	if sc == nil {
		m.fail(w, "no recording answers the user message %q", user)
		return
	}
	tools := map[string]bool{}
	for _, tl := range req.Tools {
		tools[tl.Function.Name] = tl.Type == "function" && len(tl.Function.Parameters) > 0
	}
	if !tools["get_weather"] {
		m.fail(w, "%s: the request lacks the backend tool get_weather: %+v", sc.name, req.Tools)
		return
	}
	if sc.tools != "" && !tools["pickColor"] {
		m.fail(w, "%s: the request lacks the client's frontend tool pickColor: %+v", sc.name, req.Tools)
		return
	}
	name := sc.name
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" {
		// A follow-up: the tool results after the last assistant message
		// must be the ones the scenario produces.
		got := map[string]string{}
		for i := n - 1; i >= 0 && req.Messages[i].Role == "tool"; i-- {
			got[req.Messages[i].ToolCallID] = realCanonJSON(realText(req.Messages[i].Content))
		}
		want := map[string]string{}
		for id, v := range sc.results {
			want[id] = realCanonJSON(v)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			m.fail(w, "%s: the follow-up request carries the tool results %v, want %v", sc.name, got, want)
			return
		}
		name += "_answer"
	}
	body, ok := m.recordings[name]
	if !ok {
		m.fail(w, "no recording %s.sse", name)
		return
	}
	m.mu.Lock()
	m.served = append(m.served, realServed{recording: name, users: userOrder})
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	// One frame at a time, as a model streams them.
	for frame := range strings.SplitAfterSeq(string(body), "\n\n") {
		if _, err := fmt.Fprint(w, frame); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

func (m *realModel) fail(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	m.mu.Lock()
	m.problems = append(m.problems, msg)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
	w.Write(b)
}

// realRoles is a request's conversation as roles with their text, for
// a problem's message.
func realRoles(req realChatRequest) string {
	var parts []string
	for _, msg := range req.Messages {
		parts = append(parts, fmt.Sprintf("%s %q", msg.Role, realText(msg.Content)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// realText is a Chat Completions message content: a string, or the text
// of its parts.
func realText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// realCanonJSON is text as canonical JSON when it is JSON (sorted keys, no
// spaces), else as a JSON string.
func realCanonJSON(text string) string {
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		v = text
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// startRealAgents runs `node serve.js` against the model fake and returns
// its base URL; the process is killed when the test ends.
func startRealAgents(t *testing.T, node, modelURL string) string {
	t.Helper()
	cmd := exec.Command(node, "serve.js")
	cmd.Dir = realAgentsDir
	cmd.Env = append(os.Environ(), "MODEL_BASE_URL="+modelURL+"/v1", "PORT=0")
	var stderr realLogBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("node serve.js: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("serve.js stderr:\n%s", stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
	}()
	select {
	case l, ok := <-line:
		var ready struct {
			Port int `json:"port"`
		}
		if !ok || json.Unmarshal([]byte(l), &ready) != nil || ready.Port == 0 {
			t.Fatalf("serve.js did not print its port (got %q):\n%s", l, stderr.String())
		}
		return fmt.Sprintf("http://127.0.0.1:%d", ready.Port)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve.js did not listen within 30 s:\n%s", stderr.String())
	}
	return ""
}

// realLogBuffer is a bytes.Buffer written by a process and read by the test.
type realLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *realLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *realLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *realLogBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// realScenariosJSON is the run.js scenarios of the upstreams named (all
// when none), each named "<upstream>/<scenario>" and sent with
// forwardedProps.agent naming its upstream.
func realScenariosJSON(t *testing.T, rejoin bool, upstreams ...string) (string, int) {
	t.Helper()
	// The turns of one thread share a thread id, new for every call.
	threads := map[string]string{}
	for _, sc := range realScenarios {
		if sc.after != "" {
			id := fmt.Sprintf("real-turns-%d", time.Now().UnixNano())
			threads[sc.after], threads[sc.name] = id, id
		}
	}
	var out []map[string]any
	for _, up := range realUpstreams {
		if len(upstreams) > 0 && !slices.Contains(upstreams, up.name) {
			continue
		}
		for _, sc := range realScenarios {
			if sc.only != "" && sc.only != up.name {
				continue
			}
			s := map[string]any{"name": up.name + "/" + sc.name, "message": sc.message,
				"forwardedProps": map[string]any{"agent": up.name}}
			if id := threads[sc.name]; id != "" {
				s["threadId"] = id + "-" + up.name
			}
			if sc.tools != "" {
				s["tools"] = json.RawMessage(sc.tools)
			}
			if sc.toolResult != "" {
				s["toolResult"] = sc.toolResult
			}
			if rejoin {
				s["rejoin"] = true
			}
			out = append(out, s)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), len(out)
}

// realCanon is a client's messages as what this test compares: role,
// content, tool calls' names and arguments (as canonical JSON), tool
// results (as canonical JSON when JSON) and the tool call each answers (by
// its position among the calls, not by id), one JSON line each.
func realCanon(msgs []map[string]any) string {
	calls := map[string]int{}
	var lines []string
	for _, m := range msgs {
		c := map[string]any{"role": m["role"]}
		if s, ok := m["content"].(string); ok && s != "" {
			if m["role"] == "tool" {
				s = realCanonJSON(s)
			}
			c["content"] = s
		} else if m["content"] != nil && s == "" {
			c["content"] = m["content"]
		}
		if tcs, _ := m["toolCalls"].([]any); len(tcs) > 0 {
			var cs []string
			for _, tc := range tcs {
				tc, _ := tc.(map[string]any)
				fn, _ := tc["function"].(map[string]any)
				id, _ := tc["id"].(string)
				calls[id] = len(calls)
				args, _ := fn["arguments"].(string)
				cs = append(cs, fmt.Sprintf("#%d %v %s", calls[id], fn["name"], realCanonJSON(args)))
			}
			c["toolCalls"] = cs
		}
		if id, ok := m["toolCallId"].(string); ok {
			if n, known := calls[id]; known {
				c["answers"] = fmt.Sprintf("#%d", n)
			} else {
				c["answers"] = "an unknown call " + id
			}
		}
		if e, ok := m["error"]; ok && e != nil && e != "" {
			c["error"] = e
		}
		b, _ := json.Marshal(c)
		lines = append(lines, string(b))
	}
	return strings.Join(lines, "\n")
}

// realBeforeResults is msgs up to the result of the first of the pending
// calls: what the client held after the run that left them pending.
func realBeforeResults(msgs []map[string]any, pending []string) []map[string]any {
	for i, m := range msgs {
		if id, _ := m["toolCallId"].(string); m["role"] == "tool" && slices.Contains(pending, id) {
			return msgs[:i]
		}
	}
	return msgs
}

// Real AG-UI agents from npm, CopilotKit's BuiltInAgent and a Mastra agent
// bridged by @ag-ui/mastra, with only their model faked (recorded Chat
// Completions streams), reach @ag-ui/client through Threadline's
// /run-agent as they do straight: every run passes the client's verifier
// without a warning and finishes, the messages and state the client ends
// with are the same both ways, the rejoin stream after the run folds to
// the same conversation, and a frontend tool's result reaches the
// upstream (and its model) on the follow-up run.
func TestUpstreamRealAgents(t *testing.T) {
	node := interopNode(t)
	for _, pkg := range []string{"@copilotkitnext/agent", "@ag-ui/mastra", "@mastra/core", "@ag-ui/encoder", "@ai-sdk/openai-compatible"} {
		nodeWith(t, realAgentsDir, pkg)
	}
	model, modelURL := startRealModel(t)
	agents := startRealAgents(t, node, modelURL)

	// Straight from the agents, once: the store plays no part.
	var reports []interopReport
	for _, up := range realUpstreams {
		scenarios, n := realScenariosJSON(t, false, up.name)
		reports = append(reports, runInterop(t, node, agents+up.path, scenarios, n))
	}
	direct := map[string][]map[string]any{} // the messages of each
	for _, rep := range reports {
		for _, r := range rep.Results {
			direct[r.Name] = r.Messages
		}
	}

	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		ups := make([]upstream.Upstream, len(realUpstreams))
		for i, up := range realUpstreams {
			ups[i] = upstream.Upstream{Name: up.name, URL: agents + up.path}
		}
		a, err := upstream.New(upstream.Config{Upstreams: ups, Store: store})
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, store, servertest.Options{Agent: a})
		scenarios, n := realScenariosJSON(t, true)
		before := model.count()
		through := runInterop(t, node, h.URL+"/run-agent", scenarios, n)

		// A second turn's client sent only its own message: the earlier
		// turn reached each upstream (and its model) from the thread's log.
		turns := 0
		for _, s := range model.servedSince(before) {
			if slices.Equal(s.users, []string{"Say hello to Threadline.", "What is the weather in Lisbon?"}) {
				turns++
			}
		}
		if turns < 2*len(realUpstreams) { // the call and the answer, on each
			t.Errorf("the model saw the first turn in %d requests of the second turns, want %d", turns, 2*len(realUpstreams))
		}
		for i := range through.Results {
			got := &through.Results[i]
			t.Run(got.Name, func(t *testing.T) {
				up, name, _ := strings.Cut(got.Name, "/")
				d, k := realFind(reports, got.Name)
				if d < 0 {
					t.Fatalf("no direct run of %s", got.Name)
				}
				want := &reports[d].Results[k]
				for _, w := range want.Warnings {
					t.Errorf("straight from the upstream: client console.%s: %s", w.Level, w.Text)
				}
				for _, w := range got.Warnings {
					t.Errorf("through Threadline: client console.%s: %s", w.Level, w.Text)
				}
				want.interopRun.succeeded(t, "straight from the upstream")
				got.interopRun.succeeded(t, "through Threadline")
				if want.FollowUp != nil {
					want.FollowUp.succeeded(t, "straight from the upstream, the follow-up run")
				}
				if got.FollowUp != nil {
					got.FollowUp.succeeded(t, "through Threadline, the follow-up run")
				}
				if (want.FollowUp == nil) != (got.FollowUp == nil) || len(want.PendingToolCallIDs) != len(got.PendingToolCallIDs) {
					t.Fatalf("pending tool calls %v through Threadline, %v straight", got.PendingToolCallIDs, want.PendingToolCallIDs)
				}
				if g, w := realCanon(got.Messages), realCanon(want.Messages); g != w {
					t.Fatalf("messages through Threadline\n%s\nstraight from the upstream\n%s\n(events through Threadline %v, straight %v)",
						g, w, got.Events, want.Events)
				}
				gs, _ := json.Marshal(got.State)
				ws, _ := json.Marshal(want.State)
				if string(gs) != string(ws) {
					t.Fatalf("state through Threadline %s, straight from the upstream %s", gs, ws)
				}
				if name == "second_turn" {
					// The tokens an upstream reports on RUN_FINISHED are the
					// run's: Mastra's are its model's over both calls
					// (backend_tool.sse and its answer); BuiltInAgent reports
					// none.
					var usage []instanceai.TokenUsage
					if up == "mastra" {
						usage = []instanceai.TokenUsage{{Provider: "openai.chat", Model: "gpt-4o-mini", InputTokens: 88 + 131, OutputTokens: 16 + 12, TotalTokens: 104 + 143}}
					}
					fin := waitLogEnd(t, store, got.ThreadID, 10*time.Second)
					if fmt.Sprint(fin.Usage) != fmt.Sprint(usage) {
						t.Errorf("run-finish usage %+v, want %+v", fin.Usage, usage)
					}
				}
				j := got.Rejoin
				if j == nil {
					t.Fatal("no rejoin report")
				}
				if j.Error != nil || j.RunError != nil || len(j.Events) == 0 || j.Events[0] != "RUN_STARTED" ||
					j.Events[len(j.Events)-1] != "RUN_FINISHED" {
					t.Fatalf("rejoin: error %v, runError %+v, events %v", j.Error, j.RunError, j.Events)
				}
				// The rejoin is read after the first run (before a frontend
				// tool's result), and holds the thread's earlier turns.
				wantRejoin := realBeforeResults(want.Messages, want.PendingToolCallIDs)
				for _, sc := range realScenarios {
					if sc.name == name && sc.after != "" {
						wantRejoin = realFoldByID(append(slices.Clone(direct[up+"/"+sc.after]), wantRejoin...))
					}
				}
				if g, w := realCanon(j.Messages), realCanon(wantRejoin); g != w {
					t.Fatalf("rejoin messages\n%s\nwant\n%s\n(rejoin events %v)", g, w, j.Events)
				}
			})
		}
	})
}

// realFoldByID is the messages of several runs as one client that
// followed them all holds them (@ag-ui/client 1.0.0's defaultApplyEvents,
// which mapping.AGUIFold follows): a message whose id an earlier run's
// message has already is not a message of its own, its text and tool
// calls go to the earlier one. CopilotKit's BuiltInAgent names the text of
// every run "txt-0", AI SDK's id of a Chat Completions response's first
// text part, so its second turn's text lands in the first turn's message.
func realFoldByID(msgs []map[string]any) []map[string]any {
	var out []map[string]any
	seen := map[string]map[string]any{}
	for _, m := range msgs {
		id, _ := m["id"].(string)
		if prev := seen[id]; prev != nil && id != "" && m["role"] == prev["role"] {
			a, _ := prev["content"].(string)
			b, _ := m["content"].(string)
			if a+b != "" {
				prev["content"] = a + b
			}
			if calls, _ := m["toolCalls"].([]any); len(calls) > 0 {
				had, _ := prev["toolCalls"].([]any)
				prev["toolCalls"] = append(slices.Clone(had), calls...)
			}
			continue
		}
		c := maps.Clone(m)
		seen[id] = c
		out = append(out, c)
	}
	return out
}

// realFind is where the scenario named name is in reports: report d,
// result k (-1, -1 when it is not).
func realFind(reports []interopReport, name string) (d, k int) {
	for d := range reports {
		for k := range reports[d].Results {
			if reports[d].Results[k].Name == name {
				return d, k
			}
		}
	}
	return -1, -1
}
