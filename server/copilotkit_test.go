package server_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/mapping"
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
	InfoError string             `json:"infoError"`
	Agents    []string           `json:"agents"`
	Version   string             `json:"version"`
	Results   []copilotkitResult `json:"results"`
}

// copilotkitResult is what the client reported of one scenario.
type copilotkitResult struct {
	Name     string `json:"name"`
	Error    string `json:"error"`
	Errors   []string
	Messages []copilotkitMessage `json:"messages"`
	Steps    []copilotkitStep    `json:"steps"`
}

// copilotkitStep is one op of a threadOps scenario: the threads a listing
// showed, or the error a mutation ended with.
type copilotkitStep struct {
	Error   string `json:"error"`
	Pages   int    `json:"pages"`
	Threads []struct {
		ID       string  `json:"id"`
		Name     *string `json:"name"`
		Archived bool    `json:"archived"`
		AgentID  string  `json:"agentId"`
	} `json:"threads"`
}

// copilotkitClient says how client.mjs talks to the runtime: as whom, and
// over which of its transports ("rest" or "single").
type copilotkitClient struct {
	Token, Transport string
}

// runCopilotKit runs client.mjs, CopilotKit's own runtime client, against
// the server's runtime routes.
func runCopilotKit(t *testing.T, url, scenarios string) copilotkitReport {
	t.Helper()
	return runCopilotKitAs(t, url, scenarios, copilotkitClient{})
}

func runCopilotKitAs(t *testing.T, url, scenarios string, c copilotkitClient) copilotkitReport {
	t.Helper()
	rep, err := copilotkitRun(copilotkitNode(t), url, scenarios, c)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// copilotkitNode is node, with CopilotKit's client installed beside the
// tests (the test is skipped without them).
func copilotkitNode(t *testing.T) string {
	t.Helper()
	return nodeWith(t, copilotkitDir, filepath.Join("@copilotkitnext", "core"))
}

// copilotkitRun runs client.mjs with node; it may run on any goroutine.
func copilotkitRun(node, url, scenarios string, c copilotkitClient) (copilotkitReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", url+"/copilotkit", scenarios, c.Token)
	cmd.Dir = copilotkitDir
	cmd.Env = append(os.Environ(), "CK_TRANSPORT="+cmp.Or(c.Transport, "rest"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var rep copilotkitReport
	out, err := cmd.Output()
	if err != nil {
		return rep, fmt.Errorf("node client.mjs: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("report: %v\n%s", err, out)
	}
	if rep.InfoError != "" {
		return rep, fmt.Errorf("the client could not read /info: %s", out)
	}
	return rep, nil
}

// CopilotKit's own client (@copilotkitnext/core 1.54.1) runs agents
// through Threadline's runtime routes: /info lists the agents, a run
// streams its answer, a frontend tool's result comes back in the client's
// follow-up run, and stop ends a run under way, whose stream the client is
// still reading.
func TestCopilotKitClientRuns(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
		checkClientRuns(t, store, runCopilotKit(t, h.URL, clientRunScenarios))
	})
}

// The same on two instances on PostgreSQL behind a balancer that sends
// each request to the other instance than the one before: a frontend
// tool's follow-up run, a stop and a resume each reach another instance
// than the run they are about.
func TestCopilotKitClientRunsOnTwoInstances(t *testing.T) {
	dsn := testpg.FreshDSN(t)
	ps := cluster(t, dsn, clusterBuses[0].spec(t), 2, 2*time.Millisecond)
	balancer := roundRobin(t, ps[0].URL, ps[1].URL)
	checkClientRuns(t, servertest.OpenStore(t, dsn), runCopilotKit(t, balancer, clientRunScenarios))
	for i, p := range ps {
		if !strings.Contains(p.Logs(), "path=/copilotkit/agent/default/run") {
			t.Fatalf("instance %d answered no run:\n%s", i, p.Logs())
		}
	}
}

// roundRobin serves a reverse proxy that sends each request to the next
// of backends in turn, with no affinity, and returns its URL.
func roundRobin(t *testing.T, backends ...string) string {
	t.Helper()
	var targets []*url.URL
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u)
	}
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[(next.Add(1)-1)%uint64(len(targets))])
		},
		FlushInterval: -1, // streams pass through as they come
	}
	srv := httptest.NewServer(fullDuplex(proxy))
	t.Cleanup(srv.Close)
	return srv.URL
}

// fullDuplex lets a reverse proxy keep reading a request's body after it
// has begun its answer. Without it net/http closes the body once the
// backend's answer (the stream's headers) is written, the transport's
// request writer then fails reading the body's end, closes the backend
// connection, and the proxy cuts the stream it was copying: a client
// error ("terminated") in about one test run in five.
func fullDuplex(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		next.ServeHTTP(w, r)
	})
}

const clientRunScenarios = `[
	{"name":"simple","thread":"ck-simple","message":"simple hi"},
	{"name":"tool","thread":"ck-tool","message":"frontend-tool","tool":{"name":"pickColor","result":"teal"}},
	{"name":"stop","thread":"ck-stop","message":"long 100000","stopAfter":300},
	{"name":"background","thread":"ck-bg","message":"background"},
	{"name":"ask","thread":"ck-int","message":"confirm"},
	{"name":"resume","thread":"ck-int","resume":true}
]`

// checkClientRuns checks what the client holds after clientRunScenarios.
func checkClientRuns(t *testing.T, store instanceai.Store, rep copilotkitReport) {
	t.Helper()
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
		rep := runCopilotKit(t, h.URL, `[{"name":"live","thread":"ck-live","connect":true},`+connectScenarios+`]`)
		byName := checkConnects(t, rep)
		if fin := waitRunFinish(t, store, "ck-live", 10*time.Second); fin.Status != instanceai.RunCancelled {
			t.Fatalf("the live run ended %+v", fin)
		}
		runEvents, _ := storedRun(t, store, "ck-live", live)
		full := agenttree.Fold(runEvents).TextContent
		liveRes := byName["live"]
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

// Connects through a balancer in front of two instances on PostgreSQL:
// each connect reaches the other instance than the run before it, and
// the page gets the same thread back as from one instance.
func TestCopilotKitConnectOnTwoInstances(t *testing.T) {
	ps := cluster(t, testpg.FreshDSN(t), clusterBuses[0].spec(t), 2, 2*time.Millisecond)
	checkConnects(t, runCopilotKit(t, roundRobin(t, ps[0].URL, ps[1].URL), "["+connectScenarios+"]"))
}

// connectScenarios are connects after a run, after a failed run followed
// by another, and to a thread with no run (checkConnects checks them).
const connectScenarios = `
	{"name":"first","thread":"ck-conv","message":"simple hi"},
	{"name":"reconnect","thread":"ck-conv","connect":true},
	{"name":"failed","thread":"ck-fail","message":"error"},
	{"name":"after","thread":"ck-fail","message":"simple again"},
	{"name":"reconnect-failed","thread":"ck-fail","connect":true},
	{"name":"empty","thread":"ck-none","connect":true}`

// checkConnects checks what the client holds after connectScenarios and
// returns every scenario's result by name.
func checkConnects(t *testing.T, rep copilotkitReport) map[string]copilotkitResult {
	t.Helper()
	byName := map[string]copilotkitResult{}
	for _, r := range rep.Results {
		byName[r.Name] = r
		if r.Error != "" || (len(r.Errors) > 0 && r.Name != "failed") {
			t.Fatalf("%s: error %q, client errors %v", r.Name, r.Error, r.Errors)
		}
	}
	res := func(name string) string { return copilotkitMessages(byName[name].Messages) }
	if got, want := res("reconnect"), res("first"); got != want || want == "" {
		t.Fatalf("reconnected:\n%s\nafter the run:\n%s", got, want)
	}
	if got := res("reconnect-failed"); !strings.Contains(got, "user: error") || !strings.Contains(got, "You said: simple again") {
		t.Fatalf("reconnected to a thread with a failed run:\n%s", got)
	}
	if got := res("empty"); got != "" {
		t.Fatalf("a thread with no run connected to %q", got)
	}
	return byName
}

// A CopilotKit page that reloads onto another instance follows there the
// run its first instance runs, and stops it from there.
func TestCopilotKitConnectOnAnotherInstance(t *testing.T) {
	node := copilotkitNode(t)
	ps := cluster(t, testpg.FreshDSN(t), clusterBuses[0].spec(t), 2, 2*time.Millisecond)
	a, b := ps[0], ps[1]
	run := a.chat("ck-cluster", "long 100000")
	// The run lasts minutes: the client connects while it is under way,
	// and its connect ends when the run does, stopped through B.
	type result struct {
		rep copilotkitReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := copilotkitRun(node, b.URL, `[{"name":"live","thread":"ck-cluster","connect":true}]`, copilotkitClient{})
		done <- result{rep, err}
	}()
	onA := a.stream("ck-cluster", "")
	onA.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
	time.Sleep(2 * time.Second) // node starts and connects meanwhile
	// The page's stop goes to B too.
	var stopped map[string]any
	if code := b.API.DoInto(http.MethodPost, "/copilotkit/agent/default/stop/ck-cluster", "", &stopped); code != http.StatusOK || stopped["stopped"] != true {
		t.Fatalf("stop on B: %d %v", code, stopped)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	r := res.rep.Results[0]
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
	requestID := waitConfirmation(t, store, "alices", alice.Chat("alices", "confirm")).RequestID
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

// The client's thread store (what useThreads shows) lists, renames,
// archives and deletes the caller's threads, page by page, and cannot
// touch another user's.
func TestCopilotKitThreads(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob"})
		alice, bob := h.As(aliceToken), h.As(bobToken)
		for _, c := range []struct {
			as           *harness
			thread, says string
		}{{alice, "ck-t1", "simple first"}, {alice, "ck-t2", "simple second"}, {alice, "ck-t3", "simple third"}, {bob, "ck-bobs", "simple bob"}} {
			c.as.Chat(c.thread, c.says)
		}
		for _, id := range []string{"ck-t1", "ck-t2", "ck-t3", "ck-bobs"} {
			waitRunFinish(t, store, id, 10*time.Second)
		}
		rep := runCopilotKitAs(t, h.URL, `[{"name":"threads","threadOps":[
			{"list":{"limit":2}},
			{"rename":["ck-t1","Renamed in CopilotKit"]},
			{"archive":"ck-t2"},
			{"list":{}},
			{"list":{"includeArchived":true}},
			{"delete":"ck-t3"},
			{"list":{}},
			{"rename":["ck-bobs","taken"]},
			{"archive":"ck-bobs"},
			{"delete":"ck-bobs"},
			{"rename":["ck-t1","  "]}
		]}]`, copilotkitClient{Token: aliceToken})
		steps := rep.Results[0].Steps
		listed := func(i int) string {
			t.Helper()
			if steps[i].Error != "" {
				t.Fatalf("step %d: %s", i, steps[i].Error)
			}
			var out []string
			for _, th := range steps[i].Threads {
				name := "<null>"
				if th.Name != nil {
					name = *th.Name
				}
				if th.AgentID != "default" {
					t.Fatalf("step %d: thread %s listed for agent %q", i, th.ID, th.AgentID)
				}
				out = append(out, fmt.Sprintf("%s=%s/%v", th.ID, name, th.Archived))
			}
			slices.Sort(out)
			return strings.Join(out, " ")
		}
		for i, want := range map[int]string{
			0: "ck-t1=simple first/false ck-t2=simple second/false ck-t3=simple third/false",
			3: "ck-t1=Renamed in CopilotKit/false ck-t3=simple third/false",
			4: "ck-t1=Renamed in CopilotKit/false ck-t2=simple second/true ck-t3=simple third/false",
			6: "ck-t1=Renamed in CopilotKit/false",
		} {
			if got := listed(i); got != want {
				t.Errorf("listing %d: %s\nwant %s", i, got, want)
			}
		}
		if steps[0].Pages != 2 {
			t.Errorf("3 threads by 2 came in %d pages", steps[0].Pages)
		}
		for i, want := range map[int]string{1: "", 2: "", 5: "", 7: "404", 8: "404", 9: "404", 10: "400"} {
			if (want == "") != (steps[i].Error == "") || !strings.Contains(steps[i].Error, want) {
				t.Errorf("step %d ended %q, want %q", i, steps[i].Error, want)
			}
		}
		if _, err := store.GetThread(context.Background(), "ck-t3"); !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("the deleted thread: %v", err)
		}
		if th, err := store.GetThread(context.Background(), "ck-t2"); err != nil || !th.Archived {
			t.Errorf("the archived thread: %+v, %v", th, err)
		}
		if th, err := store.GetThread(context.Background(), "ck-bobs"); err != nil || th.Archived || th.Title != "simple bob" {
			t.Errorf("bob's thread after alice's attempts: %+v, %v", th, err)
		}
		// The native list leaves it out too, unless asked for it.
		native := func(query string) (out []string) {
			for _, th := range alice.ListThreads(query).Threads {
				out = append(out, fmt.Sprintf("%s/%v", th.ID, th.Archived))
			}
			slices.Sort(out)
			return out
		}
		if got := native(""); strings.Join(got, " ") != "ck-t1/false" {
			t.Errorf("native list: %v", got)
		}
		if got := native("?includeArchived=true"); strings.Join(got, " ") != "ck-t1/false ck-t2/true" {
			t.Errorf("native list with archived: %v", got)
		}
		// An archived thread is still the owner's to run on.
		waitRow(t, store, "ck-t2", alice.Chat("ck-t2", "simple again"), rowType(instanceai.TypeRunFinish))
	})
}

