// Package figures measures each figure of the peer comparison against one
// running server. Every function starts its own server process and stops
// it, so that the caller can interleave servers and repeats freely.
//
// Where the workloads differ: Joe and Centrifugo are told what to send by
// the load client over their publish endpoints, one HTTP request per
// message. In the fanout and latency figures Threadline's events come from
// runs: the reference agent's `long N` (N text deltas at --script-delay 0)
// for fan-out, and an n8n run whose webhook is the load client (--agent
// n8n, see Webhook) where the send time must be in the payload. Either way
// each delta goes the real way: agent → Emit → writer (which also
// coalesces the deltas into stored text-blocks on SQLite) → hub →
// connection. The fanout-published and latency-published figures feed
// Threadline as the peers are fed: one HTTP request per message, to its
// publish API (servers.Producer), one publisher for every server.
package figures

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadline/threadline/bench/internal/servers"
	"github.com/threadline/threadline/bench/internal/sse"
)

// Params are the sizes of the workloads.
type Params struct {
	FanoutSubscribers  int
	FanoutMessages     int
	Publishers         int // concurrent publishers to Joe and Centrifugo
	LatencySubscribers int
	LatencyRate        int
	LatencyDuration    time.Duration
	IdleConnections    int
	FirstByteConns     int
	ReplayEvents       int
	// PostgresURL is the database of the replay-postgres figure.
	PostgresURL string
	// StallDeltas and StallPublishes are the stall figure's messages: a
	// Threadline run's deltas, the peers' publishes.
	StallDeltas    int
	StallPublishes int
}

// Env is what every figure needs.
type Env struct {
	Bin     servers.Binaries
	Params  Params
	WorkDir string
	Webhook *Webhook

	seedMu                   sync.Mutex
	sqliteSeed, postgresSeed *replayThread
}

// Result is one figure of one server in one repeat.
type Result struct {
	Value float64
	Note  string
	// Base and Under are, for a paired figure (stall), the two
	// measurements whose ratio Value is: without and with the stall.
	Base, Under float64
	// CPURatio, for the stall figure, is the server's CPU time per
	// healthy delivery with the stall over that without: a second view of
	// the same cost that other load on the machine disturbs less than the
	// rate.
	CPURatio float64
	// Outcome, for the stall figure, is what became of the stalled
	// subscriber and whether it held the healthy ones up.
	Outcome string
}

var (
	deltaPrefix  = []byte(`{"type":"text-delta"`)
	finishPrefix = []byte(`{"type":"run-finish"`)
	seqMarker    = []byte(`"i":`)
)

// payload is what the load client publishes to Joe and Centrifugo: a send
// time in ns, a sequence number, and text the size of a short delta.
func payload(i int) []byte {
	return fmt.Appendf(nil, `{"ts":%d,"i":%d,"text":"chunk %d. "}`, time.Now().UnixNano(), i, i)
}

// start runs a server of kind; a Threadline gets a fresh SQLite store.
func (e *Env) start(kind servers.Kind, args ...string) (*servers.Server, error) {
	var opt servers.Options
	if kind == servers.Threadline {
		dir, err := os.MkdirTemp(e.WorkDir, "tl-")
		if err != nil {
			return nil, err
		}
		opt.ThreadlineArgs = append([]string{"--store", "sqlite:" + filepath.Join(dir, "t.db"), "--script-delay", "0"}, args...)
	}
	return servers.Start(kind, e.Bin, opt)
}

func (e *Env) n8nArgs(path string) []string {
	return []string{"--agent", "n8n", "--n8n-webhooks", "bench=" + e.Webhook.URL + path, "--n8n-capture=false"}
}

func createThread(s *servers.Server, id string) error {
	if s.Kind != servers.Threadline {
		return nil
	}
	return s.Post("/instance-ai/threads", fmt.Appendf(nil, `{"id":%q}`, id), nil)
}

func chat(s *servers.Server, thread, message string) error {
	return s.Post("/instance-ai/chat/"+thread, fmt.Appendf(nil, `{"message":%q}`, message), nil)
}

// openAll opens n streams to url.
func openAll(url string, n int) ([]*sse.Stream, error) {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = url
	}
	return openURLs(urls)
}

func closeAll(streams []*sse.Stream) {
	for _, s := range streams {
		if s != nil {
			s.Close()
		}
	}
}

// warmUp makes sure every subscriber is live before anything is timed. A
// Threadline stream is live once its ": connected" comment arrives. Joe
// registers a subscriber after its headers went out, and Centrifugo's
// connect push may precede the subscription, so those get a warm-up
// message every 20 ms until every stream has seen one.
func warmUp(s *servers.Server, channel string, streams []*sse.Stream) error {
	var pending atomic.Int64
	pending.Store(int64(len(streams)))
	errs := make(chan error, len(streams))
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pending.Add(-1)
			st.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if err := st.Scan(func(f sse.Field, v []byte) bool {
				live := (s.Kind == servers.Threadline && f == sse.Comment && bytes.Equal(v, []byte("connected"))) ||
					(s.Kind != servers.Threadline && f == sse.Data && bytes.Contains(v, []byte(`"warm"`)))
				return !live
			}); err != nil {
				errs <- fmt.Errorf("waiting for a live stream: %w", err)
				return
			}
			st.Conn.SetReadDeadline(time.Time{})
		}()
	}
	if s.Kind != servers.Threadline {
		for pending.Load() > 0 {
			if err := s.Publish(channel, []byte(`{"warm":1}`)); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }
