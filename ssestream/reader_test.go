package ssestream

import (
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReaderLineEnds(t *testing.T) {
	cases := []struct {
		name, in string
		want     []Frame
	}{
		{"lf", "id: 1\ndata: a\n\n", []Frame{{ID: "1", HasID: true, Data: "a", HasData: true}}},
		{"crlf", "id: 1\r\ndata: a\r\n\r\n", []Frame{{ID: "1", HasID: true, Data: "a", HasData: true, CRLF: true}}},
		{"cr", "data: a\rdata: b\r\r", []Frame{{Data: "a\nb", HasData: true, CRLF: true}}},
		{"no space", "data:x\nevent:e\n\n", []Frame{{Data: "x", HasData: true, Event: "e"}}},
		{"comment", ": ping\n\n", []Frame{{Comments: []string{"ping"}}}},
		{"empty id", "id:\ndata: q\n\n", []Frame{{HasID: true, Data: "q", HasData: true}}},
		{"unknown field ignored", "retry: 10\nfoo: bar\ndata: d\n\n", []Frame{{Data: "d", HasData: true}}},
		{"leading blank lines", "\n\ndata: d\n\n", []Frame{{Data: "d", HasData: true}}},
		{"empty data line", "data\n\n", []Frame{{HasData: true}}},
		{"event alone", "event: e\n\n", []Frame{{Event: "e"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rd := NewReader(strings.NewReader(c.in))
			for i, w := range c.want {
				f, err := rd.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if f.ID != w.ID || f.HasID != w.HasID || f.Data != w.Data || f.HasData != w.HasData || f.Event != w.Event || f.CRLF != w.CRLF ||
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
	for _, in := range []string{"data: half", "data: whole line\n"} {
		rd := NewReader(strings.NewReader(in))
		if _, err := rd.Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("%q: err = %v, want unexpected EOF", in, err)
		}
	}
}

// readData drains rd through NextData.
func readData(rd *Reader) ([]string, error) {
	var out []string
	for {
		data, err := rd.NextData()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, data)
	}
}

// TestReaderNextData: the data payloads, as a Chat Completions client reads
// them, with a frame pending at the end of the stream dispatched.
func TestReaderNextData(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"LF", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
		{"CR", "data: a\r\rdata: b\r\r", []string{"a", "b"}},
		{"comments and other fields", ": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: a\n\n", []string{"a"}},
		{"frames without data are skipped", "event: e\n\nid: 3\n\ndata: a\n\n", []string{"a"}},
		{"an empty data line is data", "data\n\n", []string{""}},
		{"multi-line data", "data: a\ndata: b\ndata\n\n", []string{"a\nb\n"}},
		{"no space after colon", "data:a\n\n", []string{"a"}},
		{"only the first space goes", "data:  a\n\n", []string{" a"}},
		{"pending at EOF is dispatched", "data: a\n\ndata: [DONE]", []string{"a", "[DONE]"}},
		{"pending after a line end", "data: a\n\ndata: b\n", []string{"a", "b"}},
		{"pending after a CR", "data: a\r", []string{"a"}},
		{"a pending comment dispatches nothing", "data: a\n\n: bye", []string{"a"}},
		{"blank lines alone dispatch nothing", "\n\n\r\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readData(NewReaderWith(r, ReaderOptions{DispatchAtEOF: true}))
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("got %q, %v; want %q", got, err, tc.want)
				}
			}
		})
	}
	// A read error is no end of stream: the pending frame is not dispatched.
	rd := NewReaderWith(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(io.ErrUnexpectedEOF)),
		ReaderOptions{DispatchAtEOF: true})
	got, err := readData(rd)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !slices.Equal(got, []string{"a"}) {
		t.Errorf("read error: got %q, %v", got, err)
	}
}

func TestReaderMaxLine(t *testing.T) {
	const limit = 8
	for _, opts := range []ReaderOptions{{MaxLine: limit}, {MaxLine: limit, DispatchAtEOF: true}} {
		rd := NewReaderWith(strings.NewReader("data:123\n\ndata:1234\n\ndata: b\n\n"), opts)
		if f, err := rd.Next(); err != nil || f.Data != "123" {
			t.Fatalf("%+v: a line of %d bytes: %+v, %v", opts, limit, f, err)
		}
		_, err := rd.Next()
		if !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "8 bytes") {
			t.Errorf("%+v: a line of %d bytes: %v, want ErrLineTooLong naming the bound", opts, limit+1, err)
		}
	}
	rd := NewReader(strings.NewReader("data: " + strings.Repeat("x", MaxLine) + "\n\n"))
	if _, err := rd.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("a line over the default bound: %v, want ErrLineTooLong", err)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// repeated is line repeated until left bytes are read: a huge frame
