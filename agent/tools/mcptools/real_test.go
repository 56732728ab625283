package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/agent/tools/mcptools"
	"github.com/threadline/threadline/agent/tools/mcptools/mcptest"
	"github.com/threadline/threadline/instanceai"
)

func find(t *testing.T, m *mcptools.Manager, name string) tools.Tool {
	t.Helper()
	ts, err := m.Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("no tool %s", name)
	return tools.Tool{}
}

func call(t *testing.T, m *mcptools.Manager, name, args string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return find(t, m, name).Execute(ctx, json.RawMessage(args))
}

// TestMCPResults: server-everything's results over both transports: text,
// structured content, resource links, images, and a tool's own error.
func TestMCPResults(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			srv := mcptest.Everything(t)
			if transport == "http" {
				srv = mcptest.EverythingHTTP(t)
			}
			m := mcptest.Start(t, map[string]mcptools.Server{"ev": srv})
			if st := m.Status()["ev"]; st.State != mcptools.StateConnected || st.Transport != transport || st.Tools < 10 {
				t.Errorf("status %+v", st)
			}
			if echo := find(t, m, "ev__echo"); echo.NeedsApproval || echo.Severity != instanceai.SeverityInfo {
				t.Errorf("echo is read-only: %+v", echo)
			}
			got, err := call(t, m, "ev__echo", `{"message":"hi"}`)
			if err != nil || string(got) != `"Echo: hi"` {
				t.Errorf("echo %s %v", got, err)
			}
			got, err = call(t, m, "ev__get-structured-content", `{"location":"New York"}`)
			var sc struct {
				Structured struct {
					Temperature float64 `json:"temperature"`
				} `json:"structuredContent"`
			}
			if err != nil || json.Unmarshal(got, &sc) != nil || sc.Structured.Temperature == 0 {
				t.Errorf("structured %s %v", got, err)
			}
			got, err = call(t, m, "ev__get-resource-links", `{"count":2}`)
			var rl struct {
				Resources []struct {
					URI string `json:"uri"`
				} `json:"resources"`
			}
			if err != nil || json.Unmarshal(got, &rl) != nil || len(rl.Resources) != 2 || !strings.HasPrefix(rl.Resources[0].URI, "demo://") {
				t.Errorf("resource links %s %v", got, err)
			}
			// Outside a run there is nobody to hand the image to.
			got, err = call(t, m, "ev__get-tiny-image", `{}`)
			if err != nil || !strings.Contains(string(got), `"images":[{"mimeType":"image/png"`) || !strings.Contains(string(got), `"sentToModel":false`) {
				t.Errorf("image %s %v", got, err)
			}
			// Arguments the tool refuses: isError, with the server's words.
			_, err = call(t, m, "ev__get-sum", `{"a":"one","b":2}`)
			if err == nil || !strings.Contains(err.Error(), "a") {
				t.Errorf("bad arguments: %v", err)
			}
		})
	}
}

// TestMCPNeverAnswers: a call the server never answers ends at the
// server's timeout, naming the server.
func TestMCPNeverAnswers(t *testing.T) {
	srv := mcptest.Silent(t)
	srv.Timeout = 300 * time.Millisecond
	m := mcptest.Start(t, map[string]mcptools.Server{"quiet": srv})
	started := time.Now()
	_, err := call(t, m, "quiet__wait", `{}`)
	if err == nil || !strings.Contains(err.Error(), `"quiet"`) || !strings.Contains(err.Error(), "timed out") || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("error %v", err)
	}
	if time.Since(started) > 20*time.Second {
		t.Errorf("the timeout took %s", time.Since(started))
	}
	if st := m.Status()["quiet"]; st.State != mcptools.StateConnected {
		t.Errorf("a slow call is no dead server: %+v", st)
	}
}

// longCall starts trigger-long-running-operation (30 steps over 30 s) in
// a call that reports its progress on a channel.
func longCall(t *testing.T, m *mcptools.Manager, name string, ctx context.Context) (progress <-chan string, result <-chan error) {
	p := make(chan string, 64)
	r := make(chan error, 1)
	ctx = tools.WithCall(ctx, &tools.Call{ToolCallID: "c1", ToolName: name, Status: func(msg string) error {
		select {
		case p <- msg:
		default:
		}
		return nil
	}})
	go func() {
		_, err := find(t, m, name).Execute(ctx, json.RawMessage(`{"duration":30,"steps":30}`))
		r <- err
	}()
	return p, r
}

