package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server/servertest"
	"github.com/threadline/threadline/ssestream"
)

// process is a real server process, with the helpers these tests use.
type process struct {
	*servertest.Process
	t *testing.T
}

func launch(t *testing.T, store string, delay time.Duration, flags ...string) *process {
	t.Helper()
	args := append([]string{"-store", store, "-script-delay", delay.String()}, flags...)
	return &process{Process: servertest.Launch(t, args...), t: t}
}

func (p *process) chat(thread, message string) string { return p.API.Chat(thread, message) }

// acked reads the live stream until stop says enough, and returns every
// frame the server sent with an id: those it acknowledged as stored.
func (p *process) acked(ctx context.Context, thread string, stop func(ev instanceai.Event, deltas int) bool) map[string]string {
	p.t.Helper()
	rd, done := p.live(ctx, thread)
	defer done()
	ids := map[string]string{}
	deltas := 0
	for {
		f, err := rd.Next()
		if err != nil {
			p.t.Fatalf("live stream ended: %v", err)
		}
		if f.Data == "" || f.Event != "" {
			continue
		}
		var ev instanceai.Event
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			p.t.Fatal(err)
		}
		if f.HasID {
			ids[f.ID] = f.Data
		}
		if ev.Type == instanceai.TypeTextDelta {
			deltas++
		}
		if stop(ev, deltas) {
			return ids
		}
	}
}

// live opens the thread's live stream; done closes it.
func (p *process) live(ctx context.Context, thread string) (rd *ssestream.Reader, done func()) {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/instance-ai/events/"+thread, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	return ssestream.NewReader(res.Body), func() { res.Body.Close() }
}

// replayAll reads the whole thread after a restart, until runID's run-finish.
func (p *process) replayAll(thread, runID string) []servertest.Frame {
	p.t.Helper()
	res, err := http.Get(p.URL + "/instance-ai/events/" + thread)
	if err != nil {
		p.t.Fatal(err)
	}
	defer res.Body.Close()
	c := servertest.ReadStream(p.t, res, nil, servertest.DefaultBacklog)
	return c.Until(wait, servertest.IsRunFinish(runID))
}

var crashStores = []struct {
	name string
	spec func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "crash.db") }},
	{"postgres", func(t *testing.T) string { return testpg.FreshDSN(t) }},
}

// TestCrashSweep kills a real server with SIGKILL in the middle of a run and
// restarts it on the same store: the run ends interrupted, no tool call is
// left open, and every event acknowledged live before the kill is stored.
func TestCrashSweep(t *testing.T) {
	for _, st := range crashStores {
		t.Run(st.name, func(t *testing.T) {
			spec := st.spec(t)
			cases := []struct {
				message string
				delay   time.Duration
				stop    func(ev instanceai.Event, deltas int) bool
			}{
				{"long 100000", 2 * time.Millisecond, func(_ instanceai.Event, deltas int) bool { return deltas >= 100 }},
				{"tools", 300 * time.Millisecond, func(ev instanceai.Event, _ int) bool { return ev.Type == instanceai.TypeToolCall }},
			}
			for i, c := range cases {
				thread := fmt.Sprintf("crash%d", i)
				p := launch(t, spec, c.delay)
				runID := p.chat(thread, c.message)
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				acked := p.acked(ctx, thread, c.stop)
				cancel()
				p.Kill()

				p = launch(t, spec, c.delay)
				frames := p.replayAll(thread, runID)
				fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
				if fin.Status != instanceai.RunInterrupted || fin.Reason != instanceai.ReasonCrashed ||
					frames[len(frames)-1].Decoded.AgentID != instanceai.OrchestratorAgentID(runID) {
					t.Fatalf("%s: run ended %+v", c.message, frames[len(frames)-1].Decoded)
				}
				stored := map[string]string{}
				open := map[string]bool{}
				for _, f := range frames {
					stored[f.ID] = f.Data
					switch pl := f.Decoded.Payload.(type) {
					case *instanceai.ToolCall:
						open[pl.ToolCallID] = true
					case *instanceai.ToolResult:
						delete(open, pl.ToolCallID)
					case *instanceai.ToolError:
						delete(open, pl.ToolCallID)
					}
				}
				for id, data := range acked {
					if stored[id] != data {
						t.Fatalf("%s: event %s acknowledged live is not in the log as sent:\n live %s\n log  %s", c.message, id, data, stored[id])
					}
				}
				if len(open) != 0 {
					t.Fatalf("%s: tool calls left open after the sweep: %v", c.message, open)
				}
				var events []instanceai.Event
				for _, f := range frames {
					events = append(events, f.Decoded)
				}
				if id := loadingToolCall(agenttree.Fold(events)); id != "" {
					t.Fatalf("%s: the folded tree still shows tool call %s loading", c.message, id)
				}
				if c.message == "tools" {
					interrupted := 0
					for _, f := range frames {
						if f.Decoded.Type == instanceai.TypeToolInterrupted {
							interrupted++
						}
					}
					if interrupted != 1 {
						t.Fatalf("tools: %d tool-interrupted events, want 1", interrupted)
					}
				}
				p.Kill()
			}
		})
	}
}

// loadingToolCall returns a tool call of the tree still marked loading.
func loadingToolCall(n *agenttree.AgentNode) string {
	for _, tc := range n.ToolCalls {
		if tc.IsLoading {
			return tc.ToolCallID
		}
	}
	for _, c := range n.Children {
		if id := loadingToolCall(c); id != "" {
			return id
		}
	}
	return ""
}

