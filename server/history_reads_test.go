package server_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/faultproxy"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
	"github.com/threadline/threadline/storage/sqlite"
)

// countedStore is a store kind whose reads a test can count: open returns
// a fresh, migrated store and a function that tells how many bytes it has
// read so far.
type countedStore struct {
	name string
	open func(tb testing.TB) (instanceai.Store, func() int64)
}

// countedStores are the stores that read from somewhere: PostgreSQL,
// counted on the wire, and SQLite, counted as its reads return. (The
// memory store reads nothing.)
var countedStores = []countedStore{
	{"postgres", openProxiedPostgres},
	{"sqlite", openCountingSQLite},
}

// openProxiedPostgres opens a PostgreSQL store whose connections go
// through a proxy that counts what the server sends: every byte a read
// costs the server, whatever the client does with it afterwards (lib/pq
// receives and drops the rest of a result it closes early).
func openProxiedPostgres(tb testing.TB) (instanceai.Store, func() int64) {
	tb.Helper()
	u, err := url.Parse(testpg.FreshDSN(tb))
	if err != nil || u.Host == "" {
		tb.Fatalf("TEST_DATABASE_URL must be a postgres:// URL for the proxy to stand in for its host: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target += ":5432"
	}
	p, err := faultproxy.Listen(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	store := servertest.OpenStore(tb, u.String())
	return store, func() int64 { _, from := p.Bytes(); return from }
}

// openCountingSQLite opens a SQLite store whose reads of events and
// messages count the bytes they return. SQLite reads in the process, and a
// query stops where its reader stops stepping, so what the reads return is
// what the database read of those rows.
func openCountingSQLite(tb testing.TB) (instanceai.Store, func() int64) {
	tb.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "threadline.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	c := &readCountingStore{Store: s}
	return c, c.read.Load
}

// readCountingStore is a SQLite store that counts the bytes of events
// and messages its reads return. It embeds the store, so the server finds
// every capability the store has; countedReads names the reads it
// overrides, and TestReadCountingStoreCountsEveryRead checks that no read
// of the store escapes it.
type readCountingStore struct {
	*sqlite.Store
	read atomic.Int64
}

// countedReads are the methods readCountingStore overrides.
var countedReads = []string{"ReadAfter", "ReadRowsAfter", "ReadLightRowsAfter", "ReadRowPart", "ReadPage", "RunEvents",
	"ListMessages", "MessageHeads", "MessagesByID"}

func (c *readCountingStore) events(rows []instanceai.StoredEvent) {
	for i := range rows {
		c.read.Add(int64(len(rows[i].Data)))
	}
}

func (c *readCountingStore) rows(rows []instanceai.StoredRow) {
	for i := range rows {
		c.read.Add(int64(len(rows[i].Data)))
	}
}

func (c *readCountingStore) messages(msgs []instanceai.Message) {
	for i := range msgs {
		c.read.Add(int64(len(msgs[i].Content)))
	}
}

func (c *readCountingStore) ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	out, err := c.Store.ReadAfter(ctx, threadID, after, limit)
	c.events(out)
	return out, err
}

func (c *readCountingStore) ReadRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	out, err := c.Store.ReadRowsAfter(ctx, threadID, after, limit, maxBytes)
	c.rows(out)
	return out, err
}

func (c *readCountingStore) ReadLightRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes, large int) ([]instanceai.StoredRow, error) {
	out, err := c.Store.ReadLightRowsAfter(ctx, threadID, after, limit, maxBytes, large)
	c.rows(out)
	return out, err
}

func (c *readCountingStore) ReadRowPart(ctx context.Context, threadID string, seq int64, off, n int) ([]byte, error) {
	out, err := c.Store.ReadRowPart(ctx, threadID, seq, off, n)
	c.read.Add(int64(len(out)))
	return out, err
}

func (c *readCountingStore) ReadPage(ctx context.Context, threadID string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	out, err := c.Store.ReadPage(ctx, threadID, q)
	c.rows(out)
	return out, err
}

func (c *readCountingStore) RunEvents(ctx context.Context, threadID, runID string) ([]instanceai.StoredEvent, error) {
	out, err := c.Store.RunEvents(ctx, threadID, runID)
	c.events(out)
	return out, err
}

func (c *readCountingStore) ListMessages(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := c.Store.ListMessages(ctx, threadID)
	c.messages(out)
	return out, err
}

// MessageHeads leaves the contents out: it counts what is left, nothing.
func (c *readCountingStore) MessageHeads(ctx context.Context, threadID string) ([]instanceai.Message, error) {
	out, err := c.Store.MessageHeads(ctx, threadID)
	c.messages(out)
	return out, err
}

