package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/upstream"
	"github.com/threadline/threadline/agent/upstream/upstreamtest"
	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/aguicheck"
	"github.com/threadline/threadline/conformance/runner"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// upstreamSecret is the upstream's credential: no event or answer may show
// it.
const upstreamSecret = "Bearer s3cret-upstream-token"

// startUpstream starts Threadline in front of the hand-written AG-UI agent
// (upstreamtest), named "fake", with a second upstream "down" that no one
// answers at.
func startUpstream(t *testing.T, store instanceai.Store, idle time.Duration) (*harness, *upstreamtest.Server) {
	t.Helper()
	fake := upstreamtest.Start(t)
	a, err := upstream.New(upstream.Config{
		Upstreams: []upstream.Upstream{{Name: "fake", URL: fake.URL + "/agent?key=q-secret"}, {Name: "down", URL: "http://127.0.0.1:1/agent"}},
		Header:    http.Header{"Authorization": {upstreamSecret}}, Store: store, IdleTimeout: idle,
	})
	if err != nil {
		t.Fatal(err)
	}
	return start(t, store, servertest.Options{Agent: a, Config: server.Config{LLMHealth: a.HealthHandler()}}), fake
}

// normalized is a client's messages without their ids, which Threadline
// names its own way (a reasoning message, a tool result), and without the
// result kind Threadline adds to a tool result's metadata.
func normalized(msgs []map[string]any) string {
	var out []string
	for _, m := range msgs {
		c := map[string]any{}
		for k, v := range m {
			if k != "id" {
				c[k] = v
			}
		}
		if md, ok := c["metadata"].(map[string]any); ok {
			md = maps.Clone(md)
			delete(md, mapping.MetadataKey)
			if c["metadata"] = md; len(md) == 0 {
				delete(c, "metadata")
			}
		}
		b, _ := json.Marshal(c)
		out = append(out, string(b))
	}
	return strings.Join(out, "\n")
}

