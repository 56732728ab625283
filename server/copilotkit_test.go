package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server/servertest"
)

// copilotkitDir holds the pinned @copilotkitnext/core and client.mjs.
const copilotkitDir = "testdata/copilotkit"

// copilotkitMessage is a message the client holds, as client.mjs reports it.
type copilotkitMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []struct {
		Name string `json:"name"`
	} `json:"toolCalls"`
	ToolCallID string `json:"toolCallId"`
}

type copilotkitReport struct {
	InfoError string   `json:"infoError"`
	Agents    []string `json:"agents"`
	Version   string   `json:"version"`
	Results   []struct {
		Name     string `json:"name"`
		Error    string `json:"error"`
		Errors   []string
		Messages []copilotkitMessage `json:"messages"`
	} `json:"results"`
}

// runCopilotKit runs client.mjs, CopilotKit's own runtime client, against
// the server's runtime routes.
func runCopilotKit(t *testing.T, url, scenarios string) copilotkitReport {
	t.Helper()
	node := nodeWith(t, copilotkitDir, filepath.Join("@copilotkitnext", "core"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", url+"/copilotkit", scenarios)
	cmd.Dir = copilotkitDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	var rep copilotkitReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.InfoError != "" {
		t.Fatalf("the client could not read /info: %s", out)
	}
	return rep
}

// CopilotKit's own client (@copilotkitnext/core 1.54.1) runs agents
// through Threadline's runtime routes: /info lists the agents, a run
// streams its answer, a frontend tool's result comes back in the client's
// follow-up run, and stop ends a run under way, whose stream the client is
// still reading.
func TestCopilotKitClientRuns(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
		rep := runCopilotKit(t, h.URL, `[
			{"name":"simple","thread":"ck-simple","message":"simple hi"},
			{"name":"tool","thread":"ck-tool","message":"frontend-tool","tool":{"name":"pickColor","result":"teal"}},
			{"name":"stop","thread":"ck-stop","message":"long 100000","stopAfter":300},
			{"name":"background","thread":"ck-bg","message":"background"},
			{"name":"ask","thread":"ck-int","message":"confirm"},
			{"name":"resume","thread":"ck-int","resume":true}
		]`)
		if strings.Join(rep.Agents, ",") != "default" {
			t.Fatalf("agents %v, want [default]", rep.Agents)
		}
		for _, r := range rep.Results {
			if r.Error != "" || len(r.Errors) > 0 {
				t.Fatalf("%s: error %q, client errors %v", r.Name, r.Error, r.Errors)
			}
			if len(r.Messages) < 2 || r.Messages[0].Role != "user" {
				t.Fatalf("%s: messages %+v", r.Name, r.Messages)
			}
			last := r.Messages[len(r.Messages)-1]
			switch r.Name {
			case "simple":
				if last.Role != "assistant" || !strings.Contains(last.Content, "You said: simple hi") {
					t.Fatalf("simple: last message %+v", last)
				}
			case "tool":
				if last.Content != "The browser answered: teal" {
					t.Fatalf("tool: last message %+v of %+v", last, r.Messages)
				}
			case "background":
				// A sub-agent's events, which @ag-ui/client 0.0.48 has no
				// type for, reach it as CUSTOM: the stream is read whole,
				// up to the background agent's last result.
				said := false
				for _, m := range r.Messages {
					said = said || m.Content == "Evaluation setup has started in the background."
				}
				if !said || last.Role != "tool" || !strings.Contains(last.Content, `"nodes":5`) {
					t.Fatalf("background: messages %+v", r.Messages)
				}
			case "resume":
				// The approval asked in "ask" (an on_interrupt for
				// useInterrupt) answered by the run useInterrupt makes:
				// the run that waited goes on in this request's stream.
				if !strings.Contains(last.Content, "is archived") {
					t.Fatalf("resume: messages %+v", r.Messages)
				}
			case "stop":
				if fin := waitRunFinish(t, store, "ck-stop", 10*time.Second); fin.Status != instanceai.RunCancelled {
					t.Fatalf("stop: the run ended %+v", fin)
				}
			}
		}
	})
}

