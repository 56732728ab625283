package aguiapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage"
)

// brokenLog is a store whose log reads fail once broken is set, as a
// database that went away.
type brokenLog struct {
	instanceai.Store
	broken *atomic.Bool
}

func (b brokenLog) ReadAfter(ctx context.Context, thread string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	if b.broken.Load() {
		return nil, errors.New("connection refused")
	}
	return b.Store.ReadAfter(ctx, thread, after, limit)
}

func (b brokenLog) ReadRowsAfter(ctx context.Context, thread string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	if b.broken.Load() {
		return nil, errors.New("connection refused")
	}
	return b.Store.ReadRowsAfter(ctx, thread, after, limit, maxBytes)
}

func (b brokenLog) ReadPage(ctx context.Context, thread string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	if b.broken.Load() {
		return nil, errors.New("connection refused")
	}
	return b.Store.ReadPage(ctx, thread, q)
}

// TestStreamEndsWithRunErrorWhenTheLogFails checks that a stream whose
// source fails still ends with a terminal event: the resume of a run
// suspended on a confirmation, whose stream reads the log after the
// client's cursor.
func TestStreamEndsWithRunErrorWhenTheLogFails(t *testing.T) {
	store, err := storage.Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	broken := &atomic.Bool{}
	core := instanceai.NewCore(brokenLog{store, broken}, &script.Agent{}, instanceai.CoreConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = core.Shutdown(ctx)
	})
	r := mux.NewRouter()
	New(core, Config{}).Register(r, r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	post := func(body string) (int, []string, string) {
		t.Helper()
		res, err := http.Post(srv.URL+"/run-agent", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, `data: {"type":"`); ok {
				types = append(types, rest[:strings.IndexByte(rest, '"')])
			}
		}
		return res.StatusCode, types, string(raw)
	}
	code, types, raw := post(`{"threadId":"t1","runId":"r1","messages":[{"id":"m","role":"user","content":"confirm"}]}`)
	i := strings.Index(raw, `"interrupts":[{"id":"`)
	if code != http.StatusOK || i < 0 {
		t.Fatalf("the confirm run: %d %v", code, types)
	}
	interrupt := raw[i+len(`"interrupts":[{"id":"`):]
	interrupt = interrupt[:strings.IndexByte(interrupt, '"')]
	broken.Store(true)
	code, types, raw = post(`{"threadId":"t1","runId":"r2","messages":[],"resume":[{"interruptId":"` + interrupt +
		`","status":"resolved","payload":{"approved":true}}]}`)
	if code != http.StatusOK || strings.Join(types, " ") != "RUN_STARTED RUN_ERROR" {
		t.Fatalf("status %d, events %v:\n%s", code, types, raw)
	}
	if !strings.Contains(raw, "connection refused") {
		t.Fatalf("RUN_ERROR does not say why:\n%s", raw)
	}
}
