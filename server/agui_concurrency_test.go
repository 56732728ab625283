package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// runAgentResult is one /run-agent answer read to its end.
type runAgentResult struct {
	status     int
	events     []aguiEvent
	errCode    string
	start, end time.Time
	err        error
}

// postAndRead sends a /run-agent request and reads the whole answer. It
// reports problems in the result instead of failing the test, so that it
// can run outside the test's goroutine.
func postAndRead(h *harness, body string) (r runAgentResult) {
	r.start = time.Now()
	defer func() { r.end = time.Now() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/run-agent", strings.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := h.Client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer res.Body.Close()
	r.status = res.StatusCode
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		r.err = fmt.Errorf("read: %w", err)
		return r
	}
	if res.StatusCode != http.StatusOK {
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			r.err = fmt.Errorf("status %d with Content-Type %q", res.StatusCode, ct)
		} else if err := json.Unmarshal(raw, &body); err != nil {
			r.err = fmt.Errorf("status %d: %w: %s", res.StatusCode, err, raw)
		}
		r.errCode = body.Error.Code
		return r
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		r.err = fmt.Errorf("Content-Type %q", ct)
		return r
	}
	if r.events, err = parseAGUIStream(raw); err != nil {
		r.err = fmt.Errorf("%w\nstream:\n%s", err, raw)
		return r
	}
	if err := verifyAGUI(r.events); err != nil {
		r.err = fmt.Errorf("stream breaks the AG-UI rules: %w\nstream:\n%s", err, raw)
	}
	return r
}

// concurrently sends every body at once and waits for all the answers.
func concurrently(h *harness, bodies []string) []runAgentResult {
	out := make([]runAgentResult, len(bodies))
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i, body := range bodies {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			out[i] = postAndRead(h, body)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return out
}

func TestRunAgentConcurrentThreads(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 5 * time.Millisecond})
		const n = 5
		bodies := make([]string, n)
		for i := range bodies {
			bodies[i] = servertest.RunAgentInput(fmt.Sprintf("ag-conc-%d", i), fmt.Sprintf("r-conc-%d", i), "tools", nil)
		}
		results := concurrently(h, bodies)
		latestStart, earliestEnd := results[0].start, results[0].end
		for i, r := range results {
			thread, runID := fmt.Sprintf("ag-conc-%d", i), fmt.Sprintf("r-conc-%d", i)
			if r.err != nil {
				t.Fatalf("%s: %v", thread, r.err)
			}
			if r.status != http.StatusOK {
				t.Fatalf("%s: status %d (%s)", thread, r.status, r.errCode)
			}
			first, last := r.events[0], r.events[len(r.events)-1]
			if first.str("threadId") != thread || first.str("runId") != runID {
				t.Fatalf("%s: RUN_STARTED %s", thread, first.raw)
			}
			if last.typ != "RUN_FINISHED" || last.str("threadId") != thread || last.str("runId") != runID {
				t.Fatalf("%s: last event %s", thread, last.raw)
			}
			if countType(r.events, "TOOL_CALL_START") == 0 || countType(r.events, "TOOL_CALL_RESULT") == 0 {
				t.Fatalf("%s: no tool call and result: %v", thread, types(r.events))
			}
			if fin := waitRunFinish(t, store, thread, 10*time.Second); fin.Status != instanceai.RunCompleted {
				t.Fatalf("%s: run-finish %+v", thread, fin)
			}
			if r.start.After(latestStart) {
				latestStart = r.start
			}
			if r.end.Before(earliestEnd) {
				earliestEnd = r.end
			}
		}
		if !latestStart.Before(earliestEnd) {
			t.Fatalf("the requests did not overlap: the last started %v after the first ended", latestStart.Sub(earliestEnd))
		}
	})
}

func TestRunAgentConcurrentSameThread(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: 5 * time.Millisecond})
		results := concurrently(h, []string{
			servertest.RunAgentInput("ag-same", "r-same-a", "long 200", nil),
			servertest.RunAgentInput("ag-same", "r-same-b", "long 200", nil),
		})
		var streams, conflicts int
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("request %d: %v", i, r.err)
			}
			switch r.status {
			case http.StatusOK:
				streams++
				if last := r.events[len(r.events)-1]; last.typ != "RUN_FINISHED" {
					t.Fatalf("request %d: last event %s", i, last.raw)
				}
				var text strings.Builder
				for _, e := range r.events {
					if e.typ == "TEXT_MESSAGE_CONTENT" {
						text.WriteString(e.str("delta"))
					}
				}
				if got, want := text.String(), longText(200); got != want {
					t.Fatalf("request %d: text %q, want %q", i, got, want)
				}
			case http.StatusConflict:
				conflicts++
				if r.errCode != "run_active" {
					t.Fatalf("request %d: 409 with code %q", i, r.errCode)
				}
			default:
				t.Fatalf("request %d: status %d", i, r.status)
			}
		}
		if streams != 1 || conflicts != 1 {
			t.Fatalf("want one stream and one 409, got %d and %d", streams, conflicts)
		}
		runs := 0
		for _, row := range servertest.StoredEvents(t, store, "ag-same") {
			if row.Event.Type == instanceai.TypeRunStart {
				runs++
			}
		}
		if runs != 1 {
			t.Fatalf("%d native runs on the thread, want 1", runs)
		}
	})
}