// An upstream's run reaches @ag-ui/client through Threadline as it does
// straight from the upstream: every event passes the client's verifier,
// and the messages and state it ends with are the upstream's; the rejoin
// stream read afterwards folds to the same messages.
func TestUpstreamAgentRoundTrip(t *testing.T) {
	node := interopNode(t)
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h, fake := startUpstream(t, store, 0)
		// frontend: the upstream calls the client's tool, the client runs
		// it and sends its result, which reaches the upstream.
		scenarios := fmt.Sprintf(`[
			{"name":"full","message":%q,"rejoin":true},
			{"name":"parallel","message":%q,"rejoin":true},
			{"name":"frontend","message":%q,"rejoin":true,"toolResult":"teal",
				"tools":[{"name":"pickColor","description":"Asks the user for a color","parameters":{"type":"object","properties":{}}}]},
			{"name":"subagents","message":%q,"rejoin":true},
			{"name":"encrypted","message":%q,"rejoin":true}
		]`, upstreamtest.Full, upstreamtest.Parallel, upstreamtest.Frontend, upstreamtest.Subagents, upstreamtest.Encrypted)
		direct := runInterop(t, node, fake.URL, scenarios, 5)
		through := runInterop(t, node, h.URL+"/run-agent", scenarios, 5)
		for i, want := range direct.Results {
			got := through.Results[i]
			want.interopRun.succeeded(t, want.Name+" straight from the upstream")
			got.interopRun.succeeded(t, got.Name+" through Threadline")
			if len(got.Warnings) > 0 {
				t.Fatalf("%s: the client warned: %+v", got.Name, got.Warnings)
			}
			if g, w := normalized(got.Messages), normalized(want.Messages); g != w {
				t.Fatalf("%s: messages through Threadline\n%s\nstraight from the upstream\n%s", got.Name, g, w)
			}
			if want.FollowUp != nil {
				want.FollowUp.succeeded(t, want.Name+" follow-up straight from the upstream")
				got.FollowUp.succeeded(t, got.Name+" follow-up through Threadline")
			}
			gs, _ := json.Marshal(got.State)
			ws, _ := json.Marshal(want.State)
			if string(gs) != string(ws) {
				t.Fatalf("%s: state %s, upstream's %s", got.Name, gs, ws)
			}
			if r := got.Rejoin; r == nil || r.Error != nil || r.RunError != nil {
				t.Fatalf("%s: rejoin %+v", got.Name, r)
			}
			// The rejoin's snapshot holds the conversation as the live
			// stream built it (run.js rejoins before a follow-up: read
			// the thread again once it is over).
			if want.FollowUp == nil {
				if g, w := normalized(got.Rejoin.Messages), normalized(want.Messages); g != w {
					t.Fatalf("%s: rejoin messages\n%s\nwant\n%s", got.Name, g, w)
				}
			}
			if g, w := normalized(h.rejoinedMessages(got.ThreadID)), normalized(want.Messages); g != w {
				t.Fatalf("%s: messages of a rejoin at the end\n%s\nwant\n%s", got.Name, g, w)
			}
		}
		for _, typ := range []string{"STATE_SNAPSHOT", "STATE_DELTA", "STEP_STARTED", "STEP_FINISHED", "CUSTOM", "REASONING_MESSAGE_CONTENT"} {
			if !slices.Contains(through.Results[0].Events, typ) {
				t.Fatalf("full: no %s served back: %v", typ, through.Results[0].Events)
			}
		}

		// A sub-agent of the upstream is one of the run's agents in the
		// log, as n8n's agent tree shows it.
		var spawned, completed int
		for _, r := range servertest.StoredEvents(t, store, through.Results[3].ThreadID) {
			switch p := r.Event.Payload.(type) {
			case *instanceai.AgentSpawned:
				if r.Event.AgentID == "sub-1" && p.Role == "researcher" {
					spawned++
				}
			case *instanceai.AgentCompleted:
				if r.Event.AgentID == "sub-1" && p.Result == "three hits" {
					completed++
				}
			}
		}
		if spawned != 1 || completed != 1 {
			t.Fatalf("subagents: %d agent-spawned and %d agent-completed of sub-1 in the log", spawned, completed)
		}
		if got := lastAssistantText(through.Results[2].Messages); got != "The browser answered: teal" {
			t.Fatalf("frontend: the upstream's answer to the tool result is %q", got)
		}

		// What the upstream was sent: the thread and Threadline's run,
		// the conversation ending with the user's message (or the
		// frontend tool's result, with the client's tools again), {} for
		// state and forwardedProps, and the configured header.
		var forThread []agui.RunAgentInput
		for _, in := range fake.Requests() {
			if in.ThreadID == through.Results[2].ThreadID {
				forThread = append(forThread, in)
			}
		}
		if len(forThread) != 2 {
			t.Fatalf("the upstream got %d requests for the frontend thread", len(forThread))
		}
		first, second := forThread[0], forThread[1]
		if !strings.HasPrefix(first.RunID, "run_") || len(first.Messages) != 1 || first.Messages[0].Text() != upstreamtest.Frontend ||
			len(first.Tools) != 1 || first.Tools[0].Name != "pickColor" {
			t.Fatalf("first upstream input %+v", first)
		}
		if n := len(second.Messages); n != 3 || second.Messages[1].ToolCalls[0].ID != "fe-1" || second.Messages[2].Role != "tool" ||
			second.Messages[2].Text() != "teal" || len(second.Tools) != 1 {
			t.Fatalf("second upstream input %+v", second)
		}
		if string(first.State) != "{}" || string(first.ForwardedProps) != "{}" {
			t.Fatalf("upstream state %s forwardedProps %s", first.State, first.ForwardedProps)
		}
		if hs := fake.Headers(); hs[len(hs)-1].Get("Authorization") != upstreamSecret || hs[len(hs)-1].Get("Accept") != "text/event-stream" {
			t.Fatalf("upstream headers %v", hs[len(hs)-1])
		}
		// The native stream leaves the upstream's own events out.
		for _, r := range servertest.StoredEvents(t, store, through.Results[0].ThreadID) {
			if r.Event.Type == instanceai.TypeAGUI {
				if p := r.Event.Payload.(*instanceai.AGUIEvent); p.Upstream != "fake" {
					t.Fatalf("ag-ui event from %q", p.Upstream)
				}
			}
		}
		conn := h.Connect(through.Results[0].ThreadID, "", false)
		defer conn.Close()
		frames := conn.Until(5*time.Second, servertest.IsType(instanceai.TypeRunFinish))
		if len(frames) == 0 {
			t.Fatal("the native stream replayed nothing")
		}
		for _, f := range frames {
			if f.Decoded.Type.Extension() {
				t.Fatalf("native stream carried %s", f.Decoded.Type)
			}
		}
	})
}

