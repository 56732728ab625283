package figures

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseProcNetTCP(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the sample is a little-endian machine's")
	}
	const sample = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 249 1 000000007ba88754 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D2F0 04 0000708B:00000000 01:00000014 00000000     0        0 0 3 00000000f0df689d 216 40 0 15 -1
   2: 0100007F:D2F0 0100007F:1F90 01 00000000:0000034C 00:00000000 00000000     0        0 5185 1 00000000fe98048d 20 4 1 11 -1
`
	sockets, err := parseProcNetTCP(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(sockets) != 3 {
		t.Fatalf("got %d sockets, want 3", len(sockets))
	}
	server := netip.MustParseAddrPort("127.0.0.1:8080")
	client := netip.MustParseAddrPort("127.0.0.1:54000")
	c, s := tcpEnds(sockets, client, server)
	if c == nil || s == nil {
		t.Fatalf("ends not found: client %v, server %v", c, s)
	}
	if c.State != tcpEstablished || c.RxQueue != 0x34C || c.TxQueue != 0 {
		t.Errorf("client end %+v", *c)
	}
	if s.State.String() != "FIN_WAIT1" || s.TxQueue != 0x708B {
		t.Errorf("server end %+v (%s)", *s, s.State)
	}
	if sockets[0].State.String() != "LISTEN" {
		t.Errorf("listener is %s", sockets[0].State)
	}
	if _, err := parseProcNetTCP(strings.NewReader("header\n 0: 0100007F 00000000:0000 0A 0:0\n")); err == nil {
		t.Error("an address without a port was accepted")
	}
}

// TestStalledSocketIsHeldByTheKernel makes the stall the figure makes: a
// client dialled with stallDialer that never reads, a server that writes
// until a write blocks. Everything written is then in the two ends'
// queues as /proc/net/tcp lists them, and closing the server's end with
// bytes still queued leaves it in FIN_WAIT1.
func TestStalledSocketIsHeldByTheKernel(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	client, err := stallDialer().Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("no connection accepted")
	}
	defer srv.Close()

	raw, err := client.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rcvbuf, mss int
	raw.Control(func(fd uintptr) {
		rcvbuf, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		mss, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG)
	})
	if rcvbuf > 8<<10 || mss > stallMSS {
		t.Errorf("client socket: SO_RCVBUF %d, MSS %d", rcvbuf, mss)
	}

	frame := []byte("data: " + strings.Repeat("x", 200) + "\n\n")
	var written int64
	for {
		srv.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := srv.Write(frame)
		written += int64(n)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatal(err)
			}
			break
		}
		if written > 64<<20 {
			t.Fatal("64 MB written and no write blocked")
		}
	}
	t.Logf("a write blocked after %d KB (client SO_RCVBUF %d, MSS %d)", written>>10, rcvbuf, mss)

	cAddr := netip.MustParseAddrPort(client.LocalAddr().String())
	sAddr := netip.MustParseAddrPort(client.RemoteAddr().String())
	sockets, err := readProcNetTCP()
	if err != nil {
		t.Fatal(err)
	}
	c, s := tcpEnds(sockets, cAddr, sAddr)
	if c == nil || s == nil {
		t.Fatalf("ends not found: client %v, server %v", c, s)
	}
	if held := c.RxQueue + s.TxQueue; held != written || s.State != tcpEstablished {
		t.Fatalf("kernel holds %d of %d written, server end %s", held, written, s.State)
	}

	srv.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		sockets, err := readProcNetTCP()
		if err != nil {
			t.Fatal(err)
		}
		if _, s := tcpEnds(sockets, cAddr, sAddr); s != nil && s.State.String() == "FIN_WAIT1" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the server's close its end is %v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGauge(t *testing.T) {
	text := []byte(`# HELP threadline_subscribers Live event-stream subscribers.
# TYPE threadline_subscribers gauge
threadline_subscribers_total 7
threadline_subscribers 1001
threadline_active_runs{kind="x"} 1
`)
	if v, ok := gauge(text, "threadline_subscribers"); !ok || v != 1001 {
		t.Fatalf("got %v %v", v, ok)
	}
	if _, ok := gauge(text, "threadline_active_runs"); ok {
		t.Fatal("a labelled sample was taken for an unlabelled one")
	}
}

func TestStallOutcome(t *testing.T) {
	for _, c := range []struct {
		run         stallRun
		shortBefore int
		want        string
	}{
		{stallRun{stalled: &stalledEnd{server: "ESTABLISHED", subsBefore: 1001, subsAfter: 1000}}, 0,
			"dropped by the hub, socket still open"},
		{stallRun{stalled: &stalledEnd{server: "FIN_WAIT1", subsBefore: -1, subsAfter: -1}}, 0,
			"closed by the server"},
		{stallRun{blocked: true, short: 1000, stalled: &stalledEnd{server: "ESTABLISHED", subsBefore: -1, subsAfter: -1}}, 0,
			"healthy ones blocked, socket still open"},
		{stallRun{short: 3, stalled: &stalledEnd{server: "gone", subsBefore: 1001, subsAfter: 1001}}, 1,
			"healthy ones short (3 with, 1 without), closed by the server"},
	} {
		if got := c.run.outcome(c.shortBefore); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