// The runtime's answers outside a run: an unknown agent, a run on a busy
// thread (an empty stream, which the client takes quietly), a stop with
// nothing to stop, and an interrupt as the CUSTOM on_interrupt event the
// client's useInterrupt waits for.
func TestCopilotKitRuntimeAnswers(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
	post := func(path, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.URL+"/copilotkit"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), string(b)
	}
	input := func(thread, message string) string {
		return fmt.Sprintf(`{"threadId":%q,"runId":"r-%s","state":{},"messages":[{"id":"u","role":"user","content":%q}],"tools":[],"context":[],"forwardedProps":{}}`,
			thread, thread, message)
	}
	if code, _, body := post("/agent/nope/run", input("x", "simple")); code != http.StatusNotFound ||
		body != `{"error":"Agent not found","message":"Agent 'nope' does not exist"}`+"\n" {
		t.Fatalf("unknown agent: %d %s", code, body)
	}
	if code, _, body := post("/agent/default/stop/idle", ""); code != http.StatusOK || !strings.Contains(body, `"stopped":false`) {
		t.Fatalf("stop with no run: %d %s", code, body)
	}
	runID := h.Chat("busy", "long 100000")
	if code, ct, body := post("/agent/default/run", input("busy", "simple")); code != http.StatusOK ||
		!strings.HasPrefix(ct, "text/event-stream") || body != "" {
		t.Fatalf("run on a busy thread: %d %q %q", code, ct, body)
	}
	if code, _, body := post("/agent/default/stop/busy", ""); code != http.StatusOK || !strings.Contains(body, `"stopped":true`) {
		t.Fatalf("stop: %d %s", code, body)
	}
	waitRow(t, store, "busy", runID, rowType(instanceai.TypeRunFinish))
	for _, c := range []struct{ resume, field string }{{`5`, "forwardedProps.command.resume"}, {`true`, "forwardedProps.command.resume"}} {
		body := strings.Replace(input("idle", "simple"), `"forwardedProps":{}`, `"forwardedProps":{"command":{"resume":`+c.resume+`}}`, 1)
		if code, _, answer := post("/agent/default/run", body); code != http.StatusBadRequest || !strings.Contains(answer, c.field) {
			t.Fatalf("resume %s with nothing to answer: %d %s", c.resume, code, answer)
		}
	}
	code, _, body := post("/agent/default/run", input("confirm", "confirm"))
	if code != http.StatusOK || !strings.Contains(body, `"name":"on_interrupt"`) ||
		strings.Index(body, `"on_interrupt"`) > strings.LastIndex(body, `"RUN_FINISHED"`) {
		t.Fatalf("interrupt: %d\n%s", code, body)
	}
}

// copilotkitMessages is a report's messages in a line each, as compared.
func copilotkitMessages(msgs []copilotkitMessage) string {
	var out []string
	for _, m := range msgs {
		line := m.Role + ": " + m.Content
		for _, c := range m.ToolCalls {
			line += " [" + c.Name + "]"
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// A page that reloads asks the runtime to connect: CopilotKit's client
// gets the thread back run by run, with the messages it held before (a
// failed run in the middle included, which its verifier would refuse as a
// RUN_ERROR), and a run under way is followed to its end.
func TestCopilotKitConnect(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
		live := h.Chat("ck-live", "long 100000")
		// The run lasts minutes: it is under way when the client
		// connects, and its connect ends when the run does, cancelled.
		go func() {
			time.Sleep(3 * time.Second)
			if res, err := http.Post(h.URL+"/instance-ai/chat/ck-live/cancel", "application/json", nil); err == nil {
				res.Body.Close()
			}
		}()
		rep := runCopilotKit(t, h.URL, `[
			{"name":"live","thread":"ck-live","connect":true},
			{"name":"first","thread":"ck-conv","message":"simple hi"},
			{"name":"reconnect","thread":"ck-conv","connect":true},
			{"name":"failed","thread":"ck-fail","message":"error"},
			{"name":"after","thread":"ck-fail","message":"simple again"},
			{"name":"reconnect-failed","thread":"ck-fail","connect":true},
			{"name":"empty","thread":"ck-none","connect":true}
		]`)
		byName := map[string]int{}
		for i, r := range rep.Results {
			byName[r.Name] = i
			if r.Error != "" || (len(r.Errors) > 0 && r.Name != "failed") {
				t.Fatalf("%s: error %q, client errors %v", r.Name, r.Error, r.Errors)
			}
		}
		res := func(name string) string { return copilotkitMessages(rep.Results[byName[name]].Messages) }
		if got, want := res("reconnect"), res("first"); got != want {
			t.Fatalf("reconnected:\n%s\nafter the run:\n%s", got, want)
		}
		if got := res("reconnect-failed"); !strings.Contains(got, "user: error") || !strings.Contains(got, "You said: simple again") {
			t.Fatalf("reconnected to a thread with a failed run:\n%s", got)
		}
		if got := res("empty"); got != "" {
			t.Fatalf("a thread with no run connected to %q", got)
		}
		if fin := waitRunFinish(t, store, "ck-live", 10*time.Second); fin.Status != instanceai.RunCancelled {
			t.Fatalf("the live run ended %+v", fin)
		}
		runEvents, _ := storedRun(t, store, "ck-live", live)
		full := agenttree.Fold(runEvents).TextContent
		liveRes := rep.Results[byName["live"]]
		var text string
		for _, m := range liveRes.Messages {
			if m.Role == "assistant" {
				text += m.Content
			}
		}
		if full == "" || text != full || liveRes.Messages[0].Role != "user" || liveRes.Messages[0].Content != "long 100000" {
			t.Fatalf("the run followed live: %d bytes of text, the log's %d; messages %.300s", len(text), len(full), copilotkitMessages(liveRes.Messages))
		}
	})
}

// A CopilotKit page that reloads onto another instance follows there the
// run its first instance runs.
func TestCopilotKitConnectOnAnotherInstance(t *testing.T) {
	ps := cluster(t, testpg.FreshDSN(t), clusterBuses[0].spec(t), 2, 2*time.Millisecond)
	a, b := ps[0], ps[1]
	run := a.chat("ck-cluster", "long 100000")
	// The run lasts minutes: the client connects while it is under way,
	// and its connect ends when the run does, cancelled through B.
	done := make(chan copilotkitReport, 1)
	go func() { done <- runCopilotKit(t, b.URL, `[{"name":"live","thread":"ck-cluster","connect":true}]`) }()
	onA := a.stream("ck-cluster", "")
	onA.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
	time.Sleep(2 * time.Second) // node starts and connects meanwhile
	if code := b.post("/instance-ai/chat/ck-cluster/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel on B: %d", code)
	}
	rep := <-done
	r := rep.Results[0]
	if r.Error != "" || len(r.Errors) > 0 {
		t.Fatalf("error %q, client errors %v", r.Error, r.Errors)
	}
	var text string
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			text += m.Content
		}
	}
	var block string
	for _, f := range a.replayAll("ck-cluster", run) {
		if f.Decoded.Type == instanceai.TypeTextBlock {
			block += f.Decoded.Payload.(*instanceai.Text).Text
		}
	}
	if block == "" || text != block {
		t.Fatalf("followed on B: %d bytes of text, the log's %d", len(text), len(block))
	}
}

