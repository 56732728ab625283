package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
	"github.com/threadline/threadline/storage/memory"
)

// publisher drives the publish API as an external producer does.
type publisher struct {
	t      *testing.T
	url    string
	token  string
	thread string
	run    string
	// client, when set, sends the requests (http.DefaultClient when not).
	client *http.Client
}

// do sends a request and returns its status and JSON answer.
func (p *publisher) do(method, path, contentType string, body io.Reader, header map[string]string) (int, map[string]any) {
	p.t.Helper()
	req, _ := http.NewRequest(method, p.url+path, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := p.client
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(res.Body)
	if len(raw) > 0 && json.Unmarshal(raw, &out) != nil {
		p.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	return res.StatusCode, out
}

func (p *publisher) start(body string) (int, map[string]any) {
	p.t.Helper()
	code, out := p.do(http.MethodPost, "/publish/threads/"+p.thread+"/runs", "application/json", strings.NewReader(body), nil)
	if id, _ := out["runId"].(string); id != "" {
		p.run = id
	}
	return code, out
}

// send appends body as producer id at epoch, its first event numbered seq.
func (p *publisher) send(id string, epoch, seq int, contentType, body string) (int, map[string]any) {
	p.t.Helper()
	return p.do(http.MethodPost, "/publish/threads/"+p.thread+"/runs/"+p.run+"/events", contentType, strings.NewReader(body),
		map[string]string{"Producer-Id": id, "Producer-Epoch": fmt.Sprint(epoch), "Producer-Seq": fmt.Sprint(seq)})
}

func delta(text string) string {
	return fmt.Sprintf(`{"type":"text-delta","payload":{"text":%q}}`, text)
}

// publishError is an error answer's code and details.
func publishError(out map[string]any) (code string, details map[string]any) {
	e, _ := out["error"].(map[string]any)
	code, _ = e["code"].(string)
	details, _ = e["details"].(map[string]any)
	return code, details
}

// A producer outside Threadline streams a run: what it appends is stored
// once, in order, however often it retries, and a gap, a bad event or a
// fenced producer is refused with what to do instead, storing nothing.
func TestPublishRun(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		p := &publisher{t: t, url: h.URL, thread: "pub-run"}
		if code, out := p.start(`{"message":"summarise the report"}`); code != http.StatusCreated || p.run == "" {
			t.Fatalf("start: %d %v", code, out)
		}
		steps := []struct {
			name           string
			id             string
			epoch, seq     int
			contentType    string
			body           string
			status         int
			next           float64
			stored, dupes  float64
			errCode, field string
		}{
			{"first", "w1", 0, 0, "application/json", "[" + delta("a") + "," + delta("b") + "," + delta("c") + "]", 200, 3, 3, 0, "", ""},
			{"retried", "w1", 0, 0, "application/json", "[" + delta("a") + "," + delta("b") + "," + delta("c") + "]", 200, 3, 0, 3, "", ""},
			{"overlapping", "w1", 0, 2, "application/json", "[" + delta("c") + "," + delta("d") + "]", 200, 4, 1, 1, "", ""},
			{"one object", "w1", 0, 4, "application/json", delta("e"), 200, 5, 1, 0, "", ""},
			{"gap", "w1", 0, 9, "application/json", delta("x"), 409, 5, 0, 0, "sequence_gap", "Producer-Seq"},
			{"bad event", "w1", 0, 5, "application/json", "[" + delta("x") + `,{"type":"nope","payload":{}}]`, 400, 5, 0, 0, "invalid_event", "events[1]"},
			{"run-finish", "w1", 0, 5, "application/json", `{"type":"run-finish","payload":{"status":"completed"}}`, 400, 0, 0, 0, "invalid_event", "events[0]"},
			{"ndjson", "w1", 0, 5, "application/x-ndjson", delta("f") + "\n\n" + delta("g") + "\n", 200, 7, 2, 0, "", ""},
			{"other producer", "w2", 5, 0, "application/json", delta("x"), 409, 7, 0, 0, "producer_conflict", "Producer-Id"},
			{"new epoch", "w1", 1, 0, "application/json", delta("h"), 200, 1, 1, 0, "", ""},
			{"zombie", "w1", 0, 7, "application/json", delta("x"), 409, 1, 0, 0, "producer_fenced", "Producer-Epoch"},
			{"no headers", "", 0, 0, "application/json", delta("x"), 400, 0, 0, 0, "invalid_header", "Producer-Id"},
		}
		for _, s := range steps {
			code, out := p.send(s.id, s.epoch, s.seq, s.contentType, s.body)
			if code != s.status {
				t.Fatalf("%s: %d %v, want %d", s.name, code, out, s.status)
			}
			if s.errCode != "" {
				c, details := publishError(out)
				if c != s.errCode || details["field"] != s.field || (s.next != 0 && details["nextSeq"] != s.next) {
					t.Fatalf("%s: %v, want %s naming %s (next %v)", s.name, out, s.errCode, s.field, s.next)
				}
				continue
			}
			if out["nextSeq"] != s.next || out["stored"] != s.stored || out["duplicates"] != s.dupes {
				t.Fatalf("%s: %v, want next %v, stored %v, duplicates %v", s.name, out, s.next, s.stored, s.dupes)
			}
		}
		if code, out := p.do(http.MethodPost, "/publish/threads/pub-run/runs/"+p.run+"/finish", "application/json", nil, nil); code != http.StatusOK {
			t.Fatalf("finish: %d %v", code, out)
		}
		if code, out := p.send("w1", 1, 1, "application/json", delta("late")); code != http.StatusConflict {
			t.Fatalf("an append after the finish: %d %v", code, out)
		} else if c, _ := publishError(out); c != "run_finished" {
			t.Fatalf("an append after the finish: %v", out)
		}
		events, _ := storedRun(t, store, "pub-run", p.run)
		if got := agenttree.Fold(events).TextContent; got != "abcdefgh" {
			t.Fatalf("the run's text is %q, want each append once, in order", got)
		}
		// The deltas came without a responseId: their segment got one, so
		// that a client holding them takes the block as their text (a
		// second of silence between two appends on a slow machine would
		// begin another segment, named after its first delta).
		var ids []string
		for _, ev := range events {
			if ev.Type == instanceai.TypeTextBlock {
				ids = append(ids, ev.ResponseID)
			}
		}
		if len(ids) == 0 || ids[0] != p.run+":p:0" || slices.ContainsFunc(ids, func(id string) bool { return !strings.HasPrefix(id, p.run+":p:") }) {
			t.Fatalf("the blocks' responseIds are %q, want %s:p:0 first, each %s:p:{seq}", ids, p.run, p.run)
		}
		if fin := waitRunFinish(t, store, "pub-run", 10*time.Second); fin.Status != instanceai.RunCompleted {
			t.Fatalf("run-finish %+v", fin)
		}
		if code, out := h.Do(http.MethodGet, "/instance-ai/threads/pub-run/messages", ""); code != http.StatusOK ||
			!strings.Contains(fmt.Sprint(out), "summarise the report") {
			t.Fatalf("the thread's messages: %d %v", code, out)
		}
	})
}

