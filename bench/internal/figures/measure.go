package figures

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/lib/pq" // the replay-postgres figure's ANALYZE
	"github.com/threadline/threadline/bench/internal/servers"
	"github.com/threadline/threadline/bench/internal/sse"
)

// ErrNotApplicable marks a figure a server has no counterpart for.
var ErrNotApplicable = errors.New("not applicable")

// publishAll sends total messages to channel from e.Params.Publishers
// goroutines, optionally paced at rate per second overall.
func (e *Env) publishAll(s *servers.Server, channel string, total, rate int) error {
	if rate > 0 {
		var err error
		pace(rate, total, func(i int) {
			if err == nil {
				err = s.Publish(channel, payload(i))
			}
		})
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, e.Params.Publishers)
	for range e.Params.Publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < total; i = int(next.Add(1)) - 1 {
				if err := s.Publish(channel, payload(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// subscriberStats is what one subscriber of a live figure saw.
type subscriberStats struct {
	count     int
	last      time.Time
	latencies []time.Duration
	err       error
	// seen is count, for a watcher on another goroutine.
	seen atomic.Int64
}

// follow reads one live stream until it has want messages, Threadline's
// run-finish, or an error. Messages are Threadline text-deltas or, for the
// peers, published payloads (warm-ups carry no "i"). tsKey, when set, is
// the send timestamp to read from each message.
func follow(kind servers.Kind, st *sse.Stream, want int, tsKey string, st0 *subscriberStats) {
	st.Conn.SetReadDeadline(time.Now().Add(120 * time.Second))
	st0.err = st.Scan(func(f sse.Field, v []byte) bool {
		if f != sse.Data {
			return true
		}
		n := 0
		if kind == servers.Threadline {
			if bytes.HasPrefix(v, finishPrefix) {
				return false
			}
			if bytes.HasPrefix(v, deltaPrefix) {
				n = 1
			}
		} else {
			n = bytes.Count(v, seqMarker)
		}
		if n == 0 {
			return true
		}
		now := time.Now()
		st0.count += n
		st0.seen.Store(int64(st0.count))
		st0.last = now
		if tsKey != "" {
			if ts, ok := sse.Int(v, tsKey); ok {
				st0.latencies = append(st0.latencies, now.Sub(time.Unix(0, ts)))
			}
		}
		return st0.count < want
	})
}

// live opens subs streams, runs the workload, and gathers what each saw.
func (e *Env) live(s *servers.Server, channel string, subs, want int, tsKey string, publish func() error) ([]subscriberStats, time.Time, error) {
	if err := createThread(s, channel); err != nil {
		return nil, time.Time{}, err
	}
	streams, err := openAll(s.StreamURL(channel, ""), subs)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer closeAll(streams)
	if err := warmUp(s, channel, streams); err != nil {
		return nil, time.Time{}, err
	}
	stats := make([]subscriberStats, subs)
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); follow(s.Kind, st, want, tsKey, &stats[i]) }()
	}
	start := time.Now()
	if err := publish(); err != nil {
		return nil, start, err
	}
	wg.Wait()
	return stats, start, nil
}

// Fanout is deliveries per second to FanoutSubscribers subscribers of one
// thread (topic, channel) of FanoutMessages messages, from the first
// publish to the last subscriber's last message.
func (e *Env) Fanout(kind servers.Kind) (Result, error) {
	s, err := e.start(kind)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	p := e.Params
	stats, start, err := e.live(s, "fan", p.FanoutSubscribers, p.FanoutMessages, "", func() error {
		if kind == servers.Threadline {
			return chat(s, "fan", "long "+strconv.Itoa(p.FanoutMessages))
		}
		return e.publishAll(s, "fan", p.FanoutMessages, 0)
	})
	if err != nil {
		return Result{}, err
	}
	return fanoutResult(stats, start, p.FanoutMessages), nil
}

// fanoutResult is the deliveries per second from start to the last
// delivery, and how many subscribers got fewer than want.
func fanoutResult(stats []subscriberStats, start time.Time, want int) Result {
	var total, short int
	var last time.Time
	for i := range stats {
		st := &stats[i]
		total += st.count
		if st.count < want {
			short++
		}
		if st.last.After(last) {
			last = st.last
		}
	}
	return Result{Value: float64(total) / last.Sub(start).Seconds(), Note: fmt.Sprintf("%d short", short)}
}

// Latency is the p99 (and p50, in the note) of receive time minus send
// time over every delivery, LatencySubscribers subscribers, LatencyRate
// messages per second for LatencyDuration. The peers' send time is taken
// just before the publish request; Threadline's just before the webhook
// writes the chunk that becomes the delta.
func (e *Env) Latency(kind servers.Kind) (Result, error) {
	p := e.Params
	total := p.LatencyRate * int(p.LatencyDuration.Milliseconds()) / 1000
	var args []string
	tsKey := `"ts":`
	if kind == servers.Threadline {
		args = e.n8nArgs(fmt.Sprintf("/latency/%d/%d", p.LatencyRate, p.LatencyDuration.Milliseconds()))
		tsKey = "ts="
	}
	s, err := e.start(kind, args...)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	stats, _, err := e.live(s, "lat", p.LatencySubscribers, total, tsKey, func() error {
		if kind == servers.Threadline {
			return chat(s, "lat", "go")
		}
		return e.publishAll(s, "lat", total, p.LatencyRate)
	})
	if err != nil {
		return Result{}, err
	}
	return latencyResult(stats, total), nil
}

// latencyResult is the p99 of every delivery's latency, in ms, with the
// p50 and the subscribers that got fewer than total in the note.
func latencyResult(stats []subscriberStats, total int) Result {
	var all []time.Duration
	short := 0
	for i := range stats {
		st := &stats[i]
		all = append(all, st.latencies...)
		if st.count < total {
			short++
		}
	}
	sortDurations(all)
	p50, p99 := percentile(all, 0.50), percentile(all, 0.99)
	return Result{Value: ms(p99), Note: fmt.Sprintf("p50 %.2f ms, %d deliveries, %d short", ms(p50), len(all), short)}
}

// FanoutPublished is Fanout with every server fed alike: one publisher
// sends FanoutMessages messages one after another, one HTTP request each,
// waiting for each answer; Threadline's is a producer of its publish API
// (a sequence allows no concurrent appends), the peers' their publish
// endpoints.
func (e *Env) FanoutPublished(kind servers.Kind) (Result, error) {
	s, err := e.start(kind)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	p := e.Params
	var producer *servers.Producer
	stats, start, err := e.live(s, "fanp", p.FanoutSubscribers, p.FanoutMessages, "", func() error {
		if kind != servers.Threadline {
			for i := range p.FanoutMessages {
				if err := s.Publish("fanp", payload(i)); err != nil {
					return err
				}
			}
			return nil
		}
		var err error
		if producer, err = s.StartRun("fanp"); err != nil {
			return err
		}
		for i := range p.FanoutMessages {
			if err := producer.Append(fmt.Sprintf("chunk %d. ", i)); err != nil {
				return err
			}
		}
		return producer.Finish()
	})
	if err != nil {
		return Result{}, err
	}
	return fanoutResult(stats, start, p.FanoutMessages), nil
}

// LatencyPublished is Latency with Threadline fed through its publish
// API, as the peers are through theirs: the send time (ns) goes into each
// delta's text just before its append, on the same fixed schedule, one
// request at a time. The peers' figure is Latency's.
func (e *Env) LatencyPublished(kind servers.Kind) (Result, error) {
	if kind != servers.Threadline {
		return e.Latency(kind)
	}
	p := e.Params
	total := p.LatencyRate * int(p.LatencyDuration.Milliseconds()) / 1000
	s, err := e.start(kind)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	stats, _, err := e.live(s, "latp", p.LatencySubscribers, total, "ts=", func() error {
		producer, err := s.StartRun("latp")
		if err != nil {
			return err
		}
		pace(p.LatencyRate, total, func(int) {
			if err == nil {
				err = producer.Append(fmt.Sprintf("ts=%d;", time.Now().UnixNano()))
			}
		})
		if err != nil {
			return err
		}
		return producer.Finish()
	})
	if err != nil {
		return Result{}, err
	}
	return latencyResult(stats, total), nil
}

// Idle is the server's RSS growth per idle SSE connection, over
// IdleConnections connections, in KB.
func (e *Env) Idle(kind servers.Kind) (Result, error) {
	s, err := e.start(kind)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	if err := createThread(s, "idle"); err != nil {
		return Result{}, err
	}
	// One connection first, so that lazily built state (routes, the
	// thread's hub entry, Centrifugo's channel) is not counted.
	first, err := openAll(s.StreamURL("idle", ""), 1)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(first)
	time.Sleep(300 * time.Millisecond)
	before, err := s.RSS()
	if err != nil {
		return Result{}, err
	}
	n := e.Params.IdleConnections
	streams, err := openAll(s.StreamURL("idle", ""), n)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(streams)
	time.Sleep(time.Second)
	after, err := s.RSS()
	if err != nil {
		return Result{}, err
	}
	return Result{Value: float64(after-before) / float64(n) / 1024,
		Note: fmt.Sprintf("RSS %d → %d MB", before>>20, after>>20)}, nil
}

// FirstByte is the median time from sending the GET of an idle stream to
// its response's first byte, over FirstByteConns connections made one
// after another (p99 in the note), in ms.
func (e *Env) FirstByte(kind servers.Kind) (Result, error) {
	s, err := e.start(kind)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	if err := createThread(s, "fb"); err != nil {
		return Result{}, err
	}
	var d []time.Duration
	for range e.Params.FirstByteConns {
		st, err := sse.Open(s.StreamURL("fb", ""), nil)
		if err != nil {
			return Result{}, err
		}
		d = append(d, st.FirstByte)
		st.Close()
	}
	sortDurations(d)
	return Result{Value: ms(percentile(d, 0.5)), Note: fmt.Sprintf("p99 %.2f ms", ms(percentile(d, 0.99)))}, nil
}

// Replay is events per second to one fresh client reading a whole
// ReplayEvents-event history: a Threadline thread on SQLite from cursor 0
// (no cursor) to its last id, or a Centrifugo channel recovered from
// offset 0. Joe keeps no history.
func (e *Env) Replay(kind servers.Kind) (Result, error) {
	switch kind {
	case servers.Threadline:
		return e.replayThreadline(e.sqliteReplay())
	case servers.Centrifugo:
		return e.replayCentrifugo()
	}
	return Result{}, ErrNotApplicable
}

// ReplayPostgres is Replay with Threadline on PostgreSQL (Params.PostgresURL;
// not applicable without one), beside Centrifugo's replay measured again in
// the same repeat.
func (e *Env) ReplayPostgres(kind servers.Kind) (Result, error) {
	if e.Params.PostgresURL == "" {
		return Result{}, ErrNotApplicable
	}
	switch kind {
	case servers.Threadline:
		return e.replayThreadline(e.postgresReplay())
	case servers.Centrifugo:
		return e.replayCentrifugo()
	}
	return Result{}, ErrNotApplicable
}

// replayThread is a store holding the replay thread, written once.
type replayThread struct {
	once   sync.Once
	store  string // the --store value
	thread string
	last   int64 // the thread's last id
	err    error
}

func (e *Env) sqliteReplay() *replayThread {
	e.seedMu.Lock()
	defer e.seedMu.Unlock()
	if e.sqliteSeed == nil {
		e.sqliteSeed = &replayThread{store: "sqlite:" + e.WorkDir + "/replay.db", thread: "replay"}
	}
	return e.sqliteSeed
}

// postgresReplay writes its thread under an id of its own in the given
// database, and Close deletes it.
func (e *Env) postgresReplay() *replayThread {
	e.seedMu.Lock()
	defer e.seedMu.Unlock()
	if e.postgresSeed == nil {
		e.postgresSeed = &replayThread{store: e.Params.PostgresURL, thread: fmt.Sprintf("bench-replay-%d", time.Now().UnixNano())}
	}
	return e.postgresSeed
}

// Close deletes what the figures left in stores outside the work folder.
func (e *Env) Close() error {
	e.seedMu.Lock()
	seed := e.postgresSeed
	e.seedMu.Unlock()
	if seed == nil || seed.err != nil || seed.last == 0 {
		return nil
	}
	s, err := servers.Start(servers.Threadline, e.Bin, servers.Options{ThreadlineArgs: []string{"--store", seed.store}})
	if err != nil {
		return err
	}
	defer s.Stop()
	return s.Delete("/instance-ai/threads/" + seed.thread)
}

func (e *Env) replayThreadline(seed *replayThread) (Result, error) {
	seed.once.Do(func() { seed.err = e.seedThread(seed) })
	if seed.err != nil {
		return Result{}, seed.err
	}
	s, err := servers.Start(servers.Threadline, e.Bin, servers.Options{ThreadlineArgs: []string{"--store", seed.store}})
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	start := time.Now()
	st, err := sse.Open(s.StreamURL(seed.thread, ""), nil)
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	count := 0
	lastID := []byte(strconv.FormatInt(seed.last, 10))
	st.Conn.SetReadDeadline(time.Now().Add(120 * time.Second))
	err = st.Scan(func(f sse.Field, v []byte) bool {
		if f == sse.ID {
			count++
			return !bytes.Equal(v, lastID)
		}
		return true
	})
	elapsed := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("replay ended after %d events: %w", count, err)
	}
	return Result{Value: float64(count) / elapsed.Seconds(), Note: fmt.Sprintf("%d events", count)}, nil
}

