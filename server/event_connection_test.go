package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// The native event stream takes its HTTP/1 connection over from net/http
// (nativeapi's hijacked streams). These tests follow such a stream over a
// bare socket, which shows the response as it is on the wire.

// rawEvents sends GET /instance-ai/events/{thread} on a socket of its own
// with the extra header lines and returns the connection and the parsed
// response head.
func rawEvents(t *testing.T, h *harness, thread, extra string) (net.Conn, *http.Response) {
	t.Helper()
	u, err := url.Parse(h.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET /instance-ai/events/" + thread + " HTTP/1.1\r\nHost: " + u.Host + "\r\nAccept: text/event-stream\r\n" + extra + "\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, res
}

// waitSubscribers waits up to d for the hub to count n subscribers.
func waitSubscribers(t *testing.T, h *harness, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for h.App.Subscribers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers after %v, want %d", h.App.Subscribers(), d, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A stream on its own connection gets the replay, then the live tail,
// then heartbeats; its response is a body to the end of the connection
// with the headers the middleware set (CORS); a client that goes away is
// noticed at once.
func TestEventStreamOnItsOwnConnection(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		const origin = "https://app.example.com"
		h := start(t, store, servertest.Options{Config: server.Config{Heartbeat: 50 * time.Millisecond, AllowedOrigins: []string{origin}}})
		first := h.Chat("th", "simple")
		waitRow(t, store, "th", first, rowType(instanceai.TypeRunFinish))

		c, res := rawEvents(t, h, "th", "Origin: "+origin+"\r\n")
		if res.StatusCode != http.StatusOK || !res.Close || len(res.TransferEncoding) > 0 || res.ContentLength != -1 {
			t.Fatalf("status %d, close %v, transfer encoding %v, length %d", res.StatusCode, res.Close, res.TransferEncoding, res.ContentLength)
		}
		if got := res.Header.Get("Access-Control-Allow-Origin"); got != origin {
			t.Fatalf("Access-Control-Allow-Origin = %q", got)
		}
		if got := res.Header.Get("Content-Type"); got != "text/event-stream; charset=UTF-8" {
			t.Fatalf("Content-Type = %q", got)
		}
		conn := servertest.ReadStream(t, res, nil, servertest.DefaultBacklog)
		replay := conn.Until(wait, servertest.IsRunFinish(first))
		if replay[0].Decoded.Type != instanceai.TypeRunStart || !replay[0].HasID {
			t.Fatalf("replay begins with %+v", replay[0])
		}
		second := h.Chat("th", "simple")
		live := conn.Until(wait, servertest.IsRunFinish(second))
		if live[0].Decoded.Type != instanceai.TypeRunStart || live[0].Decoded.RunID != second {
			t.Fatalf("live tail begins with %+v", live[0])
		}
		// Idle now: heartbeats.
		deadline := time.Now().Add(wait)
		for {
			f, ok := conn.FrameWithin(wait)
			if !ok || time.Now().After(deadline) {
				t.Fatal("no heartbeat on the idle stream")
			}
			if f.IsComment() && f.Comments[0] == "ping" {
				break
			}
		}
		waitSubscribers(t, h, 1, wait)
		c.Close()
		waitSubscribers(t, h, 0, time.Second)
	})
}

// Many idle streams whose clients all go away are all noticed and
// released within a second.
func TestEventStreamsOfGoneClientsEnd(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	h.EnsureThread("th")
	const n = 50
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i], _ = rawEvents(t, h, "th", "")
	}
	waitSubscribers(t, h, n, wait)
	for _, c := range conns {
		c.Close()
	}
	waitSubscribers(t, h, 0, time.Second)
}

