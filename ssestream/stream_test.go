package ssestream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStreamFraming(t *testing.T) {
	rec := httptest.NewRecorder()
	s, err := Open(rec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Body.String(); got != ": connected\n\n" {
		t.Fatalf("first comment not flushed at once: %q", got)
	}
	for _, step := range []error{
		s.Event(7, "", []byte(`{"type":"tool-call"}`)),
		s.Event(0, "", []byte(`{"type":"text-delta"}`)),
		s.Event(0, "run-sync", []byte(`{"a":1}`)),
		s.Ping(),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	want := ": connected\n\n" +
		"id: 7\ndata: {\"type\":\"tool-call\"}\n\n" +
		"data: {\"type\":\"text-delta\"}\n\n" +
		"event: run-sync\ndata: {\"a\":1}\n\n" +
		": ping\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("frames:\n got %q\nwant %q", got, want)
	}
	h := rec.Result().Header
	for k, v := range map[string]string{
		"Content-Type":      "text/event-stream; charset=UTF-8",
		"Cache-Control":     "no-cache, no-transform",
		"Connection":        "keep-alive",
		"X-Accel-Buffering": "no",
	} {
		if h.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), v)
		}
	}
}

func TestStreamOverHTTPIsReadBack(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Open(w, Options{})
		if err != nil {
			t.Error(err)
			return
		}
		_ = s.Event(1, "", []byte(`{"n":1}`))
		_ = s.Event(2, "", []byte("line one\nline two"))
		_ = s.Flush()
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := NewReader(res.Body)
	var frames []Frame
	for {
		f, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	if len(frames) != 3 || !frames[0].IsComment() || frames[0].Comments[0] != "connected" {
		t.Fatalf("frames = %+v", frames)
	}
	if frames[1].ID != "1" || frames[1].Data != `{"n":1}` {
		t.Errorf("frame 1 = %+v", frames[1])
	}
	if frames[2].Data != "line one\nline two" {
		t.Errorf("multi-line data = %q", frames[2].Data)
	}
	for _, f := range frames {
		if f.CRLF {
			t.Errorf("frame %+v uses CR line ends", f)
		}
	}
}
