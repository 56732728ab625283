package ndjson

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll drains a reader, collecting chunks and decode errors.
func readAll(t testing.TB, r *Reader) (chunks []Chunk, decodeErrs []*DecodeError, err error) {
	t.Helper()
	for {
		c, e := r.Next()
		var de *DecodeError
		switch {
		case e == nil:
			chunks = append(chunks, c)
		case errors.As(e, &de):
			decodeErrs = append(decodeErrs, de)
		case e == io.EOF:
			return chunks, decodeErrs, nil
		default:
			return chunks, decodeErrs, e
		}
	}
}

// n8nChunkedReader returns the stream in pieces of the given sizes (the last
// piece takes the rest), like an HTTP body arriving in TCP segments.
type n8nChunkedReader struct {
	data  []byte
	sizes []int
}

func (r *n8nChunkedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = min(n, r.sizes[0])
		r.sizes = r.sizes[1:]
	}
	n = copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func TestN8NChunkReaderShapes(t *testing.T) {
	stream := strings.Join([]string{
		// PROTOCOLS §3 begin/item/end.
		`{"type":"begin","metadata":{"nodeId":"n1","nodeName":"Agent","runIndex":0,"itemIndex":0,"timestamp":1760000000000}}`,
		`{"type":"item","content":"héllo","metadata":{"nodeId":"n1","nodeName":"Agent","runIndex":0,"itemIndex":0,"timestamp":1760000000001}}`,
		// Newer n8n heartbeat, and a type neither n8n nor seed 004
		// defines: a custom control frame.
		`{"type":"keepalive"}`,
		`{"type":"node-execute-after","metadata":{"nodeId":"n2"}}`,
		``,
		// Tool chunks of n8n PR 20499: toolCallId, then the toolId spelling;
		// toolInput holds JSON text, toolOutput plain text.
		`{"type":"tool-call-start","metadata":{"nodeId":"n1","nodeName":"Agent","nodeType":"agent","runIndex":2,"itemIndex":1,"toolName":"search","toolCallId":"c1","toolInput":"{\"q\":\"x\"}"}}`,
		`{"type":"tool-call-end","metadata":{"nodeId":"n1","nodeName":"Agent","runIndex":2,"itemIndex":1,"toolName":"search","toolId":"c1","toolOutput":"no results"}}`,
		`{"type":"end","metadata":{"nodeId":"n1","nodeName":"Agent","runIndex":0,"itemIndex":0,"timestamp":1760000000002}}`,
		// Error chunk without timestamp or content, CRLF line ending.
		`{"type":"error","metadata":{"nodeId":"n1","nodeName":"Agent","runIndex":0,"itemIndex":0}}` + "\r",
		// Last line without a newline.
		`{"type":"item","content":"","metadata":{"nodeId":"n3","nodeName":"B","runIndex":"1","itemIndex":4.0,"timestamp":5}}`,
	}, "\n")
	chunks, decodeErrs, err := readAll(t, NewReader(strings.NewReader(stream), 0))
	if err != nil || len(decodeErrs) != 0 {
		t.Fatalf("err %v, decode errors %v", err, decodeErrs)
	}
	if len(chunks) != 8 {
		t.Fatalf("got %d chunks: %+v", len(chunks), chunks)
	}
	custom := chunks[2]
	if custom.Type != ChunkCustomFrame || custom.FrameType != "node-execute-after" || custom.Line != 4 ||
		string(custom.Raw) != `{"type":"node-execute-after","metadata":{"nodeId":"n2"}}` {
		t.Errorf("custom frame: %+v", custom)
	}
	chunks = slices.Delete(chunks, 2, 3)
	begin, item, start, end, errc, last := chunks[0], chunks[1], chunks[2], chunks[3], chunks[5], chunks[6]
	if begin.Type != ChunkBegin || begin.HasContent || begin.Key() != (Key{"n1", 0, 0}) ||
		!begin.Metadata.HasTimestamp || begin.Metadata.Timestamp != 1760000000000 || begin.Line != 1 {
		t.Errorf("begin: %+v", begin)
	}
	if item.Type != ChunkItem || !item.HasContent || item.Content != "héllo" || item.Metadata.NodeName != "Agent" {
		t.Errorf("item: %+v", item)
	}
	if start.Type != ChunkToolCallStart || start.Key() != (Key{"n1", 2, 1}) || start.Metadata.ToolName != "search" ||
		start.Metadata.ToolCallID != "c1" || string(start.Metadata.ToolInput) != `{"q":"x"}` || start.Metadata.NodeType != "agent" || start.Line != 6 {
		t.Errorf("tool-call-start: %+v", start)
	}
	if end.Type != ChunkToolCallEnd || end.Metadata.ToolCallID != "c1" || string(end.Metadata.ToolOutput) != `"no results"` {
		t.Errorf("tool-call-end: %+v", end)
	}
	if chunks[4].Type != ChunkEnd {
		t.Errorf("end: %+v", chunks[4])
	}
	if errc.Type != ChunkError || errc.HasContent || errc.Metadata.HasTimestamp || errc.Key() != (Key{"n1", 0, 0}) {
		t.Errorf("error: %+v", errc)
	}
	if last.Type != ChunkItem || !last.HasContent || last.Content != "" || last.Key() != (Key{"n3", 1, 4}) || last.Metadata.Timestamp != 5 {
		t.Errorf("last: %+v", last)
	}
}

