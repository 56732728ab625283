package openai

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxSSELine bounds one line of the upstream stream: a chunk is a few
// hundred bytes, Ollama's whole tool calls a few kilobytes; anything near
// this is a broken server, and without a bound it would grow memory freely.
const maxSSELine = 4 << 20

// errSSELineTooLong is returned for a line over maxSSELine.
var errSSELineTooLong = errors.New("stream line exceeds 4 MiB")

// sseReader reads the data payloads of a text/event-stream body, per the
// HTML spec's event stream interpretation: lines end with CRLF, LF or CR;
// lines starting with ':' are comments (keep-alives); "data" fields of one
// event are joined with '\n' and the event is dispatched at a blank line;
// other fields (event, id, retry) do not matter to a Chat Completions
// stream and are ignored. Unlike the spec, an event still pending at end of
// stream is dispatched: some servers close right after the last data line,
// and dropping it would lose the final chunk or [DONE].
type sseReader struct {
	r       *bufio.Reader
	line    []byte
	data    []byte
	hasData bool
	afterCR bool // the previous line ended with CR: a following LF is part of it
	eof     bool
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the next event's data. It returns io.EOF at a clean end
// (after any pending event) and the read error otherwise.
func (s *sseReader) Next() ([]byte, error) {
	for {
		if s.eof {
			if s.hasData {
				return s.dispatch(), nil
			}
			return nil, io.EOF
		}
		line, err := s.readLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
			s.eof = true
			if len(line) == 0 {
				continue
			}
		}
		if len(line) == 0 {
			if s.hasData {
				return s.dispatch(), nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		if string(name) != "data" {
			continue
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	}
}

func (s *sseReader) dispatch() []byte {
	out := s.data
	s.data, s.hasData = nil, false
	return out
}

// readLine returns one line without its terminator. At end of input it
// returns the unterminated rest with io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return s.line, err
		}
		if s.afterCR {
			s.afterCR = false
			if b == '\n' {
				continue // the LF of a CRLF
			}
		}
		switch b {
		case '\n':
			return s.line, nil
		case '\r':
			s.afterCR = true
			return s.line, nil
		}
		if len(s.line) >= maxSSELine {
			return nil, errSSELineTooLong
		}
		s.line = append(s.line, b)
	}
}
