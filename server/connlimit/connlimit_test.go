package connlimit

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPerIP: a second connection from the same IP is refused with the
// 503 while the first is held, and admitted once the first is closed.
func TestPerIP(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Listen(raw, Limits{PerIP: 1})
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	first := <-accepted
	second := dial()
	_ = second.SetReadDeadline(time.Now().Add(2 * time.Second))
	answer, _ := io.ReadAll(second)
	if !strings.HasPrefix(string(answer), "HTTP/1.1 503") || !strings.Contains(string(answer), "too_many_connections") {
		t.Fatalf("second connection from the IP: %q", answer)
	}
	select {
	case c := <-accepted:
		t.Fatalf("the second connection was accepted: %v", c.RemoteAddr())
	default:
	}
	first.Close()
	dial()
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("the place of a closed connection was not given back")
	}
}
