package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// defaultSubscriberQueue is `threadline serve`'s --subscriber-queue default.
const defaultSubscriberQueue = 8192

// TestLiveDeltasKeepUp follows a run of 100,000 deltas, produced as fast as
// the reference agent can, with one reader that reads the socket as fast
// as loopback allows. Such a reader is healthy, so the default subscriber
// queue must not drop it: it gets every delta and the run's finish on the
// one connection. (Issue 13: the connection's write path was slower than
// the writer, and the default queue cut the reader off after a few
// thousand deltas.)
func TestLiveDeltasKeepUp(t *testing.T) {
	const deltas = 100_000
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Config: server.Config{SubscriberQueue: defaultSubscriberQueue}})
	const thread = "fast-reader"
	h.EnsureThread(thread)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+"/instance-ai/events/"+thread, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("events: status %d", res.StatusCode)
	}
	// The reader takes the socket's bytes in large reads and only looks for
	// the ends of frames: as fast as a client can read, much as curl -N.
	rd := &frameScanner{r: res.Body, buf: make([]byte, 0, 1<<20)}
	if f, err := rd.next(); err != nil || !bytes.HasPrefix(f, []byte(":")) {
		t.Fatalf("first frame: %q, %v", f, err)
	}
	// The stream's first comment goes out before the feed subscribes; a
	// delta published before that would reach the reader merged into the
	// snapshot's open text, so the run starts once the reader is live.
	for h.App.Core.Hub.Subscribers() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the stream never subscribed")
		}
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	runID := h.Chat(thread, fmt.Sprintf("long %d", deltas))
	delta := []byte(`"type":"` + string(instanceai.TypeTextDelta) + `"`)
	finish := []byte(`"type":"` + string(instanceai.TypeRunFinish) + `"`)
	got := 0
	for {
		f, err := rd.next()
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			t.Fatalf("the server ended the stream after %d of %d deltas: the reader was dropped", got, deltas)
		}
		if err != nil {
			t.Fatalf("after %d of %d deltas: %v", got, deltas, err)
		}
		if bytes.Contains(f, delta) {
			if want := fmt.Sprintf(`"text":"chunk %d. "`, got); !bytes.Contains(f, []byte(want)) {
				t.Fatalf("delta %d is %q, want its text %s", got, f, want)
			}
			got++
			continue
		}
		if bytes.Contains(f, finish) && bytes.Contains(f, []byte(runID)) {
			break
		}
	}
	t.Logf("%d deltas in %v", got, time.Since(t0))
	if got != deltas {
		t.Fatalf("got %d deltas before the run's finish, want %d", got, deltas)
	}
}

// frameScanner splits an SSE byte stream at its blank lines, without
// parsing the frames' fields.
type frameScanner struct {
	r   io.Reader
	buf []byte
	off int
}

// next returns the next frame (valid until the following call), or the
// error that ended the stream (io.ErrUnexpectedEOF mid-frame).
func (s *frameScanner) next() ([]byte, error) {
	for {
		if i := bytes.Index(s.buf[s.off:], []byte("\n\n")); i >= 0 {
			f := s.buf[s.off : s.off+i]
			s.off += i + 2
			return f, nil
		}
		if s.off > 0 {
			s.buf = s.buf[:copy(s.buf, s.buf[s.off:])]
			s.off = 0
		}
		if len(s.buf) == cap(s.buf) {
			s.buf = append(s.buf, 0)[:len(s.buf)]
		}
		n, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+n]
		if err != nil && n == 0 {
			if err == io.EOF && len(s.buf) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