// without a blank line, made as it is read.
type repeated struct {
	line []byte
	at   int
	left int
}

func (e *repeated) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), e.left)]
	n := 0
	for n < len(p) {
		c := copy(p[n:], e.line[e.at:])
		n += c
		e.at = (e.at + c) % len(e.line)
	}
	e.left -= n
	return n, nil
}

// A frame is bounded as a whole, whatever its lines: data joined over many
// lines, comments, other fields. The reader fails as soon as the bound is
// crossed, reading no further than its buffer beyond it, and keeps
// failing: the rest of the stream starts mid-frame.
func TestReaderMaxFrame(t *testing.T) {
	const limit = 16
	for _, tc := range []struct {
		name, in string
		frames   int // frames read before the error
		// oneLine: one line crosses the bound alone, so a reader whose
		// frame bound is its line bound names the line's.
		oneLine bool
	}{
		{"data lines", "data: 12345\n\ndata:12345\ndata:1234567\ndata: x\n\n", 1, false},
		{"comments", ": 12345678\n: 12345678\n\n", 0, false},
		{"other fields", "id: 123456\nevent: 12345678\n\n", 0, false},
		{"one line over the frame's bound", "data: 123456789012345\n\n", 0, true},
		{"a cut-off frame", "data: a\n\ndata:12345678\ndata:12345678", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, opts := range []ReaderOptions{{MaxFrame: limit}, {MaxFrame: limit, DispatchAtEOF: true}, {MaxLine: limit}} {
				rd := NewReaderWith(strings.NewReader(tc.in), opts)
				for i := range tc.frames {
					if _, err := rd.Next(); err != nil {
						t.Fatalf("%+v: frame %d: %v", opts, i, err)
					}
				}
				want := ErrFrameTooLarge
				if opts.MaxLine != 0 && tc.oneLine {
					want = ErrLineTooLong
				}
				_, err := rd.Next()
				if !errors.Is(err, want) || !strings.Contains(err.Error(), "16 bytes") {
					t.Fatalf("%+v: %v, want %v naming the bound", opts, err, want)
				}
				if _, again := rd.Next(); !errors.Is(again, want) {
					t.Fatalf("%+v: after the error: %v, want it again", opts, again)
				}
			}
		})
	}
	// Exactly at the bound is fine: lines count without their ends.
	rd := NewReaderWith(strings.NewReader("data:1234\r\ndata:56\r\n\r\n"), ReaderOptions{MaxFrame: limit})
	if f, err := rd.Next(); err != nil || f.Data != "1234\n56" {
		t.Fatalf("a frame of %d bytes: %+v, %v", limit, f, err)
	}

	// A 32 MiB frame of short lines: the reader stops at the bound, read
	// no further than its buffer (64 KiB) and the line under way past it.
	const bound, huge = 1 << 20, 32 << 20
	src := &countingReader{r: &repeated{line: []byte("data: " + strings.Repeat("x", 100) + "\n"), left: huge}}
	rd = NewReaderWith(src, ReaderOptions{MaxFrame: bound})
	if _, err := rd.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a frame of %d bytes: %v", huge, err)
	}
	if src.n > bound+128<<10 {
		t.Fatalf("read %d bytes of a frame bounded at %d", src.n, bound)
	}
	// So does a 32 MiB line under a smaller frame bound.
	src = &countingReader{r: &repeated{line: []byte("x"), left: huge}}
	rd = NewReaderWith(src, ReaderOptions{MaxFrame: bound})
	if _, err := rd.Next(); !errors.Is(err, ErrFrameTooLarge) || src.n > bound+128<<10 {
		t.Fatalf("a line of %d bytes: %v after %d bytes", huge, err, src.n)
	}
}

// A line over its bound is an error on every later call: what follows it
// is the rest of that line, not a frame.
func TestReaderLineTooLongIsSticky(t *testing.T) {
	rd := NewReaderWith(strings.NewReader("data:12345678\n\ndata: a\n\n"), ReaderOptions{MaxLine: 8, MaxFrame: 100})
	for range 2 {
		if _, err := rd.Next(); !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("%v, want ErrLineTooLong", err)
		}
	}
}

// drain reads every frame of rd, up to and with the error that ends it; a
// reader that returns more frames than the input has bytes fails t.
func drain(t *testing.T, rd *Reader, in []byte) ([]Frame, error) {
	var frames []Frame
	for range len(in) + 1 {
		f, err := rd.Next()
		if err != nil {
			return frames, err
		}
		if strings.ContainsAny(f.ID, "\r\n") || strings.ContainsAny(f.Event, "\r\n") {
			t.Fatalf("field kept a line break: %+v", f)
		}
		frames = append(frames, f)
	}
	t.Fatal("reader returned more frames than input bytes")
	return nil, nil
}