// A cancel reaches the producer: a streamed append under way ends, and
// its next append is refused as cancelled. A producer that goes silent is
// taken for gone after its lease, as a crashed agent's run is settled.
func TestPublishCancelAndLease(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Config: server.Config{Producers: external.NewProducers(300 * time.Millisecond)}})
	p := &publisher{t: t, url: h.URL, thread: "pub-cancel"}
	if code, out := p.start(""); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, out)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan map[string]any, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.URL+"/publish/threads/pub-cancel/runs/"+p.run+"/events", pr)
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Producer-Id", "w")
		req.Header.Set("Producer-Epoch", "0")
		req.Header.Set("Producer-Seq", "0")
		out := map[string]any{}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			out["status"] = err.Error()
		} else {
			_ = json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			out["status"] = res.StatusCode
		}
		done <- out
	}()
	// The stream stays open past the lease: a request under way holds it.
	go func() {
		for i := range 4 {
			if _, err := fmt.Fprintln(pw, delta(fmt.Sprint(i))); err != nil {
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	// The fourth line is streamed to the thread's followers after the
	// lease has passed: the open append kept the run.
	follow := h.Connect("pub-cancel", "", false)
	defer follow.Close()
	follow.Until(20*time.Second, func(f servertest.Frame) bool {
		d, ok := f.Decoded.Payload.(*instanceai.Text)
		return ok && f.Decoded.Type == instanceai.TypeTextDelta && strings.Contains(d.Text, "3")
	})
	if code, _ := h.Do(http.MethodPost, "/instance-ai/chat/pub-cancel/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
	select {
	case out := <-done:
		if c, details := publishError(out); out["status"] != http.StatusConflict || c != "run_cancelled" || details["nextSeq"] != float64(4) {
			t.Fatalf("the streamed append after the cancel: %v", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the streamed append did not end with the run")
	}
	if code, out := p.send("w", 0, 4, "application/json", delta("late")); code != http.StatusConflict {
		t.Fatalf("an append after the cancel: %d %v", code, out)
	} else if c, _ := publishError(out); c != "run_cancelled" {
		t.Fatalf("an append after the cancel: %v", out)
	}
	if fin := waitRunFinish(t, store, "pub-cancel", 10*time.Second); fin.Status != instanceai.RunCancelled {
		t.Fatalf("run-finish %+v", fin)
	}

	gone := &publisher{t: t, url: h.URL, thread: "pub-gone"}
	if code, out := gone.start(""); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, out)
	}
	if fin := waitRunFinish(t, store, "pub-gone", 10*time.Second); fin.Status != instanceai.RunError {
		t.Fatalf("a silent producer's run ended %+v", fin)
	}
	var errEvent *instanceai.ErrorPayload
	waitRow(t, store, "pub-gone", gone.run, func(ev instanceai.Event) bool {
		errEvent, _ = ev.Payload.(*instanceai.ErrorPayload)
		return errEvent != nil
	})
	if errEvent.Code != "producer_gone" || !strings.Contains(errEvent.Content, "producer") {
		t.Fatalf("the error told: %+v", errEvent)
	}
}

// A producer asks for an approval and gets the person's answer back; one
// run per thread holds for producers as for chats.
func TestPublishConfirm(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{})
	p := &publisher{t: t, url: h.URL, thread: "pub-ask"}
	if code, out := p.start(`{"runId":"job-17"}`); code != http.StatusCreated || p.run != "job-17" {
		t.Fatalf("start: %d %v", code, out)
	}
	if code, out := p.start(`{"runId":"job-17"}`); code != http.StatusOK || out["runId"] != "job-17" {
		t.Fatalf("a retried start: %d %v", code, out)
	}
	if code, out := p.start(`{}`); code != http.StatusConflict {
		t.Fatalf("a second run on the thread: %d %v", code, out)
	}
	answered := make(chan map[string]any, 1)
	go func() {
		_, out := p.do(http.MethodPost, "/publish/threads/pub-ask/runs/job-17/confirm", "application/json",
			strings.NewReader(`{"requestId":"ask-1","toolCallId":"tc-1","toolName":"delete_reports","args":{"older":"30d"},`+
				`"severity":"destructive","message":"Delete the old reports?"}`), nil)
		answered <- out
	}()
	waitConfirmation(t, store, "pub-ask", "job-17")
	h.Confirm("ask-1", `{"approved":true}`)
	select {
	case out := <-answered:
		if out["approved"] != true {
			t.Fatalf("the producer got %v", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer reached the producer")
	}
	// Asked again after a lost answer, the question gets its answer again.
	if code, out := p.do(http.MethodPost, "/publish/threads/pub-ask/runs/job-17/confirm", "application/json",
		strings.NewReader(`{"requestId":"ask-1","toolCallId":"tc-1","toolName":"delete_reports","args":{},"severity":"destructive","message":"Delete?"}`), nil); code != http.StatusOK || out["approved"] != true {
		t.Fatalf("the same question again: %d %v", code, out)
	}
	// A question whose long poll broke off is withdrawn: asked again under
	// its id, the producer is told to ask anew.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/publish/threads/pub-ask/runs/job-17/confirm",
		strings.NewReader(`{"requestId":"ask-2","toolCallId":"tc-2","toolName":"delete_reports","args":{},"severity":"destructive","message":"And these?"}`))
	req.Header.Set("Content-Type", "application/json")
	broke := make(chan struct{})
	go func() {
		defer close(broke)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	waitRow(t, store, "pub-ask", "job-17", func(ev instanceai.Event) bool {
		c, ok := ev.Payload.(*instanceai.ConfirmationRequest)
		return ok && c.RequestID == "ask-2"
	})
	cancel()
	<-broke
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := store.GetConfirmation(context.Background(), "ask-2"); err == nil && c.Status != instanceai.ConfirmationPending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broken question was not withdrawn")
		}
	}
	if code, out := p.do(http.MethodPost, "/publish/threads/pub-ask/runs/job-17/confirm", "application/json",
		strings.NewReader(`{"requestId":"ask-2","toolCallId":"tc-2","toolName":"delete_reports","args":{},"severity":"destructive","message":"And these?"}`), nil); code != http.StatusConflict {
		t.Fatalf("a withdrawn question again: %d %v", code, out)
	} else if c, _ := publishError(out); c != "confirmation_withdrawn" {
		t.Fatalf("a withdrawn question again: %v", out)
	}
	if code, out := p.do(http.MethodPost, "/publish/threads/pub-ask/runs/job-17/finish", "application/json",
		strings.NewReader(`{"status":"error","message":"the report store is down"}`), nil); code != http.StatusOK {
		t.Fatalf("finish in error: %d %v", code, out)
	}
	if fin := waitRunFinish(t, store, "pub-ask", 10*time.Second); fin.Status != instanceai.RunError {
		t.Fatalf("run-finish %+v", fin)
	}
}

// Publishing takes a publish token, and a publish token does nothing else;
// a producer reaches only its own user's threads.
func TestPublishScopes(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Tokens: aliceToken + "=alice," + bobToken + "=bob",
		PublishTokens: "alice-publish-0123456789=alice,bob-publish-0123456789=bob"})
	h.As(aliceToken).Chat("alices", "simple hi")
	waitRunFinish(t, store, "alices", 10*time.Second)
	for _, c := range []struct {
		name, token, method, path string
		status                    int
		code                      string
	}{
		{"an API token publishing", aliceToken, http.MethodPost, "/publish/threads/alices/runs", 403, "publish_scope_required"},
		{"a publish token reading", "alice-publish-0123456789", http.MethodGet, "/instance-ai/threads", 403, "publish_token"},
		{"another user's thread", "bob-publish-0123456789", http.MethodPost, "/publish/threads/alices/runs", 404, "thread_not_found"},
		{"no token", "", http.MethodPost, "/publish/threads/alices/runs", 401, "unauthorized"},
		{"the owner's publish token", "alice-publish-0123456789", http.MethodPost, "/publish/threads/alices/runs", 201, ""},
	} {
		p := &publisher{t: t, url: h.URL, token: c.token}
		code, out := p.do(c.method, c.path, "application/json", strings.NewReader(`{}`), nil)
		if got, _ := publishError(out); code != c.status || got != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, out, c.status, c.code)
		}
	}
}

