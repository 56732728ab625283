package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server/servertest"
)

// A producer's events that break the log's rules are refused on three
// real instances, naming the rule and the field, storing nothing; and what
// the producer leaves open when it finishes (a spawned agent, a tool call)
// is closed by the finish, so that an AG-UI rejoin on another instance,
// joined mid-run or after it, ends with RUN_FINISHED (before, it streamed
// pings for ever).
func TestPublishRulesOnThreeInstances(t *testing.T) {
	store := testpg.FreshDSN(t)
	ps := cluster(t, store, clusterBuses[0].spec(t), 3, 0)
	a, c := ps[0], ps[2]

	other := &publisher{t: t, url: a.URL, thread: "rules-other"}
	code, out := other.start("")
	otherOrchestrator, _ := out["agentId"].(string)
	if code != http.StatusCreated || otherOrchestrator == "" {
		t.Fatalf("start the other run: %d %v", code, out)
	}

	pub := &publisher{t: t, url: a.URL, thread: "rules"}
	if code, out := pub.start(""); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, out)
	}
	seq := 0
	appendOK := func(body string, n int) {
		t.Helper()
		if code, out := pub.send("w", 0, seq, "application/json", body); code != http.StatusOK {
			t.Fatalf("append %s: %d %v", body, code, out)
		}
		seq += n
	}
	appendOK(`[{"type":"agent-spawned","agentId":"sub1","payload":{"role":"researcher"}},`+
		`{"type":"tool-call","agentId":"sub1","payload":{"toolCallId":"c1","toolName":"search","args":{}}}]`, 2)

	// A rejoin on the third instance while the run is under way.
	mid := rejoin(t, c.URL, pub.thread)

	refusals := []struct {
		name, event, rule, field string
	}{
		{"agent-completed for an agent never spawned",
			`{"type":"agent-completed","agentId":"ghost","payload":{"role":"x","result":"done"}}`, "unknown_agent", "agentId"},
		{"agent-spawned under another run's orchestrator",
			`{"type":"agent-spawned","agentId":"sub2","payload":{"parentId":"` + otherOrchestrator + `","role":"r"}}`, "unknown_parent", "payload.parentId"},
		{"a tool call under another run's orchestrator",
			`{"type":"tool-call","agentId":"` + otherOrchestrator + `","payload":{"toolCallId":"c2","toolName":"t","args":{}}}`, "unknown_agent", "agentId"},
		{"a tool result for an unknown call",
			`{"type":"tool-result","payload":{"toolCallId":"nope","result":1}}`, "unknown_tool_call", "payload.toolCallId"},
		{"a text block written directly",
			`{"type":"text-block","payload":{"text":"forged"}}`, "writer_only", "type"},
		{"a reasoning block written directly",
			`{"type":"reasoning-block","payload":{"text":"forged"}}`, "writer_only", "type"},
	}
	for _, r := range refusals {
		code, out := pub.send("w", 0, seq, "application/json", "["+r.event+"]")
		gotCode, details := publishError(out)
		if code != http.StatusBadRequest || gotCode != "rule_broken" || details["rule"] != r.rule || details["field"] != "events[0]."+r.field {
			t.Errorf("%s: %d %v, want 400 rule_broken, rule %s, field events[0].%s", r.name, code, out, r.rule, r.field)
		}
	}
	// The run goes on after a refusal.
	appendOK(delta("still here"), 1)
	if code, out := pub.do(http.MethodPost, "/publish/threads/"+pub.thread+"/runs/"+pub.run+"/finish", "", nil, nil); code != http.StatusOK {
		t.Fatalf("finish: %d %v", code, out)
	}

	after := rejoin(t, c.URL, pub.thread)
	for name, frames := range map[string]<-chan []string{"joined mid-run": mid, "joined after": after} {
		select {
		case types := <-frames:
			if len(types) == 0 || types[len(types)-1] != "RUN_FINISHED" {
				t.Errorf("the rejoin %s ended with %v, want RUN_FINISHED", name, types)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the rejoin %s on the third instance did not end", name)
		}
	}

	rows := servertest.StoredEvents(t, servertest.OpenStore(t, store), pub.thread)
	var closedAgent, closedCall bool
	for _, r := range rows {
		ev := r.Event
		switch {
		case ev.Type == instanceai.TypeTextBlock && strings.Contains(string(r.Data), "forged"),
			ev.AgentID == "ghost", ev.AgentID == "sub2", ev.AgentID == otherOrchestrator:
			t.Errorf("a refused event was stored: %s", r.Data)
		case ev.Type == instanceai.TypeAgentCompleted && ev.AgentID == "sub1":
			closedAgent = strings.Contains(string(r.Data), `"error"`)
		case ev.Type == instanceai.TypeToolError && strings.Contains(string(r.Data), `"c1"`):
			closedCall = true
		}
	}
	if !closedAgent || !closedCall {
		t.Fatalf("the finish left sub1 (closed %v) or its call (closed %v) open; the log:\n%s", closedAgent, closedCall, logText(rows))
	}
}

// rejoin opens GET /agui/threads/{thread}/events and sends, once the
// stream ends, the types of the AG-UI events it carried.
func rejoin(t *testing.T, base, thread string) <-chan []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/agui/threads/"+thread+"/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("rejoin: %d", res.StatusCode)
	}
	out := make(chan []string, 1)
	go func() {
		defer res.Body.Close()
		var types []string
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct{ Type string }
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Type != "" {
				types = append(types, ev.Type)
			}
		}
		out <- types
	}()
	return out
}

func logText(rows []instanceai.StoredEvent) string {
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%d %s\n", r.Seq, r.Data)
	}
	return b.String()
}
