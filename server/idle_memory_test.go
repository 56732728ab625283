package server_test

import (
	"bufio"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// BenchmarkIdleStreamMemory opens idleStreams SSE connections to one
// thread of a memory-store server in this process and reports what each
// costs once idle: heap and goroutine stacks in use, per connection. The
// clients are bare sockets that wrote their request and read the first
// comment, so nearly all of the figure is the server's (the client's side
// is one socket object each, a few hundred bytes).
//
//	go test -run '^$' -bench IdleStreamMemory -benchtime 1x ./server/
//
// With IDLE_HEAPPROFILE=<file> it writes a heap profile while the streams
// are open, to see what holds the bytes (add -memprofilerate 512 for a
// profile that samples the small allocations too):
//
//	IDLE_HEAPPROFILE=/tmp/idle.prof go test -run '^$' -bench 'IdleStreamMemory$' -benchtime 1x -memprofilerate 512 ./server/
//	go tool pprof -sample_index=inuse_space -top /tmp/idle.prof
func BenchmarkIdleStreamMemory(b *testing.B) { idleStreamMemory(b, servertest.OpenStore(b, "memory")) }

// BenchmarkIdleStreamMemorySQLite is the same on the SQLite store, whose
// driver's deep call chains once grew every stream goroutine's stack (see
// storage/sqlite's onFreshStack).
func BenchmarkIdleStreamMemorySQLite(b *testing.B) {
	idleStreamMemory(b, servertest.OpenStore(b, "sqlite:"+filepath.Join(b.TempDir(), "idle.db")))
}

func idleStreamMemory(b *testing.B, store instanceai.Store) {
	const idleStreams = 2000
	h := servertest.Start(b, store, servertest.Options{Config: server.Config{SubscriberQueue: defaultSubscriberQueue}})
	h.EnsureThread("idle")
	u, err := url.Parse(h.URL)
	if err != nil {
		b.Fatal(err)
	}
	request := "GET /instance-ai/events/idle HTTP/1.1\r\nHost: " + u.Host + "\r\nAccept: text/event-stream\r\n\r\n"
	for b.Loop() {
		before := inUse()
		conns := make([]net.Conn, 0, idleStreams)
		for range idleStreams {
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := c.Write([]byte(request)); err != nil {
				b.Fatal(err)
			}
			// The response head and the first comment: the stream is open.
			rd := bufio.NewReaderSize(c, 512)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.Contains(line, ": connected") {
					break
				}
			}
		}
		for h.App.Subscribers() < idleStreams {
			time.Sleep(time.Millisecond)
		}
		after := inUse()
		if path := os.Getenv("IDLE_HEAPPROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		b.ReportMetric(float64(after.heap-before.heap)/idleStreams, "heap-B/conn")
		b.ReportMetric(float64(after.stack-before.stack)/idleStreams, "stack-B/conn")
		b.ReportMetric(float64(after.heap+after.stack-before.heap-before.stack)/idleStreams, "B/conn")
		b.ReportMetric(float64(after.goroutines-before.goroutines)/idleStreams, "goroutines/conn")
		for _, c := range conns {
			c.Close()
		}
		for h.App.Subscribers() > 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

type memInUse struct {
	heap, stack uint64
	goroutines  int
}

func inUse() memInUse {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memInUse{heap: m.HeapInuse, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

func writeHeapProfile(b *testing.B, path string) {
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		b.Fatal(err)
	}
}
