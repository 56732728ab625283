package bustest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a server, and can make the ones it
// holds go silent: what a network partition does, unlike a server-side
// kill, is tell neither end. Transports' tests use it to check that a
// listener notices a dead connection by itself. It can also stall the
// link (Freeze: nothing moves, nothing is lost, until Thaw) and break it
// with a reset (Reset: every connection ends with a TCP RST, until
// Restore).
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	pairs  []*pair
	refuse bool
	// reset makes a refused connection end with RST rather than FIN.
	reset bool
	// thawed is closed while the link flows; Freeze replaces it with an
	// open channel, which Thaw closes.
	thawed chan struct{}
	closed bool
	wg     sync.WaitGroup
}

type pair struct {
	client, server net.Conn
	silent         atomic.Bool
}

// NewProxy listens on a loopback port and forwards every connection to
// target (host:port) until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{ln: ln, target: target, thawed: thawed}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Silence makes every connection the proxy holds drop what either end
// sends, without closing it; later connections work.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.pairs {
		pr.silent.Store(true)
	}
}

// CutOff closes every connection the proxy holds, and closes new ones as
// soon as they are accepted, until Restore: a server that is gone.
func (p *Proxy) CutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	for _, pr := range p.pairs {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}
}

// Restore ends CutOff and Reset: new connections are forwarded again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.refuse, p.reset = false, false
	p.mu.Unlock()
}

// Freeze stalls the link without closing anything: the proxy stops
// forwarding on every connection it holds, and on those it accepts until
// Thaw, keeping what either end sends. Neither end learns anything, as on
// a network that stops delivering; Thaw delivers what was kept, in order.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw ends Freeze: everything kept is delivered, and the link flows.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// flowing returns a channel that is closed while the link is not frozen.
func (p *Proxy) flowing() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thawed
}

// Reset ends every connection the proxy holds with a TCP reset to both
// ends, what a middlebox that drops a link's state does, and resets each
// new one as soon as it is accepted, until Restore.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse, p.reset = true, true
	for _, pr := range p.pairs {
		abort(pr.client)
		abort(pr.server)
	}
}

// abort closes c with a TCP reset: no lingering, so the kernel sends RST
// instead of FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse, reset := p.refuse, p.reset
		p.mu.Unlock()
		if refuse {
			if reset {
				abort(c)
			} else {
				_ = c.Close()
			}
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.pairs = append(p.pairs, pr)
		p.mu.Unlock()
		p.wg.Go(func() { pr.pipe(s, c, p.flowing) })
		p.wg.Go(func() { pr.pipe(c, s, p.flowing) })
	}
}

// pipe copies from src to dst until either fails, dropping what it reads
// while the pair is silent and holding it while the link is frozen (it
// reads no more meanwhile, so the sender's buffers fill as on a stalled
// network); then it closes both.
func (pr *pair) pipe(dst, src net.Conn, flowing func() <-chan struct{}) {
	defer func() {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pr.silent.Load() {
			<-flowing()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Thaw() // pipes held by a freeze would wait for ever
	p.mu.Lock()
	p.closed = true
	for _, pr := range p.pairs {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
