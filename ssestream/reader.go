package ssestream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
)

// Frame is one parsed SSE frame as a client sees it, plus what a checker
// needs to judge the framing.
type Frame struct {
	// ID is the value of the id field, "" when the frame had none.
	ID string
	// HasID reports whether an id field was present at all.
	HasID bool
	// Event is the event type ("" = message).
	Event string
	// Data is the data fields joined by "\n".
	Data string
	// Comments are the comment lines (without the leading ':' and one space).
	Comments []string
	// CRLF reports whether any line of the frame ended in "\r\n" or "\r".
	CRLF bool
}

// IsComment reports whether the frame carried only comments.
func (f *Frame) IsComment() bool {
	return !f.HasID && f.Event == "" && f.Data == "" && len(f.Comments) > 0
}

// MaxLine bounds one line, so a hostile server cannot make a client buffer
// without end.
const MaxLine = 16 << 20

// ErrLineTooLong is returned for a line over MaxLine bytes.
var ErrLineTooLong = errors.New("sse: line exceeds the maximum length")

// Reader parses an SSE byte stream into frames, following the WHATWG
// event-stream rules (LF, CRLF or CR line ends; a blank line ends a frame;
// "field: value" with one optional space; comments start with ':').
type Reader struct {
	r       *bufio.Reader
	pending bool // a CR was the last byte: a following LF belongs to it
}

// NewReader returns a reader over r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10)}
}

// readLine returns one line without its terminator and whether the
// terminator was CR-based.
func (rd *Reader) readLine() (string, bool, error) {
	var buf []byte
	for {
		b, err := rd.r.ReadByte()
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				return string(buf), false, io.ErrUnexpectedEOF
			}
			return "", false, err
		}
		if rd.pending {
			rd.pending = false
			if b == '\n' {
				continue // the LF of a CRLF already ended the previous line
			}
		}
		switch b {
		case '\n':
			return string(buf), false, nil
		case '\r':
			rd.pending = true
			return string(buf), true, nil
		}
		if len(buf) >= MaxLine {
			return "", false, ErrLineTooLong
		}
		buf = append(buf, b)
	}
}

// Next returns the next frame. A stream that ends mid-frame returns
// io.ErrUnexpectedEOF; a clean end returns io.EOF.
func (rd *Reader) Next() (Frame, error) {
	var f Frame
	var data bytes.Buffer
	started := false
	for {
		line, cr, err := rd.readLine()
		if err != nil {
			if err == io.EOF && started {
				return f, io.ErrUnexpectedEOF
			}
			return f, err
		}
		f.CRLF = f.CRLF || cr
		if line == "" {
			if !started {
				continue
			}
			if data.Len() > 0 {
				f.Data = strings.TrimSuffix(data.String(), "\n")
			}
			return f, nil
		}
		started = true
		if line[0] == ':' {
			f.Comments = append(f.Comments, strings.TrimPrefix(line[1:], " "))
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			if !strings.ContainsRune(value, 0) {
				f.ID, f.HasID = value, true
			}
		case "event":
			f.Event = value
		case "data":
			data.WriteString(value)
			data.WriteByte('\n')
		}
	}
}
