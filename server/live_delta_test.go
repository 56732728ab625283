package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// defaultSubscriberQueue is `threadline serve`'s --subscriber-queue default.
const defaultSubscriberQueue = 8192

// TestLiveDeltasKeepUp follows a run of deltas, produced as fast as the
// reference agent can, with one reader that reads the socket as fast as
// loopback allows. Such a reader is healthy, so the subscriber queue must
// not drop it: it gets every delta's text, in order and once, and the run's
// finish on the one connection. With the default queue (issue 13: the
// connection's write path was slower than the writer, and the queue cut the
// reader off after a few thousand deltas) and with a queue far smaller than
// the writer's passes, where a reader that falls behind (a loaded machine
// is enough) gets its queued deltas merged instead of being dropped.
func TestLiveDeltasKeepUp(t *testing.T) {
	for _, c := range []struct {
		name          string
		queue, deltas int
	}{
		{"default queue", defaultSubscriberQueue, 100_000},
		{"small queue", 64, 20_000},
	} {
		t.Run(c.name, func(t *testing.T) { followDeltas(t, c.queue, c.deltas) })
	}
}

func followDeltas(t *testing.T, queue, deltas int) {
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{Config: server.Config{SubscriberQueue: queue}})
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
	for h.App.Subscribers() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the stream never subscribed")
		}
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	runID := h.Chat(thread, fmt.Sprintf("long %d", deltas))
	delta := []byte(`"type":"` + string(instanceai.TypeTextDelta) + `"`)
	finish := []byte(`"type":"` + string(instanceai.TypeRunFinish) + `"`)
	got, frames := 0, 0
	for {
		f, err := rd.next()
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			t.Fatalf("the server ended the stream after %d of %d deltas: the reader was dropped", got, deltas)
		}
		if err != nil {
			t.Fatalf("after %d of %d deltas: %v", got, deltas, err)
		}
		if bytes.Contains(f, delta) {
			frames++
			// A delta carries one chunk, or several merged in order.
			var ev struct {
				Payload struct {
					Text string `json:"text"`
				} `json:"payload"`
			}
			data, ok := bytes.CutPrefix(f, []byte("data: "))
			if !ok || json.Unmarshal(data, &ev) != nil || ev.Payload.Text == "" {
				t.Fatalf("delta frame %q", f)
			}
			for text := ev.Payload.Text; text != ""; got++ {
				want := fmt.Sprintf("chunk %d. ", got)
				rest, ok := strings.CutPrefix(text, want)
				if !ok {
					t.Fatalf("after %d chunks a delta reads %q, want %q next", got, text, want)
				}
				text = rest
			}
			continue
		}
		if bytes.Contains(f, finish) && bytes.Contains(f, []byte(runID)) {
			break
		}
	}
	t.Logf("%d deltas in %d frames in %v", got, frames, time.Since(t0))
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