// With the external agent, a chat's run waits for a producer: one that
// attaches gets the user's message and drives the run; a run nobody
// attaches to ends with an error that says so.
func TestPublishExternalAgent(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	producers := external.NewProducers(time.Minute)
	h := start(t, store, servertest.Options{Agent: producers.Agent(500 * time.Millisecond),
		Config: server.Config{Producers: producers}})
	run := h.Chat("ext", "translate this")
	p := &publisher{t: t, url: h.URL, thread: "ext", run: run}
	code, out := p.do(http.MethodPost, "/publish/threads/ext/runs/"+run+"/attach", "", nil, nil)
	if code != http.StatusOK || out["message"] != "translate this" || out["runId"] != run {
		t.Fatalf("attach: %d %v", code, out)
	}
	if code, out := p.send("w", 0, 0, "application/json", delta("traduire")); code != http.StatusOK {
		t.Fatalf("append: %d %v", code, out)
	}
	if code, out := p.do(http.MethodPost, "/publish/threads/ext/runs/"+run+"/finish", "", nil, nil); code != http.StatusOK {
		t.Fatalf("finish: %d %v", code, out)
	}
	events, _ := storedRun(t, store, "ext", run)
	if got := agenttree.Fold(events).TextContent; got != "traduire" {
		t.Fatalf("the run's text: %q", got)
	}

	lonely := h.Chat("ext-alone", "anyone?")
	if fin := waitRunFinish(t, store, "ext-alone", 10*time.Second); fin.Status != instanceai.RunError {
		t.Fatalf("a run nobody attached to ended %+v", fin)
	}
	var errEvent *instanceai.ErrorPayload
	waitRow(t, store, "ext-alone", lonely, func(ev instanceai.Event) bool {
		errEvent, _ = ev.Payload.(*instanceai.ErrorPayload)
		return errEvent != nil
	})
	if errEvent.Code != "producer_missing" {
		t.Fatalf("the error told: %+v", errEvent)
	}
}

