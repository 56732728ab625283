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
// listener notices a dead connection by itself.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	pairs  []*pair
	refuse bool
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
	p := &Proxy{ln: ln, target: target}
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

// Restore ends CutOff: new connections are forwarded again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
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
		p.wg.Go(func() { pr.pipe(s, c) })
		p.wg.Go(func() { pr.pipe(c, s) })
	}
}

// pipe copies from src to dst until either fails, dropping what it reads
// while the pair is silent; then it closes both.
func (pr *pair) pipe(dst, src net.Conn) {
	defer func() {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pr.silent.Load() {
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
	p.mu.Lock()
	p.closed = true
	for _, pr := range p.pairs {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