// Shutdown ends a stream on its own connection after the run's last
// events (its cancellation) reached it, and waits for it; a stream asked
// for after the shutdown ends at once.
func TestShutdownEndsEventStreams(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
		runID := h.Chat("th", "long 100000")
		_, res := rawEvents(t, h, "th", "")
		conn := servertest.ReadStream(t, res, nil, 1<<20)
		for f, err := conn.Next(wait); f.Decoded.Type != instanceai.TypeTextDelta; f, err = conn.Next(wait) {
			if err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.App.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if n := h.App.Subscribers(); n != 0 {
			t.Fatalf("%d subscribers after the shutdown", n)
		}
		var last servertest.Frame
		for {
			f, err := conn.Next(wait)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			last = f
		}
		fin, ok := last.Decoded.Payload.(*instanceai.RunFinish)
		if last.Decoded.RunID != runID || !ok || fin.Status != instanceai.RunCancelled || fin.Reason != instanceai.ReasonServiceShutdown {
			t.Fatalf("the stream ended after %s %+v, want the run's cancellation", last.Decoded.Type, last.Decoded.Payload)
		}

		// A store that honours the request's context refuses the late
		// request (503); the memory store's lookup goes through, and the
		// stream ends as soon as it opened.
		_, res = rawEvents(t, h, "th", "")
		if res.StatusCode != http.StatusOK {
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("a stream asked for after the shutdown: status %d", res.StatusCode)
			}
			return
		}
		late := servertest.ReadStream(t, res, nil, servertest.DefaultBacklog)
		if _, err := late.Next(5 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("a stream opened after the shutdown: %v, want its end", err)
		}
	})
}

// Over HTTP/2, which cannot hand its connection over, the stream is
// served by its handler as before: replay, live tail, heartbeats.
func TestEventStreamOverHTTP2(t *testing.T) {
	app := server.New(servertest.OpenStore(t, "memory"), nil, server.Config{Heartbeat: 50 * time.Millisecond})
	srv := httptest.NewUnstartedServer(app.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		srv.Close()
	})
	h := servertest.Remote(t, srv.URL)
	h.Client = srv.Client()
	h.EnsureThread("th")

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/instance-ai/events/th", nil)
	res, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		t.Fatalf("status %d over %s", res.StatusCode, res.Proto)
	}
	conn := servertest.ReadStream(t, res, nil, servertest.DefaultBacklog)
	if f, ok := conn.FrameWithin(wait); !ok || !f.IsComment() || f.Comments[0] != "connected" {
		t.Fatalf("first frame %+v", f)
	}
	deadline := time.Now().Add(wait)
	for {
		f, ok := conn.FrameWithin(wait)
		if !ok || time.Now().After(deadline) {
			t.Fatal("no heartbeat over HTTP/2")
		}
		if f.IsComment() && f.Comments[0] == "ping" {
			break
		}
	}
	if n := app.Subscribers(); n != 1 {
		t.Fatalf("%d subscribers", n)
	}
	conn.Close()
	deadline = time.Now().Add(time.Second)
	for app.Subscribers() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the HTTP/2 stream outlived its client")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// curl reads the stream to the end of a run (a body that runs to the end
// of the connection, not chunked).
func TestCurlFollowsEventStream(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl on this machine")
	}
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	runID := h.Chat("th", "tools")
	waitRow(t, h.Store, "th", runID, rowType(instanceai.TypeRunFinish))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, curl, "--silent", "--show-error", "--no-buffer", "--include", h.URL+"/instance-ai/events/th")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	rd := bufio.NewReader(out)
	status, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("status line %q, %v", status, err)
	}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("curl's output ended before the run-finish: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"run-finish"`) && strings.Contains(line, runID) {
			return
		}
	}
}

// A shutdown that meets streams still opening ends every one of them,
// those it found registered and those asked for after it, and waits for
// them.
func TestShutdownWhileStreamsOpen(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{Heartbeat: time.Millisecond}})
	h.EnsureThread("th")
	u, err := url.Parse(h.URL)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	const openers = 8
	for range openers {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", u.Host)
				if err != nil {
					return // the listener is closed
				}
				_, _ = io.WriteString(c, "GET /instance-ai/events/th HTTP/1.1\r\nHost: x\r\n\r\n")
				_, _ = io.Copy(io.Discard, c) // until the server ends it
				c.Close()
			}
		}()
	}
	waitSubscribers(t, h, openers, wait)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.App.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for range openers {
		select {
		case <-done:
		case <-time.After(wait):
			t.Fatal("a stream was not ended by the shutdown")
		}
	}
	waitSubscribers(t, h, 0, time.Second)
}
