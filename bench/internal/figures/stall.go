package figures

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/threadline/threadline/bench/internal/servers"
	"github.com/threadline/threadline/bench/internal/sse"
)

// The stalled subscriber's socket is set up before it connects: the
// smallest receive buffer the kernel allows (SO_RCVBUF of 1 is raised to
// its minimum, 2,304 bytes), never read, and a 536-byte MSS
// (IPv4's default, what a host must accept on any path). Together they
// bound how far the server's send buffer grows behind the stalled reader:
// every segment the client acknowledges before its window closes widens
// the server's congestion window, and the send buffer is sized from it.
// On loopback, with 64 KB segments and a 4 KB buffer, the kernel took
// about 2.7 MB of small writes before a write blocked; like this, 30 to
// 70 KB, so the server's own queueing is reached after a few hundred
// messages rather than tens of thousands.
const (
	stallRcvBuf = 1
	stallMSS    = 536
)

// stallPatience is how long the healthy subscribers may go without a
// single delivery before a measurement is given up as blocked: a server
// that writes to every subscriber from one loop (Joe) waits on the stalled
// connection, with no deadline.
const stallPatience = 5 * time.Second

// Stall is the fan-out workload's deliveries per second to the healthy
// subscribers with one more subscriber that stalls, against the same
// workload without it: two measurements back to back, each on a fresh
// server process, stalledFirst choosing which goes first. Value is
// with/without, Base without and Under with.
func (e *Env) Stall(kind servers.Kind, stalledFirst bool) (Result, error) {
	var without, with stallRun
	for _, stalled := range []bool{stalledFirst, !stalledFirst} {
		r, err := e.stallRun(kind, stalled)
		if err != nil {
			return Result{}, err
		}
		if stalled {
			with = r
		} else {
			without = r
		}
	}
	if without.rate == 0 {
		return Result{}, fmt.Errorf("no deliveries without the stalled subscriber")
	}
	var cpuRatio float64
	if without.cpu > 0 {
		cpuRatio = with.cpuPerDelivery() / without.cpuPerDelivery()
	}
	return Result{Value: with.rate / without.rate, Base: without.rate, Under: with.rate, CPURatio: cpuRatio, Outcome: with.outcome(without.short),
		Note: fmt.Sprintf("without %s; with %s", without.note(), with.note())}, nil
}

// cpuPerDelivery is the server's CPU time per healthy delivery, in ns.
func (r stallRun) cpuPerDelivery() float64 {
	return float64(r.cpu.Nanoseconds()) / float64(max(r.delivered, 1))
}

// outcome says what the server did with the stalled subscriber and
// whether the healthy ones got everything (shortBefore is the healthy
// subscribers short in the measurement without the stall).
func (r stallRun) outcome(shortBefore int) string {
	var parts []string
	switch {
	case r.blocked:
		parts = append(parts, "healthy ones blocked")
	case r.short > 0 || shortBefore > 0:
		parts = append(parts, fmt.Sprintf("healthy ones short (%d with, %d without)", r.short, shortBefore))
	}
	if st := r.stalled; st != nil {
		if st.subsBefore > 0 && st.subsAfter == st.subsBefore-1 {
			parts = append(parts, "dropped by the hub")
		}
		if st.server == tcpEstablished.String() {
			parts = append(parts, "socket still open")
		} else {
			parts = append(parts, "closed by the server")
		}
	}
	return strings.Join(parts, ", ")
}

// StallMessages is what one stall measurement sends to kind: a Threadline
// run's deltas or the peers' publishes.
func (p Params) StallMessages(kind servers.Kind) int {
	if kind == servers.Threadline {
		return p.StallDeltas
	}
	return p.StallPublishes
}

// stallRun is one measurement of the stall figure.
type stallRun struct {
	messages  int
	rate      float64 // deliveries/s over the healthy subscribers
	delivered int     // deliveries to the healthy subscribers
	short     int     // healthy subscribers that got fewer than messages
	blocked   bool    // given up after stallPatience without a delivery
	// cpu is the server's CPU time over the timed span.
	cpu time.Duration
	// got and read are the messages and bytes (the response head
	// included) of the healthy subscriber that got the most: what the
	// server sent each, the stalled one too.
	got     int
	read    int64
	stalled *stalledEnd
}

// stalledEnd is the stalled subscriber's connection at the end of a run,
// as the kernel lists its two ends.
type stalledEnd struct {
	// held is the bytes the kernel holds for it: unread at the client plus
	// unacknowledged at the server.
	held int64
	// server is the server end's state: ESTABLISHED while the server
	// keeps it, FIN_WAIT1 once it closed it with bytes still queued, "gone"
	// once that end was reset or freed.
	server string
	// subsBefore and subsAfter are Threadline's threadline_subscribers
	// gauge before the run and at its end: one fewer is the hub dropping
	// the stalled subscriber (-1 for the peers).
	subsBefore, subsAfter int
}

func (r stallRun) note() string {
	s := fmt.Sprintf("%s/s, %d short, server CPU %.2f s (%.0f ns/delivery)", format(r.rate), r.short, r.cpu.Seconds(), r.cpuPerDelivery())
	if r.blocked {
		s += fmt.Sprintf(", blocked (no delivery for %s)", stallPatience)
	}
	if r.stalled == nil {
		return s
	}
	st := r.stalled
	perMsg := float64(r.read) / float64(max(r.got, 1))
	s += fmt.Sprintf("; stalled conn: kernel holds %d KB ≈ %.0f messages of %d sent (%d KB), server end %s",
		st.held>>10, float64(st.held)/perMsg, r.got, r.read>>10, st.server)
	if st.subsBefore >= 0 {
		s += fmt.Sprintf(", hub subscribers %d → %d", st.subsBefore, st.subsAfter)
	}
	return s
}

