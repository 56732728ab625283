package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/threadline/threadline/chaos/check"
)

// api makes the load's requests.
type api struct {
	client *http.Client
}

func newAPI(timeout time.Duration) *api {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	return &api{client: &http.Client{Timeout: timeout, Transport: tr}}
}

// do sends a request and decodes a JSON answer into out (when not nil).
// err is set when no answer came (refused, reset, timed out).
func (a *api) do(ctx context.Context, method, url, body string, out any) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, "", err
	}
	if out != nil && res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			return res.StatusCode, string(data), fmt.Errorf("decode %s: %w", url, err)
		}
	}
	return res.StatusCode, string(bytes.TrimSpace(data)), nil
}

// LoadStats counts what the load did and was answered.
type LoadStats struct {
	Chats       int `json:"chats"`
	Busy        int `json:"busy409"`
	Unavailable int `json:"unavailable503"`
	NoAnswer    int `json:"noAnswer"`
	Cancels     int `json:"cancels"`
	Confirms    int `json:"confirms"`
	// Published counts the runs producers started through the publish
	// API, Appends their appends answered 200, Retries the requests they
	// sent again for want of an answer, PublishEnded the runs that ended
	// under them (taken over, cancelled, their instance gone).
	Published    int `json:"published"`
	Appends      int `json:"appends"`
	Retries      int `json:"retries"`
	PublishEnded int `json:"publishEnded"`
	// Acked counts the events producers were answered 200 for, each
	// time, which the checker looks for in the log.
	Acked        int `json:"acked"`
	Reconnects   int `json:"reconnects"`
	ClientFrames int `json:"clientFrames"`
}

// load chats on every chat thread through random instances, and drives a
// publish API producer on every producer thread, until stopped.
type load struct {
	cl  *Cluster
	cfg *Config
	api *api
	// papi is the producers' client: its timeout is a producer's, shorter
	// than the faults, so that requests go unanswered and are sent again.
	papi *api
	j    *journal

	stopping chan struct{}
	haltOnce sync.Once
	wg       sync.WaitGroup

	mu       sync.Mutex
	started  []check.StartedRun
	cancels  []check.Cancel
	acked    []check.Acked
	observed []check.Anomaly
	stats    LoadStats
}

func startLoad(ctx context.Context, cl *Cluster, chats, producers []string, seed uint64, j *journal) *load {
	l := &load{cl: cl, cfg: cl.cfg, api: newAPI(cl.cfg.RequestTimeout), papi: newAPI(cl.cfg.ProducerTimeout), stopping: make(chan struct{}), j: j}
	for i, th := range chats {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		l.wg.Go(func() { l.chat(ctx, th, rng) })
	}
	for i, th := range producers {
		rng := rand.New(rand.NewPCG(seed, uint64(500+i)))
		l.wg.Go(func() { l.produce(ctx, th, rng) })
	}
	return l
}

// halt starts no more chats; the chats under way go on (a confirmation
// is still answered, so nothing is left suspended).
func (l *load) halt() {
	l.haltOnce.Do(func() {
		l.j.printf("no new chats from now on")
		close(l.stopping)
	})
}

// stop halts the load and waits for the chats under way.
func (l *load) stop() {
	l.halt()
	l.wg.Wait()
}

func (l *load) stopped() bool {
	select {
	case <-l.stopping:
		return true
	default:
		return false
	}
}