func TestN8NChunkReaderStats(t *testing.T) {
	stream := "{\"type\":\"keepalive\"}\n\n{\"type\":\"mystery\"}\nnot json\n{\"content\":\"no type\"}\n{\"type\":\"item\",\"content\":\"a\",\"metadata\":{\"nodeId\":\"n\",\"runIndex\":0,\"itemIndex\":0}}\n{\"type\":\"item\",\"metadata\":{\"runIndex\":1.5}}\n"
	r := NewReader(strings.NewReader(stream), 0)
	chunks, decodeErrs, err := readAll(t, r)
	if err != nil || len(chunks) != 2 || chunks[0].Type != ChunkCustomFrame || chunks[0].FrameType != "mystery" ||
		string(chunks[0].Raw) != `{"type":"mystery"}` || chunks[1].Content != "a" {
		t.Fatalf("err %v, chunks %+v", err, chunks)
	}
	var lines []int
	for _, de := range decodeErrs {
		lines = append(lines, de.Line)
	}
	if !slices.Equal(lines, []int{4, 5, 7}) {
		t.Fatalf("decode errors on lines %v: %v", lines, decodeErrs)
	}
	want := ReaderStats{Bytes: int64(len(stream)), Lines: 7, Chunks: 2, Keepalives: 1, Blank: 1, Malformed: 3}
	if got := r.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}

func TestN8NChunkReaderLineTooLong(t *testing.T) {
	short := `{"type":"keepalive"}`
	for _, tc := range []struct {
		name   string
		stream string
	}{
		{"with newline", short + "\n" + strings.Repeat("x", 100) + "\n" + short + "\n"},
		{"without newline", short + "\n" + strings.Repeat("x", 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(iotest.OneByteReader(strings.NewReader(tc.stream)), len(short))
			_, err := r.Next()
			if !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "line 2") {
				t.Fatalf("err %v", err)
			}
			if _, err2 := r.Next(); !errors.Is(err2, ErrLineTooLong) {
				t.Fatalf("error not sticky: %v", err2)
			}
			if r.Stats().Keepalives != 1 {
				t.Fatalf("stats %+v", r.Stats())
			}
		})
	}
	// A line exactly at the bound is fine.
	r := NewReader(strings.NewReader(short+"\n"+short), len(short))
	if _, _, err := readAll(t, r); err != nil || r.Stats().Keepalives != 2 {
		t.Fatalf("err %v, stats %+v", err, r.Stats())
	}
}

func TestN8NChunkReaderPassesReadErrors(t *testing.T) {
	r := NewReader(iotest.TimeoutReader(strings.NewReader("{\"type\":\"keepalive\"}\n{\"type\":")), 0)
	if _, err := r.Next(); !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("err %v", err)
	}
}

// TestN8NChunkReaderSplitReads reads the sample stream at every split
// offset, one byte at a time and in halves; each read must yield the same
// chunks.
func TestN8NChunkReaderSplitReads(t *testing.T) {
	data, err := os.ReadFile("../testdata/agent_stream.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := readAll(t, NewReader(bytes.NewReader(data), 0))
	if err != nil || len(want) != 13 {
		t.Fatalf("err %v, %d chunks", err, len(want))
	}
	readers := map[string]func() io.Reader{
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
	}
	for k := 1; k < len(data); k += 7 {
		readers["split "+strconv.Itoa(k)] = func() io.Reader {
			return &n8nChunkedReader{data: data, sizes: []int{k, 3, k}}
		}
	}
	for name, mk := range readers {
		got, _, err := readAll(t, NewReader(mk(), 0))
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: err %v, %d chunks", name, err, len(got))
		}
		for i := range got {
			if got[i].Type != want[i].Type || got[i].Content != want[i].Content || got[i].Key() != want[i].Key() ||
				got[i].Line != want[i].Line || !bytes.Equal(got[i].Metadata.ToolInput, want[i].Metadata.ToolInput) {
				t.Fatalf("%s: chunk %d %+v, want %+v", name, i, got[i], want[i])
			}
		}
	}
}

