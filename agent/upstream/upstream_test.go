package upstream_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/upstream"
	"github.com/threadline/threadline/agent/upstream/upstreamtest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

const wait = 30 * time.Second

// harness is the core as the server builds it (store, hub, writer, runs)
// around the upstream agent.
type harness struct {
	t      *testing.T
	store  *memory.Store
	writer *instanceai.Writer
	runs   *instanceai.Runs
}

func newHarness(t *testing.T, cfg upstream.Config) *harness {
	t.Helper()
	store := memory.New(memory.WithMaxEvents(1 << 20))
	cfg.Store = store
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, err := upstream.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writer := instanceai.NewWriter(store, instanceai.NewHub(1<<20), instanceai.WriterConfig{})
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	runs := instanceai.NewRuns(writer, a, instanceai.RunsConfig{Logger: cfg.Logger})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = runs.Shutdown(ctx)
	})
	return &harness{t: t, store: store, writer: writer, runs: runs}
}

// play runs message on a new thread and returns the run's stored events.
func (h *harness) play(thread, message string) []instanceai.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, _, err := h.store.EnsureThread(ctx, instanceai.Thread{ID: thread, OwnerID: "u"}); err != nil {
		h.t.Fatal(err)
	}
	run, err := h.runs.Start(instanceai.StartRequest{ThreadID: thread, UserID: "u", Message: message})
	if err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-ctx.Done():
		h.t.Fatal("the run did not end")
	}
	if err := h.writer.Sync(ctx, thread); err != nil {
		h.t.Fatal(err)
	}
	rows, err := h.store.ReadAfter(ctx, thread, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []instanceai.Event
	for _, r := range rows {
		if r.Event.RunID == run.ID {
			out = append(out, r.Event)
		}
	}
	return out
}

// counting counts the bytes the agent reads of the upstream's answers.
type counting struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// An upstream that sends one event larger than the bound on one event, on
// one line or over many lines of one frame, ends the run with
// event_too_large naming the bound and its flag, and what it sent before
// is kept. The agent stops reading where the bound is crossed: it reads
// little more than the bound of a stream that would be 64 MiB, and the
// upstream is cut off before it has written it.
func TestAnEventOverTheBoundEndsTheRun(t *testing.T) {
	const maxEvent = 1 << 20
	for _, script := range []string{upstreamtest.HugeLine, upstreamtest.HugeFrame} {
		t.Run(script, func(t *testing.T) {
			fake := upstreamtest.Start(t)
			body := &counting{base: http.DefaultTransport}
			h := newHarness(t, upstream.Config{Upstreams: []upstream.Upstream{{Name: "big", URL: fake.URL}},
				HTTPClient: &http.Client{Transport: body}, MaxEventBytes: maxEvent})
			evs := h.play("t-"+script, script)

			var failure *instanceai.ErrorPayload
			text := ""
			for _, ev := range evs {
				switch p := ev.Payload.(type) {
				case *instanceai.ErrorPayload:
					failure = p
				case *instanceai.Text:
					text += p.Text
				}
			}
			if failure == nil || failure.Code != instanceai.CodeEventTooLarge || failure.Provider != upstream.Provider {
				t.Fatalf("error %+v, want code %s", failure, instanceai.CodeEventTooLarge)
			}
			for _, want := range []string{`"big"`, "1 MiB", "--max-event-bytes", "what came before is kept"} {
				if !strings.Contains(failure.Content, want) {
					t.Errorf("the error %q does not say %q", failure.Content, want)
				}
			}
			if finish := evs[len(evs)-1].Payload.(*instanceai.RunFinish); finish.Status != instanceai.RunError {
				t.Fatalf("the run ended %+v", finish)
			}
			if text != "Kept." {
				t.Fatalf("kept text %q, want what came before the event", text)
			}
			// The bound, the reader's buffer, and the small events before.
			if n, most := body.read.Load(), int64(bound.Stream(maxEvent)+128<<10); n > most {
				t.Fatalf("read %d bytes of the upstream's stream, more than the bound allows (%d)", n, most)
			}
			deadline := time.Now().Add(wait)
			for {
				cut, whole := fake.Huge()
				if whole > 0 {
					t.Fatalf("the upstream wrote its %d bytes whole: the agent read them all", upstreamtest.HugeSize)
				}
				if cut == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the upstream is still writing: the agent did not go away")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// /llm/health is public: however many clients poll it at once, each
// upstream gets one probe while the answer is young, as the openai
// agent's model server does.
func TestHealthProbesAreShared(t *testing.T) {
	fake := upstreamtest.Start(t)
	a, err := upstream.New(upstream.Config{Upstreams: []upstream.Upstream{{Name: "fake", URL: fake.URL}},
		Store: memory.New(), HealthCacheTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 40)
	for i := range codes {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			a.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/llm/health", nil))
			codes[i] = rec.Code
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if n := fake.Probes(); n != 1 {
		t.Fatalf("40 requests made %d probes of the upstream, want 1", n)
	}
}
