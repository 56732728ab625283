package ssestream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

func TestReaderLineEnds(t *testing.T) {
	cases := []struct {
		name, in string
		want     []Frame
	}{
		{"lf", "id: 1\ndata: a\n\n", []Frame{{ID: "1", HasID: true, Data: "a"}}},
		{"crlf", "id: 1\r\ndata: a\r\n\r\n", []Frame{{ID: "1", HasID: true, Data: "a", CRLF: true}}},
		{"cr", "data: a\rdata: b\r\r", []Frame{{Data: "a\nb", CRLF: true}}},
		{"no space", "data:x\nevent:e\n\n", []Frame{{Data: "x", Event: "e"}}},
		{"comment", ": ping\n\n", []Frame{{Comments: []string{"ping"}}}},
		{"empty id", "id:\ndata: q\n\n", []Frame{{HasID: true, Data: "q"}}},
		{"unknown field ignored", "retry: 10\nfoo: bar\ndata: d\n\n", []Frame{{Data: "d"}}},
		{"leading blank lines", "\n\ndata: d\n\n", []Frame{{Data: "d"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rd := NewReader(strings.NewReader(c.in))
			for i, w := range c.want {
				f, err := rd.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if f.ID != w.ID || f.HasID != w.HasID || f.Data != w.Data || f.Event != w.Event || f.CRLF != w.CRLF ||
					strings.Join(f.Comments, "|") != strings.Join(w.Comments, "|") {
					t.Fatalf("frame %d = %+v, want %+v", i, f, w)
				}
			}
			if _, err := rd.Next(); err != io.EOF {
				t.Fatalf("after last frame: %v, want EOF", err)
			}
		})
	}
}

func TestReaderTruncatedFrame(t *testing.T) {
	rd := NewReader(strings.NewReader("data: half"))
	if _, err := rd.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("err = %v, want unexpected EOF", err)
	}
}

func FuzzReader(f *testing.F) {
	for _, s := range []string{"id: 1\ndata: a\n\n", "data: a\r\n\r\n: c\n\n", "\r\r\n\n", "data"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewReader(strings.NewReader(string(in)))
		for range len(in) + 1 {
			fr, err := rd.Next()
			if err != nil {
				return
			}
			if strings.ContainsAny(fr.ID, "\r\n") || strings.ContainsAny(fr.Event, "\r\n") {
				t.Fatalf("field kept a line break: %+v", fr)
			}
		}
		t.Fatal("reader returned more frames than input bytes")
	})
}
