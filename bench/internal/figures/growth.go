package figures

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/threadline/threadline/bench/internal/servers"
	"github.com/threadline/threadline/bench/internal/sse"
)

// GrowthArgs are the Threadline flags of every cost-growth measurement:
// the in-memory store, so that the figures show what subscribers and
// threads cost the hub and the connections rather than what SQLite costs,
// and the reference agent without pauses between deltas.
var GrowthArgs = []string{"--store", "memory", "--script-delay", "0"}

// Growth is one cost-growth measurement: Threads threads with Subscribers
// SSE subscribers each, then one concurrent `long Messages` run per thread.
type Growth struct {
	Threads, Subscribers, Messages int

	// Deliveries is text-delta frames received over all subscribers per
	// second, from the first POST /chat to the last subscriber's last
	// delta; Runs is threads whose run finished at every subscriber per
	// second over the same span.
	Deliveries, Runs float64
	Elapsed          time.Duration
	// Short is subscribers that got fewer than Messages deltas.
	Short int
	// RSS of the server (bytes): Before is after start with one warm-up
	// thread and stream; Idle with every thread created and every stream
	// open and idle; After once every run has finished, streams still open.
	Before, Idle, After int64
}

// Growth measures Threadline (only: the peers have no runs) with threads ×
// subscribers streams. Each thread's run is its own `POST /chat`, sent by
// 32 concurrent requesters.
func (e *Env) Growth(threads, subscribers, messages int) (Growth, error) {
	g := Growth{Threads: threads, Subscribers: subscribers, Messages: messages}
	s, err := servers.Start(servers.Threadline, e.Bin, servers.Options{ThreadlineArgs: GrowthArgs})
	if err != nil {
		return g, err
	}
	defer s.Stop()

	// A warm-up thread and stream first, so that lazily built state
	// (routes, the hub, the first thread's entry) is not counted.
	if err := createThread(s, "warm"); err != nil {
		return g, err
	}
	warm, err := openAll(s.StreamURL("warm", ""), 1)
	if err != nil {
		return g, err
	}
	defer closeAll(warm)
	time.Sleep(300 * time.Millisecond)
	if g.Before, err = s.RSS(); err != nil {
		return g, err
	}

	ids := make([]string, threads)
	urls := make([]string, 0, threads*subscribers)
	for i := range ids {
		ids[i] = "g" + strconv.Itoa(i)
		for range subscribers {
			urls = append(urls, s.StreamURL(ids[i], ""))
		}
	}
	if err := parallel(threads, 32, func(i int) error { return createThread(s, ids[i]) }); err != nil {
		return g, err
	}
	streams, err := openURLs(urls)
	if err != nil {
		return g, err
	}
	defer closeAll(streams)
	if err := warmUp(s, "", streams); err != nil {
		return g, err
	}
	time.Sleep(time.Second)
	if g.Idle, err = s.RSS(); err != nil {
		return g, err
	}

	stats := make([]subscriberStats, len(streams))
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); follow(s.Kind, st, messages, "", &stats[i]) }()
	}
	start := time.Now()
	if err := parallel(threads, 32, func(i int) error { return chat(s, ids[i], "long "+strconv.Itoa(messages)) }); err != nil {
		return g, err
	}
	wg.Wait()

	var total int
	var last time.Time
	for i := range stats {
		st := &stats[i]
		if st.err != nil {
			return g, fmt.Errorf("a subscriber stopped after %d deltas: %w", st.count, st.err)
		}
		total += st.count
		if st.count < messages {
			g.Short++
		}
		if st.last.After(last) {
			last = st.last
		}
	}
	g.Elapsed = last.Sub(start)
	g.Deliveries = float64(total) / g.Elapsed.Seconds()
	g.Runs = float64(threads) / g.Elapsed.Seconds()
	time.Sleep(500 * time.Millisecond)
	g.After, err = s.RSS()
	return g, err
}

// parallel calls fn(0) … fn(n-1) from up to workers goroutines and returns
// the first error.
func parallel(n, workers int, fn func(i int) error) error {
	errs := make(chan error, n)
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// openURLs opens one stream to each of urls, 32 at a time.
func openURLs(urls []string) ([]*sse.Stream, error) {
	streams := make([]*sse.Stream, len(urls))
	err := parallel(len(urls), 32, func(i int) (err error) {
		streams[i], err = sse.Open(urls[i], nil)
		return err
	})
	if err != nil {
		closeAll(streams)
		return nil, err
	}
	return streams, nil
}
