package chaos

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadline/threadline/chaos/check"
	"github.com/threadline/threadline/ssestream"
)

// follower keeps a client connected to a thread's event stream: it
// connects to a random instance with the client's cursor, folds what it
// is sent, drops the connection now and then (and whenever it errors or
// ends) and reconnects to a random instance.
type follower struct {
	c   *check.Client
	cl  *Cluster
	rng *rand.Rand
	// settled stops the random drops, for the end of the scenario: the
	// client then stays on its connection unless told to move.
	settled atomic.Bool
	// move makes the client drop its connection and reconnect.
	move chan struct{}

	mu     sync.Mutex
	frames int
	conns  int
	// unexpected are answers of the events endpoint the API does not give.
	unexpected []check.Anomaly
}

var streamClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func (f *follower) run(ctx context.Context) {
	for ctx.Err() == nil {
		in := f.cl.Instances[f.rng.IntN(len(f.cl.Instances))]
		f.connect(ctx, in)
		sleep(ctx, jitter(f.rng, 10*time.Millisecond, 100*time.Millisecond))
	}
}

// connect follows the stream on one instance until the connection ends,
// errs, or is dropped on purpose.
func (f *follower) connect(ctx context.Context, in *Instance) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, in.URL+"/instance-ai/events/"+f.c.Thread, nil)
	if cursor := f.c.Cursor(); cursor > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(cursor, 10))
	}
	res, err := streamClient.Do(req)
	if err != nil {
		return // refused or reset: another instance, soon
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		if res.StatusCode != http.StatusServiceUnavailable {
			f.mu.Lock()
			f.unexpected = append(f.unexpected, check.Anomaly{Kind: check.UnexpectedStatus, Thread: f.c.Thread, Client: f.c.Name,
				Detail: "events through " + in.Name() + " answered " + strconv.Itoa(res.StatusCode) + " " + clip(string(body), 300)})
			f.mu.Unlock()
		}
		return
	}
	f.c.Connect(in.Name(), time.Now())
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	reason := make(chan string, 1)
	lifetime := jitter(f.rng, f.cl.cfg.ClientLife/10, f.cl.cfg.ClientLife)
	go func() {
		t := time.NewTimer(lifetime)
		defer t.Stop()
		life := t.C
		for {
			select {
			case <-life:
				if f.settled.Load() {
					life = nil // the scenario is ending: stay
					continue
				}
				reason <- "dropped by the client"
			case <-f.move:
				reason <- "moved by the harness"
			case <-cctx.Done():
				return
			}
			cancel()
			return
		}
	}()
	rd := ssestream.NewReader(res.Body)
	for {
		fr, err := rd.Next()
		if err != nil {
			why := err.Error()
			select {
			case r := <-reason:
				why = r
			default:
				if errors.Is(err, io.EOF) {
					why = "ended by the server"
				}
			}
			f.c.Disconnect(why)
			return
		}
		f.c.Frame(fr)
		f.mu.Lock()
		f.frames++
		f.mu.Unlock()
	}
}
