package figures

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/threadline/threadline/bench/internal/servers"
	"github.com/threadline/threadline/bench/internal/sse"
)

// NonReadingParams are the sizes of the non-reading-streams measurement:
// a thread of Chats runs of the reference agent's `simple` on a message of
// MessageBytes each (the message is stored and echoed, so each chat adds
// about twice that to the log), Conns streams of it that read nothing
// after their response head, and Healthy streams that replay it whole.
type NonReadingParams struct {
	Chats, MessageBytes int
	Conns, Healthy      int
	// Hold is how long the non-reading streams stay open before the
	// server's memory is read: less than the server's write deadline
	// (10 s), so every one of them is still held when it is.
	Hold time.Duration
}

// NonReading is one measurement.
type NonReading struct {
	NonReadingParams
	// LogBytes is the thread's stored events as a full replay sends them.
	LogBytes int64
	// RSS of the server, sampled every 50 ms: Before the most seen while
	// the healthy readers replayed the thread alone, Peak the most seen
	// while the non-reading streams were open (the healthy readers
	// replaying it once more beside them), Held at the end of Hold.
	Before, Peak, Held int64
	// LiveBefore and LiveHeld are the Go memory the server holds (heap
	// in use and goroutine stacks, right after a garbage collection):
	// once the healthy readers are done, and at the end of Hold. Unlike
	// RSS they leave out what a collection frees and what the runtime
	// has not returned to the system yet, so their difference is what
	// the non-reading streams hold.
	LiveBefore, LiveHeld int64
	// Alone and Beside are the healthy readers' slowest full replay
	// without and with the non-reading streams open.
	Alone, Beside time.Duration
	// Closed is how many of the non-reading streams the server had
	// closed a write deadline after they stopped taking bytes.
	Closed int
}

// PerConn is the RSS growth per non-reading stream at its peak, in KB.
func (n NonReading) PerConn() float64 {
	return float64(n.Peak-n.Before) / float64(n.Conns) / 1024
}

// HeldPerConn is the Go memory each non-reading stream holds once it
// stopped taking bytes, in KB.
func (n NonReading) HeldPerConn() float64 {
	return float64(n.LiveHeld-n.LiveBefore) / float64(n.Conns) / 1024
}