// CopilotKit's single-route transport (runtimeTransport: "single") carries
// the same runs, stops, interrupts and connects as the REST routes.
func TestCopilotKitSingleRoute(t *testing.T) {
	store := servertest.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "threadline.db"))
	h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
	rep := runCopilotKitAs(t, h.URL, `[
		{"name":"simple","thread":"ck1-simple","message":"simple hi"},
		{"name":"tool","thread":"ck1-tool","message":"frontend-tool","tool":{"name":"pickColor","result":"teal"}},
		{"name":"stop","thread":"ck1-stop","message":"long 100000","stopAfter":300},
		{"name":"ask","thread":"ck1-int","message":"confirm"},
		{"name":"resume","thread":"ck1-int","resume":true},
		{"name":"reconnect","thread":"ck1-simple","connect":true}
	]`, copilotkitClient{Transport: "single"})
	if strings.Join(rep.Agents, ",") != "default" {
		t.Fatalf("agents %v over the single route", rep.Agents)
	}
	last := map[string]copilotkitMessage{}
	all := map[string]string{}
	for _, r := range rep.Results {
		if r.Error != "" || len(r.Errors) > 0 || len(r.Messages) == 0 {
			t.Fatalf("%s: error %q, client errors %v, messages %+v", r.Name, r.Error, r.Errors, r.Messages)
		}
		last[r.Name] = r.Messages[len(r.Messages)-1]
		all[r.Name] = copilotkitMessages(r.Messages)
	}
	if !strings.Contains(last["simple"].Content, "You said: simple hi") || last["tool"].Content != "The browser answered: teal" ||
		!strings.Contains(last["resume"].Content, "is archived") || all["reconnect"] != all["simple"] {
		t.Fatalf("over the single route:\n%v", all)
	}
	if fin := waitRunFinish(t, store, "ck1-stop", 10*time.Second); fin.Status != instanceai.RunCancelled {
		t.Fatalf("stop over the single route: the run ended %+v", fin)
	}
}

