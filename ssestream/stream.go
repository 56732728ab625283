// Package ssestream writes Server-Sent Events responses: the headers every
// streaming endpoint sends, a first comment at once (so proxies and clients
// see the stream open before the first event), heartbeats, and a write
// deadline per frame so a stalled client cannot hold a handler forever.
// Frames are encoded by go-sse's Message, which guarantees LF-only framing.
package ssestream

import (
	"bufio"
	"errors"
	"net/http"
	"strconv"
	"time"

	sse "github.com/tmaxmax/go-sse"
)

// DefaultHeartbeat is the pause between `: ping` comments on an idle stream.
const DefaultHeartbeat = 15 * time.Second

// DefaultWriteTimeout bounds how long one frame (or batch of frames) may
// take to reach the client.
const DefaultWriteTimeout = 10 * time.Second

// Stream is an open SSE response.
type Stream struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	buf          *bufio.Writer
	writeTimeout time.Duration
	msg          sse.Message
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
	s := &Stream{w: w, rc: http.NewResponseController(w), buf: bufio.NewWriterSize(w, 32<<10), writeTimeout: opts.WriteTimeout}
	if err := s.Comment(opts.FirstComment); err != nil {
		return nil, err
	}
	return s, s.Flush()
}

// Event writes one frame: `id: <id>` when id > 0, `event: <typ>` when typ is
// set, then the data. Call Flush to send what was written.
func (s *Stream) Event(id int64, typ string, data []byte) error {
	s.msg = sse.Message{}
	if id > 0 {
		s.msg.ID = sse.ID(strconv.FormatInt(id, 10))
	}
	if typ != "" {
		t, err := sse.NewType(typ)
		if err != nil {
			return err
		}
		s.msg.Type = t
	}
	s.msg.AppendData(string(data))
	_, err := s.msg.WriteTo(s.buf)
	return err
}

// DataFrame frames data as an SSE message without id or event lines:
// `data:` lines ending in the blank line, ready for Stream.Frame.
func DataFrame(data []byte) []byte {
	var m sse.Message
	m.AppendData(string(data))
	b, _ := m.MarshalText() // only fails for a message with nothing in it
	return b
}

// Frame writes a frame built by DataFrame, preceded by `id: <id>` when
// id > 0.
func (s *Stream) Frame(id int64, wire []byte) error {
	if id > 0 {
		var line [32]byte
		b := append(append(line[:0], "id: "...), strconv.FormatInt(id, 10)...)
		if _, err := s.buf.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	_, err := s.buf.Write(wire)
	return err
}

// Comment writes a comment line (`: text`).
func (s *Stream) Comment(text string) error {
	s.msg = sse.Message{}
	s.msg.AppendComment(text)
	_, err := s.msg.WriteTo(s.buf)
	return err
}

// Ping writes and flushes a heartbeat comment.
func (s *Stream) Ping() error {
	if err := s.Comment("ping"); err != nil {
		return err
	}
	return s.Flush()
}

// Flush sends buffered frames to the client within the write deadline.
func (s *Stream) Flush() error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if err := s.buf.Flush(); err != nil {
		return err
	}
	return s.rc.Flush()
}
