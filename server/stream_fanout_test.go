package server_test

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// BenchmarkStreamFanout compares, in one run, the two ways a native event
// stream is served over sockets: on a connection taken over from net/http
// (a goroutine runs only while there is something to write) and in its
// handler (the HTTP/2 way, forced here by hiding http.Hijacker). Rounds
// alternate between two servers of 200 streams each on one thread; a
// round publishes 50 one-frame batches, the worst case for waking a
// stream per batch, and waits for every stream to read them.
//
//	go test -run '^$' -bench StreamFanout -benchtime 100x ./server/
func BenchmarkStreamFanout(b *testing.B) {
	hijacked := newStreamFanout(b, nil)
	inHandler := newStreamFanout(b, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(noHijack{w}, r) })
	})
	rounds, hijackedTime, handlerTime := 0, time.Duration(0), time.Duration(0)
	for b.Loop() {
		if rounds%2 == 0 {
			hijackedTime += hijacked.round(b)
			handlerTime += inHandler.round(b)
		} else {
			handlerTime += inHandler.round(b)
			hijackedTime += hijacked.round(b)
		}
		rounds++
	}
	deliveries := float64(rounds * streamFanoutBatches * streamFanoutStreams)
	b.ReportMetric(deliveries/hijackedTime.Seconds(), "hijacked-deliveries/s")
	b.ReportMetric(deliveries/handlerTime.Seconds(), "handler-deliveries/s")
	b.ReportMetric(handlerTime.Seconds()/hijackedTime.Seconds(), "hijacked/handler")
}

const (
	streamFanoutStreams = 200
	streamFanoutBatches = 50
)

// noHijack hides the ResponseWriter's Hijacker (and Unwrap), as an HTTP/2
// ResponseWriter has none; it keeps Flush.
type noHijack struct{ w http.ResponseWriter }

func (n noHijack) Header() http.Header         { return n.w.Header() }
func (n noHijack) Write(p []byte) (int, error) { return n.w.Write(p) }
func (n noHijack) WriteHeader(code int)        { n.w.WriteHeader(code) }
func (n noHijack) Flush()                      { n.w.(http.Flusher).Flush() }

type streamFanout struct {
	h         *servertest.Server
	delivered atomic.Int64
	frame     instanceai.Frame
}

func newStreamFanout(b *testing.B, wrap func(http.Handler) http.Handler) *streamFanout {
	h := servertest.Start(b, servertest.OpenStore(b, "memory"), servertest.Options{WrapHandler: wrap,
		Config: server.Config{SubscriberQueue: defaultSubscriberQueue}})
	h.EnsureThread("fan")
	f := &streamFanout{h: h}
	ev := instanceai.Event{Type: instanceai.TypeTextDelta, RunID: "run", AgentID: "agent", ResponseID: "resp",
		Payload: &instanceai.Text{Text: "a delta of a few words, as a model streams them"}}
	var err error
	if f.frame, err = instanceai.NewFrame(0, &ev); err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(h.URL)
	if err != nil {
		b.Fatal(err)
	}
	for range streamFanoutStreams {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte("GET /instance-ai/events/fan HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n")); err != nil {
			b.Fatal(err)
		}
		go func() {
			rd := bufio.NewReaderSize(c, 32<<10)
			for {
				line, err := rd.ReadSlice('\n')
				if err != nil {
					return
				}
				if bytes.HasPrefix(line, []byte("data:")) {
					f.delivered.Add(1)
				}
			}
		}()
	}
	for h.App.Subscribers() < streamFanoutStreams {
		time.Sleep(time.Millisecond)
	}
	return f
}

func (f *streamFanout) round(b *testing.B) time.Duration {
	want := f.delivered.Load() + streamFanoutBatches*streamFanoutStreams
	t0 := time.Now()
	for range streamFanoutBatches {
		f.h.Hub.Publish("fan", []instanceai.Frame{f.frame})
	}
	deadline := t0.Add(30 * time.Second)
	for f.delivered.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d deliveries after 30 s", f.delivered.Load()-want+streamFanoutBatches*streamFanoutStreams,
				streamFanoutBatches*streamFanoutStreams)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return time.Since(t0)
}
