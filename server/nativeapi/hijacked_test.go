package nativeapi_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/nativeapi"
	"github.com/threadline/threadline/storage/memory"
)

// smallSendBuffers gives every accepted connection a small kernel send
// buffer, so that a client that stops reading stalls the server's writes
// after a few kilobytes rather than megabytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// A client that stops reading is dropped once a write to it has taken
// WriteTimeout, on a stream that owns its connection: its subscription is
// released and its connection closed.
func TestHijackedStreamDropsStalledClient(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	hub := instanceai.NewHub(0)
	core := instanceai.NewCore(memory.New(), nil, instanceai.CoreConfig{Hub: hub})
	api := nativeapi.New(core, nativeapi.Config{WriteTimeout: writeTimeout, Heartbeat: time.Hour})
	router := mux.NewRouter()
	api.Register(router)
	srv := httptest.NewUnstartedServer(router)
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := api.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		srv.Close()
	})
	if _, err := core.OpenThread(context.Background(), "th", auth.LocalUser); err != nil {
		t.Fatal(err)
	}

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(c, "GET /instance-ai/events/th HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ": connected") {
			break
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for core.Subscribers() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stream never went live")
		}
		time.Sleep(time.Millisecond)
	}

	// From now on the client reads nothing: a frame far larger than the
	// socket buffers cannot be written whole.
	fr, err := instanceai.NewFrame(0, &instanceai.Event{Type: instanceai.TypeTextDelta, RunID: "run", AgentID: "agent",
		ResponseID: "resp", Payload: &instanceai.Text{Text: strings.Repeat("x", 8<<20)}})
	if err != nil {
		t.Fatal(err)
	}
	published := time.Now()
	hub.Publish("th", []instanceai.Frame{fr})
	for core.Subscribers() != 0 {
		if time.Since(published) > writeTimeout+5*time.Second {
			t.Fatal("the stalled client was never dropped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(published); took < writeTimeout {
		t.Fatalf("dropped after %v, before the write timeout (%v)", took, writeTimeout)
	}
	// Its connection is closed: what it had not read yet, then the end.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, rd); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the dropped stream: %v", err)
	}
}
