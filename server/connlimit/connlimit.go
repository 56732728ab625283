// Package connlimit caps the connections a server holds, in all and per
// client IP. A connection over a cap is answered at once with a 503 and
// closed, rather than left waiting: netutil.LimitListener's way, blocking
// Accept, would leave every new client — health checks included — hanging
// in the kernel's backlog for as long as the held connections last, while
// a quick refusal tells a client to retry and an operator what happened.
package connlimit

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Limits are the caps; 0 is no cap.
type Limits struct {
	// Total caps the connections held at once.
	Total int
	// PerIP caps the connections held at once from one client IP.
	PerIP int
}

// refusal is what a refused connection reads: an HTTP/1.1 503 in the
// API's JSON error shape. The request itself is never read.
var refusal = func() []byte {
	body := `{"error":{"code":"too_many_connections","message":"the server holds as many connections as it may; retry in a moment"}}` + "\n"
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

// refuseFor bounds how long a refused connection is kept: the time to
// write the refusal and to read (and drop) what the client sent meanwhile,
// since closing a socket with unread data resets it and may destroy the
// answer before the client reads it.
const refuseFor = 500 * time.Millisecond

// Listen wraps ln so that it holds no more connections than l allows. With
// no caps it returns ln itself.
func Listen(ln net.Listener, l Limits) net.Listener {
	if l.Total <= 0 && l.PerIP <= 0 {
		return ln
	}
	return &listener{Listener: ln, limits: l, perIP: map[string]int{}}
}

type listener struct {
	net.Listener
	limits Limits

	mu    sync.Mutex
	total int
	perIP map[string]int
}

// Accept returns the next connection within the caps; those over a cap
// are refused and closed here.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientIP(c)
		if l.take(ip) {
			return &conn{Conn: c, release: func() { l.release(ip) }}, nil
		}
		go refuse(c)
	}
}

// refuse answers c with the refusal and closes it. It waits for the
// request's headers first (up to refuseFor): a client that reads an answer
// before it has sent its request takes it for a stray answer on an idle
// connection (Go's transport fails the request so), and whatever the
// client sent is read before the close anyway.
func refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseFor))
	readHeaders(c)
	// A client that sent nothing gets the answer all the same.
	_ = c.SetDeadline(time.Now().Add(refuseFor))
	if _, err := c.Write(refusal); err != nil {
		return
	}
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, c)
}

func (l *listener) take(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.Total > 0 && l.total >= l.limits.Total {
		return false
	}
	if l.limits.PerIP > 0 && l.perIP[ip] >= l.limits.PerIP {
		return false
	}
	l.total++
	l.perIP[ip]++
	return true
}

func (l *listener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
}

// clientIP is the remote IP of c ("" when it has none).
func clientIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	return host
}

// conn gives its place back once, at its first Close (by the server, or by
// a handler that took the connection over).
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// readHeaders reads from c until the end of a request's headers, 8 KB, or
// an error (the deadline).
func readHeaders(c net.Conn) {
	buf := make([]byte, 0, 8<<10)
	for len(buf) < cap(buf) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf, []byte("\r\n\r\n")) || err != nil {
			return
		}
	}
}
