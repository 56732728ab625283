package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c  net.Conn
	rd *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, rd: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, line string) {
	t.Helper()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

// recv reads one line within d.
func (c *client) recv(d time.Duration) (string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestForwards(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.send(t, "hello")
	if got, err := c.recv(2 * time.Second); err != nil || got != "hello" {
		t.Fatalf("echo through the proxy: %q, %v", got, err)
	}
	if p.State().String() != "healthy" {
		t.Fatalf("state %v", p.State())
	}
}

// A frozen link holds what was sent, closes nothing, and delivers it on
// Heal; a connection opened while frozen is held as well.
func TestFreezeHoldsAndHealDelivers(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.send(t, "before")
	if got, err := c.recv(2 * time.Second); err != nil || got != "before" {
		t.Fatalf("before the freeze: %q, %v", got, err)
	}
	p.Freeze()
	c.send(t, "held")
	if got, err := c.recv(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("a frozen link answered %q, %v", got, err)
	}
	late := dial(t, p)
	late.send(t, "late")
	if got, err := late.recv(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("a connection opened while frozen answered %q, %v", got, err)
	}
	p.Heal()
	if got, err := c.recv(2 * time.Second); err != nil || got != "held" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
	if got, err := late.recv(2 * time.Second); err != nil || got != "late" {
		t.Fatalf("the late connection after the heal: %q, %v", got, err)
	}
}

// Reset ends the connections with an RST; later ones work.
func TestResetSendsRST(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.send(t, "x")
	if _, err := c.recv(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	_, err := c.recv(2 * time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: %v, want a connection reset", err)
	}
	if p.Resets() != 1 {
		t.Fatalf("%d resets counted, want 1", p.Resets())
	}
	again := dial(t, p)
	again.send(t, "y")
	if got, err := again.recv(2 * time.Second); err != nil || got != "y" {
		t.Fatalf("a new connection after Reset: %q, %v", got, err)
	}
}

// Cut resets what is open and every new connection until Heal.
func TestCutRefusesUntilHeal(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	p.Cut()
	if _, err := c.recv(2 * time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Cut: %v, want a connection reset", err)
	}
	// The reset may reach the dialler before its connect returns, or at
	// its first read; either way nothing gets through.
	if refused, err := net.Dial("tcp", p.Addr()); err == nil {
		defer refused.Close()
		_, _ = refused.Write([]byte("z\n"))
		_ = refused.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := refused.Read(make([]byte, 8)); err == nil || isTimeout(err) {
			t.Fatalf("a connection to a cut link read %d bytes, %v", n, err)
		}
	}
	p.Heal()
	ok := dial(t, p)
	ok.send(t, "w")
	if got, err := ok.recv(2 * time.Second); err != nil || got != "w" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}

// Down closes what is open in order (an EOF, not a reset) and every new
// connection until Heal.
func TestDownClosesUntilHeal(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.send(t, "x")
	if _, err := c.recv(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Down()
	if _, err := c.recv(2 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read after Down: %v, want EOF", err)
	}
	if p.State().String() != "down" {
		t.Fatalf("state %v", p.State())
	}
	closed := dial(t, p)
	closed.send(t, "z")
	if got, err := closed.recv(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a connection to a downed link answered %q, %v", got, err)
	}
	if p.Resets() != 0 {
		t.Fatalf("%d resets counted, want none", p.Resets())
	}
	p.Heal()
	ok := dial(t, p)
	ok.send(t, "w")
	if got, err := ok.recv(2 * time.Second); err != nil || got != "w" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}

// Silence drops what the connections held then carry, closing nothing;
// a later connection works.
func TestSilenceDropsWithoutClosing(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.send(t, "x")
	if _, err := c.recv(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Silence()
	c.send(t, "lost")
	if got, err := c.recv(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("a silenced connection answered %q, %v", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("%d connections held after Silence, want the silenced one", n)
	}
	later := dial(t, p)
	later.send(t, "heard")
	if got, err := later.recv(2 * time.Second); err != nil || got != "heard" {
		t.Fatalf("a connection after Silence: %q, %v", got, err)
	}
}

// Delay holds each chunk for the delay in each direction.
func TestDelay(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	const d = 150 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	c.send(t, "slow")
	if got, err := c.recv(3 * time.Second); err != nil || got != "slow" {
		t.Fatalf("delayed echo: %q, %v", got, err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("a round trip through a %v delay took %v", d, took)
	}
	p.Heal()
	start = time.Now()
	c.send(t, "fast")
	if _, err := c.recv(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= d {
		t.Fatalf("after the heal a round trip took %v", took)
	}
}

// Close ends every connection and returns.
func TestClose(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	p.Freeze()
	c.send(t, "x")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.recv(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a connection outlived Close: %v", err)
	}
}

// The proxy counts the bytes it delivers each way, over all its
// connections, by the time the other side has them.
func TestCountsBytes(t *testing.T) {
	p := newProxy(t)
	var want int64
	for _, tc := range []struct {
		name  string
		conns int
		line  string
	}{
		{"one short line", 1, "hello"},
		{"a line larger than a chunk", 1, strings.Repeat("x", 100<<10)},
		{"three connections", 3, strings.Repeat("y", 5000)},
	} {
		for range tc.conns {
			c := dial(t, p)
			c.send(t, tc.line)
			if got, err := c.recv(5 * time.Second); err != nil || got != tc.line {
				t.Fatalf("%s: echo of %d bytes: %d bytes, %v", tc.name, len(tc.line), len(got), err)
			}
			want += int64(len(tc.line) + 1)
		}
		to, from := p.Bytes()
		if to != want || from != want {
			t.Fatalf("%s: counted %d bytes to the target and %d from it, want %d each way", tc.name, to, from, want)
		}
	}
}
