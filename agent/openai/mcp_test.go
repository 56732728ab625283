package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/agent/tools/mcptools"
	"github.com/threadline/threadline/agent/tools/mcptools/mcptest"
	"github.com/threadline/threadline/instanceai"
)

// The model's side of these tests is the fake OpenAI-compatible server of
// harness_test.go replaying chunk streams built with its helpers
// (callChunk, finishChunk, answer), in the shape of the recorded OpenAI
// streams under testdata: one tool call, then a text answer. The MCP side
// is real: the pinned npm servers of agent/tools/mcptools/testdata.

// mcpRegistry starts the servers and returns their tools as a registry.
func mcpRegistry(t *testing.T, servers map[string]mcptools.Server) (*tools.Registry, *mcptools.Manager) {
	t.Helper()
	m := mcptest.Start(t, servers)
	set, err := m.Tools()
	if err != nil {
		t.Fatal(err)
	}
	return registry(t, set...), m
}

// callThenAnswer is a model that calls one tool, then answers "Done.".
func callThenAnswer(t *testing.T, tool, args string) *fake {
	return newFake(t, replay(sse(callChunk("r1", 0, "c1", tool, args), finishChunk("r1", "tool_calls"))), answer("r2", "Done.", 1, 1))
}

// toolMessage is the tool message the model got in its second request.
func toolMessage(t *testing.T, f *fake) string {
	t.Helper()
	reqs := f.requests()
	if len(reqs) < 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	for _, m := range reqs[1].Messages {
		if m.Role == "tool" && m.ToolCallID == "c1" {
			return *m.Content
		}
	}
	t.Fatalf("no tool message: %q", reqs[1].summary())
	return ""
}

func completed(t *testing.T, evs []instanceai.Event) {
	t.Helper()
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
}

// TestMCPReadOnlyCall: a read-only tool runs without a confirmation, over
// stdio and over streamable HTTP.
func TestMCPReadOnlyCall(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			srv := mcptest.Everything(t)
			if transport == "http" {
				srv = mcptest.EverythingHTTP(t)
			}
			reg, _ := mcpRegistry(t, map[string]mcptools.Server{"ev": srv})
			f := callThenAnswer(t, "ev__echo", `{"message":"hi"}`)
			h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
			evs := h.play(t, instanceai.StartRequest{Message: "echo hi"})
			completed(t, evs)
			if n := len(ofType[*instanceai.ConfirmationRequest](evs, instanceai.TypeConfirmRequest)); n != 0 {
				t.Errorf("%d confirmations for a read-only tool", n)
			}
			results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
			if len(results) != 1 || string(results[0].Result) != `"Echo: hi"` {
				t.Fatalf("results %+v", results)
			}
			if got := toolMessage(t, f); got != "Echo: hi" {
				t.Errorf("tool message %q", got)
			}
			var offered []string
			for _, tool := range f.requests()[0].Tools {
				offered = append(offered, tool.Function.Name)
			}
			if !strings.Contains(strings.Join(offered, ","), "ev__echo") {
				t.Errorf("tools offered %q", offered)
			}
		})
	}
}

// TestMCPDestructiveCall: server-filesystem's write_file says
// destructiveHint: it waits for a person, and runs only when approved.
func TestMCPDestructiveCall(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approved", false: "denied"}[approve], func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			reg, _ := mcpRegistry(t, map[string]mcptools.Server{"fs": mcptest.Filesystem(t, dir)})
			path := filepath.Join(dir, "note.txt")
			args, _ := json.Marshal(map[string]string{"path": path, "content": "hello"})
			f := callThenAnswer(t, "fs__write_file", string(args))
			h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
			run := h.start(t, instanceai.StartRequest{Message: "write a note"})
			c := waitConfirmation(t, h)
			var req instanceai.ConfirmationRequest
			if err := json.Unmarshal(c.Request, &req); err != nil {
				t.Fatal(err)
			}
			if req.ToolCallID != "c1" || req.ToolName != "fs__write_file" || req.Severity != instanceai.SeverityDestructive {
				t.Errorf("confirmation %+v", req)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("the file exists before the approval: %v", err)
			}
			if _, _, err := h.runs.Answer(context.Background(), user, c.RequestID, instanceai.Answer{Approved: approve}); err != nil {
				t.Fatal(err)
			}
			evs := h.wait(t, run)
			completed(t, evs)
			got, err := os.ReadFile(path)
			if approve && (err != nil || string(got) != "hello") {
				t.Errorf("approved: file %q %v", got, err)
			}
			if !approve && !os.IsNotExist(err) {
				t.Errorf("denied: the file was written (%v)", err)
			}
			results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
			if len(results) != 1 || strings.Contains(string(results[0].Result), `"denied":true`) == approve {
				t.Errorf("results %+v", results)
			}
		})
	}
}

