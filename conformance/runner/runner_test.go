package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/aguicheck"
	"github.com/threadline/threadline/conformance/runner"
	"github.com/threadline/threadline/conformance/ssecheck"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/servertest"
)

// startThreadline serves the reference agent on store with a short
// heartbeat, as `threadline serve` wires it.
func startThreadline(t *testing.T, store instanceai.Store, heartbeat time.Duration) string {
	t.Helper()
	return servertest.Start(t, store, servertest.Options{Config: server.Config{Heartbeat: heartbeat, AgentName: "script"}}).URL
}

func failures(rep *conformance.Report) string {
	var b strings.Builder
	for _, v := range rep.Rules {
		for _, f := range v.Failures {
			fmt.Fprintf(&b, "%s %s: %s\n", v.ID, f.Scenario, f.Detail)
		}
	}
	for _, sc := range rep.Scenarios {
		if sc.Error != "" {
			fmt.Fprintf(&b, "scenario %s/%s: %s\n", sc.Protocol, sc.Name, sc.Error)
		}
	}
	return b.String()
}

// TestThreadlineConforms runs the whole suite, both protocols and the
// heartbeat rule, against Threadline on each store.
func TestThreadlineConforms(t *testing.T) {
	for _, st := range servertest.StoreKinds {
		t.Run(st.Name, func(t *testing.T) {
			url := startThreadline(t, st.Open(t), 300*time.Millisecond)
			var progress strings.Builder
			rep, err := runner.Run(context.Background(), runner.Config{Target: url, Heartbeat: 300 * time.Millisecond,
				MaxCursors: 12, Timeout: 30 * time.Second, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Passed {
				t.Fatalf("Threadline failed its own suite:\n%s\nprogress:\n%s", failures(rep), progress.String())
			}
			// Every scenario ran on its protocols, each reported once.
			if got := strings.Count(progress.String(), "\n"); got != len(rep.Scenarios) || len(rep.Scenarios) < 2*len(runner.Scenarios)-1 {
				t.Fatalf("%d progress lines for %d scenarios:\n%s", got, len(rep.Scenarios), progress.String())
			}
			passed := 0
			status := map[string]conformance.Status{}
			for _, v := range rep.Rules {
				status[v.ID] = v.Status
				if v.Status == conformance.Pass {
					passed++
				}
			}
			// The confirm scenario's interrupt exercises the interrupt
			// contract; Threadline's interrupts do not expire.
			for id, want := range map[string]conformance.Status{runner.ResumeCoversOpen: conformance.Pass,
				runner.ResumeReplay: conformance.Pass, runner.ResumeExpired: conformance.Skip,
				aguicheck.RunProtocolVersion: conformance.Pass, aguicheck.RunPendingCalls: conformance.Pass} {
				if status[id] != want {
					t.Errorf("%s is %s, want %s", id, status[id], want)
				}
			}
			if passed < len(rep.Rules)*3/4 {
				t.Fatalf("only %d of %d rules were exercised", passed, len(rep.Rules))
			}
		})
	}
}

// TestCleanup: with Cleanup the run's threads are gone afterwards, and
// the progress says how many were deleted; without it they stay.
func TestCleanup(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	srv := servertest.Start(t, store, servertest.Options{Config: server.Config{AgentName: "script"}})
	threads := func() []string {
		t.Helper()
		list, err := store.ListThreads(context.Background(), instanceai.ThreadQuery{OwnerID: auth.LocalUser, Limit: 0, Offset: 0})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, th := range list {
			if strings.HasPrefix(th.ID, "conformance-") {
				ids = append(ids, th.ID)
			}
		}
		return ids
	}
	cfg := runner.Config{Target: srv.URL, Scenarios: []string{"simple", "tools"}, Timeout: 10 * time.Second, MaxCursors: 4}
	if _, err := runner.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	kept := threads()
	if len(kept) < 4 {
		t.Fatalf("a run without cleanup left %d threads, want the 4 it played", len(kept))
	}
	var progress strings.Builder
	cfg.Cleanup, cfg.Progress = true, &progress
	if _, err := runner.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if left := threads(); len(left) != len(kept) {
		t.Fatalf("after a run with cleanup %d threads, want the %d of the first run only: %v", len(left), len(kept), left)
	}
	if !strings.Contains(progress.String(), "cleanup: deleted 4 of the run's 4 threads") {
		t.Fatalf("progress: %s", progress.String())
	}
}

// brokenAGUI serves /run-agent with CRLF line ends and a text message that
// is never ended.
func brokenAGUI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /run-agent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		for _, ev := range []string{
			`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hi"}`,
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
		} {
			fmt.Fprintf(w, "data: %s\r\n\r\n", ev)
		}
	})
	return mux
}