// runFinish waits for the run's run-finish in the log and returns the
// run's stored events.
func runFinish(t *testing.T, store instanceai.Store, thread, runID string) []instanceai.Event {
	t.Helper()
	waitRow(t, store, thread, runID, rowType(instanceai.TypeRunFinish))
	evs, _ := storedRun(t, store, thread, runID)
	return evs
}

// An upstream that fails ends the run with an error event that names the
// upstream and the cause (and never its credential), keeps what it sent
// before, and leaves the thread free for the next run.
func TestUpstreamAgentFailures(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		// The stall case waits out the idle timeout; long enough that the
		// others, whose upstreams never pause, cannot hit it on a busy
		// machine.
		h, fake := startUpstream(t, store, time.Second)
		cases := []struct {
			script, agent, code, says string
			keeps                     string // text kept from before the failure
		}{
			{script: upstreamtest.RunError, code: "rate_limited", says: "model quota exceeded", keeps: "Working on it"},
			{script: upstreamtest.Status500, code: upstream.CodeUpstreamError, says: "HTTP 500"},
			{script: upstreamtest.HTML, code: upstream.CodeNotEventStream, says: `"text/html"`},
			{script: upstreamtest.Malformed, code: upstream.CodeInvalidEvent, says: "cannot accept"},
			{script: upstreamtest.AfterEnd, code: upstream.CodeInvalidEvent, says: "after its run had ended", keeps: "done"},
			{script: upstreamtest.NoEnd, code: upstream.CodeStreamInterrupted, says: "before ending its run", keeps: "cut"},
			{script: upstreamtest.Stall, code: upstream.CodeTimeout, says: "sent nothing for 1s"},
			{script: upstreamtest.Echo, agent: "down", code: upstream.CodeConnectionFailed, says: `Could not reach the AG-UI agent "down"`},
		}
		for i, c := range cases {
			thread := fmt.Sprintf("fail-%d", i)
			body, _ := json.Marshal(map[string]string{"message": c.script, "agent": c.agent})
			code, out := h.Do(http.MethodPost, "/instance-ai/chat/"+thread, string(body))
			if code != http.StatusOK {
				t.Fatalf("%s: chat %d %v", c.script, code, out)
			}
			runID := out["runId"].(string)
			evs := runFinish(t, store, thread, runID)
			var failure *instanceai.ErrorPayload
			text := ""
			for _, ev := range evs {
				switch p := ev.Payload.(type) {
				case *instanceai.ErrorPayload:
					failure = p
				case *instanceai.Text:
					text += p.Text
				}
			}
			finish := evs[len(evs)-1].Payload.(*instanceai.RunFinish)
			if failure == nil || finish.Status != instanceai.RunError || failure.Code != c.code || failure.Provider != upstream.Provider ||
				!strings.Contains(failure.Content+" "+failure.TechnicalDetails, c.says) {
				t.Fatalf("%s: error %+v, finish %+v; want code %s saying %q", c.script, failure, finish, c.code, c.says)
			}
			if text != c.keeps {
				t.Fatalf("%s: kept text %q, want %q", c.script, text, c.keeps)
			}
			raw, _ := json.Marshal(evs)
			if strings.Contains(string(raw), "s3cret") || strings.Contains(string(raw), "q-secret") {
				t.Fatalf("%s: the upstream's credential is in the log: %s", c.script, raw)
			}
			// The thread takes the next run.
			next := h.Chat(thread, upstreamtest.Echo)
			if evs := runFinish(t, store, thread, next); evs[len(evs)-1].Payload.(*instanceai.RunFinish).Status != instanceai.RunCompleted {
				t.Fatalf("%s: the next run ended %+v", c.script, evs[len(evs)-1].Payload)
			}
		}
		// An upstream that stalls is abandoned: its request was cut.
		if fake.Gone() == 0 {
			t.Fatal("the stalled upstream request was never cut")
		}

		// /status and /llm/health report each upstream, and never the
		// credential.
		var status struct {
			Agents map[string]struct {
				Status string `json:"status"`
			} `json:"agents"`
		}
		if code := h.DoInto(http.MethodGet, "/status", "", &status); code != http.StatusOK ||
			status.Agents["fake"].Status != upstream.StateReady || status.Agents["down"].Status != upstream.StateUnreachable {
			t.Fatalf("/status %d %+v", code, status)
		}
		var health upstream.Health
		if code := h.DoInto(http.MethodGet, "/llm/health", "", &health); code != http.StatusOK || health.Status != "degraded" ||
			len(health.Upstreams) != 2 || !health.Upstreams[0].Reachable || health.Upstreams[1].Reachable ||
			health.Upstreams[0].URL != fake.URL+"/agent" || health.Upstreams[1].Error == "" {
			t.Fatalf("/llm/health %d %+v", code, health)
		}
	})
}

