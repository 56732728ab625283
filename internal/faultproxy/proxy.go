// Package faultproxy is a TCP proxy that can misbehave on command, as a
// network does: it freezes a link (bytes are held, nobody is told), resets
// it (every connection ends with a TCP RST), cuts it (reset, and new
// connections are refused until healed), takes its peer down (connections
// closed in order, new ones too, until healed), silences it (what either
// end sends is dropped, nothing is closed) or delays it. The fault harness
// puts one in front of each instance's PostgreSQL and bus connections, so
// a fault hits exactly one link of one instance; tests put one in front of
// a store or a bus server.
//
// Every method is safe for concurrent use.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// State is what a proxy does to its link at the moment.
type State struct {
	// Frozen: nothing is forwarded in either direction and nothing is
	// closed; bytes already read wait, and the rest wait in the kernel's
	// buffers, until Heal delivers them in order. New connections are
	// accepted and held (the upstream is dialled at Heal), as on a
	// network that stalls after the handshake.
	Frozen bool
	// Cut: every connection was reset and new ones are reset at once.
	Cut bool
	// Down: every connection was closed in order (FIN, as by a peer
	// whose process ended) and new ones are closed as soon as accepted.
	Down bool
	// Delay is added to every chunk before it is delivered, in order.
	Delay time.Duration
}

func (s State) String() string {
	switch {
	case s.Cut:
		return "cut"
	case s.Down:
		return "down"
	case s.Frozen:
		return "frozen"
	case s.Delay > 0:
		return fmt.Sprintf("delay %v", s.Delay)
	}
	return "healthy"
}

// Proxy forwards every connection it accepts to one target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	state State
	// changed is closed, and replaced, whenever state changes, so that
	// every pipe waiting on a frozen link wakes up to look again.
	changed chan struct{}
	conns   map[*link]struct{}
	closed  bool
	// resets counts the connections ended by Reset, Cut or a cut link's
	// refusal, for reports.
	resets int

	// toTarget and fromTarget count the bytes delivered each way, over
	// every connection.
	toTarget, fromTarget atomic.Int64

	wg sync.WaitGroup
}

// link is one proxied connection: the client's side and the upstream's.
type link struct {
	client *net.TCPConn
	done   chan struct{}
	// silent drops what either end sends (see Proxy.Silence).
	silent atomic.Bool

	mu       sync.Mutex
	ended    bool
	upstream *net.TCPConn // nil until dialled
}

// Listen starts a proxy on a free loopback port forwarding to target
// (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port, the address clients dial instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// State returns the current fault state.
func (p *Proxy) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Resets returns how many connections the proxy has reset so far.
func (p *Proxy) Resets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resets
}

// Conns returns how many connections the proxy holds now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Bytes returns how many bytes the proxy has delivered so far, over every
// connection: to the target (what clients sent) and from it (what they
// received). A byte counts by the time the other side can read it, and
// not before it is written: a frozen link's held bytes count once Heal
// delivers them.
func (p *Proxy) Bytes() (toTarget, fromTarget int64) {
	return p.toTarget.Load(), p.fromTarget.Load()
}

func (p *Proxy) setState(f func(*State)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.state)
	close(p.changed)
	p.changed = make(chan struct{})
}

// Freeze stops forwarding in both directions without closing anything,
// until Heal.
func (p *Proxy) Freeze() { p.setState(func(s *State) { s.Frozen = true }) }

// Delay delivers every chunk d after it was read, in order, until Heal
// (or Delay(0)).
func (p *Proxy) Delay(d time.Duration) { p.setState(func(s *State) { s.Delay = d }) }

// Reset ends every connection the proxy holds with a TCP RST; new
// connections work as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := p.snapshot()
	p.resets += len(conns)
	p.mu.Unlock()
	for _, l := range conns {
		l.reset()
	}
}

// Cut resets every connection and resets new ones as soon as they are
// accepted, until Heal: a peer that is gone.
func (p *Proxy) Cut() {
	p.setState(func(s *State) { s.Cut = true })
	p.Reset()
}

// Down closes every connection in order and closes new ones as soon as
// they are accepted, until Heal: a peer whose process is gone, which the
// kernel's close of its sockets tells both ends.
func (p *Proxy) Down() {
	p.setState(func(s *State) { s.Down = true })
	p.mu.Lock()
	conns := p.snapshot()
	p.mu.Unlock()
	for _, l := range conns {
		l.close()
	}
}