// MeasureNonReading runs the measurement once on a fresh server.
func (e *Env) MeasureNonReading(p NonReadingParams) (NonReading, error) {
	out := NonReading{NonReadingParams: p}
	pprofPort, err := servers.FreePort()
	if err != nil {
		return out, err
	}
	pprof := fmt.Sprintf("127.0.0.1:%d", pprofPort)
	s, err := e.start(servers.Threadline, "--max-body", strconv.Itoa(p.MessageBytes+64<<10), "--pprof-addr", pprof)
	if err != nil {
		return out, err
	}
	defer s.Stop()
	const thread = "big"
	if err := createThread(s, thread); err != nil {
		return out, err
	}
	message := "simple " + strings.Repeat("x", p.MessageBytes)
	for range p.Chats {
		if err := chat(s, thread, message); err != nil {
			return out, err
		}
		if err := waitIdle(s, thread); err != nil {
			return out, err
		}
	}
	var msgs struct{ NextEventID int64 }
	if err := s.Get("/instance-ai/threads/"+thread+"/messages?limit=1", &msgs); err != nil {
		return out, err
	}
	last := msgs.NextEventID - 1
	url := s.StreamURL(thread, "")

	// The healthy readers alone, twice: the first warms the server up
	// (its pools, the page cache), the second is the baseline. Before is
	// the most RSS they took, so that what the readers' own replay costs
	// (a Go heap grows to about twice what is live) is not counted
	// against the non-reading streams.
	stopBefore := make(chan struct{})
	before := make(chan int64, 1)
	go func() { before <- sampleRSS(s, stopBefore) }()
	for range 2 {
		if out.Alone, out.LogBytes, err = replayAll(url, p.Healthy, last); err != nil {
			close(stopBefore)
			return out, err
		}
	}
	close(stopBefore)
	out.Before = <-before
	if out.LiveBefore, err = liveMemory(pprof); err != nil {
		return out, err
	}

	stalled := make([]*sse.Stream, 0, p.Conns)
	defer func() {
		for _, st := range stalled {
			st.Close()
		}
	}()
	stop := make(chan struct{})
	peak := make(chan int64, 1)
	go func() { peak <- sampleRSS(s, stop) }()
	opened := time.Now()
	for range p.Conns {
		st, err := sse.Dial(stallDialer(), url, nil)
		if err != nil {
			close(stop)
			return out, err
		}
		stalled = append(stalled, st)
	}
	// The healthy readers beside them, once the non-reading streams had
	// a moment to fill their sockets.
	time.Sleep(time.Second)
	if out.Beside, _, err = replayAll(url, p.Healthy, last); err != nil {
		close(stop)
		return out, err
	}
	time.Sleep(time.Until(opened.Add(p.Hold)))
	if out.Held, err = s.RSS(); err != nil {
		close(stop)
		return out, err
	}
	close(stop)
	if out.LiveHeld, err = liveMemory(pprof); err != nil {
		return out, err
	}
	out.Peak = max(<-peak, out.Held)

	// A write deadline (10 s) after the last of them stopped taking
	// bytes, every one should have been closed: read what the kernel
	// holds of each and see whether the server's end follows.
	time.Sleep(time.Until(opened.Add(p.Hold + 12*time.Second)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, st := range stalled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.Copy(io.Discard, st.Conn); err == nil {
				mu.Lock()
				out.Closed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// liveMemory collects the server's garbage (through its profiler) and
// returns the heap it has in use and its goroutines' stacks, from the
// runtime's statistics the heap profile ends with.
func liveMemory(pprof string) (int64, error) {
	res, err := http.Get("http://" + pprof + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	var total int64
	// "# HeapInuse = N" and "# Stack = inuse / sys".
	for _, key := range []string{"# HeapInuse = ", "# Stack = "} {
		i := bytes.Index(body, []byte(key))
		if i < 0 {
			return 0, fmt.Errorf("the heap profile has no %q", strings.TrimSpace(key))
		}
		rest := body[i+len(key):]
		n, err := strconv.ParseInt(string(bytes.Fields(rest)[0]), 10, 64)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// waitIdle waits for the thread's run to end.
func waitIdle(s *servers.Server, thread string) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var status struct{ HasActiveRun bool }
		if err := s.Get("/instance-ai/threads/"+thread+"/status", &status); err != nil {
			return err
		}
		if !status.HasActiveRun {
			return nil
		}
	}
	return errors.New("the run did not end")
}

// replayAll replays the thread to its last id on n streams at once and
// returns the slowest one's time and the bytes one of them read.
func replayAll(url string, n int, last int64) (slowest time.Duration, read int64, err error) {
	lastID := []byte(strconv.FormatInt(last, 10))
	var wg sync.WaitGroup
	errs := make([]error, n)
	times := make([]time.Duration, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			st, err := sse.Open(url, nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer st.Close()
			st.Conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
			errs[i] = st.Scan(func(f sse.Field, v []byte) bool { return f != sse.ID || !bytes.Equal(v, lastID) })
			times[i] = time.Since(start)
			if i == 0 {
				read = st.BytesRead()
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			return 0, 0, fmt.Errorf("healthy reader %d: %w", i, errs[i])
		}
		slowest = max(slowest, times[i])
	}
	return slowest, read, nil
}

// sampleRSS reads the server's RSS every 50 ms until stop closes and
// returns the most it saw.
func sampleRSS(s *servers.Server, stop <-chan struct{}) int64 {
	var most int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if rss, err := s.RSS(); err == nil {
			most = max(most, rss)
		}
		select {
		case <-stop:
			return most
		case <-tick.C:
		}
	}
}