// Cancel stops the upstream's request at once; the run ends cancelled and
// nothing the upstream would have sent after is kept.
func TestUpstreamAgentCancel(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h, fake := startUpstream(t, store, 0)
		runID := h.Chat("cancel", upstreamtest.Slow)
		waitRow(t, store, "cancel", runID, func(ev instanceai.Event) bool {
			return ev.Type == instanceai.TypeTextBlock || ev.Type == instanceai.TypeAGUI
		})
		h.Cancel("cancel")
		evs := runFinish(t, store, "cancel", runID)
		if st := evs[len(evs)-1].Payload.(*instanceai.RunFinish).Status; st != instanceai.RunCancelled {
			t.Fatalf("run ended %s", st)
		}
		deadline := time.Now().Add(10 * time.Second)
		for fake.Gone() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the upstream's request was not cut by the cancel")
			}
			time.Sleep(5 * time.Millisecond)
		}
		after, _ := storedRun(t, store, "cancel", runID)
		if len(after) != len(evs) {
			t.Fatalf("%d events stored after the run-finish", len(after)-len(evs))
		}
	})
}

// An upstream's interrupt is a confirmation: answered through the native
// API or an AG-UI resume, the answer goes upstream as the next request's
// resume and the upstream's answer continues the same Threadline run.
func TestUpstreamAgentInterrupt(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h, fake := startUpstream(t, store, 0)

		// Native: a text interrupt answered with text.
		runID := h.Chat("native", upstreamtest.InterruptText)
		var requestID string
		waitRow(t, store, "native", runID, func(ev instanceai.Event) bool {
			if p, ok := ev.Payload.(*instanceai.ConfirmationRequest); ok {
				requestID = p.RequestID
				if p.InputType != instanceai.InputText || p.Message != "Which region?" || p.ToolCallID != "int-1" {
					t.Errorf("confirmation %+v", p)
				}
				return true
			}
			return false
		})
		h.Confirm(requestID, `{"kind":"text","approved":true,"userInput":"eu-west"}`)
		evs := runFinish(t, store, "native", runID)
		text := ""
		for _, ev := range evs {
			if p, ok := ev.Payload.(*instanceai.Text); ok {
				text += p.Text
			}
		}
		if want := `I need your approval first.Resumed with resolved: "eu-west"`; text != want {
			t.Fatalf("run text %q, want %q", text, want)
		}
		reqs := fake.Requests()
		resumed := reqs[len(reqs)-1]
		if len(resumed.Resume) != 1 || resumed.Resume[0].InterruptID != "int-1" || resumed.RunID == runID || resumed.ThreadID != "native" {
			t.Fatalf("resume request %+v", resumed)
		}

		// AG-UI: the client sees Threadline's interrupt and resumes it.
		first := h.runAgent("agui-int", "r1", upstreamtest.Interrupt, nil)
		outcome := outcomeOf(t, first)
		interrupts, _ := outcome["interrupts"].([]any)
		if outcome["type"] != "interrupt" || len(interrupts) != 1 {
			t.Fatalf("outcome %v", outcome)
		}
		id := interrupts[0].(map[string]any)["id"].(string)
		second := h.runAgentBody(inputJSON(map[string]any{"threadId": "agui-int", "runId": "r2", "messages": []any{},
			"resume": []any{map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": false}}}}))
		if got := textOf(second); got != `Resumed with resolved: {"approved":false}` {
			t.Fatalf("resumed text %q", got)
		}
		if o := outcomeOf(t, second); o["type"] != "success" {
			t.Fatalf("resumed outcome %v", o)
		}
	})
}

// A client that reloads in the middle of an upstream's run rejoins it and
// ends with exactly the messages the upstream sent.
func TestUpstreamAgentReloadMidRun(t *testing.T) {
	node := interopNode(t)
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h, fake := startUpstream(t, store, 0)
		direct := runInterop(t, node, fake.URL, fmt.Sprintf(`[{"name":"slow","message":%q}]`, upstreamtest.Slow), 1).Results[0]
		direct.interopRun.succeeded(t, "straight from the upstream")
		through := runInterop(t, node, h.URL+"/run-agent", fmt.Sprintf(`[{"name":"reload","message":%q,
			"abortAfter":"TEXT_MESSAGE_CONTENT","forwardedProps":{"onDisconnect":"continue"},"rejoin":true}]`, upstreamtest.Slow), 1).Results[0]
		if through.Aborted == nil || !*through.Aborted {
			t.Fatalf("the client never left the run: %v", through.Events)
		}
		r := through.Rejoin
		if r == nil || r.Error != nil || r.RunError != nil || r.Events[len(r.Events)-1] != "RUN_FINISHED" {
			t.Fatalf("rejoin %+v", r)
		}
		if !slices.Contains(r.Events, "TEXT_MESSAGE_CONTENT") {
			t.Fatalf("the rejoin carried no live text (the run was over before it): %v", r.Events)
		}
		if g, w := normalized(r.Messages), normalized(direct.Messages); g != w {
			t.Fatalf("after the reload\n%s\nstraight from the upstream\n%s", g, w)
		}
	})
}