// Bad requests to the thread routes, the single route and transcribe get
// a specific answer and change nothing: the runtime's own error shape
// where the Node runtime has one, else Threadline's, naming the field.
func TestCopilotKitRefusals(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob"})
	h.As(bobToken).Chat("ck-bobs", "simple bob")
	waitRunFinish(t, store, "ck-bobs", 10*time.Second)
	before := len(servertest.StoredEvents(t, store, "ck-bobs"))
	for _, c := range []struct {
		name, method, path, contentType, body string
		status                                int
		want                                  string
	}{
		{"list without agentId", "GET", "/threads", "", "", 400, `"field":"agentId"`},
		{"list with a bad agentId", "GET", "/threads?agentId=a%20b", "", "", 400, `"field":"agentId"`},
		{"list with a bad limit", "GET", "/threads?agentId=default&limit=0", "", "", 400, `"field":"limit"`},
		{"list with a limit too large", "GET", "/threads?agentId=default&limit=101", "", "", 400, `"field":"limit"`},
		{"list with a forged cursor", "GET", "/threads?agentId=default&cursor=-3", "", "", 400, `"field":"cursor"`},
		{"list of nobody's", "GET", "/threads?agentId=default", "", "", 200, `{"threads":[],"joinCode":null,"nextCursor":null}`},
		{"subscribe", "POST", "/threads/subscribe", "application/json", `{}`, 422, `"not_supported"`},
		{"rename another user's", "PATCH", "/threads/ck-bobs", "application/json", `{"agentId":"default","name":"x"}`, 404, `"thread_not_found"`},
		{"rename with nothing", "PATCH", "/threads/ck-none", "application/json", `{"agentId":"default"}`, 404, `"thread_not_found"`},
		{"rename with bad JSON", "PATCH", "/threads/ck-bobs", "application/json", `{"name":`, 400, `"invalid_json"`},
		{"archive with a bad agentId", "POST", "/threads/ck-bobs/archive", "application/json", `{"agentId":"a/b"}`, 400, `"field":"agentId"`},
		{"delete another user's", "DELETE", "/threads/ck-bobs", "application/json", `{"agentId":"default"}`, 404, `"thread_not_found"`},
		// Every POST must say it is JSON, which a cross-site form cannot.
		{"single route, not JSON", "POST", "", "text/plain", `{"method":"info"}`, 415, `"field":"Content-Type"`},
		{"single route, bad JSON", "POST", "", "application/json", `{"method":`, 400, `"message":"Invalid JSON payload"`},
		{"single route, no method", "POST", "", "application/json", `{}`, 400, `"message":"Missing method field"`},
		{"single route, unknown method", "POST", "", "application/json", `{"method":"threads"}`, 400, `"message":"Unsupported method 'threads'"`},
		{"single route, run without agentId", "POST", "", "application/json", `{"method":"agent/run","body":{}}`, 400, `"message":"Missing or invalid parameter 'agentId'"`},
		{"single route, run without body", "POST", "", "application/json", `{"method":"agent/run","params":{"agentId":"default"}}`, 400, `"message":"Missing request body for JSON handler"`},
		{"single route, stop without threadId", "POST", "", "application/json", `{"method":"agent/stop","params":{"agentId":"default"}}`, 400, `"message":"Missing or invalid parameter 'threadId'"`},
		{"single route, unknown agent", "POST", "", "application/json", `{"method":"agent/connect","params":{"agentId":"nope"},"body":{"threadId":"x"}}`, 404, `"Agent 'nope' does not exist"`},
		{"single route, stop another user's run", "POST", "", "application/json", `{"method":"agent/stop","params":{"agentId":"default","threadId":"ck-bobs"}}`, 200, `"stopped":false`},
		{"single route, info", "POST", "", "application/json", `{"method":"info"}`, 200, `"agents":{"default":`},
		{"transcribe", "POST", "/transcribe", "application/json", `{"audio":"AAAA","mimeType":"audio/webm"}`, 503, `"error":"service_not_configured"`},
		{"single route, transcribe", "POST", "", "application/json", `{"method":"transcribe","body":{}}`, 503, `"error":"service_not_configured"`},
	} {
		req, _ := http.NewRequest(c.method, h.URL+"/copilotkit"+c.path, strings.NewReader(c.body))
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status || !strings.Contains(string(got), c.want) {
			t.Errorf("%s: %d %s\nwant %d with %s", c.name, res.StatusCode, got, c.status, c.want)
		}
	}
	th, err := store.GetThread(context.Background(), "ck-bobs")
	if err != nil || th.Archived || th.Title != "simple bob" || len(servertest.StoredEvents(t, store, "ck-bobs")) != before {
		t.Fatalf("bob's thread after alice's refused requests: %+v, %v", th, err)
	}
}