// TestMCPElicitation: server-everything's elicitation becomes a questions
// confirmation-request of the run, and the person's answers go back.
func TestMCPElicitation(t *testing.T) {
	reg, _ := mcpRegistry(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	f := callThenAnswer(t, "ev__trigger-elicitation-request", `{}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
	run := h.start(t, instanceai.StartRequest{Message: "ask me"})
	c := waitConfirmation(t, h)
	var req instanceai.ConfirmationRequest
	if err := json.Unmarshal(c.Request, &req); err != nil {
		t.Fatal(err)
	}
	if req.InputType != instanceai.InputQuestions || req.ToolCallID != "c1" || len(req.Questions) < 5 || req.Questions[0].ID != "name" ||
		!strings.Contains(req.Message, "Please provide inputs") {
		t.Fatalf("confirmation %+v", req)
	}
	if _, _, err := h.runs.Answer(context.Background(), user, c.RequestID, instanceai.Answer{Kind: instanceai.AnswerQuestions, Approved: true,
		Answers: []instanceai.QuestionAnswer{{QuestionID: "name", CustomText: "Ada Lovelace"}, {QuestionID: "check", SelectedOptions: []string{"Yes"}}}}); err != nil {
		t.Fatal(err)
	}
	evs := h.wait(t, run)
	completed(t, evs)
	msg := toolMessage(t, f)
	if !strings.Contains(msg, "User provided the requested information") || !strings.Contains(msg, "Name: Ada Lovelace") || !strings.Contains(msg, "Agreed to terms: true") {
		t.Errorf("tool message %q", msg)
	}
}

// TestMCPProgress: the server's progress notifications are status events.
func TestMCPProgress(t *testing.T) {
	reg, _ := mcpRegistry(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	f := callThenAnswer(t, "ev__trigger-long-running-operation", `{"duration":1.5,"steps":3}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
	status := watchStatus(t, h)
	evs := h.play(t, instanceai.StartRequest{Message: "go"})
	completed(t, evs)
	var got []string
	for s := range status {
		got = append(got, s)
	}
	// The SDK hands notifications to a queue of their own and responses
	// straight to the caller, so a notification sent just before the
	// result may come after it, when the call is over, and is dropped:
	// the last of the three may be missing, not the first, sent a whole
	// step (half a second) before the result.
	want := []string{"ev__trigger-long-running-operation: 1 of 3", "ev__trigger-long-running-operation: 2 of 3", "ev__trigger-long-running-operation: 3 of 3"}
	if len(got) == 0 || !slices.Equal(got, want[:len(got)]) {
		t.Errorf("status events %q, want a start of %q", got, want)
	}
}

// watchStatus follows the thread live and sends the status events'
// messages (they are ephemeral: the log does not keep them); it closes the
// channel at the first run-finish.
func watchStatus(t *testing.T, h *harness) <-chan string {
	t.Helper()
	sub, _ := h.hub.Subscribe(thread)
	out := make(chan string, 256)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
		sub.Close()
	})
	go func() {
		defer close(done)
		for {
			frames, err := sub.Next(ctx)
			if err != nil {
				return
			}
			for _, f := range frames {
				if f.Event.Type == instanceai.TypeRunFinish {
					close(out)
					return
				}
				if s, ok := f.Event.Payload.(*instanceai.Status); ok && f.Event.Type == instanceai.TypeStatus {
					select {
					case out <- s.Message:
					default:
					}
				}
			}
		}
	}()
	return out
}