func TestBrokenServerIsReportedByRule(t *testing.T) {
	srv := httptest.NewServer(brokenAGUI())
	defer srv.Close()
	rep, err := runner.Run(context.Background(), runner.Config{Target: srv.URL, Protocols: []string{runner.ProtocolAGUI}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed {
		t.Fatal("a broken server passed")
	}
	failed := map[string]bool{}
	for _, v := range rep.Rules {
		if v.Status == conformance.Fail {
			failed[v.ID] = true
		}
	}
	for _, id := range []string{ssecheck.RuleLF, aguicheck.TextClosed} {
		if !failed[id] {
			t.Errorf("%s not reported; failures:\n%s", id, failures(rep))
		}
	}
	// A generic server gets the generic scenario only.
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Name != "hello" {
		t.Fatalf("scenarios %+v", rep.Scenarios)
	}
}

func TestConfigErrors(t *testing.T) {
	url := startThreadline(t, servertest.OpenStore(t, "memory"), time.Second)
	for _, c := range []struct {
		cfg  runner.Config
		want string
	}{
		{runner.Config{Target: "localhost:8080"}, "absolute http(s) URL"},
		{runner.Config{Target: url, Protocols: []string{"grpc"}}, `protocol "grpc"`},
		{runner.Config{Target: url, Scenarios: []string{"nope"}}, `unknown scenario "nope"`},
		{runner.Config{Target: "http://127.0.0.1:1"}, "target http://127.0.0.1:1"},
	} {
		if _, err := runner.Run(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
	generic := httptest.NewServer(brokenAGUI())
	defer generic.Close()
	if _, err := runner.Run(context.Background(), runner.Config{Target: generic.URL, Scenarios: []string{"tools"}}); err == nil || !strings.Contains(err.Error(), "needs the reference agent") {
		t.Errorf("reference scenario on a generic server: %v", err)
	}
}

// TestEveryRuleIsDocumented keeps conformance/README.md's rule table true.
func TestEveryRuleIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	c, err := runner.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Rules() {
		if !strings.Contains(string(doc), "| `"+r.ID+"` |") {
			t.Errorf("conformance/README.md does not list %s", r.ID)
		}
	}
}

// TestToken runs the suite against a server with authentication on:
// without the token every scenario is refused, which is an error that
// says so and hints --token (not a report of nothing checked); with it
// the suite passes.
func TestToken(t *testing.T) {
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{
		Tokens: "tok-conformance-0123456789=alice", Config: server.Config{AgentName: "script"}})
	cfg := runner.Config{Target: srv.URL, Scenarios: []string{"hello", "tools"}, Timeout: 10 * time.Second}
	_, err := runner.Run(context.Background(), cfg)
	if !errors.Is(err, runner.ErrRefused) || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("without the token: %v", err)
	}
	cfg.Token = "tok-conformance-0123456789"
	rep, err := runner.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if !rep.Passed {
		t.Fatalf("with the token:\n%s", failures(rep))
	}
}

// TestServerWithoutThreadsEndpoint checks the native scenarios against a
// server that creates threads on the first chat only: the chat goes first
// and the stream replays the run from the start.
func TestServerWithoutThreadsEndpoint(t *testing.T) {
	withoutThreads := func(app http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/instance-ai/threads" {
				http.NotFound(w, r)
				return
			}
			app.ServeHTTP(w, r)
		})
	}
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{
		Config: server.Config{AgentName: "script"}, WrapHandler: withoutThreads})
	rep, err := runner.Run(context.Background(), runner.Config{Target: srv.URL, Protocols: []string{runner.ProtocolNative},
		Scenarios: []string{"hello", "tools", "background"}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || len(rep.Scenarios) != 3 {
		t.Fatalf("chat-first: %s", failures(rep))
	}
}

// interruptingAGUI serves /run-agent with a run that stops on an interrupt
// expiring in 300 ms. A conforming one keeps the interrupt contract; the
// other takes every request as a new run: a message without resume, a
// resume that leaves the interrupt out, one past its expiry, one replayed.
func interruptingAGUI(conforming bool) http.Handler {
	var mu sync.Mutex
	open := map[string]map[string]time.Time{} // thread → interrupt id → expiry
	n := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /run-agent", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ThreadID string `json:"threadId"`
			RunID    string `json:"runId"`
			Resume   []struct {
				InterruptID string `json:"interruptId"`
				Status      string `json:"status"`
			} `json:"resume"`
		}
		if json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, `{"error":"bad input"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		send := func(evs ...string) {
			for _, ev := range evs {
				fmt.Fprintf(w, "data: %s\n\n", ev)
			}
		}
		started := fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q,"protocolVersion":"1.0"}`, in.ThreadID, in.RunID)
		finished := fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, in.ThreadID, in.RunID)
		refuse := func(code string) { send(fmt.Sprintf(`{"type":"RUN_ERROR","message":"refused","code":%q}`, code)) }
		mu.Lock()
		defer mu.Unlock()
		pending := open[in.ThreadID]
		if conforming && len(pending) > 0 {
			answered := map[string]bool{}
			for _, e := range in.Resume {
				exp, ok := pending[e.InterruptID]
				switch {
				case !ok:
					refuse("interrupt_not_open")
					return
				case time.Now().After(exp) && e.Status != "cancelled":
					refuse("interrupt_expired")
					return
				}
				answered[e.InterruptID] = true
			}
			if len(answered) != len(pending) {
				refuse("interrupts_unanswered")
				return
			}
			delete(open, in.ThreadID)
		} else if conforming && len(in.Resume) > 0 {
			refuse("interrupt_not_open")
			return
		}
		if len(in.Resume) > 0 || (!conforming && open[in.ThreadID] != nil) {
			send(started, `{"type":"TEXT_MESSAGE_START","messageId":"m-`+in.RunID+`","role":"assistant"}`,
				`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-`+in.RunID+`","delta":"Done."}`,
				`{"type":"TEXT_MESSAGE_END","messageId":"m-`+in.RunID+`"}`, finished)
			return
		}
		n++
		id := fmt.Sprintf("i%d", n)
		exp := time.Now().Add(300 * time.Millisecond)
		open[in.ThreadID] = map[string]time.Time{id: exp}
		send(started, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":%q,"reason":"confirmation","expiresAt":%q}]}}`,
			in.ThreadID, in.RunID, id, exp.UTC().Format(time.RFC3339Nano)))
	})
	return mux
}

// TestResumeRules: a server that keeps AG-UI's interrupt contract passes
// the resume rules; one that runs whatever it is sent fails each.
func TestResumeRules(t *testing.T) {
	for _, conforming := range []bool{true, false} {
		t.Run(fmt.Sprint("conforming=", conforming), func(t *testing.T) {
			srv := httptest.NewServer(interruptingAGUI(conforming))
			defer srv.Close()
			rep, err := runner.Run(context.Background(), runner.Config{Target: srv.URL, Protocols: []string{runner.ProtocolAGUI}, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			status := map[string]conformance.Status{}
			for _, v := range rep.Rules {
				status[v.ID] = v.Status
			}
			for _, id := range []string{runner.ResumeCoversOpen, runner.ResumeExpired, runner.ResumeReplay} {
				want := conformance.Fail
				if conforming {
					want = conformance.Pass
				}
				if status[id] != want {
					t.Errorf("%s is %s, want %s; failures:\n%s", id, status[id], want, failures(rep))
				}
			}
			if conforming && !rep.Passed {
				t.Errorf("a conforming server failed:\n%s", failures(rep))
			}
		})
	}
}