// rejoinedMessages folds a rejoin of the thread, as a client folds it.
func (h *harness) rejoinedMessages(thread string) []map[string]any {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fold := mapping.NewAGUIFold()
	for _, ev := range h.openRejoin(ctx, thread, "").rest() {
		decoded, err := agui.DecodeEvent([]byte(ev.raw))
		if err != nil {
			h.t.Fatalf("rejoin event %s: %v", ev.raw, err)
		}
		fold.Apply(decoded)
	}
	raw, _ := json.Marshal(fold.Messages())
	var out []map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// The conformance suite passes against Threadline in front of an AG-UI
// agent: the scenarios any agent can play, on both protocols, with the
// heartbeat rule.
func TestUpstreamAgentConforms(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		fake := upstreamtest.Start(t)
		a, err := upstream.New(upstream.Config{Upstreams: []upstream.Upstream{{Name: "fake", URL: fake.URL}}, Store: store})
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, store, servertest.Options{Agent: a, Config: server.Config{Heartbeat: 300 * time.Millisecond}})
		rep, err := runner.Run(context.Background(), runner.Config{Target: h.URL, Heartbeat: 300 * time.Millisecond, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Passed || len(rep.Scenarios) < 2 {
			var b strings.Builder
			_ = rep.WriteTable(&b)
			t.Fatalf("passed %v, %d scenarios:\n%s", rep.Passed, len(rep.Scenarios), b.String())
		}
		if len(fake.Requests()) < 2 {
			t.Fatalf("the upstream got %d requests, want one per protocol at least", len(fake.Requests()))
		}
	})
}

// An upstream's REASONING_ENCRYPTED_VALUE events reach the /run-agent
// stream attached to entities the client holds there (the reasoning
// message, the text message, the tool call), and a rejoin afterwards
// restates them: the MESSAGES_SNAPSHOT carries each value on its message
// or tool call, as the client that followed the run live holds them.
func TestUpstreamEncryptedReasoning(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h, _ := startUpstream(t, store, 0)
	thread := "up-encrypted"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := h.PostRunAgent(ctx, servertest.RunAgentInput(thread, "r1", upstreamtest.Encrypted,
		map[string]any{"forwardedProps": map[string]any{"agent": "fake"}}), "text/event-stream")
	rec, err := conformance.Record(ctx, res, nil)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("run-agent: %d %v", res.StatusCode, err)
	}
	verdict := map[string]conformance.Finding{}
	for _, f := range aguicheck.Check(rec) {
		verdict[f.Rule] = f
		if f.Status == conformance.Fail {
			t.Errorf("%s fails: %s", f.Rule, f.Detail)
		}
	}
	if f := verdict[aguicheck.ReasonEncrypted]; f.Status != conformance.Pass {
		t.Fatalf("%s: %+v\n%s", aguicheck.ReasonEncrypted, f, rec.Body)
	}
	for _, v := range []string{upstreamtest.EncryptedReasoning, upstreamtest.EncryptedMessage, upstreamtest.EncryptedCall} {
		if !strings.Contains(string(rec.Body), `"encryptedValue":"`+v+`"`) {
			t.Fatalf("the stream lacks encrypted value %s:\n%s", v, rec.Body)
		}
	}

	// The rejoin's snapshot restates them on their entities.
	var snapshot []map[string]any
	for _, ev := range h.openRejoin(ctx, thread, "").rest() {
		if ev.typ == "MESSAGES_SNAPSHOT" {
			raw, _ := json.Marshal(ev.body["messages"])
			_ = json.Unmarshal(raw, &snapshot)
		}
	}
	found := map[string]string{}
	for _, m := range snapshot {
		if v, ok := m["encryptedValue"].(string); ok {
			found[v] = fmt.Sprint(m["role"])
		}
		calls, _ := m["toolCalls"].([]any)
		for _, c := range calls {
			tc, _ := c.(map[string]any)
			if v, ok := tc["encryptedValue"].(string); ok {
				found[v] = "toolCall " + fmt.Sprint(tc["id"])
			}
		}
	}
	want := map[string]string{upstreamtest.EncryptedReasoning: "reasoning", upstreamtest.EncryptedMessage: "assistant",
		upstreamtest.EncryptedCall: "toolCall ec1"}
	if !maps.Equal(found, want) {
		t.Fatalf("encrypted values in the rejoin's MESSAGES_SNAPSHOT %v, want %v\nsnapshot: %v", found, want, snapshot)
	}
}