func (c *readCountingStore) MessagesByID(ctx context.Context, threadID string, ids []string) ([]instanceai.Message, error) {
	out, err := c.Store.MessagesByID(ctx, threadID, ids)
	c.messages(out)
	return out, err
}

// Every method of the SQLite store that returns events, rows, messages or
// bytes is one readCountingStore counts: a read it left to the embedded
// store would go uncounted, and the history test would pass whatever that
// read cost.
func TestReadCountingStoreCountsEveryRead(t *testing.T) {
	data := []reflect.Type{
		reflect.TypeFor[[]instanceai.StoredEvent](), reflect.TypeFor[[]instanceai.StoredRow](),
		reflect.TypeFor[[]instanceai.Message](), reflect.TypeFor[[]byte](),
	}
	store := reflect.TypeFor[*sqlite.Store]()
	counter := reflect.TypeFor[*readCountingStore]()
	for i := range store.NumMethod() {
		m := store.Method(i)
		if m.Type.NumOut() == 0 || !slices.Contains(data, m.Type.Out(0)) {
			continue
		}
		if !slices.Contains(countedReads, m.Name) {
			t.Errorf("(*sqlite.Store).%s returns %v, and readCountingStore does not count it", m.Name, m.Type.Out(0))
		}
	}
	for _, name := range countedReads {
		if _, ok := counter.MethodByName(name); !ok {
			t.Errorf("readCountingStore has no method %s", name)
		}
	}
}

// largeThread is a thread of runs of the reference agent, each on a message
// of size bytes, which the run's answer echoes: each run stores the message
// (as the user's) and a text block as large.
type largeThread struct {
	id   string
	runs []string
	// starts are the seqs of the runs' run-starts.
	starts []string
}

// seedLargeThread has the reference agent answer runs messages of size
// bytes in thread id, one after another.
func seedLargeThread(tb testing.TB, h *servertest.Server, id string, runs, size int) largeThread {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	letters := []byte("abcdefghijklmnopqrstuvwxyz")
	payload := make([]byte, size)
	h.EnsureThread(id)
	live := h.Connect(id, "", false)
	defer live.Close()
	th := largeThread{id: id}
	for i := range runs {
		for j := range payload {
			payload[j] = letters[rng.IntN(len(letters))]
		}
		runID := h.Chat(id, "simple m"+strconv.Itoa(i)+" "+string(payload))
		for _, f := range live.Until(wait, servertest.IsRunFinish(runID)) {
			if f.Decoded.Type == instanceai.TypeRunStart && f.Decoded.RunID == runID {
				th.starts = append(th.starts, f.ID)
			}
		}
		th.runs = append(th.runs, runID)
	}
	return th
}

// historyRequest is one request that reads a thread's history.
type historyRequest struct {
	name string
	// request makes the request for thread th on the server at base.
	request func(base string, th largeThread) *http.Request
	// want is in the answer: the newest run it must hold.
	want func(th largeThread) string
}

func getRequest(path string) func(string, largeThread) *http.Request {
	return func(base string, th largeThread) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, base+strings.ReplaceAll(path, "{thread}", th.id), nil)
		req.Header.Set("Accept", "text/event-stream")
		return req
	}
}

func connectRequest(after func(th largeThread) string) func(string, largeThread) *http.Request {
	return func(base string, th largeThread) *http.Request {
		body := fmt.Sprintf(`{"threadId":%q`, th.id)
		if after != nil {
			body += fmt.Sprintf(`,"lastSeenEventId":%q`, after(th))
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/copilotkit/agent/default/connect", strings.NewReader(body+"}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		return req
	}
}

// newestRun is the thread's last run, which every newest window holds.
func newestRun(th largeThread) string { return th.runs[len(th.runs)-1] }

// historyRequests are the requests that read a window of a thread's
// history: the native /messages (newest, and an older page), the AG-UI
// rejoin's MESSAGES_SNAPSHOT, and CopilotKit's connect (from the start,
// and from a cursor at the newest run's start, which continues that run as
// a rejoin does).
var historyRequests = []historyRequest{
	{"messages", getRequest("/instance-ai/threads/{thread}/messages"), newestRun},
	{"messages before", getRequest("/instance-ai/threads/{thread}/messages?before=6"),
		func(th largeThread) string { return th.runs[2] }},
	{"agui rejoin", getRequest("/agui/threads/{thread}/events"), newestRun},
	{"copilotkit connect", connectRequest(nil), newestRun},
	{"copilotkit connect after", connectRequest(func(th largeThread) string { return th.starts[len(th.starts)-1] }), newestRun},
}