// awaitConfirmation reads the thread's live stream until a
// confirmation-request and returns its request id.
func (p *process) awaitConfirmation(thread string) string {
	p.t.Helper()
	var requestID string
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p.acked(ctx, thread, func(ev instanceai.Event, _ int) bool {
		if c, ok := ev.Payload.(*instanceai.ConfirmationRequest); ok {
			requestID = c.RequestID
			return true
		}
		return false
	})
	return requestID
}

// stop sends the process a signal and waits for it to exit.
func (p *process) stop(sig syscall.Signal) {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	_ = p.Cmd.Wait()
}

func (p *process) get(path string, out any) int { return p.API.DoInto(http.MethodGet, path, "", out) }

func (p *process) post(path, body string) int { return p.API.DoInto(http.MethodPost, path, body, nil) }

// TestSuspendedRunSurvivesRestart: a run waiting for approval when the
// server stops (gracefully or killed) is still suspended after the restart:
// status and messages show it, and the answer resumes it to completion.
// The kill comes as soon as the request is seen, which may be before the
// killed process handed the run to no one (it does once the request is
// stored): the answer is then accepted (202), and the run resumed once the
// dead process's lease ran out, hence the short lease.
func TestSuspendedRunSurvivesRestart(t *testing.T) {
	for _, st := range crashStores {
		t.Run(st.name, func(t *testing.T) {
			spec := st.spec(t)
			for i, stop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				thread := fmt.Sprintf("suspended%d", i)
				p := launch(t, spec, 0, "-lease", "2s", "-lease-renew", "300ms")
				runID := p.chat(thread, "confirm")
				requestID := p.awaitConfirmation(thread)
				p.stop(stop)

				p = launch(t, spec, 0, "-lease", "2s", "-lease-renew", "300ms")
				var status instanceai.ThreadStatus
				p.get("/instance-ai/threads/"+thread+"/status", &status)
				if !status.HasActiveRun || !status.IsSuspended || status.RunID != runID {
					t.Fatalf("%v: status after restart = %+v", stop, status)
				}
				var page messagesPage
				p.get("/instance-ai/threads/"+thread+"/messages", &page)
				last := page.Messages[len(page.Messages)-1]
				tree, _ := json.Marshal(last.AgentTree)
				if last.RunID != runID || !last.IsStreaming || !strings.Contains(string(tree), requestID) {
					t.Fatalf("%v: messages after restart = %+v", stop, page)
				}
				if code := p.post("/instance-ai/chat/"+thread, `{"message":"simple"}`); code != http.StatusConflict {
					t.Fatalf("%v: chat while suspended: %d, want 409", stop, code)
				}
				code := p.post("/instance-ai/confirm/"+requestID, `{"approved":true}`)
				if code != http.StatusOK && (stop != syscall.SIGKILL || code != http.StatusAccepted) {
					t.Fatalf("%v: confirm after restart: %d\n%s", stop, code, p.Logs())
				}
				frames := p.replayAll(thread, runID)
				fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
				if fin.Status != instanceai.RunCompleted || !strings.Contains(texts(frames), "is archived") {
					t.Fatalf("%v: resumed run ended %+v with text %q", stop, fin, texts(frames))
				}
				p.get("/instance-ai/threads/"+thread+"/status", &status)
				if status.HasActiveRun || status.IsSuspended {
					t.Fatalf("%v: status after the resumed run = %+v", stop, status)
				}
				p.Kill()
			}
		})
	}
}

// TestCancelSuspendedRunAfterRestart: cancelling a run that waits for
// approval from before a restart ends it cancelled and settles its call.
func TestCancelSuspendedRunAfterRestart(t *testing.T) {
	spec := "sqlite:" + filepath.Join(t.TempDir(), "cancel.db")
	// A short lease: the kill may come before the process handed the run
	// to no one (see TestSuspendedRunSurvivesRestart), and the cancel then
	// acts once the dead process's lease ran out.
	p := launch(t, spec, 0, "-lease", "2s", "-lease-renew", "300ms")
	runID := p.chat("th", "confirm")
	var requestID, toolCallID string
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	p.acked(ctx, "th", func(ev instanceai.Event, _ int) bool {
		if c, ok := ev.Payload.(*instanceai.ConfirmationRequest); ok {
			requestID, toolCallID = c.RequestID, c.ToolCallID
			return true
		}
		return false
	})
	cancel()
	p.Kill()
	p = launch(t, spec, 0, "-lease", "2s", "-lease-renew", "300ms")
	if code := p.post("/instance-ai/chat/th/cancel", ""); code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("cancel: %d", code)
	}
	frames := p.replayAll("th", runID)
	fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
	settled := false
	for _, f := range frames {
		if r, ok := f.Decoded.Payload.(*instanceai.ToolResult); ok && r.ToolCallID == toolCallID {
			settled = strings.Contains(string(r.Result), "cancelled")
		}
	}
	if fin.Status != instanceai.RunCancelled || !settled {
		t.Fatalf("run ended %+v, call settled %v", fin, settled)
	}
	if code := p.post("/instance-ai/confirm/"+requestID, `{"approved":true}`); code != http.StatusConflict {
		t.Fatalf("answer after cancel: %d, want 409", code)
	}
	var status instanceai.ThreadStatus
	p.get("/instance-ai/threads/th/status", &status)
	if status.HasActiveRun || status.IsSuspended {
		t.Fatalf("status = %+v", status)
	}
	if code := p.post("/instance-ai/chat/th", `{"message":"simple"}`); code != http.StatusOK {
		t.Fatalf("chat after cancel: %d", code)
	}
	p.Kill()
}
