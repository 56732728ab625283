package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/threadline/threadline/chaos/check"
)

// The oversized scenario: producers that go past the size bounds on
// purpose, one after the other, while the usual load runs beside them on
// an `--agent agui` cluster. First an upstream AG-UI agent streams one
// message far larger than the segment bound (cfg.UpstreamFrames ×
// cfg.UpstreamFrameBytes) into a chat's run; then a publish producer
// appends cfg.OversizedDeltas text-deltas of cfg.OversizedDeltaBytes each
// to one segment, going on after it is refused, as a producer that does
// not read its answers would. Each instance's peak resident memory is read
// over each of the two (VmHWM, reset before each), and the checker judges
// how each run ended (check.Oversized) and the peaks (check.Memory).

// The oversized scenario's threads, after the scenario's and bus's names.
const (
	bigUpstreamThread = "big-upstream"
	bigPublishThread  = "big-publish"
)

// oversizedRecord is what the oversized scenario's injections did, for
// the checker and the report.
type oversizedRecord struct {
	mu      sync.Mutex
	rounds  int
	runs    []check.Oversized
	memory  []check.Memory
	streams []string // what the upstream wrote of each oversized message
}

// pid is the instance's current process id (0: none runs).
func (in *Instance) pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.cmd.Process == nil {
		return 0
	}
	return in.cmd.Process.Pid
}

func oversized(e *env) ([]check.Fault, error) {
	rec := e.over
	rec.mu.Lock()
	round := rec.rounds
	rec.rounds++
	rec.mu.Unlock()
	n := len(e.cl.Instances)
	phases := []struct {
		name string
		do   func(*Instance) (check.Oversized, error)
	}{
		{fmt.Sprintf("an upstream AG-UI agent streamed %d × %s in one message", e.cfg.UpstreamFrames, sizeWords(e.cfg.UpstreamFrameBytes)), e.upstreamOversized},
		{fmt.Sprintf("a producer appended %d × %s to one segment", e.cfg.OversizedDeltas, sizeWords(e.cfg.OversizedDeltaBytes)), e.publishOversized},
	}
	for i, ph := range phases {
		owner := e.cl.Instances[(round+i)%n]
		for _, in := range e.cl.Instances {
			if err := resetPeakRSS(in.pid()); err != nil {
				e.j.printf("reset the peak memory of %s: %v (the peak is then the process's whole life's)", in.Name(), err)
			}
		}
		e.cfg.progress("  oversized: %s, the run on %s", ph.name, owner.Name())
		e.j.printf("oversized: %s, the run on %s", ph.name, owner.Name())
		o, err := ph.do(owner)
		if err != nil {
			return nil, err
		}
		for _, in := range e.cl.Instances {
			peak, err := peakRSS(in.pid())
			if err != nil {
				e.j.printf("peak memory of %s: %v", in.Name(), err)
				continue
			}
			e.cfg.progress("  oversized: %s peaked at %s", in.Name(), check.MB(peak))
			rec.mu.Lock()
			rec.memory = append(rec.memory, check.Memory{Instance: in.Name(), Phase: ph.name, Owner: in == owner, Peak: peak})
			rec.mu.Unlock()
		}
		if o.Run != "" {
			rec.mu.Lock()
			rec.runs = append(rec.runs, o)
			rec.mu.Unlock()
		}
	}
	if e.final {
		e.halt()
	}
	return nil, nil
}

// sizeWords writes a size as it was set: in MiB, MB or bytes.
func sizeWords(n int) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n > 0 && n%1_000_000 == 0:
		return fmt.Sprintf("%d MB", n/1_000_000)
	}
	return fmt.Sprintf("%d bytes", n)
}

// runEnded waits until the log holds a run-finish of the run, up to
// bound.
func (e *env) runEnded(thread, run string, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		var n int
		err := e.cl.DB.QueryRowContext(e.ctx, `SELECT count(*) FROM events WHERE thread_id = $1 AND run_id = $2 AND type = 'run-finish'`,
			thread, run).Scan(&n)
		if err == nil && n > 0 {
			return true
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			return false
		}
		sleep(e.ctx, 100*time.Millisecond)
	}
}

// upstreamOversized chats on the upstream's thread through the instance
// with the message the upstream answers hugely, and waits until the run
// has ended and the upstream has stopped writing.
func (e *env) upstreamOversized(in *Instance) (check.Oversized, error) {
	thread := e.bigThread(bigUpstreamThread)
	a := newAPI(e.cfg.RequestTimeout)
	body := `{"message":"` + oversizedMessage + `"}`
	var run string
	for run == "" {
		var out struct {
			RunID string `json:"runId"`
		}
		code, text, err := a.do(e.ctx, http.MethodPost, in.URL+"/instance-ai/chat/"+thread, body, &out)
		switch {
		case e.ctx.Err() != nil:
			return check.Oversized{}, e.ctx.Err()
		case err != nil || code == http.StatusConflict || code == http.StatusServiceUnavailable:
			// The thread's previous run still ends, or the load keeps the
			// instance busy: again, soon.
			sleep(e.ctx, 200*time.Millisecond)
		case code == http.StatusOK && out.RunID != "":
			run = out.RunID
		default:
			return check.Oversized{}, fmt.Errorf("oversized chat through %s: %d %s", in.Name(), code, clip(text, 300))
		}
	}
	e.j.printf("%s: oversized chat through %s started %s", thread, in.Name(), run)
	o := check.Oversized{Thread: thread, Run: run, Source: "upstream", Instance: in.Name()}
	if !e.runEnded(thread, run, 2*time.Minute) {
		e.j.printf("%s: %s has not ended 2 minutes after it began", thread, run)
		return o, nil
	}
	deadline := time.Now().Add(time.Minute)
	s := e.up.stream(run)
	for (s == nil || !s.Done) && time.Now().Before(deadline) && e.ctx.Err() == nil {
		sleep(e.ctx, 100*time.Millisecond)
		s = e.up.stream(run)
	}
	what := "the upstream had no request for it"
	if s != nil {
		what = fmt.Sprintf("the upstream wrote %d of its %d deltas, %s in all; it stopped: %s", s.Frames, e.cfg.UpstreamFrames, check.MB(s.Bytes), orAll(s))
	}
	e.cfg.progress("  oversized: %s", what)
	e.j.printf("%s: %s: %s", thread, run, what)
	e.over.mu.Lock()
	e.over.streams = append(e.over.streams, what)
	e.over.mu.Unlock()
	return o, nil
}

