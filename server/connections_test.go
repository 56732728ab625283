package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/connlimit"
	"github.com/threadline/threadline/server/servertest"
)

// heldFor is how long the server keeps a raw connection: until it closes
// it (EOF or a reset), after having answered or not, or until limit.
func heldFor(t *testing.T, c net.Conn, limit time.Duration) (held time.Duration, answer string) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	raw, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still holds the connection after %v (read %q)", limit, raw)
	}
	return time.Since(start), string(raw)
}

func dial(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gatedAgent holds the runs whose message is "hold" until release closes,
// and plays the reference agent's scenarios otherwise.
func gatedAgent(release <-chan struct{}) instanceai.Agent {
	ref := &script.Agent{}
	return instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		if run.Message != "hold" {
			return ref.Run(ctx, run)
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// TestSlowClientsTimeOut: a client that sends its body slowly or not at
// all, or keeps a connection idle, loses it after the timeout, while a
// native event stream and an AG-UI run's stream live on well past every
// timeout.
func TestSlowClientsTimeOut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	release := make(chan struct{})
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{
		Agent:  gatedAgent(release),
		Config: server.Config{Heartbeat: 50 * time.Millisecond},
		Serve:  &server.ServeOptions{Timeouts: server.Timeouts{ReadHeader: timeout, Body: timeout, Idle: timeout}},
	})
	h.EnsureThread("live")
	native := h.Connect("live", "", false)
	defer native.Close()
	agui := make(chan []aguiEvent, 1)
	go func() { agui <- h.runAgent("ag", "r1", "hold", nil) }()

	head := "POST /instance-ai/chat/t1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
	missing := dial(t, h.URL)
	if _, err := io.WriteString(missing, head+`{"message":`); err != nil {
		t.Fatal(err)
	}
	if held, answer := heldFor(t, missing, 10*timeout); !strings.HasPrefix(answer, "HTTP/1.1 408") {
		t.Fatalf("a body that never arrives: after %v %q, want a 408", held, answer)
	}

	slow := dial(t, h.URL)
	if _, err := io.WriteString(slow, head); err != nil {
		t.Fatal(err)
	}
	go func() { // a byte every 50 ms: 100 bytes would take 5 s
		for i := 0; i < 100; i++ {
			if _, err := slow.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if held, answer := heldFor(t, slow, 10*timeout); held > 5*timeout || !strings.HasPrefix(answer, "HTTP/1.1 408") {
		t.Fatalf("a trickled body: held %v, answered %q", held, answer)
	}

	idle := dial(t, h.URL)
	if _, err := io.WriteString(idle, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /health on the raw connection: %v %v", res, err)
	}
	if held, _ := heldFor(t, idle, 10*timeout); held > 5*timeout {
		t.Fatalf("an idle keep-alive connection held %v", held)
	}

	// The streams opened before all this are still followed.
	time.Sleep(2 * timeout)
	run := h.Chat("live", "simple after the timeouts")
	if frames := native.Until(5*time.Second, servertest.IsRunFinish(run)); len(frames) == 0 || !servertest.IsRunFinish(run)(frames[len(frames)-1]) {
		t.Fatalf("the native stream ended before its run did: %v", frames)
	}
	close(release)
	select {
	case events := <-agui:
		if last := events[len(events)-1]; last.typ != "RUN_FINISHED" {
			t.Fatalf("the AG-UI stream ended with %s", last.raw)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the AG-UI stream did not end after its run")
	}
}

// TestConnectionCap: over -max-connections a new connection is answered
// 503 too_many_connections at once, while the held ones — event streams
// among them — keep working; a closed one frees its place.
func TestConnectionCap(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{
		Serve: &server.ServeOptions{Connections: connlimit.Limits{Total: 2}},
	})
	h.EnsureThread("live")
	// The stream reuses the keep-alive connection of the request before:
	// it and the raw one below are the two.
	native := h.Connect("live", "", false)
	defer native.Close()
	third := dial(t, h.URL)
	if _, err := io.WriteString(third, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	thirdReader := bufio.NewReader(third)
	if res, err := http.ReadResponse(thirdReader, nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the second connection: %v %v", res, err)
	} else {
		_, _ = io.Copy(io.Discard, res.Body)
	}

	over := dial(t, h.URL)
	_, _ = io.WriteString(over, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	held, answer := heldFor(t, over, 5*time.Second)
	if held > time.Second || !strings.HasPrefix(answer, "HTTP/1.1 503") || !strings.Contains(answer, `"too_many_connections"`) {
		t.Fatalf("the third connection: after %v %q", held, answer)
	}

	// The held keep-alive connection still serves, and the stream still
	// follows its thread.
	chat := `{"message":"simple over the cap"}`
	if _, err := io.WriteString(third, "POST /instance-ai/chat/live HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(chat))+"\r\n\r\n"+chat); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(thirdReader, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("chat on the held connection: %v %v", res, err)
	}
	var started struct {
		RunID string `json:"runId"`
	}
	decodeJSON(t, res, &started)
	run := started.RunID
	if frames := native.Until(5*time.Second, servertest.IsRunFinish(run)); len(frames) == 0 || !servertest.IsRunFinish(run)(frames[len(frames)-1]) {
		t.Fatalf("the stream did not follow the run: %v", frames)
	}
	third.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		again := dial(t, h.URL)
		_, _ = io.WriteString(again, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		if _, answer := heldFor(t, again, 5*time.Second); strings.HasPrefix(answer, "HTTP/1.1 200") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a closed connection's place was not freed: %q", answer)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