// seedThread writes the replay thread once: one n8n run whose webhook
// streams ReplayEvents chunks alternating between two items (a `long N`
// run would be coalesced into a single stored text-block).
func (e *Env) seedThread(seed *replayThread) error {
	s, err := servers.Start(servers.Threadline, e.Bin, servers.Options{ThreadlineArgs: append([]string{"--store", seed.store},
		e.n8nArgs(fmt.Sprintf("/seed/%d", e.Params.ReplayEvents))...)})
	if err != nil {
		return err
	}
	defer s.Stop()
	if err := chat(s, seed.thread, "seed"); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Minute); ; {
		var status struct{ HasActiveRun bool }
		if err := s.Get("/instance-ai/threads/"+seed.thread+"/status", &status); err != nil {
			return err
		}
		if !status.HasActiveRun {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the replay thread's run did not finish")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var msgs struct{ NextEventID int64 }
	if err := s.Get("/instance-ai/threads/"+seed.thread+"/messages?limit=1", &msgs); err != nil {
		return err
	}
	seed.last = msgs.NextEventID - 1
	if seed.last < int64(e.Params.ReplayEvents) {
		return fmt.Errorf("the replay thread has %d events, want at least %d", seed.last, e.Params.ReplayEvents)
	}
	if seed.store == e.Params.PostgresURL {
		return analyze(seed.store)
	}
	return nil
}

// analyze has PostgreSQL gather the events table's statistics now, as its
// autovacuum does within a minute or so of a large write: on a table it
// never analyzed, the planner reads each replay page by a bitmap scan of
// the whole rest of the thread and a sort, not by the primary key's order
// (see docs/benchmarks.md, "Full replay on PostgreSQL").
func analyze(dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec("ANALYZE events")
	return err
}

func (e *Env) replayCentrifugo() (Result, error) {
	s, err := e.start(servers.Centrifugo)
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	epoch, last, err := s.CentrifugoFill("replay", e.Params.ReplayEvents, payload)
	if err != nil {
		return Result{}, err
	}
	if last < int64(e.Params.ReplayEvents) {
		return Result{}, fmt.Errorf("centrifugo history holds %d publications", last)
	}
	lastOffset := fmt.Appendf(nil, `"offset":%d`, last)
	start := time.Now()
	st, err := sse.Open(s.StreamURL("replay", epoch), nil)
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	count, recovered := 0, false
	st.Conn.SetReadDeadline(time.Now().Add(120 * time.Second))
	err = st.Scan(func(f sse.Field, v []byte) bool {
		if f != sse.Data {
			return true
		}
		count += bytes.Count(v, seqMarker)
		recovered = recovered || bytes.Contains(v, []byte(`"recovered":true`))
		return !bytes.Contains(v, lastOffset)
	})
	elapsed := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("recovery ended after %d publications: %w", count, err)
	}
	if !recovered || count < e.Params.ReplayEvents {
		return Result{}, fmt.Errorf("centrifugo recovered %d publications (recovered flag %v)", count, recovered)
	}
	return Result{Value: float64(count) / elapsed.Seconds(), Note: fmt.Sprintf("%d publications", count)}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