// longestLine is the length of the longest line of in, whatever ends it.
func longestLine(in []byte) int {
	n := 0
	for _, l := range strings.FieldsFunc(string(in), func(r rune) bool { return r == '\r' || r == '\n' }) {
		n = max(n, len(l))
	}
	return n
}

// FuzzReader: the strict reader keeps no line break in a field; the
// reader with DispatchAtEOF reads the same frames, plus the one the strict
// reader calls cut off; a line bound fails exactly the inputs with a
// longer line, a frame bound exactly those with a larger frame, and a
// reader without a frame bound takes its line bound for one.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"id: 1\ndata: a\n\n", "data: a\r\n\r\n: c\n\n", "\r\r\n\n", "data", "data: a\n\ndata: [DONE]", "data:123456\n",
		"data:1\ndata:2\ndata:3\n\n", ": a\r\n: b\r\n: c\r\n\r\n", "data:1\r\rdata:12345678\r\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		strict, serr := drain(t, NewReader(strings.NewReader(string(in))), in)
		lax, lerr := drain(t, NewReaderWith(strings.NewReader(string(in)), ReaderOptions{DispatchAtEOF: true}), in)
		laxAll := lax
		switch {
		case serr == io.ErrUnexpectedEOF:
			if lerr != io.EOF || len(lax) != len(strict)+1 {
				t.Fatalf("cut-off frame: DispatchAtEOF read %d frames and %v, want %d and EOF", len(lax), lerr, len(strict)+1)
			}
			lax = lax[:len(strict)]
		case lerr != serr || len(lax) != len(strict):
			t.Fatalf("DispatchAtEOF read %d frames and %v, the strict reader %d and %v", len(lax), lerr, len(strict), serr)
		}
		if !slices.EqualFunc(lax, strict, func(a, b Frame) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("DispatchAtEOF read %+v, the strict reader %+v", lax, strict)
		}

		const limit = 4
		// A frame bound far above any frame here: the line bound alone.
		_, err := drain(t, NewReaderWith(strings.NewReader(string(in)), ReaderOptions{MaxLine: limit, MaxFrame: 1 << 20, DispatchAtEOF: true}), in)
		if long := longestLine(in) > limit; errors.Is(err, ErrLineTooLong) != long {
			t.Fatalf("MaxLine %d: %v for an input whose longest line has %d bytes", limit, err, longestLine(in))
		}

		// The frame bound fails exactly the inputs with a larger frame,
		// and what it read before is what a reader without it reads.
		const frameLimit = 8
		bounded, err := drain(t, NewReaderWith(strings.NewReader(string(in)), ReaderOptions{MaxFrame: frameLimit, DispatchAtEOF: true}), in)
		if large := largestFrame(in) > frameLimit; errors.Is(err, ErrFrameTooLarge) != large {
			t.Fatalf("MaxFrame %d: %v for an input whose largest frame has %d bytes", frameLimit, err, largestFrame(in))
		}
		if len(bounded) > len(laxAll) || !slices.EqualFunc(bounded, laxAll[:len(bounded)], func(a, b Frame) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("MaxFrame %d read %+v, a reader without it %+v", frameLimit, bounded, laxAll)
		}

		// Without a frame bound of its own a reader takes the line's: a
		// frame holds no more than one line may.
		_, err = drain(t, NewReaderWith(strings.NewReader(string(in)), ReaderOptions{MaxLine: limit, DispatchAtEOF: true}), in)
		if large := largestFrame(in) > limit; (errors.Is(err, ErrLineTooLong) || errors.Is(err, ErrFrameTooLarge)) != large {
			t.Fatalf("MaxLine %d and no MaxFrame: %v for an input whose largest frame has %d bytes", limit, err, largestFrame(in))
		}
	})
}

// largestFrame is the size of the largest frame of in as the reader
// counts it: the lengths of its lines, line ends not counted, up to the
// blank line that ends it (or the end of the input).
func largestFrame(in []byte) int {
	most, frame, line := 0, 0, 0
	for i := 0; i <= len(in); i++ {
		if i < len(in) && in[i] != '\n' && in[i] != '\r' {
			line++
			continue
		}
		if i < len(in) && in[i] == '\n' && i > 0 && in[i-1] == '\r' {
			continue // the LF of a CRLF
		}
		if line == 0 {
			frame = 0 // a blank line ends the frame
			continue
		}
		frame += line
		most = max(most, frame)
		line = 0
	}
	return most
}