// An upstream's interrupt keeps its expiresAt on the /run-agent stream; a
// resume that resolves it too late gets RUN_ERROR interrupt_expired and
// leaves it open; cancelling it still goes on with the thread.
func TestUpstreamInterruptExpiry(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h, fake := startUpstream(t, store, 0)
	thread := "up-expiring"
	resumeBody := func(thread, runID string, resume []any) string {
		return inputJSON(map[string]any{"threadId": thread, "runId": runID, "messages": []any{}, "resume": resume,
			"forwardedProps": map[string]any{"agent": "fake"}})
	}
	evs := h.runAgent(thread, "r1", upstreamtest.InterruptExpiring, map[string]any{"forwardedProps": map[string]any{"agent": "fake"}})
	out := outcomeOf(t, evs)
	ins, _ := out["interrupts"].([]any)
	if out["type"] != "interrupt" || len(ins) != 1 {
		t.Fatalf("outcome %v", out)
	}
	in, _ := ins[0].(map[string]any)
	id, _ := in["id"].(string)
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(in["expiresAt"]))
	if err != nil {
		t.Fatalf("the interrupt's expiresAt: %v (%v)", in["expiresAt"], err)
	}
	time.Sleep(time.Until(at) + 20*time.Millisecond)
	late := resumeBody(thread, "r2", []any{map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": true}}})
	if code, field := h.runAgentRefused(late); code != "interrupt_expired" || field != "resume[0].interruptId" {
		t.Fatalf("a late resume: %s %q", code, field)
	}
	if st := h.ThreadStatus(thread); !st.IsSuspended {
		t.Fatalf("after the refused late resume: %+v", st)
	}
	// The native answer endpoint refuses the approval as well, naming the
	// request, and changes nothing.
	for _, body := range []string{`{"approved":true}`, `{"kind":"text","text":"go"}`} {
		code, out := h.Do("POST", "/instance-ai/confirm/"+id, body)
		errObj, _ := out["error"].(map[string]any)
		details, _ := errObj["details"].(map[string]any)
		if code != http.StatusConflict || errObj["code"] != "confirmation_expired" || details["field"] != "requestId" {
			t.Fatalf("a late native answer %s: %d %s", body, code, out)
		}
	}
	if st := h.ThreadStatus(thread); !st.IsSuspended {
		t.Fatalf("after the refused native answers: %+v", st)
	}
	evs = h.runAgentBody(resumeBody(thread, "r3", []any{map[string]any{"interruptId": id, "status": "cancelled"}}))
	if o := outcomeOf(t, evs); o["type"] != "success" {
		t.Fatalf("cancelled: outcome %v", o)
	}
	reqs := fake.Requests()
	// A cancelled approval goes upstream as a denial (PROTOCOLS.md §3).
	if last := reqs[len(reqs)-1]; len(last.Resume) != 1 || last.Resume[0].InterruptID != "int-1" ||
		string(last.Resume[0].Payload) != `{"approved":false}` {
		t.Fatalf("the upstream's last request resumes %+v", last.Resume)
	}
}