// Three instances on one database and bus: producers drive runs on two of
// them, sending every append twice as a producer retrying after a lost
// answer does, and a client on the third follows both threads live, every
// event once, in order. Meanwhile a client on the other producer's
// instance, the only one following the thread there, reconnects from its
// last id between appends: each time the instance subscribes anew, and
// nothing is lost or repeated at the edges.
func TestPublishAcrossInstances(t *testing.T) {
	for _, b := range clusterBuses {
		t.Run(b.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			ps := cluster(t, store, b.spec(t), 3, 0)
			follower := ps[2]
			type feed struct {
				pub   *publisher
				conn  *servertest.Conn
				churn *churner
				want  string
			}
			var feeds []feed
			for i, p := range ps[:2] {
				pub := &publisher{t: t, url: p.URL, thread: fmt.Sprintf("pub-x-%d", i)}
				if code, out := pub.start(""); code != http.StatusCreated {
					t.Fatalf("start on %d: %d %v", i, code, out)
				}
				feeds = append(feeds, feed{pub: pub, conn: follower.stream(pub.thread, ""),
					churn: newChurner(ps[1-i], pub.thread)})
			}
			for n := range 40 {
				for i := range feeds {
					f := &feeds[i]
					text := fmt.Sprintf("%d.%d ", i, n)
					f.want += text
					for try, stored := range []float64{1, 0} {
						code, out := f.pub.send("w", 0, n, "application/json", delta(text))
						if code != http.StatusOK || out["stored"] != stored || out["duplicates"] != 1-stored {
							t.Fatalf("append %d on %d, try %d: %d %v, want stored %v\nits instance's log:\n%s", n, i, try+1, code, out, stored, ps[i].Logs())
						}
					}
					if n%4 == 3 {
						f.churn.reconnect()
					}
				}
			}
			for _, f := range feeds {
				if code, out := f.pub.do(http.MethodPost, "/publish/threads/"+f.pub.thread+"/runs/"+f.pub.run+"/finish", "", nil, nil); code != http.StatusOK {
					t.Fatalf("finish: %d %v", code, out)
				}
			}
			for _, f := range feeds {
				frames := f.conn.Until(20*time.Second, servertest.IsRunFinish(f.pub.run))
				f.conn.Close()
				logStore := servertest.OpenStore(t, store)
				// What the client shows, folded as a browser does (a block
				// sent live after a gap in the deltas replaces their text).
				checkTexts(t, "the client on the third instance", frames, servertest.StoredEvents(t, logStore, f.pub.thread))
				checkIDsIncrease(t, "the client on the third instance", frames)
				if events, _ := storedRun(t, logStore, f.pub.thread, f.pub.run); agenttree.Fold(events).TextContent != f.want {
					t.Fatalf("the log of %s holds %q, want each append once", f.pub.thread, agenttree.Fold(events).TextContent)
				}
				f.churn.finish(t, f.pub.run, servertest.StoredEvents(t, logStore, f.pub.thread))
			}
		})
	}
}

