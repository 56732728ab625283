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
	"fmt"
	"net"
	"net/http"
	"os"
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
	w  http.ResponseWriter
	rc *http.ResponseController
	// conn is a hijacked stream's connection (see Hijack), which frames
	// are written to directly; w and rc are nil then.
	conn         net.Conn
	buf          *[]byte // nil between a Flush and the next frame
	writeTimeout time.Duration
	// partSize is the size of DataParts' next part (0: firstPart): it
	// grows while the client takes whole parts, from frame to frame.
	partSize int
	// binary is Options.Binary.
	binary bool
}

// spillSize is how much a stream gathers before it writes without waiting
// for Flush: a replay page of large rows is sent in parts of this size
// instead of being held whole. It is also the size from which a frame's
// data is written from where it lies rather than copied into the buffer
// (see large), so what a stream buffers stays below twice this.
const spillSize = 64 << 10

// stallProbe is how long a write of a large frame's chunk may wait before
// the stream takes its client for one that stopped reading and lets go of
// the frame's bytes (see DataReloadable).
const stallProbe = 50 * time.Millisecond

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
	// Binary makes the body another framing than SSE, written with
	// Frame(0, …) (AG-UI's protobuf binding, say): no first comment, and
	// Ping only flushes, since such a framing has no comment to send. The
	// stream keeps its buffering and write deadlines.
	Binary bool
}

