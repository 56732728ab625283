// Package servers starts the three servers under test as child processes,
// each on a fresh loopback port, and knows each one's URLs: Threadline
// (the binary given), a go-sse Joe server (cmd/joeserver) and Centrifugo
// (through centrifugo.sh). Every measurement starts its own process, so
// one figure's leftovers (goroutines, heap, connections) never weigh on
// the next.
package servers

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kind names a server under test.
type Kind string

// The servers under test.
const (
	Threadline Kind = "threadline"
	Joe        Kind = "joe"
	Centrifugo Kind = "centrifugo"
)

// CentrifugoAPIKey is the HTTP API key centrifugo.sh configures.
const CentrifugoAPIKey = "bench-api-key"

// Binaries are what Start runs.
type Binaries struct {
	Threadline     string
	Joe            string
	CentrifugoExec string // centrifugo.sh
}

// Options tune one start.
type Options struct {
	// ThreadlineArgs are added to `threadline serve` (store, agent, …).
	ThreadlineArgs []string
	// Env is added to the child's environment.
	Env []string
}

// Server is one running server process.
type Server struct {
	Kind Kind
	Base string // http://127.0.0.1:PORT
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// Start runs a server of kind and waits until it answers HTTP.
func Start(kind Kind, bin Binaries, opt Options) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var cmd *exec.Cmd
	probe := "/"
	switch kind {
	case Threadline:
		args := append([]string{"serve", "--addr", addr, "--log-level", "error"}, opt.ThreadlineArgs...)
		cmd = exec.Command(bin.Threadline, args...)
		probe = "/instance-ai/threads"
	case Joe:
		cmd = exec.Command(bin.Joe, "--addr", addr)
	case Centrifugo:
		cmd = exec.Command(bin.CentrifugoExec, "serve", strconv.Itoa(port))
		probe = "/health"
	default:
		return nil, fmt.Errorf("unknown server %q", kind)
	}
	logBuf := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logBuf, logBuf
	cmd.Env = append(os.Environ(), opt.Env...)
	// A load client that is interrupted takes its servers with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Kind: kind, Base: "http://" + addr, cmd: cmd, log: logBuf}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Base + probe)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			s.Stop()
			return nil, fmt.Errorf("%s did not start: %v\n%s", kind, err, logBuf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the server process's id (centrifugo.sh execs, so it is Centrifugo's).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop ends the process and waits for it.
func (s *Server) Stop() {
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// Log is what the process wrote so far.
func (s *Server) Log() string { return s.log.String() }

// RSS is the server process's resident set (VmRSS) in bytes.
func (s *Server) RSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", s.Pid())
}

// CPU is the CPU time (user and system) the server process has used so
// far, from /proc/PID/stat, in clock ticks of 10 ms.
func (s *Server) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.Pid()))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/PID/stat line; the command name in parentheses may hold spaces.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q", stat)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat %q: %w", stat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// StreamURL is the SSE endpoint one subscriber of channel opens: a
// Threadline thread's event stream, Joe's single topic, or a Centrifugo
// uni_sse connection subscribed to channel through its connect command.
// recover asks Centrifugo to recover the channel from offset 0 of epoch.
func (s *Server) StreamURL(channel string, recoverEpoch string) string {
	switch s.Kind {
	case Threadline:
		return s.Base + "/instance-ai/events/" + channel
	case Joe:
		return s.Base + "/events"
	default:
		sub := "{}"
		if recoverEpoch != "" {
			sub = fmt.Sprintf(`{"recover":true,"offset":0,"epoch":%q}`, recoverEpoch)
		}
		connect := fmt.Sprintf(`{"subs":{%q:%s}}`, channel, sub)
		return s.Base + "/connection/uni_sse?cf_connect=" + urlQueryEscape(connect)
	}
}

// FreePort asks the kernel for an unused loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
