package aguiapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage"
)

// brokenLog is a store whose log reads fail, as a database that went away.
type brokenLog struct{ instanceai.Store }

func (brokenLog) ReadAfter(context.Context, string, int64, int) ([]instanceai.StoredEvent, error) {
	return nil, errors.New("connection refused")
}

// TestStreamEndsWithRunErrorWhenTheLogFails checks that a stream whose
// source fails still ends with a terminal event.
func TestStreamEndsWithRunErrorWhenTheLogFails(t *testing.T) {
	store, err := storage.Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	core := instanceai.NewCore(brokenLog{store}, &script.Agent{}, instanceai.CoreConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = core.Runs.Shutdown(ctx)
		_ = core.Writer.Close(ctx)
	})
	r := mux.NewRouter()
	New(core, Config{}).Register(r, r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	body := `{"threadId":"t1","runId":"r1","messages":[{"id":"m","role":"user","content":"hello"}]}`
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
	if res.StatusCode != http.StatusOK || strings.Join(types, " ") != "RUN_STARTED RUN_ERROR" {
		t.Fatalf("status %d, events %v:\n%s", res.StatusCode, types, raw)
	}
	if !strings.Contains(string(raw), "connection refused") {
		t.Fatalf("RUN_ERROR does not say why:\n%s", raw)
	}
}
