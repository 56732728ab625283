package ndjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// n8n streaming webhook (Response mode: Streaming), PROTOCOLS §3: plain
// chunked HTTP carrying one JSON object per line (NDJSON, not SSE). Each line
// is a chunk
//
//	{"type":"begin|item|end|error","content"?:string,
//	 "metadata":{"nodeId","nodeName","runIndex","itemIndex","timestamp"?}}
//
// Error chunks may lack timestamp and content. Newer n8n sends
// {"type":"keepalive"} every 30 s; it is skipped and counted.
//
// The optional tool chunks come from n8n PR 20499 (unmerged): types
// "tool-call-start" and "tool-call-end", whose metadata adds toolName,
// toolInput / toolOutput (JSON text carried as a JSON string) and toolCallId
// (toolId in some revisions), plus nodeType. They are decoded when present and
// never required.
//
// Seed 004's control frames, written by the workflow as lines of their own
// ("you can write custom control frames in exactly the same stream"), are
// the flat objects {"type":"tool_call",…} and {"type":"tool_result",…}:
// they are yielded with the line in Raw, for the capture layer to read.
// A line of any other type is a custom control frame (ChunkCustomFrame):
// yielded with its type in FrameType and the line in Raw, to be passed on
// rather than dropped. One whose type is empty or longer than
// MaxFrameType is skipped and counted as unknown.

// ChunkType is the type field of an n8n streaming chunk.
type ChunkType string

// Chunk types Reader yields.
const (
	ChunkBegin         ChunkType = "begin"
	ChunkItem          ChunkType = "item"
	ChunkEnd           ChunkType = "end"
	ChunkError         ChunkType = "error"
	ChunkToolCallStart ChunkType = "tool-call-start" // n8n PR 20499
	ChunkToolCallEnd   ChunkType = "tool-call-end"   // n8n PR 20499

	ChunkToolCallFrame   ChunkType = "tool_call"   // seed 004 control frame
	ChunkToolResultFrame ChunkType = "tool_result" // seed 004 control frame
	// ChunkCustomFrame is a line of a type neither n8n nor seed 004
	// defines; Chunk.FrameType holds the line's own type.
	ChunkCustomFrame ChunkType = "custom-frame"
)

// MaxFrameType bounds the type of a custom control frame.
const MaxFrameType = 200

// n8nChunkKeepalive is skipped silently (counted in ReaderStats.Keepalives).
const n8nChunkKeepalive = "keepalive"

// DefaultMaxLine is the default bound on one NDJSON line, newline excluded.
const DefaultMaxLine = 1 << 20

// ErrLineTooLong is returned (wrapped) when a line exceeds the reader's
// bound. It is sticky: the reader yields nothing after it.
var ErrLineTooLong = errors.New("n8n stream: line too long")

// Key identifies one streamed item: each agent item gets its own
// begin…end, so text must be keyed by (nodeId, runIndex, itemIndex).
type Key struct {
	NodeID    string
	RunIndex  int
	ItemIndex int
}

// Metadata is a chunk's metadata. Fields absent on the wire stay zero;
// HasTimestamp tells a missing timestamp from 0.
type Metadata struct {
	NodeID       string
	NodeName     string
	NodeType     string // n8n PR 20499
	RunIndex     int
	ItemIndex    int
	Timestamp    int64 // milliseconds since the epoch
	HasTimestamp bool

	// Tool chunks (n8n PR 20499).
	ToolName   string
	ToolCallID string          // toolCallId, or toolId when that is what was sent
	ToolInput  json.RawMessage // the JSON the toolInput string held (see n8nToolJSON)
	ToolOutput json.RawMessage // likewise for toolOutput
}

// Chunk is one decoded chunk.
type Chunk struct {
	Type       ChunkType
	Content    string
	HasContent bool
	Metadata   Metadata
	Line       int // 1-based line number in the stream
	// Raw is the whole line of a control frame (ChunkToolCallFrame,
	// ChunkToolResultFrame, ChunkCustomFrame); nil for n8n's own chunks.
	Raw []byte
	// FrameType is a custom control frame's type.
	FrameType string
}

// Key returns the (nodeId, runIndex, itemIndex) the chunk belongs to.
func (c Chunk) Key() Key {
	return Key{NodeID: c.Metadata.NodeID, RunIndex: c.Metadata.RunIndex, ItemIndex: c.Metadata.ItemIndex}
}