// firstStatus waits for the run's first status event.
func firstStatus(t *testing.T, status <-chan string) string {
	t.Helper()
	select {
	case s, ok := <-status:
		if !ok {
			t.Fatal("the run finished without a status event")
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no status event")
		return ""
	}
}

// TestMCPCancelDuringLongCall: cancelling the run ends the MCP call at once
// (the SDK sends notifications/cancelled), not when the tool would end.
func TestMCPCancelDuringLongCall(t *testing.T) {
	reg, m := mcpRegistry(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	f := callThenAnswer(t, "ev__trigger-long-running-operation", `{"duration":60,"steps":60}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
	started := time.Now()
	status := watchStatus(t, h)
	run := h.start(t, instanceai.StartRequest{Message: "go"})
	firstStatus(t, status)
	h.runs.Cancel(thread, instanceai.ReasonUserCancelled)
	evs := h.wait(t, run)
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCancelled {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	if time.Since(started) > 40*time.Second {
		t.Errorf("the run took %s: the call was not cancelled", time.Since(started))
	}
	if len(f.requests()) != 1 {
		t.Errorf("%d model requests after the cancel", len(f.requests()))
	}
	if st := m.Status()["ev"]; st.State != mcptools.StateConnected || st.Restarts != 0 {
		t.Errorf("server %+v", st)
	}
}

// TestMCPServerCrashMidCall: the server dies during the call: the call is
// a tool-error naming the server, the model goes on, the server restarts.
func TestMCPServerCrashMidCall(t *testing.T) {
	reg, m := mcpRegistry(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	pid := m.Status()["ev"].PID
	f := callThenAnswer(t, "ev__trigger-long-running-operation", `{"duration":60,"steps":60}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
	status := watchStatus(t, h)
	run := h.start(t, instanceai.StartRequest{Message: "go"})
	firstStatus(t, status)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs := h.wait(t, run)
	completed(t, evs)
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || !strings.Contains(errs[0].Error, `MCP server "ev" stopped answering during the call`) {
		t.Fatalf("tool errors %+v", toolErrors(errs))
	}
	if msg := toolMessage(t, f); !strings.HasPrefix(msg, "Error: ") || !strings.Contains(msg, `"ev"`) {
		t.Errorf("tool message %q", msg)
	}
	mcptest.WaitStatus(t, m, "ev", func(st mcptools.ServerStatus) bool { return st.State == mcptools.StateConnected && st.Restarts == 1 })
}

// TestMCPServerNeverAnswers: a call the server never answers is a
// tool-error at the server's timeout.
func TestMCPServerNeverAnswers(t *testing.T) {
	srv := mcptest.Silent(t)
	srv.Timeout = 300 * time.Millisecond
	reg, _ := mcpRegistry(t, map[string]mcptools.Server{"quiet": srv})
	f := callThenAnswer(t, "quiet__wait", `{}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
	evs := h.play(t, instanceai.StartRequest{Message: "wait"})
	completed(t, evs)
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || !strings.Contains(errs[0].Error, `"quiet"`) || !strings.Contains(errs[0].Error, "timed out") {
		t.Fatalf("tool errors %+v", toolErrors(errs))
	}
}

// TestMCPImageToModel: an image a tool returns reaches the model as an
// image_url content part of a user message after the tool messages; the
// log keeps only its description.
func TestMCPImageToModel(t *testing.T) {
	reg, _ := mcpRegistry(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	f := callThenAnswer(t, "ev__get-tiny-image", `{}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg})
	evs := h.play(t, instanceai.StartRequest{Message: "show me"})
	completed(t, evs)
	results := ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)
	if len(results) != 1 || !strings.Contains(string(results[0].Result), `"sentToModel":true`) || strings.Contains(string(results[0].Result), "iVBOR") {
		t.Fatalf("results %+v", results)
	}
	msgs := f.requests()[1].Messages
	last := msgs[len(msgs)-1]
	if last.Role != "user" || msgs[len(msgs)-2].Role != "tool" {
		t.Fatalf("messages %q", f.requests()[1].summary())
	}
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal([]byte(*last.Content), &parts); err != nil {
		t.Fatalf("content %q: %v", *last.Content, err)
	}
	if len(parts) != 2 || parts[0].Type != "text" || parts[1].Type != "image_url" || !strings.HasPrefix(parts[1].ImageURL.URL, "data:image/png;base64,iVBOR") {
		t.Errorf("parts %+v", parts)
	}
}

// TestMCPResumeAfterRestart: Threadline stops while a destructive MCP call
// waits for approval; the next process starts its MCP servers, takes the
// answer and runs the call.
func TestMCPResumeAfterRestart(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]mcptools.Server{"fs": mcptest.Filesystem(t, dir)}
	reg, first := mcpRegistry(t, servers)
	path := filepath.Join(dir, "after-restart.txt")
	args, _ := json.Marshal(map[string]string{"path": path, "content": "resumed"})
	f := callThenAnswer(t, "fs__write_file", string(args))
	cfg := openai.Config{BaseURL: f.url(), Model: "m", Tools: reg}
	h := newHarness(t, cfg)
	run := h.start(t, instanceai.StartRequest{Message: "write it"})
	c := waitConfirmation(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.stop(t, ctx)
	_ = first.Close() // the process ends: its MCP servers with it

	// The next process.
	cfg.Tools, _ = mcpRegistry(t, servers)
	runs := h.next(t, cfg)
	if _, _, err := runs.Answer(ctx, user, c.RequestID, instanceai.Answer{Approved: true}); err != nil {
		t.Fatal(err)
	}
	evs := h.resumed(t, runs, run.ID)
	completed(t, evs)
	if got, err := os.ReadFile(path); err != nil || string(got) != "resumed" {
		t.Errorf("file %q %v", got, err)
	}
	if msg := toolMessage(t, f); !strings.Contains(msg, "Successfully wrote") {
		t.Errorf("tool message %q", msg)
	}
}

func toolErrors(errs []*instanceai.ToolError) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error)
	}
	return out
}

