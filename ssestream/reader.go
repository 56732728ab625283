package ssestream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
	// HasData reports whether a data field was present at all, so that a
	// frame of one empty "data" line is told from one without data.
	HasData bool
	// Comments are the comment lines (without the leading ':' and one space).
	Comments []string
	// CRLF reports whether any line of the frame ended in "\r\n" or "\r".
	CRLF bool
}

// IsComment reports whether the frame carried only comments.
func (f *Frame) IsComment() bool {
	return !f.HasID && f.Event == "" && f.Data == "" && len(f.Comments) > 0
}

// MaxLine is the default bound on one line, so a hostile server cannot make
// a client buffer without end.
const MaxLine = 16 << 20

// ErrLineTooLong is returned (wrapped, with the bound) for a line over the
// reader's maximum length.
var ErrLineTooLong = errors.New("sse: line exceeds the maximum length")

// ErrFrameTooLarge is returned (wrapped, with the bound) for a frame whose
// lines together are over the reader's maximum frame size. A line bound
// alone does not bound what a reader holds: a frame of many data lines is
// joined into one Data, and its comments are kept too.
var ErrFrameTooLarge = errors.New("sse: frame exceeds the maximum size")

// ReaderOptions tune a Reader; the zero value is NewReader's strict reader.
type ReaderOptions struct {
	// MaxLine bounds one line in bytes; 0 means MaxLine.
	MaxLine int
	// MaxFrame bounds one frame in bytes: the lengths of its lines, line
	// ends and the blank line that ends it not counted (so a frame of one
	// line of MaxLine bytes fits). 0 means the line bound: a frame holds
	// at most what one line may, however it is split. The reader fails as
	// soon as a line would cross it, without reading the rest of that line.
	MaxFrame int
	// DispatchAtEOF makes a stream that ends mid-frame (even mid-line)
	// end that frame, where the strict reader returns io.ErrUnexpectedEOF.
	// The WHATWG rules drop such a frame, but some OpenAI-compatible
	// servers close right after the last data line, and dropping it would
	// lose the final chunk or [DONE].
	DispatchAtEOF bool
}

// Reader parses an SSE byte stream into frames, following the WHATWG
// event-stream rules (LF, CRLF or CR line ends; a blank line ends a frame;
// "field: value" with one optional space; comments start with ':').
type Reader struct {
	r       *bufio.Reader
	opts    ReaderOptions
	afterCR bool // a CR was the last byte: a following LF belongs to it
	eof     bool // the input ended: read no further
	// tooLong is the error of a line or frame over its bound, returned by
	// every later call: the rest of the stream starts mid-line, and a
	// reader that went on would take the rest of that line for a new one.
	tooLong error
}

// NewReader returns a strict reader over r: a frame cut off by the end of
// the stream is an error.
func NewReader(r io.Reader) *Reader { return NewReaderWith(r, ReaderOptions{}) }

// NewReaderWith returns a reader over r tuned by opts.
func NewReaderWith(r io.Reader, opts ReaderOptions) *Reader {
	if opts.MaxLine <= 0 {
		opts.MaxLine = MaxLine
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = opts.MaxLine
	}
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), opts: opts}
}

// readLine returns one line without its terminator and whether the
// terminator was CR-based. room is what is left of the frame's bound: a
// line longer than it fails with ErrFrameTooLarge as soon as it crosses
// it (ErrLineTooLong when the line's own bound is the smaller).
func (rd *Reader) readLine(room int) (string, bool, error) {
	if rd.tooLong != nil {
		return "", false, rd.tooLong
	}
	if rd.eof {
		return "", false, io.EOF
	}
	var buf []byte
	for {
		b, err := rd.r.ReadByte()
		if err != nil {
			if err != io.EOF {
				return "", false, err
			}
			// Some bodies do not repeat io.EOF when read again.
			rd.eof = true
			switch {
			case len(buf) == 0:
				return "", false, io.EOF
			case rd.opts.DispatchAtEOF:
				return string(buf), false, nil
			}
			return string(buf), false, io.ErrUnexpectedEOF
		}
		if rd.afterCR {
			rd.afterCR = false
			if b == '\n' {
				continue // the LF of a CRLF already ended the previous line
			}
		}
		switch b {
		case '\n':
			return string(buf), false, nil
		case '\r':
			rd.afterCR = true
			return string(buf), true, nil
		}
		if len(buf) >= rd.opts.MaxLine {
			rd.tooLong = fmt.Errorf("%w of %d bytes", ErrLineTooLong, rd.opts.MaxLine)
			return "", false, rd.tooLong
		}
		if len(buf) >= room {
			rd.tooLong = fmt.Errorf("%w of %d bytes", ErrFrameTooLarge, rd.opts.MaxFrame)
			return "", false, rd.tooLong
		}
		buf = append(buf, b)
	}
}

// Next returns the next frame. A stream that ends mid-frame returns
// io.ErrUnexpectedEOF (or, with DispatchAtEOF, that frame and then io.EOF);
// a clean end returns io.EOF.
func (rd *Reader) Next() (Frame, error) {
	var f Frame
	var data bytes.Buffer
	started := false
	size := 0 // bytes of the frame's lines so far
	end := func() (Frame, error) {
		if data.Len() > 0 {
			f.Data = strings.TrimSuffix(data.String(), "\n")
		}
		return f, nil
	}
	for {
		line, cr, err := rd.readLine(rd.opts.MaxFrame - size)
		if err != nil {
			if err == io.EOF && started {
				if rd.opts.DispatchAtEOF {
					return end()
				}
				return f, io.ErrUnexpectedEOF
			}
			return f, err
		}
		f.CRLF = f.CRLF || cr
		if line == "" {
			if !started {
				continue
			}
			return end()
		}
		started = true
		size += len(line)
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
			f.HasData = true
		}
	}
}

// NextData returns the data of the next frame that has a data field,
// skipping the others (comments such as keep-alives, frames of id or event
// alone), as an EventSource dispatches only frames with data.
func (rd *Reader) NextData() (string, error) {
	for {
		f, err := rd.Next()
		if err != nil {
			return "", err
		}
		if f.HasData {
			return f.Data, nil
		}
	}
}
