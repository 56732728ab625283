package ssestream

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Where the connection cannot be taken over, Hijack writes nothing and
// says so, so that Open can serve the request.
func TestHijackNotSupported(t *testing.T) {
	rec := httptest.NewRecorder()
	if _, err := Hijack(rec, httptest.NewRequest(http.MethodGet, "/", nil), Options{}); !errors.Is(err, http.ErrNotSupported) {
		t.Fatalf("a recorder: %v, want ErrNotSupported", err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	if _, err := Hijack(rec, r, Options{}); !errors.Is(err, http.ErrNotSupported) {
		t.Fatalf("HTTP/2: %v, want ErrNotSupported", err)
	}
	if rec.Body.Len() > 0 || len(rec.Header()) > 0 || rec.Flushed {
		t.Fatalf("something was written: %v %q", rec.Header(), rec.Body.String())
	}
	if _, err := Open(rec, Options{}); err != nil || rec.Body.String() != ": connected\n\n" {
		t.Fatalf("Open after a refused Hijack: %v %q", err, rec.Body.String())
	}
}

// A hijacked stream writes the response head (with the headers set on
// the ResponseWriter before) and its frames on the connection itself; the
// body runs to the end of the connection, and WatchClient reports the
// client's going away.
func TestHijackedStream(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "https://app.example.com")
		s, err := Hijack(w, r, Options{})
		if err != nil {
			t.Error(err)
			return
		}
		s.WatchClient(func() { close(gone) })
		go func() { // the handler returns; the stream goes on
			defer s.Close()
			for i := range 3 {
				if err := s.Event(int64(i+1), "", []byte(`{"n":1}`)); err != nil {
					t.Error(err)
					return
				}
				if err := s.Flush(); err != nil {
					t.Error(err)
					return
				}
			}
			_ = s.Ping()
			<-gone
		}()
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	var head strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	for _, want := range []string{"HTTP/1.1 200 OK\r\n", "Access-Control-Allow-Origin: https://app.example.com\r\n",
		"Cache-Control: no-cache, no-transform\r\n", "Connection: close\r\n", "Content-Type: text/event-stream; charset=UTF-8\r\n",
		"Date: ", "X-Accel-Buffering: no\r\n"} {
		if !strings.Contains(head.String(), want) {
			t.Errorf("head lacks %q:\n%s", want, head.String())
		}
	}
	if strings.Contains(head.String(), "Transfer-Encoding") || strings.Contains(head.String(), "Content-Length") {
		t.Errorf("head frames the body:\n%s", head.String())
	}
	want := ": connected\n\nid: 1\ndata: {\"n\":1}\n\nid: 2\ndata: {\"n\":1}\n\nid: 3\ndata: {\"n\":1}\n\n: ping\n\n"
	body := make([]byte, len(want))
	if _, err := io.ReadFull(rd, body); err != nil || string(body) != want {
		t.Fatalf("body %q, %v; want %q", body, err, want)
	}
	c.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the client's going away was not noticed")
	}
}
