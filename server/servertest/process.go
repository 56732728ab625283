package servertest

import (
	"bytes"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/internal/testbin"
)

// Binary returns the real command (cmd/threadline), built once for the
// test run (see testbin).
func Binary(t testing.TB) string {
	t.Helper()
	return testbin.Threadline(t)
}

// FreeAddr returns a loopback address with a port nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Process is a real `threadline serve` process on a loopback port. It can
// be stopped and started again on the same port with the same arguments
// (a restart on the same store).
type Process struct {
	// URL is the process's base URL, API a Remote server on it.
	URL string
	API *Server
	// Args are the serve arguments after -addr.
	Args []string
	Cmd  *exec.Cmd

	t    testing.TB
	addr string
	logs *LogBuffer
}

// Launch starts `threadline serve -addr <free port> args…` and waits until
// it serves; the test's cleanup kills it if it still runs.
func Launch(t testing.TB, args ...string) *Process {
	t.Helper()
	addr := FreeAddr(t)
	p := &Process{URL: "http://" + addr, API: Remote(t, "http://"+addr), Args: args, t: t, addr: addr, logs: &LogBuffer{}}
	p.Start()
	t.Cleanup(func() {
		if p.Cmd.ProcessState == nil {
			_ = p.Cmd.Process.Kill()
			_ = p.Cmd.Wait()
		}
	})
	return p
}

// Start runs the process with its arguments and waits until it serves.
func (p *Process) Start() {
	p.t.Helper()
	p.Cmd = exec.Command(Binary(p.t), append([]string{"serve", "-addr", p.addr}, p.Args...)...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.logs, p.logs
	if err := p.Cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(p.URL + "/instance-ai/events/none")
		if err == nil {
			res.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server did not start: %v\n%s", err, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits for a clean exit.
func (p *Process) Stop() {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	if err := p.Cmd.Wait(); err != nil {
		p.t.Fatalf("graceful stop: %v\n%s", err, p.Logs())
	}
}

// Kill ends the process with SIGKILL, as a crash would.
func (p *Process) Kill() {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	_ = p.Cmd.Wait()
}

// Logs returns what the process has written to stdout and stderr, over
// all its starts.
func (p *Process) Logs() string { return p.logs.String() }

// LogBuffer is a log sink that goroutines (a server's, a process's output
// copier) write while the test reads it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
