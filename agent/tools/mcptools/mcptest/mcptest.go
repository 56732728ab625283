// Package mcptest starts the real MCP servers the tests of mcptools and of
// the agents use: @modelcontextprotocol/server-everything (stdio and
// streamable HTTP) and @modelcontextprotocol/server-filesystem, installed
// at pinned versions in agent/tools/mcptools/testdata (make node-deps),
// and testdata/silent-server.mjs, a server that never answers a call.
package mcptest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/tools/mcptools"
)

// testdata is agent/tools/mcptools/testdata, found from this file.
func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// NodeModules returns the absolute path of the servers' node_modules,
// skipping the test when node or the modules are missing, unless CI=true,
// where it fails instead.
func NodeModules(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testdata(), "node_modules")
	_, nerr := exec.LookPath("node")
	_, merr := os.Stat(filepath.Join(dir, "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	_, ferr := os.Stat(filepath.Join(dir, "@modelcontextprotocol", "server-filesystem", "dist", "index.js"))
	if nerr != nil || merr != nil || ferr != nil {
		if os.Getenv("CI") != "true" {
			t.Skip("needs node and the MCP servers of agent/tools/mcptools/testdata (make node-deps)")
		}
		t.Fatalf("node or the MCP test servers are missing (make node-deps): %v %v %v", nerr, merr, ferr)
	}
	return dir
}

// Everything is server-everything over stdio.
func Everything(t testing.TB) mcptools.Server {
	dir := NodeModules(t)
	return mcptools.Server{Command: "node", Args: []string{filepath.Join(dir, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}}
}

// Filesystem is server-filesystem allowed the folder root.
func Filesystem(t testing.TB, root string) mcptools.Server {
	dir := NodeModules(t)
	return mcptools.Server{Command: "node", Args: []string{filepath.Join(dir, "@modelcontextprotocol/server-filesystem/dist/index.js"), root}}
}

// Silent is a stdio server with one read-only tool, wait, whose calls
// it never answers (nor their cancellation).
func Silent(t testing.TB) mcptools.Server {
	NodeModules(t)
	return mcptools.Server{Command: "node", Args: []string{filepath.Join(testdata(), "silent-server.mjs")}}
}

// EverythingHTTP starts server-everything's streamable-HTTP transport on a
// free port for the test and returns the server's configuration.
func EverythingHTTP(t testing.TB) mcptools.Server {
	t.Helper()
	dir := NodeModules(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("node", filepath.Join(dir, "@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the port; the deadline bounds it
	}
	return mcptools.Server{URL: "http://" + addr + "/mcp"}
}

// Start runs a manager over servers, with short restart backoffs, and
// closes it when the test ends.
func Start(t testing.TB, servers map[string]mcptools.Server) *mcptools.Manager {
	t.Helper()
	m := mcptools.New(mcptools.File{Servers: servers}, mcptools.Options{Logger: slog.New(slog.DiscardHandler),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	t.Cleanup(func() { _ = m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// WaitStatus waits until the named server's status satisfies ok, failing
// the test after a generous deadline.
func WaitStatus(t testing.TB, m *mcptools.Manager, name string, ok func(mcptools.ServerStatus) bool) mcptools.ServerStatus {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		changed := m.Changed(name)
		if st := m.Status()[name]; ok(st) {
			return st
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("MCP server %s is still %+v", name, m.Status()[name])
		}
	}
}

// WaitState waits until the named server is in state.
func WaitState(t testing.TB, m *mcptools.Manager, name, state string) mcptools.ServerStatus {
	t.Helper()
	return WaitStatus(t, m, name, func(st mcptools.ServerStatus) bool { return st.State == state })
}