// DecodeError reports a line that is not a chunk. It is not sticky: the
// next call to Next continues with the following line.
type DecodeError struct {
	Line int
	Err  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("n8n stream: line %d: %v", e.Line, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ReaderStats counts what the reader consumed. Every line ends up in
// exactly one of Chunks, Keepalives, Unknown, Blank or Malformed.
type ReaderStats struct {
	Bytes      int64 // bytes consumed, newlines included
	Lines      int
	Chunks     int
	Keepalives int
	Unknown    int
	Blank      int
	Malformed  int
}

// Reader decodes n8n's streaming-webhook NDJSON from an io.Reader,
// buffering partial lines across reads.
type Reader struct {
	r       io.Reader
	maxLine int
	buf     []byte // unread bytes are buf[start:]
	start   int
	eof     bool
	err     error // sticky error
	stats   ReaderStats
}

// NewReader returns a reader over r. maxLine bounds one line (newline
// excluded); 0 or less means DefaultMaxLine.
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Reader{r: r, maxLine: maxLine}
}

// Stats returns the counters so far.
func (r *Reader) Stats() ReaderStats { return r.stats }

// Next returns the next begin, item, end, error, tool-call-start or
// tool-call-end chunk, or seed-004 control frame. It returns io.EOF at the end of the stream (a last line
// without a newline is still decoded), a *DecodeError for a line that is
// not a chunk (call Next again to go on), an error wrapping
// ErrLineTooLong, or the underlying reader's error.
func (r *Reader) Next() (Chunk, error) {
	for {
		line, ok, err := r.line()
		if err != nil {
			return Chunk{}, err
		}
		if !ok {
			return Chunk{}, io.EOF
		}
		r.stats.Lines++
		c, keep, err := n8nDecodeLine(line)
		switch {
		case err != nil:
			r.stats.Malformed++
			return Chunk{}, &DecodeError{Line: r.stats.Lines, Err: err}
		case keep == n8nLineBlank:
			r.stats.Blank++
		case keep == n8nLineKeepalive:
			r.stats.Keepalives++
		case keep == n8nLineUnknown:
			r.stats.Unknown++
		default:
			r.stats.Chunks++
			c.Line = r.stats.Lines
			return c, nil
		}
	}
}

// line returns the next line without its newline (and a trailing \r).
func (r *Reader) line() ([]byte, bool, error) {
	if r.err != nil {
		return nil, false, r.err
	}
	scanned := 0 // bytes of buf[start:] known to hold no newline
	for {
		pending := r.buf[r.start:]
		if i := bytes.IndexByte(pending[scanned:], '\n'); i >= 0 {
			n := scanned + i
			if n > r.maxLine {
				return r.tooLong()
			}
			r.start += n + 1
			r.stats.Bytes += int64(n + 1)
			return bytes.TrimSuffix(pending[:n], []byte{'\r'}), true, nil
		}
		scanned = len(pending)
		if scanned > r.maxLine {
			return r.tooLong()
		}
		if r.eof {
			if len(pending) == 0 {
				return nil, false, nil
			}
			r.start = len(r.buf)
			r.stats.Bytes += int64(len(pending))
			return bytes.TrimSuffix(pending, []byte{'\r'}), true, nil
		}
		// Compact, then grow, then read.
		if r.start > 0 {
			n := copy(r.buf, pending)
			r.buf = r.buf[:n]
			r.start = 0
		}
		// The buffer never grows past a line and its newline: a line over
		// the bound is refused once that much of it is in, not after a
		// doubling read more of it.
		if grown := min(max(2*cap(r.buf), 4096), r.maxLine+1); cap(r.buf)-len(r.buf) < 512 && grown > cap(r.buf) {
			nb := make([]byte, len(r.buf), grown)
			copy(nb, r.buf)
			r.buf = nb
		}
		n, err := r.r.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+n]
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			r.err = err
			return nil, false, err
		}
	}
}

func (r *Reader) tooLong() ([]byte, bool, error) {
	r.err = fmt.Errorf("%w: line %d exceeds %d bytes", ErrLineTooLong, r.stats.Lines+1, r.maxLine)
	return nil, false, r.err
}

type n8nLineKind int

const (
	n8nLineChunk n8nLineKind = iota
	n8nLineBlank
	n8nLineKeepalive
	n8nLineUnknown
)