// churner follows a thread, closing its stream and reconnecting from the
// last id it was sent whenever told to.
type churner struct {
	p              *process
	thread, lastID string
	conn           *servertest.Conn
	frames         []servertest.Frame
	reconnections  int
}

func newChurner(p *process, thread string) *churner {
	return &churner{p: p, thread: thread, conn: p.stream(thread, "")}
}

// drain keeps the frames that arrive until the stream is quiet.
func (c *churner) drain() {
	for {
		f, ok := c.conn.FrameWithin(20 * time.Millisecond)
		if !ok {
			return
		}
		c.keep(f)
	}
}

func (c *churner) keep(f servertest.Frame) {
	if f.IsComment() {
		return
	}
	c.frames = append(c.frames, f)
	if f.ID != "" {
		c.lastID = f.ID
	}
}

func (c *churner) reconnect() {
	c.drain()
	c.conn.Close()
	c.conn = c.p.stream(c.thread, c.lastID)
	c.reconnections++
}

// finish reads to the run's end and checks that, across every
// reconnection, the ids only grew and the client's fold is the log's.
func (c *churner) finish(t *testing.T, runID string, rows []instanceai.StoredEvent) {
	t.Helper()
	for _, f := range c.conn.Until(20*time.Second, servertest.IsRunFinish(runID)) {
		c.keep(f)
	}
	c.conn.Close()
	checkIDsIncrease(t, "the client reconnecting on "+c.thread, c.frames)
	checkTexts(t, fmt.Sprintf("the client reconnecting %d times", c.reconnections), c.frames, rows)
}