// TestMCPElicitationAcrossRestart: Threadline stops while an MCP tool's
// question waits for the person; the answer comes to the next process,
// where the call (and its server session) is gone: the call is reported
// interrupted, not run again, and the run goes on.
func TestMCPElicitationAcrossRestart(t *testing.T) {
	servers := map[string]mcptools.Server{"ev": mcptest.Everything(t)}
	reg, first := mcpRegistry(t, servers)
	f := callThenAnswer(t, "ev__trigger-elicitation-request", `{}`)
	cfg := openai.Config{BaseURL: f.url(), Model: "m", Tools: reg}
	h := newHarness(t, cfg)
	run := h.start(t, instanceai.StartRequest{Message: "ask me"})
	c := waitConfirmation(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.stop(t, ctx)
	_ = first.Close()

	cfg.Tools, _ = mcpRegistry(t, servers)
	runs := h.next(t, cfg)
	if _, _, err := runs.Answer(ctx, user, c.RequestID, instanceai.Answer{Kind: instanceai.AnswerQuestions, Approved: true,
		Answers: []instanceai.QuestionAnswer{{QuestionID: "name", CustomText: "Ada"}}}); err != nil {
		t.Fatal(err)
	}
	evs := h.resumed(t, runs, run.ID)
	completed(t, evs)
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || !strings.Contains(errs[0].Error, "interrupted by a server restart") {
		t.Fatalf("tool errors %q", toolErrors(errs))
	}
	if msg := toolMessage(t, f); !strings.Contains(msg, "interrupted") {
		t.Errorf("tool message %q", msg)
	}
}

// An MCP tool's result over the bound on one event (under the bound on
// one MCP message) is a tool-error naming its size and the bound: not
// stored, not handed to the model, and the run goes on.
func TestMCPResultOverTheEventBound(t *testing.T) {
	type sizeArgs struct {
		Bytes int `json:"bytes"`
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "sized", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "sized", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, a sizeArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", a.Bytes)}}}, nil, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	reg, _ := mcpRegistry(t, map[string]mcptools.Server{"s": {URL: ts.URL}})
	f := callThenAnswer(t, "s__sized", `{"bytes":2097152}`)
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "m", Tools: reg, MaxEventBytes: 1 << 20})
	evs := h.play(t, instanceai.StartRequest{Message: "read it all"})
	completed(t, evs)
	errs := ofType[*instanceai.ToolError](evs, instanceai.TypeToolError)
	if len(errs) != 1 || !strings.Contains(errs[0].Error, "2097154 bytes (2.0 MiB), over 1 MiB, the bound on one event (--max-event-bytes)") {
		t.Fatalf("tool errors %+v", errs)
	}
	if n := len(ofType[*instanceai.ToolResult](evs, instanceai.TypeToolResult)); n != 0 {
		t.Fatalf("%d tool results stored", n)
	}
	if msg := toolMessage(t, f); !strings.HasPrefix(msg, "Error: The tool's result was 2097154 bytes") {
		t.Fatalf("the model got %.200q", msg)
	}
}
