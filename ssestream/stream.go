// Package ssestream writes Server-Sent Events responses: the headers every
// streaming endpoint sends, a first comment at once (so proxies and clients
// see the stream open before the first event), heartbeats, and a write
// deadline per frame so a stalled client cannot hold a handler forever.
// Frames are LF-only: a one-line payload (any JSON) is framed here as one
// `data:` line, anything else by go-sse's Message, which splits lines.
package ssestream

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	sse "github.com/tmaxmax/go-sse"
)

// DefaultHeartbeat is the pause between `: ping` comments on an idle stream.
const DefaultHeartbeat = 15 * time.Second

// DefaultWriteTimeout bounds how long one frame (or batch of frames) may
// take to reach the client.
const DefaultWriteTimeout = 10 * time.Second

// Stream is an open SSE response. Frames written to it are gathered in
// one buffer and sent by Flush with a single write, so a batch of frames
// costs one system call rather than one per frame. The buffer comes from a
// pool shared by every stream and goes back to it at each Flush: an idle
// stream holds none, which keeps the memory of many idle connections small.
type Stream struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	buf          *[]byte // nil between a Flush and the next frame
	writeTimeout time.Duration
}

// spillSize is how much a stream gathers before it writes without waiting
// for Flush: a replay page of large rows is sent in parts of this size
// instead of being held whole.
const spillSize = 256 << 10

// pooledCap bounds the buffers kept for reuse; a larger one (a batch of
// large frames) is left to the garbage collector.
const pooledCap = 1 << 20

var buffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

// appendTo is an io.Writer that appends to a stream's buffer, for go-sse's
// Message.WriteTo.
type appendTo struct{ b *[]byte }

func (a appendTo) Write(p []byte) (int, error) {
	*a.b = append(*a.b, p...)
	return len(p), nil
}

// Options tune a stream.
type Options struct {
	// ContentType overrides the default "text/event-stream; charset=UTF-8".
	ContentType string
	// WriteTimeout is the deadline for each flush (DefaultWriteTimeout).
	WriteTimeout time.Duration
	// FirstComment is written at once; empty means "connected".
	FirstComment string
}

// Open writes the SSE headers and the first comment and flushes them.
func Open(w http.ResponseWriter, opts Options) (*Stream, error) {
	if opts.ContentType == "" {
		opts.ContentType = "text/event-stream; charset=UTF-8"
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.FirstComment == "" {
		opts.FirstComment = "connected"
	}
	h := w.Header()
	h.Set("Content-Type", opts.ContentType)
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	s := &Stream{w: w, rc: http.NewResponseController(w), writeTimeout: opts.WriteTimeout}
	if err := s.Comment(opts.FirstComment); err != nil {
		return nil, err
	}
	return s, s.Flush()
}

// Event writes one frame: `id: <id>` when id > 0, `event: <typ>` when typ is
// set, then the data. Call Flush to send what was written.
func (s *Stream) Event(id int64, typ string, data []byte) error {
	if typ == "" {
		return s.Data(id, data)
	}
	var msg sse.Message
	if id > 0 {
		msg.ID = sse.ID(strconv.FormatInt(id, 10))
	}
	t, err := sse.NewType(typ)
	if err != nil {
		return err
	}
	msg.Type = t
	msg.AppendData(string(data))
	return s.message(&msg)
}

// Data writes a frame of data, preceded by `id: <id>` when id > 0: what
// Frame(id, DataFrame(data)) writes, without building the frame apart.
func (s *Stream) Data(id int64, data []byte) error {
	if !singleLine(data) {
		return s.Frame(id, DataFrame(data))
	}
	b := s.buffer()
	*b = appendID(*b, id)
	*b = appendDataLine(*b, data)
	return s.spill()
}

// singleLine reports whether data is one non-empty line, which frames as a
// single `data:` line; JSON always is.
func singleLine(data []byte) bool {
	return len(data) > 0 && !bytes.ContainsAny(data, "\r\n")
}

func appendDataLine(b, data []byte) []byte {
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

func appendID(b []byte, id int64) []byte {
	if id <= 0 {
		return b
	}
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, '\n')
}

// DataFrame frames data as an SSE message without id or event lines:
// `data:` lines ending in the blank line, ready for Stream.Frame.
func DataFrame(data []byte) []byte {
	return AppendDataFrame(make([]byte, 0, len(data)+DataFrameOverhead), data)
}

// DataFrameOverhead is what DataFrame adds to a single line of data.
const DataFrameOverhead = len("data: \n\n")

// AppendDataFrame appends DataFrame(data) to dst, so that many frames can
// share one buffer.
func AppendDataFrame(dst, data []byte) []byte {
	if singleLine(data) {
		return appendDataLine(dst, data)
	}
	var m sse.Message
	m.AppendData(string(data))
	b, _ := m.MarshalText() // only fails for a message with nothing in it
	return append(dst, b...)
}

// Frame writes a frame built by DataFrame, preceded by `id: <id>` when
// id > 0.
func (s *Stream) Frame(id int64, wire []byte) error {
	b := s.buffer()
	*b = appendID(*b, id)
	*b = append(*b, wire...)
	return s.spill()
}

// Comment writes a comment line (`: text`).
func (s *Stream) Comment(text string) error {
	var msg sse.Message
	msg.AppendComment(text)
	return s.message(&msg)
}

func (s *Stream) message(msg *sse.Message) error {
	if _, err := msg.WriteTo(appendTo{s.buffer()}); err != nil {
		return err
	}
	return s.spill()
}

// buffer returns the stream's buffer, taking one from the pool if it has
// none.
func (s *Stream) buffer() *[]byte {
	if s.buf == nil {
		s.buf = buffers.Get().(*[]byte)
	}
	return s.buf
}

// Ping writes and flushes a heartbeat comment.
func (s *Stream) Ping() error {
	if err := s.Comment("ping"); err != nil {
		return err
	}
	return s.Flush()
}

// spill writes what the stream gathered once it reaches spillSize.
func (s *Stream) spill() error {
	if len(*s.buf) < spillSize {
		return nil
	}
	return s.write()
}

// write sends the gathered frames to the response within the write
// deadline, in one write, and empties the buffer.
func (s *Stream) write() error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err := s.w.Write(*s.buf)
	*s.buf = (*s.buf)[:0]
	return err
}

// Flush sends buffered frames to the client within the write deadline and
// gives the buffer back to the pool.
func (s *Stream) Flush() error {
	if s.buf != nil {
		err := s.write()
		if cap(*s.buf) <= pooledCap {
			buffers.Put(s.buf)
		}
		s.buf = nil
		if err != nil {
			return err
		}
	} else if err := s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return s.rc.Flush()
}