// What a CopilotKit page reconnects to survives a Threadline restart: the
// thread is read from the log, not from a process's memory.
func TestCopilotKitConnectAfterRestart(t *testing.T) {
	for _, st := range crashStores {
		t.Run(st.name, func(t *testing.T) {
			spec := st.spec(t)
			p := launch(t, spec, 0)
			run := p.chat("ck-restart", "simple hi")
			p.replayAll("ck-restart", run)
			p.stop(syscall.SIGTERM)
			p = launch(t, spec, 0)
			defer p.Kill()
			rep := runCopilotKit(t, p.URL, `[{"name":"connect","thread":"ck-restart","connect":true}]`)
			r := rep.Results[0]
			if r.Error != "" || len(r.Errors) > 0 {
				t.Fatalf("error %q, client errors %v", r.Error, r.Errors)
			}
			got := copilotkitMessages(r.Messages)
			if !strings.HasPrefix(got, "user: simple hi") || !strings.Contains(got, "You said: simple hi") {
				t.Fatalf("after the restart the page holds:\n%s", got)
			}
		})
	}
}

// A resume from CopilotKit answers only the caller's own thread: on
// another user's, it is refused as if nothing waited, and tells nothing of
// what does.
func TestCopilotKitResumeIsTheOwners(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob"})
	alice := h.As(aliceToken)
	runID := alice.Chat("alices", "confirm")
	var requestID string
	waitRow(t, store, "alices", runID, func(ev instanceai.Event) bool {
		if p, ok := ev.Payload.(*instanceai.ConfirmationRequest); ok {
			requestID = p.RequestID
			return true
		}
		return false
	})
	body := `{"threadId":"alices","runId":"r","state":{},"messages":[{"id":"u","role":"user","content":"confirm"}],"tools":[],"context":[],` +
		`"forwardedProps":{"command":{"resume":true}}}`
	req, _ := http.NewRequest(http.MethodPost, h.URL+"/copilotkit/agent/default/run", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bobToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || strings.Contains(string(answer), requestID) {
		t.Fatalf("bob resuming alice's run: %d %s", res.StatusCode, answer)
	}
	if st := alice.ThreadStatus("alices"); !st.IsSuspended {
		t.Fatalf("alice's run after bob's resume: %+v", st)
	}
}