// format writes a rate in thousands or millions.
func format(v float64) string {
	if v >= 1e6 {
		return fmt.Sprintf("%.2fM", v/1e6)
	}
	return fmt.Sprintf("%.0fk", v/1e3)
}

// stallRun measures the fan-out workload once, with or without the
// stalled subscriber. The stalled one connects first, reads its response
// head (and whatever came with it) and nothing more, so that it is
// subscribed before the healthy ones are warmed up.
func (e *Env) stallRun(kind servers.Kind, withStalled bool) (stallRun, error) {
	p := e.Params
	r := stallRun{messages: p.StallMessages(kind)}
	s, err := e.start(kind)
	if err != nil {
		return r, err
	}
	stop := sync.OnceFunc(s.Stop)
	defer stop()
	const channel = "stall"
	if err := createThread(s, channel); err != nil {
		return r, err
	}
	var stalled *sse.Stream
	if withStalled {
		if stalled, err = sse.Dial(stallDialer(), s.StreamURL(channel, ""), nil); err != nil {
			return r, err
		}
		defer stalled.Close()
	}
	streams, err := openAll(s.StreamURL(channel, ""), p.FanoutSubscribers)
	if err != nil {
		return r, err
	}
	defer closeAll(streams)
	if err := warmUp(s, channel, streams); err != nil {
		return r, err
	}
	subsBefore := subscriberGauge(s)

	stats := make([]subscriberStats, len(streams))
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); follow(s.Kind, st, r.messages, "", &stats[i]) }()
	}
	followed := make(chan struct{})
	go func() { wg.Wait(); close(followed) }()
	// The load client's own garbage (the streams of the measurement
	// before) is collected now rather than while this one is timed.
	runtime.GC()
	cpu0, err := s.CPU()
	if err != nil {
		return r, err
	}
	published := make(chan error, 1)
	start := time.Now()
	go func() {
		if kind == servers.Threadline {
			published <- chat(s, channel, "long "+strconv.Itoa(r.messages))
		} else {
			published <- e.publishAll(s, channel, r.messages, 0)
		}
	}()
	end, blocked := watch(stats, followed)
	if blocked {
		for _, st := range streams {
			st.Conn.SetReadDeadline(time.Now())
		}
		<-followed
	}
	r.blocked = blocked
	cpu1, err := s.CPU()
	if err != nil {
		return r, err
	}
	r.cpu = cpu1 - cpu0

	if stalled != nil {
		r.stalled, err = stalledState(s, stalled)
		if err != nil {
			return r, err
		}
		r.stalled.subsBefore = subsBefore
		r.stalled.subsAfter = subscriberGauge(s)
	}
	if blocked {
		// Publishers wait on the blocked server; stopping it ends them.
		stop()
		<-published
	} else if err := <-published; err != nil {
		return r, err
	}

	var total int
	var last time.Time
	for i := range stats {
		st := &stats[i]
		total += st.count
		if st.count < r.messages {
			r.short++
		}
		if st.last.After(last) {
			last = st.last
		}
		if st.count > r.got {
			r.got, r.read = st.count, streams[i].BytesRead()
		}
	}
	if !blocked {
		end = last
	}
	r.rate = float64(total) / end.Sub(start).Seconds()
	r.delivered = total
	return r, nil
}

// watch waits until the healthy subscribers are done (followed closes)
// or none has had a delivery for stallPatience; it returns when it gave up.
func watch(stats []subscriberStats, followed <-chan struct{}) (end time.Time, blocked bool) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var seen int64
	moved := time.Now()
	for {
		select {
		case <-followed:
			return time.Now(), false
		case now := <-tick.C:
			var n int64
			for i := range stats {
				n += stats[i].seen.Load()
			}
			if n != seen {
				seen, moved = n, now
			} else if now.Sub(moved) >= stallPatience {
				return now, true
			}
		}
	}
}

// stallDialer sets up the stalled subscriber's socket before it connects.
func stallDialer() *net.Dialer {
	return &net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			if err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stallRcvBuf); err == nil {
				err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, stallMSS)
			}
		}); cerr != nil {
			return cerr
		}
		return err
	}}
}

// stalledState reads both ends of the stalled connection from the kernel.
func stalledState(s *servers.Server, st *sse.Stream) (*stalledEnd, error) {
	client, err := netip.ParseAddrPort(st.Conn.LocalAddr().String())
	if err != nil {
		return nil, err
	}
	server, err := netip.ParseAddrPort(st.Conn.RemoteAddr().String())
	if err != nil {
		return nil, err
	}
	sockets, err := readProcNetTCP()
	if err != nil {
		return nil, err
	}
	c, srv := tcpEnds(sockets, client, server)
	end := &stalledEnd{server: "gone", subsBefore: -1, subsAfter: -1}
	if c != nil {
		end.held += c.RxQueue
	}
	if srv != nil {
		end.held += srv.TxQueue
		end.server = srv.State.String()
	}
	return end, nil
}

// subscriberGauge is Threadline's threadline_subscribers gauge, -1 for
// the peers or when it cannot be read.
func subscriberGauge(s *servers.Server) int {
	if s.Kind != servers.Threadline {
		return -1
	}
	b, err := s.GetBody("/metrics")
	if err != nil {
		return -1
	}
	v, ok := gauge(b, "threadline_subscribers")
	if !ok {
		return -1
	}
	return int(v)
}

// gauge finds an unlabelled sample in Prometheus's text format.
func gauge(text []byte, name string) (float64, bool) {
	for line := range bytes.Lines(text) {
		rest, ok := bytes.CutPrefix(line, []byte(name+" "))
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64)
		return v, err == nil
	}
	return 0, false
}