func (o *Options) defaults() {
	if o.ContentType == "" {
		o.ContentType = "text/event-stream; charset=UTF-8"
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.FirstComment == "" {
		o.FirstComment = "connected"
	}
}

// setHeaders sets the headers of an SSE response in h.
func setHeaders(h http.Header, opts *Options, connection string) {
	h.Set("Content-Type", opts.ContentType)
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", connection)
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
}

// Open writes the SSE headers and the first comment and flushes them.
func Open(w http.ResponseWriter, opts Options) (*Stream, error) {
	opts.defaults()
	setHeaders(w.Header(), &opts, "keep-alive")
	w.WriteHeader(http.StatusOK)
	s := &Stream{w: w, rc: http.NewResponseController(w), writeTimeout: opts.WriteTimeout, binary: opts.Binary}
	if !opts.Binary {
		if err := s.Comment(opts.FirstComment); err != nil {
			return nil, err
		}
	}
	return s, s.Flush()
}

// Hijack opens the stream on the request's connection, taken over from
// net/http: it writes the response head (with the headers already set on
// w, such as CORS's) and the first comment itself, and frames go straight
// to the connection. The handler may then return and serve the stream
// from elsewhere. What it saves is memory: for as long as its handler
// runs, net/http keeps a connection's 4 KB read and 4 KB write buffers,
// a 2 KB response buffer, the request, a goroutine watching the
// connection and the handler's own goroutine; a hijacked stream keeps the
// connection and what its caller keeps.
//
// The response is not chunked: it says `Connection: close`, and its body
// runs to the end of the connection, which every HTTP/1 client reads.
// Nothing that the client sends after the request is answered. Only an
// HTTP/1 connection can be taken over; elsewhere (HTTP/2, a
// ResponseWriter that cannot hijack) Hijack returns an error wrapping
// http.ErrNotSupported, having written nothing, and Open serves the
// request instead. The caller must Close the stream; WatchClient tells it
// when the client went away.
func Hijack(w http.ResponseWriter, r *http.Request, opts Options) (*Stream, error) {
	if r.ProtoMajor != 1 {
		return nil, fmt.Errorf("ssestream: hijack %s: %w", r.Proto, http.ErrNotSupported)
	}
	opts.defaults()
	h := w.Header()
	// The reader holds what the client sent after the request (a
	// pipelined request, which this response does not answer); dropped
	// with it, as are net/http's buffers.
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	setHeaders(h, &opts, "close")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	s := &Stream{conn: conn, writeTimeout: opts.WriteTimeout, binary: opts.Binary}
	b := s.buffer()
	*b = append(*b, "HTTP/1.1 200 OK\r\n"...)
	if err := h.Write(appendTo{b}); err != nil {
		conn.Close()
		return nil, err
	}
	*b = append(*b, "\r\n"...)
	err = nil
	if !opts.Binary {
		err = s.Comment(opts.FirstComment)
	}
	if err == nil {
		err = s.Flush()
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// WatchClient calls gone once, on a goroutine of its own, when the client
// of a hijacked stream closes its connection or the connection fails
// (Close included): a stream served by net/http learns this from its
// request's context instead. Bytes the client sends meanwhile are read
// and dropped. The goroutine blocks in a read, which holds no buffer, so
// an idle stream costs little more than its stack.
func (s *Stream) WatchClient(gone func()) {
	go func() {
		var b [1]byte
		for {
			if _, err := s.conn.Read(b[:]); err != nil {
				break
			}
		}
		gone()
	}()
}

// Close closes a hijacked stream's connection, from any goroutine: a
// write under way fails. On a stream served by net/http it does nothing
// (the response ends when the handler returns).
func (s *Stream) Close() error {
	if s.conn == nil {
		return nil
	}
	return s.conn.Close()
}

// Event writes one frame: `id: <id>` when id > 0, `event: <typ>` when typ is
// set, then the data. Call Flush to send what was written.
func (s *Stream) Event(id int64, typ string, data []byte) error {
	if typ == "" {
		return s.Data(id, data)
	}
	return s.frame(id > 0, id, typ, data)
}

// EventWithID is Event with its `id:` line written whatever id is, 0
// included: a frame that moves the client's cursor back to the start.
func (s *Stream) EventWithID(id int64, typ string, data []byte) error {
	return s.frame(true, id, typ, data)
}

// frame writes one frame, with an `id:` line when withID is set and an
// `event:` line when typ is.
func (s *Stream) frame(withID bool, id int64, typ string, data []byte) error {
	var msg sse.Message
	if withID {
		msg.ID = sse.ID(strconv.FormatInt(id, 10))
	}
	if typ != "" {
		t, err := sse.NewType(typ)
		if err != nil {
			return err
		}
		msg.Type = t
	}
	msg.AppendData(string(data))
	return s.message(&msg)
}

// Data writes a frame of data, preceded by `id: <id>` when id > 0: what
// Frame(id, DataFrame(data)) writes, without building the frame apart.
func (s *Stream) Data(id int64, data []byte) error {
	return s.DataReloadable(id, data, nil)
}

// DataReloadable is Data for bytes that can be had again, such as a row of
// a log, which never changes: reload returns them. A hijacked stream
// writes a large frame in chunks, and when a chunk is not taken within
// stallProbe (the client stopped reading), it keeps only the rest of that
// chunk while it waits the write deadline out, and calls reload to go on
// (once per frame: see writeChunks).
// A client that does not read thus holds a chunk of the frame, not the
// frame, provided the caller kept no reference to data either. With reload
// nil it is Data.
func (s *Stream) DataReloadable(id int64, data []byte, reload func() ([]byte, error)) error {
	if !singleLine(data) {
		return s.Frame(id, DataFrame(data))
	}
	if len(data) >= spillSize {
		return s.large(id, data, reload)
	}
	b := s.buffer()
	*b = appendID(*b, id)
	*b = appendDataLine(*b, data)
	return s.spill()
}

// large writes a single-line frame of data without copying data: what was
// gathered and the frame's head in one write, data from where it lies,
// and its end gathered for the next write.
func (s *Stream) large(id int64, data []byte, reload func() ([]byte, error)) error {
	if err := s.writeHead(id); err != nil {
		return err
	}
	var err error
	switch {
	case s.conn == nil:
		if err = s.setWriteDeadline(); err == nil {
			_, err = s.w.Write(data)
		}
	case reload == nil:
		if err = s.setWriteDeadline(); err == nil {
			_, err = s.conn.Write(data)
		}
	default:
		err = s.writeChunks(data, reload)
	}
	if err != nil {
		return err
	}
	*s.buffer() = append(*s.buffer(), "\n\n"...)
	return s.spill()
}

// DataParts writes a single-line frame of size bytes that part reads, n
// bytes from off at a time, as the frame is written: a frame the caller
// never held whole (a large row of a log). Parts grow four times from
// firstPart to maxPart while the client takes them, from one frame to the
// next, so a client that keeps up soon reads a frame in one part; on a
// hijacked stream, when a chunk is not taken within stallProbe, the
// stream keeps only the rest of that chunk while it waits the write
// deadline out, and the next part is read from where it stopped, as small
// as the first. A client that stops reading thus holds a chunk of the
// frame at most.
func (s *Stream) DataParts(id int64, size int, part func(off, n int) ([]byte, error)) error {
	if err := s.writeHead(id); err != nil {
		return err
	}
	n := max(s.partSize, firstPart)
	for off := 0; off < size; {
		p, err := part(off, min(n, size-off))
		if err != nil {
			return err
		}
		if len(p) != min(n, size-off) || bytes.ContainsAny(p, "\r\n") {
			return fmt.Errorf("ssestream: part %d+%d of a %d-byte frame is not what it was", off, len(p), size)
		}
		written, stalled, err := s.writePart(p, nil)
		if err != nil {
			return err
		}
		off += written
		if stalled {
			n = firstPart
		} else if written == n {
			n = min(4*n, maxPart)
		}
	}
	s.partSize = n
	*s.buffer() = append(*s.buffer(), "\n\n"...)
	return s.spill()
}

// Part sizes of DataParts.
const (
	firstPart = 64 << 10
	maxPart   = 4 << 20
)

// writePart writes p in chunks; when a chunk stalls (see DataParts) it
// writes the rest of that chunk alone, having called release (when set)
// for the caller to let go of what p points into, and reports how much of
// p went out.
func (s *Stream) writePart(p []byte, release func()) (written int, stalled bool, err error) {
	if s.conn == nil {
		if err := s.setWriteDeadline(); err != nil {
			return 0, false, err
		}
		_, err := s.w.Write(p)
		return len(p), false, err
	}
	for off := 0; off < len(p); {
		end := min(off+chunkSize, len(p))
		if err := s.conn.SetWriteDeadline(time.Now().Add(stallProbe)); err != nil {
			return off, false, err
		}
		n, err := s.conn.Write(p[off:end])
		off += n
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return off, false, err
		}
		rest := bytes.Clone(p[off:end])
		p = nil // what the caller holds of it is all that is left
		if release != nil {
			release()
		}
		if err := s.setWriteDeadline(); err != nil {
			return off, true, err
		}
		if _, err := s.conn.Write(rest); err != nil {
			return off, true, err
		}
		return end, true, nil
	}
	return len(p), false, nil
}

// writeHead writes what was gathered and the head of a frame whose data
// follows, and gives the buffer back to the pool: a stream that then
// waits on a client that does not read holds none.
func (s *Stream) writeHead(id int64) error {
	b := s.buffer()
	*b = appendID(*b, id)
	*b = append(*b, "data: "...)
	err := s.write()
	s.putBuffer()
	return err
}

// chunkSize is what a hijacked stream writes of a large frame at a time,
// and so what it holds of one while its client does not read. (Writes
// that grow while the client keeps up made no faster replay, and a
// stall then holds the rest of a larger one.)
const chunkSize = 16 << 10

// writeChunks writes data to a hijacked connection in chunks (see
// DataReloadable): writePart's, letting go of data at the first stall. A
// frame is read again at most once: a client that reads, however slowly,
// after it stalled is then written the rest whole, so that a slow reader
// cannot make the stream read a large frame once per chunk.
func (s *Stream) writeChunks(data []byte, reload func() ([]byte, error)) error {
	total := len(data)
	reloaded := false
	for off := 0; off < total; {
		var release func()
		if !reloaded {
			release = func() { data = nil }
		}
		written, stalled, err := s.writePart(data[off:], release)
		if err != nil {
			return err
		}
		off += written
		if !stalled || reloaded || off == total {
			continue
		}
		if data, err = reload(); err != nil {
			return err
		}
		reloaded = true
		if len(data) != total {
			return fmt.Errorf("ssestream: a reloaded frame has %d bytes, not %d", len(data), total)
		}
	}
	return nil
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

// ID writes a frame of an id alone (`id: <id>` and the blank line): an
// EventSource takes the id as its last event id and dispatches nothing, so
// a stream can move a client's cursor past an event it does not show.
func (s *Stream) ID(id int64) error {
	b := s.buffer()
	*b = appendID(*b, id)
	*b = append(*b, '\n')
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

// Ping writes and flushes a heartbeat comment; on a binary stream it only
// flushes.
func (s *Stream) Ping() error {
	if s.binary {
		return s.Flush()
	}
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
	if err := s.setWriteDeadline(); err != nil {
		return err
	}
	var err error
	if s.conn != nil {
		_, err = s.conn.Write(*s.buf)
	} else {
		_, err = s.w.Write(*s.buf)
	}
	*s.buf = (*s.buf)[:0]
	return err
}

func (s *Stream) setWriteDeadline() error {
	deadline := time.Now().Add(s.writeTimeout)
	if s.conn != nil {
		return s.conn.SetWriteDeadline(deadline)
	}
	if err := s.rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// putBuffer gives the stream's buffer back to the pool.
func (s *Stream) putBuffer() {
	if cap(*s.buf) <= pooledCap {
		*s.buf = (*s.buf)[:0]
		buffers.Put(s.buf)
	}
	s.buf = nil
}

// Flush sends buffered frames to the client within the write deadline and
// gives the buffer back to the pool.
func (s *Stream) Flush() error {
	if s.buf != nil {
		err := s.write()
		s.putBuffer()
		if err != nil {
			return err
		}
	} else if s.conn == nil {
		if err := s.setWriteDeadline(); err != nil {
			return err
		}
	}
	if s.conn != nil {
		return nil // written already: nothing buffers on the way
	}
	return s.rc.Flush()
}