// FuzzN8NChunkReader: no panic; every line lands in one counter; all bytes
// are consumed; reading one byte at a time gives the same result.
func FuzzN8NChunkReader(f *testing.F) {
	if data, err := os.ReadFile("../testdata/agent_stream.ndjson"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("{\"type\":\"keepalive\"}\n\r\n{\"type\":\"item\",\"metadata\":{\"runIndex\":\"x\"}}"))
	f.Add([]byte(`{"type":"tool-call-start","metadata":{"toolInput":"{\"a\":1}","toolId":"t"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		whole := NewReader(bytes.NewReader(data), len(data)+1)
		chunks, decodeErrs, err := readAll(t, whole)
		if err != nil {
			t.Fatalf("unexpected error %v", err)
		}
		st := whole.Stats()
		if st.Bytes != int64(len(data)) {
			t.Fatalf("consumed %d of %d bytes", st.Bytes, len(data))
		}
		if st.Lines != st.Chunks+st.Keepalives+st.Unknown+st.Blank+st.Malformed ||
			st.Chunks != len(chunks) || st.Malformed != len(decodeErrs) {
			t.Fatalf("stats %+v, %d chunks, %d decode errors", st, len(chunks), len(decodeErrs))
		}
		bytewise := NewReader(iotest.OneByteReader(bytes.NewReader(data)), len(data)+1)
		chunks2, _, err := readAll(t, bytewise)
		if err != nil || bytewise.Stats() != st || len(chunks2) != len(chunks) {
			t.Fatalf("bytewise read differs: err %v, stats %+v vs %+v", err, bytewise.Stats(), st)
		}
		for i := range chunks {
			if chunks[i].Content != chunks2[i].Content || chunks[i].Key() != chunks2[i].Key() {
				t.Fatalf("chunk %d differs: %+v vs %+v", i, chunks[i], chunks2[i])
			}
		}
	})
}

func TestControlFrames(t *testing.T) {
	stream := `{"type":"tool_call","name":"search","args":{"q":"x"}}` + "\n" +
		`  {"type":"tool_result","name":"search","result":[1]}  ` + "\n" + `{"type":"progress","percent":5}` + "\n" +
		`{"type":""}` + "\n"
	r := NewReader(strings.NewReader(stream), 0)
	chunks, decodeErrs, err := readAll(t, r)
	if err != nil || len(decodeErrs) != 0 || len(chunks) != 3 {
		t.Fatalf("err %v, decode errors %v, chunks %+v", err, decodeErrs, chunks)
	}
	if chunks[0].Type != ChunkToolCallFrame || string(chunks[0].Raw) != `{"type":"tool_call","name":"search","args":{"q":"x"}}` {
		t.Errorf("first frame %+v", chunks[0])
	}
	if chunks[1].Type != ChunkToolResultFrame || string(chunks[1].Raw) != `{"type":"tool_result","name":"search","result":[1]}` || chunks[1].Line != 2 {
		t.Errorf("second frame %+v", chunks[1])
	}
	if chunks[2].Type != ChunkCustomFrame || chunks[2].FrameType != "progress" || string(chunks[2].Raw) != `{"type":"progress","percent":5}` {
		t.Errorf("custom frame %+v", chunks[2])
	}
	if st := r.Stats(); st.Chunks != 3 || st.Unknown != 1 {
		t.Errorf("stats %+v: want 3 chunks and the frame without a type unknown", st)
	}
}

// endlessLine is a line that never ends; it counts the bytes read of it.
type endlessLine struct{ read int }

func (e *endlessLine) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.read += len(p)
	if e.read > 64<<20 {
		return len(p), io.EOF // a reader that ignored its bound ends, and fails the test
	}
	return len(p), nil
}

// A line over the bound is refused once a line and its newline are read,
// whatever the bound: the buffer does not grow past it.
func TestN8NChunkReaderReadsNoFurtherThanTheBound(t *testing.T) {
	for _, limit := range []int{100, 5000, 1 << 20} {
		src := &endlessLine{}
		if _, err := NewReader(src, limit).Next(); !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("bound %d: %v", limit, err)
		}
		if src.read > limit+1 {
			t.Errorf("bound %d: read %d bytes of an endless line", limit, src.read)
		}
	}
}
