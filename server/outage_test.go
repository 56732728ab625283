package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// TestPostgresOutageBeyondTheRetryBudget cuts the server off its
// PostgreSQL mid-run for longer than the writer retries. While the database
// is gone, requests that need it answer 503 storage_unavailable; the run
// ends for its live clients with error + run-finish{error,
// storage_unavailable}. Once the database is back, the log ends the run
// with exactly the events the clients were sent, the run is over in
// /status and /messages, and the hub keeps no open text of the dead run
// for later subscribers.
func TestPostgresOutageBeyondTheRetryBudget(t *testing.T) {
	dsn := testpg.FreshDSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := bustest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	store := servertest.OpenStore(t, u.String())
	h := start(t, store, servertest.Options{AgentDelay: 2 * time.Millisecond, Config: server.Config{
		Writer: instanceai.WriterConfig{Retries: 2, RetryBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	}})
	const thread = "outage"
	h.EnsureThread(thread)
	conn := h.Connect(thread, "", false)
	runID := h.Chat(thread, "long 500")
	conn.Until(wait, servertest.IsType(instanceai.TypeTextDelta))

	proxy.Down()
	cutAt := time.Now()
	frames := conn.Until(wait, servertest.IsRunFinish(runID))
	finish := frames[len(frames)-1]
	var errorFrame *servertest.Frame
	for i := range frames {
		if frames[i].Decoded.Type == instanceai.TypeError {
			errorFrame = &frames[i]
		}
	}
	if errorFrame == nil || finish.ID != "" || errorFrame.ID != "" {
		t.Fatalf("live ending: error %+v, run-finish id %q; want both, without ids", errorFrame, finish.ID)
	}
	if p := finish.Decoded.Payload.(*instanceai.RunFinish); p.Status != instanceai.RunError || p.Reason != "storage_unavailable" {
		t.Fatalf("live run-finish %+v", p)
	}
	status, body := h.Do(http.MethodGet, "/instance-ai/threads", "")
	if code := errorCode(body); status != http.StatusServiceUnavailable || code != "storage_unavailable" {
		t.Fatalf("threads during the outage: %d %v, want 503 storage_unavailable", status, body)
	}
	time.Sleep(time.Until(cutAt.Add(time.Second)))
	proxy.Heal()
	// A client that joins once the database is back, from the last id the
	// first one has, missed the live ending: whether the ending is stored
	// before its replay or after (then it comes live), it is sent it.
	lastID := ""
	for _, f := range frames {
		if f.ID != "" {
			lastID = f.ID
		}
	}
	late := h.Connect(thread, lastID, false)

	// The log ends the run as its clients saw it end.
	deadline := time.Now().Add(wait)
	var rows []instanceai.StoredEvent
	for {
		rows = servertest.StoredEvents(t, store, thread)
		if n := len(rows); n > 0 && rows[n-1].Event.Type == instanceai.TypeRunFinish {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log never got the run's ending; it ends with %+v", rows[len(rows)-1].Event)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := len(rows)
	for i, live := range []servertest.Frame{*errorFrame, finish} {
		stored, err := json.Marshal(&rows[n-2+i].Event)
		if err != nil {
			t.Fatal(err)
		}
		if string(stored) != live.Data {
			t.Fatalf("stored ending %d:\n%s\nlive:\n%s", i, stored, live.Data)
		}
	}
	if got := late.Until(wait, servertest.IsRunFinish(runID)); got[len(got)-1].ID != strconv.FormatInt(rows[n-1].Seq, 10) {
		t.Fatalf("the late client's run-finish has id %q, want %d", got[len(got)-1].ID, rows[n-1].Seq)
	}
	// The first client had the ending live: it is not sent again.
	for {
		f, ok := conn.FrameWithin(300 * time.Millisecond)
		if !ok {
			break
		}
		if f.Decoded.Type == instanceai.TypeRunFinish || f.Decoded.Type == instanceai.TypeError {
			t.Fatalf("the first client was sent the ending again: %+v", f)
		}
	}
	if st := h.ThreadStatus(thread); st.HasActiveRun {
		t.Fatalf("status after the outage: %+v", st)
	}
	var page struct {
		Messages []struct {
			RunID       string `json:"runId"`
			Role        string `json:"role"`
			IsStreaming bool   `json:"isStreaming"`
		} `json:"messages"`
	}
	h.DoInto(http.MethodGet, "/instance-ai/threads/"+thread+"/messages", "", &page)
	for _, m := range page.Messages {
		if m.RunID == runID && m.Role == "assistant" && m.IsStreaming {
			t.Fatal("/messages still shows the failed run streaming")
		}
	}
	sub, snap := h.Hub.Subscribe(thread)
	sub.Close()
	if len(snap.Open) != 0 {
		t.Fatalf("a later subscriber would get the dead run's open text: %+v", snap.Open)
	}
	t.Logf("cut off for %v; the log has the ending at seqs %d-%d", time.Since(cutAt).Round(time.Millisecond), rows[n-2].Seq, rows[n-1].Seq)
}

// errorCode is the code of a JSON error body.
func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}