// connectFrames opens a CopilotKit connect on the thread with the cursor
// ("" for none) and returns its frames as they come.
func connectFrames(t *testing.T, h *harness, thread, cursor string) (frames <-chan aguiEvent, stop func()) {
	t.Helper()
	body := fmt.Sprintf(`{"threadId":%q,"runId":"c","messages":[],"state":{},"tools":[],"context":[],"forwardedProps":{}`, thread)
	if cursor != "" {
		body += fmt.Sprintf(`,"lastSeenEventId":%q`, cursor)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/copilotkit/agent/default/connect", strings.NewReader(body+"}"))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("connect after %q: %v %v", cursor, err, res)
	}
	out := make(chan aguiEvent, 1024)
	go func() {
		defer close(out)
		defer res.Body.Close()
		r := bufio.NewReader(res.Body)
		var msg strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			msg.WriteString(line)
			if line != "\n" {
				continue
			}
			evs, err := parseAGUIStream([]byte(msg.String()))
			msg.Reset()
			if err != nil {
				t.Errorf("connect stream: %v", err)
				return
			}
			for _, ev := range evs {
				out <- ev
			}
		}
	}()
	return out, cancel
}

// foldedTexts folds events as an AG-UI client does and returns its
// messages, a "role: text" line each.
func foldedTexts(t *testing.T, events []aguiEvent) []string {
	t.Helper()
	fold := mapping.NewAGUIFold()
	for _, ev := range events {
		decoded, err := agui.DecodeEvent([]byte(ev.raw))
		if err != nil {
			t.Fatalf("%s: %v", ev.raw, err)
		}
		fold.Apply(decoded)
	}
	var texts []string
	for _, m := range fold.Messages() {
		texts = append(texts, string(m.Role)+": "+m.Text())
	}
	return texts
}