// measureRead makes req and returns its answer and how many bytes the
// store read meanwhile.
func measureRead(tb testing.TB, client *http.Client, req *http.Request, read func() int64) (answer []byte, readBytes int64) {
	tb.Helper()
	before := read()
	res, err := client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	answer, err = io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("%s %s: %d %s", req.Method, req.URL.Path, res.StatusCode, answer)
	}
	return answer, read() - before
}

// maxReadPerAnswered bounds what a history request may read from the store
// per byte it answers.
const maxReadPerAnswered = 4

// A request for a window of a thread's history reads from the store about
// what it answers, not the thread: on a thread of large events, each of
// /messages, the AG-UI rejoin and CopilotKit's connect receives from
// PostgreSQL (counted on the wire) and reads from SQLite at most
// maxReadPerAnswered times the bytes of its answer.
func TestHistoryReadsWhatItServes(t *testing.T) {
	const (
		runs    = 20
		size    = 512 << 10
		history = 1 << 20 // two entries of the thread: far less than the thread
	)
	for _, k := range countedStores {
		t.Run(k.name, func(t *testing.T) {
			store, read := k.open(t)
			h := servertest.Start(t, store, servertest.Options{Config: server.Config{HistoryMaxBytes: history}})
			th := seedLargeThread(t, h, "big", runs, size)
			for _, rq := range historyRequests {
				t.Run(rq.name, func(t *testing.T) {
					answer, got := measureRead(t, h.Client, rq.request(h.URL, th), read)
					if want := rq.want(th); !strings.Contains(string(answer), want) {
						t.Fatalf("the answer (%d bytes) does not hold run %s", len(answer), want)
					}
					ratio := float64(got) / float64(len(answer))
					t.Logf("read %d bytes for an answer of %d (%.2f×)", got, len(answer), ratio)
					if ratio > maxReadPerAnswered {
						t.Errorf("read %d bytes from the store for an answer of %d: %.1f×, more than %d×",
							got, len(answer), ratio, maxReadPerAnswered)
					}
				})
			}
		})
	}
}

// BenchmarkHistoryLargeThread measures GET /messages on a 50 MB thread (50
// runs, each a 1 MB message echoed as a 1 MB text block) against a full
// native replay of the same thread, the baseline, alternating the two.
// It reports the time of /messages over the replay's, and what each read
// from the store per request (PostgreSQL on the wire, SQLite as its reads
// return), beside what /messages answered.
//
//	go test -run '^$' -bench HistoryLargeThread -benchtime 5x ./server/
func BenchmarkHistoryLargeThread(b *testing.B) {
	const (
		runs = 50
		size = 1 << 20
	)
	for _, k := range countedStores {
		b.Run(k.name, func(b *testing.B) {
			store, read := k.open(b)
			h := servertest.Start(b, store, servertest.Options{})
			th := seedLargeThread(b, h, "big", runs, size)
			var messages struct {
				elapsed       time.Duration
				read, answers int64
			}
			var replay struct {
				elapsed time.Duration
				read    int64
			}
			messagesOnce := func() {
				t0 := time.Now()
				answer, got := measureRead(b, h.Client, getRequest("/instance-ai/threads/{thread}/messages")(h.URL, th), read)
				messages.elapsed += time.Since(t0)
				messages.read += got
				messages.answers += int64(len(answer))
			}
			replayOnce := func() {
				t0 := time.Now()
				before := read()
				replayThread(b, h, th)
				replay.elapsed += time.Since(t0)
				replay.read += read() - before
			}
			i := 0
			for b.Loop() {
				// Alternated, so that the machine's moods fall on both.
				if i%2 == 0 {
					messagesOnce()
					replayOnce()
				} else {
					replayOnce()
					messagesOnce()
				}
				i++
			}
			n := float64(i)
			b.ReportMetric(messages.elapsed.Seconds()/replay.elapsed.Seconds(), "messages/replay")
			b.ReportMetric(float64(messages.read)/n/1e6, "messages-read-MB")
			b.ReportMetric(float64(messages.answers)/n/1e6, "messages-answer-MB")
			b.ReportMetric(float64(replay.read)/n/1e6, "replay-read-MB")
			b.ReportMetric(float64(messages.read)/float64(messages.answers), "messages-read/answer")
		})
	}
}

// replayThread reads the thread's native event stream from the start to
// the end of its last run.
func replayThread(tb testing.TB, h *servertest.Server, th largeThread) {
	tb.Helper()
	c := h.Connect(th.id, "", false)
	defer c.Close()
	c.Until(wait, servertest.IsRunFinish(newestRun(th)))
}