func orAll(s *upstreamStream) string {
	switch {
	case !s.Done:
		return "not yet"
	case s.Err == "":
		return "never, it wrote them all"
	}
	return s.Err
}

// bigThread is the scenario's thread of that name.
func (e *env) bigThread(name string) string {
	for _, th := range e.big {
		if len(th) >= len(name) && th[len(th)-len(name):] == name {
			return th
		}
	}
	return name
}

// publishOversized starts a run through the publish API on the instance
// and appends the huge deltas to one segment, one per request, whatever
// the answers say (it follows only their nextSeq), then waits until the run
// has ended.
func (e *env) publishOversized(in *Instance) (check.Oversized, error) {
	thread := e.bigThread(bigPublishThread)
	a := newAPI(e.cfg.RequestTimeout)
	e.over.mu.Lock()
	round := e.over.rounds
	e.over.mu.Unlock()
	var run string
	for try := 1; run == ""; try++ {
		id := fmt.Sprintf("%s-%d-%d", thread, round, try)
		code, ans, text, err := a.publish(e.ctx, in.URL+"/publish/threads/"+thread+"/runs", []byte(`{"runId":"`+id+`","message":"huge deltas"}`), nil)
		switch {
		case e.ctx.Err() != nil:
			return check.Oversized{}, e.ctx.Err()
		case err != nil || code == http.StatusConflict || code == http.StatusServiceUnavailable:
			sleep(e.ctx, 200*time.Millisecond)
		case code == http.StatusCreated:
			run = ans.RunID
		default:
			return check.Oversized{}, fmt.Errorf("oversized publish start through %s: %d %s", in.Name(), code, clip(text, 300))
		}
	}
	e.j.printf("%s: oversized producer started %s through %s", thread, run, in.Name())
	o := check.Oversized{Thread: thread, Run: run, Source: "publish", Instance: in.Name(), Answers: map[string]int{}}
	text := bytes.Repeat([]byte("y"), e.cfg.OversizedDeltaBytes)
	head := []byte(`[{"type":"text-delta","responseId":"` + run + `:huge","payload":{"text":"`)
	tail := []byte(`"}}]`)
	// A client of its own: each request sends a megabyte, and one that the
	// instance answers before reading it all may end its connection.
	client := &http.Client{Timeout: time.Minute}
	url := in.URL + "/publish/threads/" + thread + "/runs/" + run + "/events"
	began := time.Now()
	var seq int64
	for i := range e.cfg.OversizedDeltas {
		if e.ctx.Err() != nil {
			return o, e.ctx.Err()
		}
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, url, io.MultiReader(bytes.NewReader(head), bytes.NewReader(text), bytes.NewReader(tail)))
		req.ContentLength = int64(len(head) + len(text) + len(tail))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Producer-Id", "huge-"+run)
		req.Header.Set("Producer-Epoch", "0")
		req.Header.Set("Producer-Seq", strconv.FormatInt(seq, 10))
		res, err := client.Do(req)
		if err != nil {
			o.Answers["no answer"]++
			continue
		}
		data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		var ans struct {
			NextSeq *int64 `json:"nextSeq"`
			Error   *struct {
				Code    string `json:"code"`
				Details struct {
					NextSeq *int64 `json:"nextSeq"`
				} `json:"details"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &ans)
		key := strconv.Itoa(res.StatusCode)
		switch {
		case ans.Error != nil:
			key += " " + ans.Error.Code
			if ans.Error.Details.NextSeq != nil {
				seq = *ans.Error.Details.NextSeq
			}
		case ans.NextSeq != nil:
			seq = *ans.NextSeq
		}
		if o.Answers[key] == 0 {
			e.j.printf("%s: huge delta %d through %s: first %s answer: %s", thread, i, in.Name(), key, clip(string(data), 300))
		}
		o.Answers[key]++
	}
	e.cfg.progress("  oversized: %d huge deltas sent in %v, answered %v", e.cfg.OversizedDeltas, time.Since(began).Round(time.Millisecond), o.Answers)
	e.j.printf("%s: %d huge deltas sent in %v, answered %v", thread, e.cfg.OversizedDeltas, time.Since(began).Round(time.Millisecond), o.Answers)
	if !e.runEnded(thread, run, 2*time.Minute) {
		e.j.printf("%s: %s has not ended 2 minutes after its deltas", thread, run)
	}
	return o, nil
}