// TestMCPCancel: cancelling the run's context ends the call at once.
func TestMCPCancel(t *testing.T) {
	m := mcptest.Start(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	ctx, cancel := context.WithCancel(context.Background())
	progress, result := longCall(t, m, "ev__trigger-long-running-operation", ctx)
	select {
	case msg := <-progress:
		if msg != "ev__trigger-long-running-operation: 1 of 30" {
			t.Errorf("progress %q", msg)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no progress")
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end with its context")
	}
	// The server is still there for the next call.
	if got, err := call(t, m, "ev__echo", `{"message":"again"}`); err != nil || string(got) != `"Echo: again"` {
		t.Errorf("echo after cancel %s %v", got, err)
	}
}

// TestMCPCrashMidCall: the server dies during a call; the call fails
// naming the server, the server is restarted, and calls work again.
func TestMCPCrashMidCall(t *testing.T) {
	m := mcptest.Start(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	pid := m.Status()["ev"].PID
	if pid == 0 {
		t.Fatal("no pid")
	}
	progress, result := longCall(t, m, "ev__trigger-long-running-operation", context.Background())
	select {
	case <-progress:
	case <-time.After(20 * time.Second):
		t.Fatal("no progress")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if err == nil || !strings.Contains(err.Error(), `MCP server "ev" stopped answering`) {
			t.Errorf("error %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not fail with its server")
	}
	st := mcptest.WaitStatus(t, m, "ev", func(st mcptools.ServerStatus) bool {
		return st.State == mcptools.StateConnected && st.Restarts > 0
	})
	if st.Restarts != 1 || st.PID == pid || st.PID == 0 {
		t.Errorf("status after the restart %+v", st)
	}
	if got, err := call(t, m, "ev__echo", `{"message":"back"}`); err != nil || string(got) != `"Echo: back"` {
		t.Errorf("echo after restart %s %v", got, err)
	}
}

// TestMCPStartFailure: a server that cannot start does not stop the
// others; it is retried with backoff and reported with its error.
func TestMCPStartFailure(t *testing.T) {
	m := mcptools.New(mcptools.File{Servers: map[string]mcptools.Server{
		"ev":     mcptest.Everything(t),
		"broken": {Command: os.DevNull + "/no-such-command", Timeout: time.Second},
		"off":    {Command: "x", Disabled: true},
	}}, mcptools.Options{Logger: slog.New(slog.DiscardHandler), MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := m.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), `MCP server "broken"`) {
		t.Fatalf("start error %v", err)
	}
	ts, _ := m.Tools()
	for _, x := range ts {
		if !strings.HasPrefix(x.Name, "ev__") {
			t.Errorf("tool %s", x.Name)
		}
	}
	st := mcptest.WaitState(t, m, "broken", mcptools.StateRestarting)
	if st.Attempt < 1 || !strings.Contains(st.LastError, "no-such-command") {
		t.Errorf("broken %+v", st)
	}
	if st := m.Status()["off"]; st.State != mcptools.StateDisabled {
		t.Errorf("off %+v", st)
	}
	if m.Healthy() {
		t.Error("healthy with a broken server")
	}
	_ = m.Close()
	if st := m.Status()["ev"]; st.State != mcptools.StateClosed {
		t.Errorf("after close %+v", st)
	}
}

// TestMCPElicitationNeedsOneCallInFlight: over stdio an elicitation names
// no call; with two calls in flight on the server it cannot be attributed
// and is refused with the reason, without asking anyone.
func TestMCPElicitationNeedsOneCallInFlight(t *testing.T) {
	m := mcptest.Start(t, map[string]mcptools.Server{"ev": mcptest.Everything(t)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress, result := longCall(t, m, "ev__trigger-long-running-operation", ctx)
	select {
	case <-progress:
	case <-time.After(20 * time.Second):
		t.Fatal("no progress")
	}
	asked := false
	ectx := tools.WithCall(context.Background(), &tools.Call{ToolCallID: "c2", ToolName: "ev__trigger-elicitation-request",
		Confirm: func(context.Context, instanceai.ConfirmationRequest) (instanceai.Answer, error) {
			asked = true
			return instanceai.Answer{Approved: true}, nil
		}})
	ectx, ecancel := context.WithTimeout(ectx, 30*time.Second)
	defer ecancel()
	got, err := find(t, m, "ev__trigger-elicitation-request").Execute(ectx, json.RawMessage(`{}`))
	if asked {
		t.Error("a person was asked")
	}
	text := string(got)
	if err != nil {
		text = err.Error()
	}
	if !strings.Contains(text, "cannot tell which person to ask: 2 tool calls are in flight") {
		t.Errorf("result %s", text)
	}
	cancel()
	<-result
}