// Silence makes every connection the proxy holds drop what either end
// sends, without closing it, for as long as it lasts; later connections
// work. A partition tells neither end, unlike a peer that is gone: what it
// tests is that an end notices a dead connection by itself.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.silent.Store(true)
	}
}

// Heal ends every fault but Silence, which lasts as long as its
// connections: a frozen link delivers what it held, a cut or downed one
// accepts connections again, a delayed one forwards at once.
func (p *Proxy) Heal() { p.setState(func(s *State) { *s = State{} }) }

// Close stops the proxy and closes every connection it holds.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	conns := p.snapshot()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, l := range conns {
		l.close()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// snapshot returns the links held now; p.mu must be held.
func (p *Proxy) snapshot() []*link {
	out := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		out = append(out, l)
	}
	return out
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		tc := c.(*net.TCPConn)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = tc.Close()
			return
		}
		if p.state.Cut {
			p.resets++
			p.mu.Unlock()
			rst(tc)
			continue
		}
		if p.state.Down {
			p.mu.Unlock()
			_ = tc.Close()
			continue
		}
		l := &link{client: tc, done: make(chan struct{})}
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(l) })
	}
}

// serve dials the upstream once the link is not frozen, then pipes both
// ways until either side ends or the link is reset.
func (p *Proxy) serve(l *link) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	if !p.waitUnfrozen(l) {
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	upstream := up.(*net.TCPConn)
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		_ = upstream.Close()
		return
	}
	l.upstream = upstream
	l.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, upstream, l.client, &p.toTarget) })
	wg.Go(func() { p.pipe(l, l.client, upstream, &p.fromTarget) })
	wg.Wait()
}

// waitUnfrozen waits while the link is frozen; false if the link ended
// meanwhile.
func (p *Proxy) waitUnfrozen(l *link) bool {
	for {
		p.mu.Lock()
		frozen, changed := p.state.Frozen, p.changed
		p.mu.Unlock()
		if l.isDone() {
			return false
		}
		if !frozen {
			return true
		}
		select {
		case <-changed:
		case <-l.done:
			return false
		}
	}
}

// chunk is what one read returned, stamped with when it was read.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src to dst through a small queue: the reader stamps each
// chunk, the writer holds it while the link is frozen or until its delay
// is over. The queue is bounded, so a frozen link stops reading once it
// is full and the rest waits in the kernel's buffers, as on a stalled
// network. Delivered bytes are added to count.
func (p *Proxy) pipe(l *link, dst, src *net.TCPConn, count *atomic.Int64) {
	queue := make(chan chunk, 16)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{data: buf[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		// The other direction ends too: a half-closed proxied link is
		// not something either peer expects of a network. A clean end
		// (EOF) closes normally, so a peer's orderly shutdown is seen as
		// one.
		l.close()
		for range queue { // let the reader see done and exit
		}
	}()
	for c := range queue {
		if !p.waitUnfrozen(l) {
			return
		}
		for {
			p.mu.Lock()
			delay, changed := p.state.Delay, p.changed
			p.mu.Unlock()
			wait := time.Until(c.at.Add(delay))
			if wait <= 0 {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed: // healed or re-delayed: look again
				t.Stop()
			case <-l.done:
				t.Stop()
				return
			}
		}
		if !p.waitUnfrozen(l) {
			return
		}
		if l.silent.Load() {
			continue
		}
		// Counted before the write, so that a peer that has read the
		// bytes finds them counted; a short write takes back the rest.
		count.Add(int64(len(c.data)))
		if n, err := dst.Write(c.data); err != nil {
			count.Add(int64(n - len(c.data)))
			return
		}
	}
}

func (l *link) isDone() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// close ends the link with an ordinary close.
func (l *link) close() { l.end(func(c *net.TCPConn) { _ = c.Close() }) }

// reset ends the link with an RST to both peers.
func (l *link) reset() { l.end(rst) }

// end closes both sides with how, once.
func (l *link) end(how func(*net.TCPConn)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	how(l.client)
	if l.upstream != nil {
		how(l.upstream)
	}
}

// rst closes a connection with a TCP RST instead of a FIN: with a zero
// linger, close discards unsent data and resets.
func rst(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

var _ io.Closer = (*Proxy)(nil)