func (l *load) note(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// unexpected records an answer the API does not give in the situation.
func (l *load) unexpected(thread, in, what string, code int, body string) {
	l.j.printf("%s: %s through %s answered %d %s", thread, what, in, code, clip(body, 300))
	l.note(func() {
		l.observed = append(l.observed, check.Anomaly{Kind: check.UnexpectedStatus, Thread: thread,
			Detail: fmt.Sprintf("%s through %s answered %d %s", what, in, code, clip(body, 300))})
	})
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// message picks what the reference agent is asked to do.
func (l *load) message(rng *rand.Rand, thread string, n int) string {
	switch p := rng.IntN(100); {
	case p < 20:
		return fmt.Sprintf("simple message %d on %s", n, thread)
	case p < 33:
		return "tools"
	case p < 43:
		return "tasks"
	case p < 68:
		lo := max(1, l.cfg.LongDeltas/4)
		return fmt.Sprintf("long %d", lo+rng.IntN(max(1, l.cfg.LongDeltas-lo+1)))
	case p < 84:
		return "background"
	default:
		return "confirm"
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// chat is one thread's user: it chats through a random instance, waits
// while a run is active (409), tries another instance on 503 or no
// answer, answers its confirmations and now and then cancels.
func (l *load) chat(ctx context.Context, thread string, rng *rand.Rand) {
	for n := 1; ctx.Err() == nil && !l.stopped(); {
		in := l.cl.Instances[rng.IntN(len(l.cl.Instances))]
		msg := l.message(rng, thread, n)
		body, _ := json.Marshal(map[string]string{"message": msg})
		var out struct {
			RunID string `json:"runId"`
		}
		code, text, err := l.api.do(ctx, http.MethodPost, in.URL+"/instance-ai/chat/"+thread, string(body), &out)
		switch {
		case err != nil:
			l.note(func() { l.stats.NoAnswer++ })
			sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
		case code == http.StatusOK && out.RunID != "":
			n++
			at := time.Now()
			l.j.printf("%s: chat %q through %s started %s", thread, msg, in.Name(), out.RunID)
			l.note(func() {
				l.stats.Chats++
				l.started = append(l.started, check.StartedRun{Thread: thread, Run: out.RunID, Instance: in.Name(), At: at})
			})
			switch {
			case msg == "confirm":
				l.confirm(ctx, thread, out.RunID, rng)
			case rng.IntN(100) < 10:
				sleep(ctx, jitter(rng, 50*time.Millisecond, 800*time.Millisecond))
				l.cancel(ctx, thread, out.RunID, rng)
			}
			sleep(ctx, jitter(rng, 0, 200*time.Millisecond))
		case code == http.StatusConflict:
			l.note(func() { l.stats.Busy++ })
			sleep(ctx, jitter(rng, 100*time.Millisecond, 300*time.Millisecond))
		case code == http.StatusServiceUnavailable:
			l.note(func() { l.stats.Unavailable++ })
			sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
		default:
			l.unexpected(thread, in.Name(), "chat "+msg, code, text)
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

// cancel cancels the thread's run through a random instance, until one
// answers.
func (l *load) cancel(ctx context.Context, thread, run string, rng *rand.Rand) {
	for range 20 {
		in := l.cl.Instances[rng.IntN(len(l.cl.Instances))]
		sent := time.Now()
		code, text, err := l.api.do(ctx, http.MethodPost, in.URL+"/instance-ai/chat/"+thread+"/cancel", "", nil)
		answered := time.Now()
		switch {
		case err != nil || code == http.StatusServiceUnavailable:
			sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
			continue
		case code == http.StatusOK || code == http.StatusAccepted:
			// 200 says the work stopped ("applied"), 202 that the cancel
			// is recorded and the owner stops it at its next renewal.
			l.j.printf("%s: cancel of %s through %s answered %d %s after %v", thread, run, in.Name(), code, text, answered.Sub(sent).Round(time.Millisecond))
			compact := strings.ReplaceAll(text, " ", "")
			l.note(func() {
				l.stats.Cancels++
				l.cancels = append(l.cancels, check.Cancel{Thread: thread, Run: run, Instance: in.Name(), Sent: sent, Answered: answered,
					Applied: code == http.StatusOK && strings.Contains(compact, `"ok":true`) && strings.Contains(compact, `"status":"applied"`)})
			})
		default:
			l.unexpected(thread, in.Name(), "cancel", code, text)
		}
		return
	}
}

// message is the part of a /messages answer the load reads.
type messagesAnswer struct {
	Messages []struct {
		RunID       string `json:"runId"`
		Role        string `json:"role"`
		IsStreaming bool   `json:"isStreaming"`
		AgentTree   *struct {
			ToolCalls []struct {
				Confirmation *struct {
					RequestID string `json:"requestId"`
				} `json:"confirmation"`
			} `json:"toolCalls"`
		} `json:"agentTree"`
	} `json:"messages"`
}

// confirm finds the run's confirmation request through /messages on random
// instances and answers it (approve or deny, after a short pause) through
// a random instance. It gives up when the run ended without asking (it
// was cancelled or settled) or after a bound.
func (l *load) confirm(ctx context.Context, thread, run string, rng *rand.Rand) {
	// A request appears within a second; the bound leaves room for a
	// settlement (a lease) and a slow cluster, and a run that never asks
	// is then the checker's to report (it stays unfinished).
	deadline := time.Now().Add(2*l.cfg.Lease + 10*time.Second)
	requestID := ""
	for requestID == "" {
		if time.Now().After(deadline) || ctx.Err() != nil {
			l.j.printf("%s: gave up finding the confirmation request of %s", thread, run)
			return
		}
		in := l.cl.Instances[rng.IntN(len(l.cl.Instances))]
		var out messagesAnswer
		code, text, err := l.api.do(ctx, http.MethodGet, in.URL+"/instance-ai/threads/"+thread+"/messages?limit=4", "", &out)
		switch {
		case err != nil || code == http.StatusServiceUnavailable:
		case code != http.StatusOK:
			l.unexpected(thread, in.Name(), "messages", code, text)
		default:
			for _, m := range out.Messages {
				if m.RunID != run || m.Role != "assistant" || m.AgentTree == nil {
					continue
				}
				for _, tc := range m.AgentTree.ToolCalls {
					if tc.Confirmation != nil && tc.Confirmation.RequestID != "" {
						requestID = tc.Confirmation.RequestID
					}
				}
				if requestID == "" && !m.IsStreaming {
					l.j.printf("%s: %s ended without asking for a confirmation (messages through %s)", thread, run, in.Name())
					return
				}
			}
		}
		if requestID == "" {
			sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
		} else {
			l.j.printf("%s: %s asks for confirmation %s (messages through %s)", thread, run, requestID, in.Name())
		}
	}
	sleep(ctx, jitter(rng, 50*time.Millisecond, 500*time.Millisecond))
	body := fmt.Sprintf(`{"approved":%v}`, rng.IntN(2) == 0)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		in := l.cl.Instances[rng.IntN(len(l.cl.Instances))]
		code, text, err := l.api.do(ctx, http.MethodPost, in.URL+"/instance-ai/confirm/"+requestID, body, nil)
		switch {
		case err != nil || code == http.StatusServiceUnavailable:
			sleep(ctx, jitter(rng, 50*time.Millisecond, 150*time.Millisecond))
			continue
		case code == http.StatusOK || code == http.StatusAccepted:
			// 202: stored, and the instance that runs the run takes it
			// at its next lease renewal.
			l.j.printf("%s: confirmation %s answered %s through %s: %d %s", thread, requestID, body, in.Name(), code, clip(text, 200))
			l.note(func() { l.stats.Confirms++ })
		case code == http.StatusConflict:
			l.j.printf("%s: confirmation %s answered %s through %s: %d %s", thread, requestID, body, in.Name(), code, clip(text, 200))
			// Answered already (an earlier try whose answer was lost) or
			// closed (the run was cancelled or settled): nothing waits.
		default:
			// Reported; the user tries again, as anyone would, so that
			// the run is not left waiting because of the harness.
			l.unexpected(thread, in.Name(), "confirm", code, text)
			sleep(ctx, jitter(rng, 100*time.Millisecond, 300*time.Millisecond))
			continue
		}
		return
	}
	l.j.printf("%s: gave up answering confirmation %s of %s", thread, requestID, run)
}
