package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/threadline/threadline/chaos/check"
	"github.com/threadline/threadline/instanceai"
)

// The publish API's producers in the load: each works a thread of its
// own, one run after another, as an external worker does (see
// docs/publish-api.md). A run starts on a random instance and is driven
// there; its events carry unique markers (tool-call ids, task ids), so
// that the checker can find every event the producer was answered 200 for
// in the log. A request whose answer did not come (refused, reset, timed
// out) is sent again, to the same instance, with the same Producer-Id,
// Producer-Epoch and Producer-Seq, until an answer comes: the API
// acknowledges a retry without storing anything twice.

// publishAnswer is the part of a publish API answer a producer reads.
type publishAnswer struct {
	RunID      string `json:"runId"`
	NextSeq    int64  `json:"nextSeq"`
	Stored     int    `json:"stored"`
	Duplicates int    `json:"duplicates"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (a *publishAnswer) code() string {
	if a.Error == nil {
		return ""
	}
	return a.Error.Code
}

// publish sends one publish API request. err is set when no answer came.
func (a *api) publish(ctx context.Context, url string, body []byte, hdr map[string]string) (int, publishAnswer, string, error) {
	var ans publishAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, ans, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := a.client.Do(req)
	if err != nil {
		return 0, ans, "", err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, ans, "", err
	}
	_ = json.Unmarshal(data, &ans)
	return res.StatusCode, ans, string(bytes.TrimSpace(data)), nil
}

// runOver are the answers that say a published run is over for its
// producer (docs/publish-api.md): its events were not stored (another
// instance took it over, or the store failed), it was cancelled or ended,
// or the instance that drove it is gone (a restarted process knows it no
// more).
var runOver = map[string]bool{
	instanceai.FateTakenOver: true, instanceai.FateStorageFailed: true,
	"run_finished": true, "run_cancelled": true, "run_not_found": true, "run_on_another_instance": true,
}

// pevent is one event a producer appends, and its marker (see
// check.Acked) when the acknowledgement check looks for it.
type pevent struct {
	typ    instanceai.EventType
	marker string
	json   []byte
}

func pev(typ instanceai.EventType, marker string, payload any) pevent {
	data, _ := json.Marshal(map[string]any{"type": typ, "payload": payload})
	return pevent{typ: typ, marker: marker, json: data}
}

// plan is a published run's events: text in segments, tool calls with
// their results (some with text in between), task lists; now and then a
// call left open, which the finish closes with a tool-error.
func plan(run string, rng *rand.Rand) []pevent {
	var out []pevent
	var tasks []instanceai.Task
	steps := 3 + rng.IntN(6)
	for k := 1; k <= steps; k++ {
		switch rng.IntN(4) {
		case 0:
			for i := range 2 + rng.IntN(12) {
				out = append(out, pev(instanceai.TypeTextDelta, "", instanceai.Text{Text: fmt.Sprintf("step %d word %d. ", k, i)}))
			}
		case 1, 2:
			id := fmt.Sprintf("%s:tc:%d", run, k)
			out = append(out, pev(instanceai.TypeToolCall, id, instanceai.ToolCall{ToolCallID: id, ToolName: "chaos_tool",
				Args: json.RawMessage(`{"step":` + strconv.Itoa(k) + `}`)}))
			for i := range rng.IntN(4) {
				out = append(out, pev(instanceai.TypeTextDelta, "", instanceai.Text{Text: fmt.Sprintf("working %d. ", i)}))
			}
			if k < steps || rng.IntN(5) > 0 {
				out = append(out, pev(instanceai.TypeToolResult, id, instanceai.ToolResult{ToolCallID: id, Result: json.RawMessage(`{"ok":true}`)}))
			}
		case 3:
			for i := range tasks {
				tasks[i].Status = instanceai.TaskDone
			}
			id := fmt.Sprintf("%s:task:%d", run, k)
			tasks = append(tasks, instanceai.Task{ID: id, Description: "step " + strconv.Itoa(k), Status: instanceai.TaskInProgress})
			out = append(out, pev(instanceai.TypeTasksUpdate, id, instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: append([]instanceai.Task(nil), tasks...)}}))
		}
	}
	return out
}

// published is a run a producer drives, on the instance that started it.
type published struct {
	l      *load
	in     *Instance
	thread string
	run    string
	// producer is its Producer-Id; next the Producer-Seq of its next event.
	producer string
	next     int64
}

// produce is one thread's producer: runs, one after another, until the
// load stops.
func (l *load) produce(ctx context.Context, thread string, rng *rand.Rand) {
	for n := 1; ctx.Err() == nil && !l.stopped(); n++ {
		l.publishRun(ctx, thread, fmt.Sprintf("%s-run%d", thread, n), rng)
		sleep(ctx, jitter(rng, 0, 200*time.Millisecond))
	}
}

// patience bounds how long a producer sends one request again for want
// of an answer: longer than any fault holds an instance or its link.
func (l *load) patience() time.Duration {
	return 2*l.cfg.Lease + l.cfg.PastLease + l.cfg.RestartAfter + 10*time.Second
}

func (l *load) publishRun(ctx context.Context, thread, run string, rng *rand.Rand) {
	p := l.startPublished(ctx, thread, run, rng)
	if p == nil {
		return
	}
	events := plan(run, rng)
	cancelAt := -1
	if rng.IntN(10) == 0 {
		cancelAt = rng.IntN(len(events))
	}
	for i := 0; i < len(events); {
		if l.stopped() {
			break // the load is ending: finish what is under way
		}
		n := min(len(events)-i, 1+rng.IntN(3))
		if i <= cancelAt && cancelAt < i+n {
			l.cancel(ctx, thread, run, rng)
		}
		if !p.append(ctx, events[i:i+n], rng) {
			return
		}
		i += n
		sleep(ctx, jitter(rng, 0, 30*time.Millisecond))
	}
	p.finish(ctx, rng)
}

// startPublished starts the run on a random instance. A start whose answer
// did not come is sent again to the same instance with the same runId,
// which gets the run back if the first try made it; a start that could not
// be made there (503, 409 while the thread's previous run is settled) is
// tried again with another runId, since one that made the run unseen may
// have left it to be settled.
func (l *load) startPublished(ctx context.Context, thread, run string, rng *rand.Rand) *published {
	body, _ := json.Marshal(map[string]string{"runId": run, "message": "publish " + run})
	deadline := time.Now().Add(l.patience())
	in := l.cl.Instances[rng.IntN(len(l.cl.Instances))]
	unanswered := false
	for try := 1; ctx.Err() == nil && !l.stopped(); try++ {
		if time.Now().After(deadline) {
			l.j.printf("%s: gave up starting %s through %s", thread, run, in.Name())
			return nil
		}
		code, ans, text, err := l.papi.publish(ctx, in.URL+"/publish/threads/"+thread+"/runs", body, nil)
		switch {
		case err != nil:
			l.note(func() { l.stats.NoAnswer++ })
			unanswered = true
			sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
			continue
		case (code == http.StatusCreated || code == http.StatusOK) && ans.RunID == run:
			at := time.Now()
			l.j.printf("%s: published run %s started through %s (%d, try %d)", thread, run, in.Name(), code, try)
			l.note(func() {
				l.stats.Published++
				l.started = append(l.started, check.StartedRun{Thread: thread, Run: run, Instance: in.Name(), At: at})
			})
			return &published{l: l, in: in, thread: thread, run: run, producer: "producer-" + run}
		case code == http.StatusConflict || code == http.StatusServiceUnavailable:
			if code == http.StatusConflict {
				l.note(func() { l.stats.Busy++ })
			} else {
				l.note(func() { l.stats.Unavailable++ })
			}
			if unanswered {
				// An earlier try may have made the run; it is left to be
				// settled, and this one goes on under a new id.
				l.j.printf("%s: start of %s through %s answered %d after a try without answer; going on as another run", thread, run, in.Name(), code)
				run = fmt.Sprintf("%s.%d", run, try)
				body, _ = json.Marshal(map[string]string{"runId": run, "message": "publish " + run})
				unanswered = false
			}
			in = l.cl.Instances[rng.IntN(len(l.cl.Instances))]
			sleep(ctx, jitter(rng, 100*time.Millisecond, 300*time.Millisecond))
		default:
			l.unexpected(thread, in.Name(), "publish start", code, text)
			return nil
		}
	}
	return nil
}

// append sends events as one append, again and again until it is
// answered. It journals what a 200 acknowledged and reports whether the
// run goes on.
func (p *published) append(ctx context.Context, events []pevent, rng *rand.Rand) bool {
	var body bytes.Buffer
	body.WriteByte('[')
	for i, ev := range events {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(ev.json)
	}
	body.WriteByte(']')
	hdr := map[string]string{"Producer-Id": p.producer, "Producer-Epoch": "0", "Producer-Seq": strconv.FormatInt(p.next, 10)}
	what := fmt.Sprintf("append of %s seq %d-%d", p.run, p.next, p.next+int64(len(events))-1)
	code, ans, text, ok := p.send(ctx, "/events", body.Bytes(), hdr, what, rng)
	switch {
	case !ok:
		return false
	case code == http.StatusOK:
		at := time.Now()
		if ans.NextSeq != p.next+int64(len(events)) || ans.Stored+ans.Duplicates != len(events) {
			p.l.unexpected(p.thread, p.in.Name(), what, code, text)
		}
		p.l.note(func() {
			p.l.stats.Appends++
			for i, ev := range events {
				if ev.marker != "" {
					p.l.acked = append(p.l.acked, check.Acked{Thread: p.thread, Run: p.run, Type: ev.typ, Marker: ev.marker,
						Seq: p.next + int64(i), Instance: p.in.Name(), At: at, Duplicate: i < ans.Duplicates})
				}
			}
		})
		if ans.Duplicates > 0 {
			p.l.j.printf("%s: %s through %s: %d stored, %d duplicates", p.thread, what, p.in.Name(), ans.Stored, ans.Duplicates)
		}
		p.next = ans.NextSeq
		return true
	case runOver[ans.code()]:
		p.l.j.printf("%s: %s through %s answered %d %s: the run is over", p.thread, what, p.in.Name(), code, ans.code())
		p.l.note(func() { p.l.stats.PublishEnded++ })
		return false
	default:
		p.l.unexpected(p.thread, p.in.Name(), what, code, text)
		return false
	}
}

// finish finishes the run, again and again until it is answered.
func (p *published) finish(ctx context.Context, rng *rand.Rand) {
	what := "finish of " + p.run
	code, ans, text, ok := p.send(ctx, "/finish", []byte(`{"status":"completed"}`), nil, what, rng)
	switch {
	case !ok:
	case code == http.StatusOK:
		at := time.Now()
		p.l.j.printf("%s: %s through %s answered 200", p.thread, what, p.in.Name())
		p.l.note(func() {
			p.l.acked = append(p.l.acked, check.Acked{Thread: p.thread, Run: p.run, Type: instanceai.TypeRunFinish,
				Marker: instanceai.RunCompleted, Seq: p.next, Instance: p.in.Name(), At: at})
		})
	case runOver[ans.code()]:
		p.l.j.printf("%s: %s through %s answered %d %s", p.thread, what, p.in.Name(), code, ans.code())
		p.l.note(func() { p.l.stats.PublishEnded++ })
	default:
		p.l.unexpected(p.thread, p.in.Name(), what, code, text)
	}
}

// send posts to the run's route on its instance until an answer comes
// (503 counts as none: the instance could not serve it then), or the
// producer's patience runs out. ok is false when no answer came.
func (p *published) send(ctx context.Context, route string, body []byte, hdr map[string]string, what string, rng *rand.Rand) (int, publishAnswer, string, bool) {
	url := p.in.URL + "/publish/threads/" + p.thread + "/runs/" + p.run + route
	deadline := time.Now().Add(p.l.patience())
	for try := 1; ; try++ {
		code, ans, text, err := p.l.papi.publish(ctx, url, body, hdr)
		if err == nil && code != http.StatusServiceUnavailable {
			return code, ans, text, true
		}
		p.l.note(func() {
			if err != nil {
				p.l.stats.NoAnswer++
			} else {
				p.l.stats.Unavailable++
			}
			p.l.stats.Retries++
		})
		if try == 1 {
			p.l.j.printf("%s: %s through %s: no answer (%v), sending it again", p.thread, what, p.in.Name(), orStatus(err, code))
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			p.l.j.printf("%s: gave up on %s through %s after %d tries", p.thread, what, p.in.Name(), try)
			return 0, ans, "", false
		}
		sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
	}
}

func orStatus(err error, code int) string {
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(code)
}
