// Package sse is the load client's side of an SSE connection: a raw TCP
// dial with a hand-written GET, so the time to the response's first byte
// is measured exactly, and a line scanner that hands out each field
// without copying or allocating, so one client process can read a
// thousand streams without becoming the bottleneck itself.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Stream is one open SSE response.
type Stream struct {
	Conn net.Conn
	// FirstByte is the time from writing the request to reading the first
	// byte of the response (the status line).
	FirstByte time.Duration
	body      *bufio.Reader
	read      counter
	scratch   []byte
}

// counter counts the bytes read from the connection.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Open dials rawURL's host and sends a GET for it. It returns once the
// response head is read and says 200.
func Open(rawURL string, header http.Header) (*Stream, error) {
	return Dial(&net.Dialer{Timeout: 10 * time.Second}, rawURL, header)
}

// Dial is Open with a dialer of the caller's, for a socket set up
// differently before it connects.
func Dial(d *net.Dialer, rawURL string, header http.Header) (*Stream, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		return nil, err
	}
	req := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{"Accept": {"text/event-stream"}},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	for k, v := range header {
		req.Header[k] = v
	}
	start := time.Now()
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	s := &Stream{Conn: conn, read: counter{r: conn}}
	br := bufio.NewReaderSize(&s.read, 32<<10)
	if _, err := br.Peek(1); err != nil {
		conn.Close()
		return nil, err
	}
	s.FirstByte = time.Since(start)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		conn.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", rawURL, resp.Status, bytes.TrimSpace(b))
	}
	s.body = bufio.NewReaderSize(resp.Body, 32<<10)
	return s, nil
}

// BytesRead is what was read from the connection so far, the response
// head included; not to be called while another goroutine scans.
func (s *Stream) BytesRead() int64 { return s.read.n }

// Close ends the connection.
func (s *Stream) Close() error { return s.Conn.Close() }

// Field is the kind of an SSE line the scanner reports.
type Field int

// The fields Scan reports. End is the blank line that ends an event.
const (
	ID Field = iota
	Data
	Event
	Comment
	End
)

// Scan reads lines until fn returns false or the stream ends. value is
// the field's value without the "name: " prefix and line ending; it is
// only valid during the call.
func (s *Stream) Scan(fn func(f Field, value []byte) bool) error {
	for {
		line, err := s.line()
		if err != nil {
			return err
		}
		var f Field
		switch {
		case len(line) == 0:
			f = End
		case line[0] == ':':
			f, line = Comment, line[1:]
		case bytes.HasPrefix(line, []byte("data:")):
			f, line = Data, line[5:]
		case bytes.HasPrefix(line, []byte("id:")):
			f, line = ID, line[3:]
		case bytes.HasPrefix(line, []byte("event:")):
			f, line = Event, line[6:]
		default:
			continue
		}
		if len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		if !fn(f, line) {
			return nil
		}
	}
}

// line returns the next line without its ending. Lines longer than the
// buffer (a Centrifugo recovery can be one long data line) are gathered
// in scratch.
func (s *Stream) line() ([]byte, error) {
	line, err := s.body.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.scratch = append(s.scratch[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.body.ReadSlice('\n')
			s.scratch = append(s.scratch, line...)
		}
		line = s.scratch
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = nil
		} else {
			return nil, err
		}
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// Int parses the run of decimal digits that follows key in b, for the send
// timestamps the publishers embed. ok is false when key is absent.
func Int(b []byte, key string) (n int64, ok bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	j := 0
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + int64(b[j]-'0')
	}
	return n, j > 0
}
