package figures

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// tcpSocket is one IPv4 TCP socket as the kernel lists it in
// /proc/net/tcp: its state and the bytes it holds. On a connection
// between two local processes both ends are listed, so the load client
// can see, without reading a stalled stream, how much of it the kernel
// buffers and whether the server has closed its end.
type tcpSocket struct {
	Local, Remote netip.AddrPort
	State         tcpState
	// TxQueue is bytes written and not yet acknowledged by the peer;
	// RxQueue is bytes received and not yet read by the owner.
	TxQueue, RxQueue int64
}

// tcpState is a socket's state as the kernel numbers it (include/net/tcp_states.h).
type tcpState int

var tcpStateNames = map[tcpState]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
}

func (s tcpState) String() string {
	if n, ok := tcpStateNames[s]; ok {
		return n
	}
	return "state " + strconv.Itoa(int(s))
}

const tcpEstablished tcpState = 1

// parseProcNetTCP reads the socket lines of /proc/net/tcp.
func parseProcNetTCP(r io.Reader) ([]tcpSocket, error) {
	var out []tcpSocket
	sc := bufio.NewScanner(r)
	sc.Scan() // the header line
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		var s tcpSocket
		var err error
		if s.Local, err = parseHexAddr(f[1]); err != nil {
			return nil, err
		}
		if s.Remote, err = parseHexAddr(f[2]); err != nil {
			return nil, err
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("state %q: %w", f[3], err)
		}
		s.State = tcpState(st)
		tx, rx, ok := strings.Cut(f[4], ":")
		if !ok {
			return nil, fmt.Errorf("queues %q", f[4])
		}
		if s.TxQueue, err = strconv.ParseInt(tx, 16, 64); err != nil {
			return nil, err
		}
		if s.RxQueue, err = strconv.ParseInt(rx, 16, 64); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseHexAddr reads "0100007F:1F90": the IPv4 address as the kernel's
// in-memory (network order) word printed in this machine's byte order,
// and the port in hex.
func parseHexAddr(s string) (netip.AddrPort, error) {
	ip, port, ok := strings.Cut(s, ":")
	if !ok || len(ip) != 8 {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	v, err := strconv.ParseUint(ip, 16, 32)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(v))
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(p)), nil
}

// tcpEnds finds both ends of the loopback connection from client to
// server: the client's socket and the server's. A missing end is nil (a
// socket that was reset, or closed and gone).
func tcpEnds(sockets []tcpSocket, client, server netip.AddrPort) (clientEnd, serverEnd *tcpSocket) {
	for i := range sockets {
		s := &sockets[i]
		switch {
		case s.Local == client && s.Remote == server:
			clientEnd = s
		case s.Local == server && s.Remote == client:
			serverEnd = s
		}
	}
	return clientEnd, serverEnd
}

func readProcNetTCP() ([]tcpSocket, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcNetTCP(f)
}
