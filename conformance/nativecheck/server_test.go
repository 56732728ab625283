package nativecheck_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/nativecheck"
	"github.com/threadline/threadline/conformance/ssecheck"
	"github.com/threadline/threadline/server/servertest"
)

const wait = 10 * time.Second

func startServer(t *testing.T, storeSpec string) *servertest.Server {
	return servertest.Start(t, servertest.OpenStore(t, storeSpec), servertest.Options{})
}

func post(t *testing.T, url, body string) map[string]any {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %v", url, res.StatusCode, out)
	}
	return out
}

// open starts a recording of the thread's events; the result arrives on
// the channel once stop returns true.
func open(t *testing.T, url string, cursor int64, stop func(conformance.TimedFrame) bool) <-chan *conformance.Recording {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if cursor > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(cursor, 10))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out := make(chan *conformance.Recording, 1)
	go func() {
		defer cancel()
		defer res.Body.Close()
		rec, err := conformance.Record(ctx, res, stop)
		if err != nil {
			t.Errorf("record %s: %v", url, err)
		}
		out <- rec
	}()
	return out
}

type wire struct {
	Type    string `json:"type"`
	AgentID string `json:"agentId"`
	Payload struct {
		RequestID string `json:"requestId"`
	} `json:"payload"`
}

func decodeFrame(f conformance.TimedFrame) wire {
	var w wire
	_ = json.Unmarshal([]byte(f.Data), &w)
	return w
}

func maxID(rec *conformance.Recording) int64 {
	var last int64
	for _, f := range rec.Frames {
		if n, err := strconv.ParseInt(f.ID, 10, 64); err == nil && n > last {
			last = n
		}
	}
	return last
}

// scenario runs one chat message on a fresh thread while a connection
// follows it from the start, then records the full replay and a replay
// after every cursor, and returns every finding.
func scenario(t *testing.T, srv *servertest.Server, thread, message string) []conformance.Finding {
	post(t, srv.URL+"/instance-ai/threads", `{"id":"`+thread+`"}`)
	events := srv.URL + "/instance-ai/events/" + thread
	background := strings.HasPrefix(message, "background")
	confirms := make(chan string, 1)
	// With no delay the background agent may complete before or after the
	// orchestrator's run-finish: the recording ends once both came.
	finished, completed := false, false
	liveC := open(t, events, 0, func(f conformance.TimedFrame) bool {
		w := decodeFrame(f)
		switch w.Type {
		case "confirmation-request":
			confirms <- w.Payload.RequestID
		case "run-finish":
			finished = true
		case "agent-completed":
			completed = true
		}
		return finished && (completed || !background)
	})
	body, _ := json.Marshal(map[string]string{"message": message})
	post(t, srv.URL+"/instance-ai/chat/"+thread, string(body))
	var findings []conformance.Finding
	if strings.HasPrefix(message, "confirm") {
		var id string
		select {
		case id = <-confirms:
		case <-time.After(wait):
			t.Fatal("no confirmation-request")
		}
		// A connection that joins the suspended run gets its run-sync.
		mid := <-open(t, events, 0, func(f conformance.TimedFrame) bool { return f.Event == "run-sync" })
		findings = append(findings, nativecheck.CheckConnection(mid)...)
		post(t, srv.URL+"/instance-ai/confirm/"+id, `{"approved":true}`)
	}
	live := <-liveC
	findings = append(findings, nativecheck.CheckConnection(live)...)
	findings = append(findings, ssecheck.Check(live, ssecheck.Options{})...)
	last := maxID(live)
	untilLast := func(f conformance.TimedFrame) bool { return f.ID == strconv.FormatInt(last, 10) }
	full := <-open(t, events, 0, untilLast)
	findings = append(findings, nativecheck.CheckConnection(full)...)
	after := map[int64]*conformance.Recording{}
	for c := int64(1); c < last; c++ {
		after[c] = <-open(t, events, c, untilLast)
		findings = append(findings, nativecheck.CheckConnection(after[c])...)
	}
	return append(findings, nativecheck.CheckReplay(live, full, after)...)
}

// TestServerScenarios: the real server passes every rule it exercises,
// and the scenarios together exercise every rule.
// A memory store with a window of 4 events evicts the start of a "tools"
// thread, so its replays are reset.
func TestServerScenarios(t *testing.T) {
	srv, small := startServer(t, "memory"), startServer(t, "memory?max-events=4")
	passed := map[string]bool{}
	for i, msg := range []string{"simple hi", "tools", "tasks", "error", "confirm", "background", "long 300", "evicted tools"} {
		t.Run(msg, func(t *testing.T) {
			target := srv
			if strings.HasPrefix(msg, "evicted ") {
				target, msg = small, strings.TrimPrefix(msg, "evicted ")
			}
			for _, f := range scenario(t, target, "th"+strconv.Itoa(i), msg) {
				switch f.Status {
				case conformance.Fail:
					t.Errorf("%s: %s", f.Rule, f.Detail)
				case conformance.Pass:
					passed[f.Rule] = true
				}
			}
		})
	}
	for _, r := range nativecheck.Rules {
		if !passed[r.ID] {
			t.Errorf("rule %s never passed", r.ID)
		}
	}
}