// A client that keeps the ids of the frames it read gives the last one as
// lastSeenEventId, and connect goes on from there: the runs it holds are
// not sent again, and a run it holds in part continues with no gap and no
// duplicate, whether it is over or still under way.
func TestCopilotKitConnectAfterCursor(t *testing.T) {
	store := servertest.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "threadline.db"))
	h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond})
	all := func(frames <-chan aguiEvent) (evs []aguiEvent) {
		for ev := range frames {
			evs = append(evs, ev)
		}
		return evs
	}
	h.Chat("ck-cur", "simple one")
	waitRunFinish(t, store, "ck-cur", 10*time.Second)
	frames, stop := connectFrames(t, h, "ck-cur", "")
	first := all(frames)
	stop()
	head := servertest.StoredEvents(t, store, "ck-cur")
	h1 := head[len(head)-1].Seq
	if len(first) == 0 || first[len(first)-1].id != h1 {
		t.Fatalf("a replay's last frame has id %v, want the log's head %d", first, h1)
	}
	frames, stop = connectFrames(t, h, "ck-cur", strconv.FormatInt(h1, 10))
	if evs := all(frames); len(evs) != 0 {
		t.Fatalf("connect at the head sent %v", types(evs))
	}
	stop()

	run := h.Chat("ck-cur", "long 100000")
	waitRow(t, store, "ck-cur", run, rowType(instanceai.TypeRunStart))
	// The first connect takes a part of the run under way, then leaves.
	frames, stop = connectFrames(t, h, "ck-cur", strconv.FormatInt(h1, 10))
	var seen []aguiEvent
	var cursor int64
	for ev := range frames {
		seen = append(seen, ev)
		cursor = max(cursor, ev.id)
		if countType(seen, "TEXT_MESSAGE_CONTENT") >= 3 {
			break
		}
	}
	stop()
	if len(seen) == 0 || seen[0].typ != "RUN_STARTED" || seen[0].str("runId") != run || strings.Contains(fmt.Sprint(seen), "simple one") {
		t.Fatalf("connect after the first run began with %v", types(seen))
	}
	// The second goes on from the last id the first read, until the run
	// ends, cancelled.
	frames, stop = connectFrames(t, h, "ck-cur", strconv.FormatInt(cursor, 10))
	defer stop()
	var rest []aguiEvent
	for ev := range frames {
		rest = append(rest, ev)
		if countType(rest, "TEXT_MESSAGE_CONTENT") == 3 {
			if code, _ := h.Do(http.MethodPost, "/instance-ai/chat/ck-cur/cancel", ""); code != http.StatusOK {
				t.Fatalf("cancel: %d", code)
			}
		}
	}
	if got := types(rest); len(got) < 2 || got[0] != "RUN_STARTED" || got[1] != "MESSAGES_SNAPSHOT" {
		t.Fatalf("the continued run began %v", got)
	}
	runEvents, _ := storedRun(t, store, "ck-cur", run)
	full := agenttree.Fold(runEvents).TextContent
	texts := foldedTexts(t, append(seen, rest...))
	n := len(texts)
	if n < 4 || texts[0] != "user: simple one" || texts[n-2] != "user: long 100000" || texts[n-1] != "assistant: "+full ||
		strings.Count(strings.Join(texts, "\n"), "chunk 0.") != 1 {
		t.Fatalf("the client holds %d messages (the log's run has %d bytes of text):\n%.600s", len(texts), len(full), strings.Join(texts, "\n"))
	}

	// A run the client holds up to its interrupt, answered and over since:
	// the connect after the interrupt's id brings the rest of it.
	ask := h.Chat("ck-ask", "confirm")
	requestID := waitConfirmation(t, store, "ck-ask", ask).RequestID
	frames, stop = connectFrames(t, h, "ck-ask", "")
	asked := all(frames)
	stop()
	if countType(asked, "RUN_FINISHED") != 1 || !strings.Contains(fmt.Sprint(asked), "on_interrupt") || asked[len(asked)-1].id == 0 {
		t.Fatalf("connect to the waiting run: %v", types(asked))
	}
	h.Confirm(requestID, `{"approved":true}`)
	waitRow(t, store, "ck-ask", ask, rowType(instanceai.TypeRunFinish))
	frames, stop = connectFrames(t, h, "ck-ask", strconv.FormatInt(asked[len(asked)-1].id, 10))
	answered := all(frames)
	stop()
	if got := types(answered); len(got) < 3 || got[0] != "RUN_STARTED" || got[1] != "MESSAGES_SNAPSHOT" || got[len(got)-1] != "RUN_FINISHED" {
		t.Fatalf("connect after the interrupt: %v", got)
	}
	if got := strings.Join(foldedTexts(t, append(asked, answered...)), "\n"); strings.Count(got, "user: confirm") != 1 || strings.Count(got, "I can archive") != 1 ||
		strings.Count(got, "is archived") != 1 {
		t.Fatalf("after the answered run the client holds:\n%s", got)
	}

	req, _ := http.NewRequest(http.MethodPost, h.URL+"/copilotkit/agent/default/connect",
		strings.NewReader(`{"threadId":"ck-cur","lastSeenEventId":"evt-7"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(answer), "lastSeenEventId") {
		t.Fatalf("a foreign cursor: %d %s", res.StatusCode, answer)
	}
}
