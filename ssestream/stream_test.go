package ssestream

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"
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

// TestBinaryStreamWritesOnlyFrames: a binary stream's body is the frames
// and nothing else, heartbeats included.
func TestBinaryStreamWritesOnlyFrames(t *testing.T) {
	rec := httptest.NewRecorder()
	s, err := Open(rec, Options{Binary: true, ContentType: "application/vnd.ag-ui.event+proto"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Body.Len() != 0 {
		t.Fatalf("a binary stream opened with %q", rec.Body.String())
	}
	frame := []byte{0, 0, 0, 2, 0x0a, 0x00}
	for _, step := range []error{s.Frame(0, frame), s.Ping(), s.Frame(0, frame), s.Flush()} {
		if step != nil {
			t.Fatal(step)
		}
	}
	if want := append(append([]byte{}, frame...), frame...); !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("body % x, want % x", rec.Body.Bytes(), want)
	}
	if got := rec.Result().Header.Get("Content-Type"); got != "application/vnd.ag-ui.event+proto" {
		t.Fatalf("Content-Type %q", got)
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

// The one-line framing is byte for byte go-sse's; other data goes through
// go-sse itself.
func TestDataFrameMatchesGoSSE(t *testing.T) {
	for _, data := range []string{`{"type":"text-delta","payload":{"text":"a\nb"}}`, "x", "two\nlines", "cr\rlf\r\n", "", "trailing\n"} {
		var m sse.Message
		m.AppendData(data)
		want, _ := m.MarshalText()
		if got := DataFrame([]byte(data)); !bytes.Equal(got, want) {
			t.Errorf("DataFrame(%q) = %q, want %q", data, got, want)
		}
	}
}

// discardWriter is a ResponseWriter that counts the writes reaching it.
type discardWriter struct {
	header http.Header
	writes int
	bytes  int
}

func (d *discardWriter) Header() http.Header { return d.header }
func (d *discardWriter) Write(p []byte) (int, error) {
	d.writes++
	d.bytes += len(p)
	return len(p), nil
}
func (d *discardWriter) WriteHeader(int) {}
func (d *discardWriter) Flush()          {}

// SetWriteDeadline is there as on a real connection's response.
func (d *discardWriter) SetWriteDeadline(time.Time) error { return nil }

// A batch of frames reaches the response as one write at Flush, and
// framing it allocates nothing per frame; between batches the stream holds
// no buffer.
func TestBatchIsOneWriteWithoutAllocations(t *testing.T) {
	w := &discardWriter{header: http.Header{}}
	s, err := Open(w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.buf != nil {
		t.Fatal("an open stream holds a buffer before any frame")
	}
	wire := DataFrame([]byte(`{"type":"tool-call","runId":"run_1"}`))
	data := []byte(`{"type":"text-delta","runId":"run_1"}`)
	batch := func() {
		for i := range 100 {
			if err := s.Frame(int64(i+1), wire); err != nil {
				t.Fatal(err)
			}
			if err := s.Data(0, data); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	batch() // the pool's first buffer grows to the batch's size
	before := w.writes
	batch()
	if n := w.writes - before; n != 1 {
		t.Fatalf("a batch of 200 frames took %d writes, want 1", n)
	}
	if s.buf != nil {
		t.Fatal("the stream kept its buffer after Flush")
	}
	if raceDetector {
		return
	}
	// A pooled buffer may be collected between runs, hence "less than one".
	if allocs := testing.AllocsPerRun(20, batch); allocs >= 1 {
		t.Fatalf("a batch of 200 frames allocates %.1f times", allocs)
	}
}

// A batch larger than spillSize is written in parts as it is gathered, and
// arrives whole.
func TestLargeBatchSpills(t *testing.T) {
	rec := httptest.NewRecorder()
	s, err := Open(rec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Body.Reset()
	row := []byte(`{"payload":"` + strings.Repeat("x", 10_000) + `"}`)
	const rows = 3 * spillSize / 10_000
	for i := range rows {
		if err := s.Data(int64(i+1), row); err != nil {
			t.Fatal(err)
		}
		if i == rows/2 && rec.Body.Len() == 0 {
			t.Fatalf("%d bytes gathered and none written", (i+1)*len(row))
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	rd := NewReader(rec.Body)
	for i := range rows {
		f, err := rd.Next()
		if err != nil || f.ID != strconv.Itoa(i+1) || f.Data != string(row) {
			t.Fatalf("frame %d: id %q, %d bytes, %v", i+1, f.ID, len(f.Data), err)
		}
	}
}
