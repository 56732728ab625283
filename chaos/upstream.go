package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/threadline/threadline/agui"
)

// oversizedMessage is the user message the upstream answers with one huge
// message.
const oversizedMessage = "oversized upstream"

// upstream is the AG-UI agent the instances of an `--agent agui` cluster
// run their runs on. It answers the message oversizedMessage with one
// text message of cfg.UpstreamFrames TEXT_MESSAGE_CONTENT events of
// cfg.UpstreamFrameBytes each, written as they are generated from one
// shared buffer (it never holds more than a frame's text), and any other
// message with a short reply streamed over a few milliseconds, so that the
// chat load goes on beside it.
type upstream struct {
	URL string

	srv   *http.Server
	frame []byte // the text of one huge delta
	n     int    // huge deltas per oversized message

	mu sync.Mutex
	// streams are the oversized streams, by the Threadline run's id.
	streams map[string]*upstreamStream
}

// upstreamStream is what the upstream wrote of one oversized message.
type upstreamStream struct {
	Frames int
	Bytes  int64
	// Err is why it stopped writing before its end ("" if it wrote it
	// all): the instance closed the stream.
	Err  string
	Done bool
}

func startUpstream(cfg *Config) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{URL: "http://" + ln.Addr().String() + "/agent", frame: bytes.Repeat([]byte("x"), cfg.UpstreamFrameBytes),
		n: cfg.UpstreamFrames, streams: map[string]*upstreamStream{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /agent", u.serve)
	u.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

func (u *upstream) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if u.srv.Shutdown(ctx) != nil {
		u.srv.Close()
	}
}

// stream returns what the upstream wrote of the run's oversized message
// (nil: it had no request for it).
func (u *upstream) stream(run string) *upstreamStream {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.streams[run]; s != nil {
		c := *s
		return &c
	}
	return nil
}

// lastUserText is the text of the input's last user message.
func lastUserText(in *agui.RunAgentInput) string {
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if m := in.Messages[i]; m.Role == "user" {
			var s string
			if json.Unmarshal(m.Content, &s) == nil {
				return s
			}
			return string(m.Content)
		}
	}
	return ""
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	var in agui.RunAgentInput
	// A thread's conversation comes with each request: the oversized
	// thread's holds its earlier runs' text, a segment's bound each.
	if err := json.NewDecoder(io.LimitReader(r.Body, 256<<20)).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var written int64
	send := func(ev map[string]any) error {
		data, _ := json.Marshal(ev)
		n, err := fmt.Fprintf(w, "data: %s\n\n", data)
		written += int64(n)
		if err == nil {
			err = rc.Flush()
		}
		return err
	}
	mid := "msg-" + in.RunID
	if send(map[string]any{"type": "RUN_STARTED", "threadId": in.ThreadID, "runId": in.RunID}) != nil ||
		send(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}) != nil {
		return
	}
	if strings.HasPrefix(lastUserText(&in), oversizedMessage) {
		if !u.oversized(w, rc, in.RunID, mid, written) {
			return
		}
	} else {
		for i := range 5 {
			if send(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": fmt.Sprintf("reply part %d. ", i)}) != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	_ = send(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": mid})
	_ = send(map[string]any{"type": "RUN_FINISHED", "threadId": in.ThreadID, "runId": in.RunID})
}

// oversized writes the huge message's deltas, frame by frame from the
// shared text, until they are all written or the instance stops reading;
// it reports whether they were all written.
func (u *upstream) oversized(w io.Writer, rc *http.ResponseController, run, mid string, written int64) bool {
	s := &upstreamStream{Bytes: written}
	u.mu.Lock()
	u.streams[run] = s
	u.mu.Unlock()
	head := []byte(`data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"` + mid + `","delta":"`)
	tail := []byte("\"}\n\n")
	var err error
	for i := 0; i < u.n && err == nil; i++ {
		var n int
		for _, part := range [][]byte{head, u.frame, tail} {
			if err == nil {
				n, err = w.Write(part)
				u.mu.Lock()
				s.Bytes += int64(n)
				u.mu.Unlock()
			}
		}
		if err == nil {
			err = rc.Flush()
		}
		if err == nil {
			u.mu.Lock()
			s.Frames++
			u.mu.Unlock()
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	s.Done = true
	if err != nil {
		s.Err = err.Error()
		return false
	}
	return true
}