// n8nWireChunk is the wire shape; metadata fields are raw so that a number
// sent as a string, or a missing field, is handled leniently.
type n8nWireChunk struct {
	Type     *string `json:"type"`
	Content  *string `json:"content"`
	Metadata *struct {
		NodeID     string          `json:"nodeId"`
		NodeName   string          `json:"nodeName"`
		NodeType   string          `json:"nodeType"`
		RunIndex   json.RawMessage `json:"runIndex"`
		ItemIndex  json.RawMessage `json:"itemIndex"`
		Timestamp  json.RawMessage `json:"timestamp"`
		ToolName   string          `json:"toolName"`
		ToolCallID string          `json:"toolCallId"`
		ToolID     string          `json:"toolId"`
		ToolInput  json.RawMessage `json:"toolInput"`
		ToolOutput json.RawMessage `json:"toolOutput"`
	} `json:"metadata"`
}

func n8nDecodeLine(line []byte) (Chunk, n8nLineKind, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return Chunk{}, n8nLineBlank, nil
	}
	var w n8nWireChunk
	if err := json.Unmarshal(line, &w); err != nil {
		return Chunk{}, 0, err
	}
	if w.Type == nil {
		return Chunk{}, 0, errors.New("chunk has no type")
	}
	t := ChunkType(*w.Type)
	switch t {
	case ChunkBegin, ChunkItem, ChunkEnd, ChunkError, ChunkToolCallStart, ChunkToolCallEnd:
	case ChunkToolCallFrame, ChunkToolResultFrame:
		// The frame's own fields are not n8n's: metadata, if any, is kept
		// out of the way.
		return Chunk{Type: t, Raw: append([]byte(nil), bytes.TrimSpace(line)...)}, n8nLineChunk, nil
	case n8nChunkKeepalive:
		return Chunk{}, n8nLineKeepalive, nil
	default:
		if *w.Type == "" || utf8.RuneCountInString(*w.Type) > MaxFrameType {
			return Chunk{}, n8nLineUnknown, nil
		}
		return Chunk{Type: ChunkCustomFrame, FrameType: *w.Type, Raw: append([]byte(nil), bytes.TrimSpace(line)...)}, n8nLineChunk, nil
	}
	c := Chunk{Type: t}
	if w.Content != nil {
		c.Content, c.HasContent = *w.Content, true
	}
	if m := w.Metadata; m != nil {
		var err error
		md := &c.Metadata
		md.NodeID, md.NodeName, md.NodeType, md.ToolName = m.NodeID, m.NodeName, m.NodeType, m.ToolName
		md.ToolCallID = m.ToolCallID
		if md.ToolCallID == "" {
			md.ToolCallID = m.ToolID
		}
		if md.RunIndex, _, err = n8nInt(m.RunIndex); err != nil {
			return Chunk{}, 0, fmt.Errorf("metadata.runIndex: %w", err)
		}
		if md.ItemIndex, _, err = n8nInt(m.ItemIndex); err != nil {
			return Chunk{}, 0, fmt.Errorf("metadata.itemIndex: %w", err)
		}
		var ts int
		if ts, md.HasTimestamp, err = n8nInt(m.Timestamp); err != nil {
			return Chunk{}, 0, fmt.Errorf("metadata.timestamp: %w", err)
		}
		md.Timestamp = int64(ts)
		md.ToolInput = n8nToolJSON(m.ToolInput)
		md.ToolOutput = n8nToolJSON(m.ToolOutput)
	}
	return c, n8nLineChunk, nil
}

// n8nInt reads an integer sent as a JSON number (integral float accepted) or
// a numeric string; absent or null is (0, false).
func n8nInt(raw json.RawMessage) (int, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false, err
		}
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return int(n), true, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != float64(int64(f)) {
		return 0, false, fmt.Errorf("not an integer: %s", raw)
	}
	return int(f), true, nil
}

// n8nToolJSON normalises toolInput/toolOutput. PR 20499 sends them as JSON
// strings holding JSON text: a string whose content is valid JSON yields that
// JSON; any other string yields the string itself as a JSON string; a
// non-string value is kept as is; absent or null yields nil.
func n8nToolJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] != '"' {
		return append(json.RawMessage(nil), raw...)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return append(json.RawMessage(nil), raw...)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return append(json.RawMessage(nil), raw...)
}