// A producer's run lives on the instance that started it. Another
// instance says so while the run lasts (409 run_on_another_instance, so
// that a producer misrouted by a load balancer tries elsewhere); when that
// instance dies, another settles the run as it settles a crashed agent's,
// a client following it anywhere sees it end, and the producer's next
// request is answered 404 run_not_found.
func TestPublishRunWhoseInstanceDies(t *testing.T) {
	ps := cluster(t, testpg.FreshDSN(t), clusterBuses[0].spec(t), 2, 0)
	a, b := ps[0], ps[1]
	onA := &publisher{t: t, url: a.URL, thread: "pub-dies"}
	if code, out := onA.start(""); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, out)
	}
	onB := &publisher{t: t, url: b.URL, thread: onA.thread, run: onA.run}
	follow := b.stream(onA.thread, "")
	defer follow.Close()
	if code, out := onA.send("w", 0, 0, "application/json", delta("before the crash")); code != http.StatusOK {
		t.Fatalf("append on A: %d %v", code, out)
	}
	code, out := onB.send("w", 0, 1, "application/json", delta("misrouted"))
	if c, _ := publishError(out); code != http.StatusConflict || c != "run_on_another_instance" {
		t.Fatalf("append on B while A drives the run: %d %v, want 409 run_on_another_instance\nA's log:\n%s\nB's log:\n%s", code, out, a.Logs(), b.Logs())
	}
	follow.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
	a.Kill()
	killed := time.Now()
	frames := follow.Until(wait, servertest.IsRunFinish(onA.run))
	t.Logf("settled %v after the kill", time.Since(killed).Round(time.Millisecond))
	fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
	if fin.Status != instanceai.RunInterrupted || fin.Reason != instanceai.ReasonCrashed {
		t.Fatalf("the run whose instance died ended %+v, want interrupted/%s", fin, instanceai.ReasonCrashed)
	}
	code, out = onB.send("w", 0, 1, "application/json", delta("after the crash"))
	if c, _ := publishError(out); code != http.StatusNotFound || c != "run_not_found" {
		t.Fatalf("append after the settlement: %d %v, want 404 run_not_found", code, out)
	}
	var text string
	for _, f := range b.replayAll(onA.thread, onA.run) {
		if f.Decoded.Type == instanceai.TypeTextBlock {
			text += f.Decoded.Payload.(*instanceai.Text).Text
		}
	}
	if text != "before the crash" {
		t.Fatalf("the settled run's text is %q, want what was appended before the crash", text)
	}
}

// stallingStore holds every append while stalled is set, until release.
type stallingStore struct {
	*memory.Store
	stalled atomic.Bool
	release chan struct{}
	once    sync.Once
}

func (s *stallingStore) unstall() {
	s.stalled.Store(false)
	s.once.Do(func() { close(s.release) })
}

func (s *stallingStore) wait() {
	if s.stalled.Load() {
		<-s.release
	}
}

func (s *stallingStore) Append(ctx context.Context, threadID string, events []instanceai.Event) (int64, error) {
	s.wait()
	return s.Store.Append(ctx, threadID, events)
}

func (s *stallingStore) AppendEncoded(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte) (int64, error) {
	s.wait()
	return s.Store.AppendEncoded(ctx, threadID, events, data)
}

func (s *stallingStore) AppendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	s.wait()
	return s.Store.AppendFenced(ctx, threadID, events, data, fences)
}

// An append of deltas only is answered once queued, without waiting for
// the writer: here the writer is held up storing the producer's tool call
// before them, whose append is answered only once it is stored.
func TestPublishAnswersDeltasOnceQueued(t *testing.T) {
	store := &stallingStore{Store: memory.New(), release: make(chan struct{})}
	h := start(t, store, servertest.Options{})
	t.Cleanup(store.unstall) // cleanups run last first: before the server's, which waits for its writer
	p := &publisher{t: t, url: h.URL, thread: "pub-queued"}
	if code, out := p.start(""); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, out)
	}
	store.stalled.Store(true)
	call := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/publish/threads/"+p.thread+"/runs/"+p.run+"/events",
			strings.NewReader(`{"type":"tool-call","payload":{"toolCallId":"c1","toolName":"search","args":{"q":"x"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Producer-Id", "w")
		req.Header.Set("Producer-Epoch", "0")
		req.Header.Set("Producer-Seq", "0")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			call <- err.Error()
			return
		}
		res.Body.Close()
		call <- res.Status
	}()
	// A writer's pass takes microseconds; an answer that waited for the
	// stalled store would never come.
	p.client = &http.Client{Timeout: wait}
	// Until the tool call is queued, the delta's sequence is a gap.
	deadline := time.Now().Add(wait)
	for {
		code, out := p.send("w", 0, 1, "application/json", delta("while the call is being stored"))
		if c, _ := publishError(out); code == http.StatusConflict && c == "sequence_gap" && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			continue
		}
		if code != http.StatusOK || out["stored"] != 1.0 {
			t.Fatalf("the delta's append: %d %v", code, out)
		}
		break
	}
	select {
	case status := <-call:
		t.Fatalf("the tool call's append was answered (%s) before it was stored", status)
	default:
	}
	store.unstall()
	if status := <-call; status != "200 OK" {
		t.Fatalf("the tool call's append: %s once stored", status)
	}
}

// checkIDsIncrease checks that the frames' ids, where they have one, grow
// strictly: no event came twice or out of order.
func checkIDsIncrease(t *testing.T, who string, frames []servertest.Frame) {
	t.Helper()
	last := int64(0)
	for _, f := range frames {
		if !f.HasID {
			continue
		}
		id, err := strconv.ParseInt(f.ID, 10, 64)
		if err != nil || id <= last {
			t.Fatalf("%s was sent id %q after %d", who, f.ID, last)
		}
		last = id
	}
}

// A producer's deltas without a responseId are one segment until the
// agent's next stored event, or a second without a delta (the writer
// closes a segment after three): each segment's block is named after its
// first delta's sequence number.
func TestPublishNamesSegments(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{})
	p := &publisher{t: t, url: h.URL, thread: "pub-segments"}
	if code, out := p.start(""); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, out)
	}
	steps := []struct {
		body  string
		pause time.Duration
	}{
		{"[" + delta("a") + "," + delta("b") + "]", 0},
		{delta("c"), 1500 * time.Millisecond},
		{`{"type":"tool-call","payload":{"toolCallId":"c1","toolName":"search","args":{}}}`, 0},
		{delta("d"), 0},
	}
	seq := 0
	for _, s := range steps {
		time.Sleep(s.pause)
		code, out := p.send("w", 0, seq, "application/json", s.body)
		if code != http.StatusOK {
			t.Fatalf("append at %d: %d %v", seq, code, out)
		}
		seq = int(out["nextSeq"].(float64))
	}
	if code, out := p.do(http.MethodPost, "/publish/threads/pub-segments/runs/"+p.run+"/finish", "", nil, nil); code != http.StatusOK {
		t.Fatalf("finish: %d %v", code, out)
	}
	events, _ := storedRun(t, store, "pub-segments", p.run)
	var got []string
	for _, ev := range events {
		if ev.Type == instanceai.TypeTextBlock {
			got = append(got, strings.TrimPrefix(ev.ResponseID, p.run)+"="+ev.Payload.(*instanceai.Text).Text)
		}
	}
	if want := ":p:0=ab :p:2=c :p:4=d"; strings.Join(got, " ") != want {
		t.Fatalf("blocks %q, want %s", got, want)
	}
}
