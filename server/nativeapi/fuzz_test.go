package nativeapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/nativeapi"
	"github.com/threadline/threadline/storage/memory"
)

// FuzzChatRequest: whatever the body, the answer is a run (200), a JSON 4xx,
// or a 409 for the run it started earlier; never a 5xx or a crash, and a
// rejected request stores nothing.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{`{"message":"simple"}`, `{"message":""}`, `{`, `[]`, `null`, `{"message":null}`,
		`{"message":"long 3","attachments":[1]}`, "\xff\xfe", `{"message":"\u0000"}`,
		`{"message":"","attachments":[{"type":"file","data":"iVBORw0KGgo=","mimeType":"image/png","fileName":"a.png"}]}`,
		`{"attachments":[{"type":"file","data":"JVBERi0=","mimeType":"application/pdf; x=1","fileName":""},{"type":"workflow","id":"w"}]}`,
		`{"message":"a","attachments":[{"type":"file","data":"A=A=","mimeType":"audio/ogg","fileName":null}]}`} {
		f.Add(s, "thread-1")
	}
	store := memory.New()
	core := instanceai.NewCore(store, instanceai.AgentFunc(func(ctx context.Context, r *instanceai.Run) error { return nil }),
		instanceai.CoreConfig{})
	f.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	router := mux.NewRouter()
	nativeapi.New(core, nativeapi.Config{MaxBody: 4096, ChatMaxBody: 4096}).Register(router)

	f.Fuzz(func(t *testing.T, body, thread string) {
		req := httptest.NewRequest(http.MethodPost, "/instance-ai/chat/x", strings.NewReader(body))
		req = mux.SetURLVars(req, map[string]string{"threadId": thread})
		rec := httptest.NewRecorder()
		before, _ := store.ListMessages(context.Background(), thread)
		router.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK || rec.Code == http.StatusConflict:
		case rec.Code >= 400 && rec.Code < 500:
			// The chat's message is stored as its run starts, which a
			// refused chat never does.
			if after, _ := store.ListMessages(context.Background(), thread); len(after) != len(before) {
				t.Fatalf("refused chat (%d) stored a message: %q", rec.Code, body)
			}
			var out struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Error.Code == "" || out.Error.Message == "" {
				t.Fatalf("%d answer is not the error shape: %q", rec.Code, rec.Body.String())
			}
		default:
			t.Fatalf("status %d for body %q thread %q: %s", rec.Code, body, thread, rec.Body.String())
		}
	})
}

// FuzzEventsCursor: any cursor value gets a 400 JSON error or a stream.
func FuzzEventsCursor(f *testing.F) {
	for _, s := range []string{"0", "-1", "abc", "99999999999999999999", " 3", "1e3", ""} {
		f.Add(s)
	}
	store := memory.New()
	if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: auth.LocalUser}); err != nil {
		f.Fatal(err)
	}
	core := instanceai.NewCore(store, nil, instanceai.CoreConfig{})
	f.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	router := mux.NewRouter()
	nativeapi.New(core, nativeapi.Config{}).Register(router)

	f.Fuzz(func(t *testing.T, cursor string) {
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest(http.MethodGet, "/instance-ai/events/t", nil).WithContext(ctx)
		req.Header.Set("Last-Event-ID", cursor)
		rec := httptest.NewRecorder()
		cancel() // a valid cursor streams until the client leaves: leave at once
		router.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			if !strings.HasPrefix(rec.Body.String(), ": connected\n\n") {
				t.Fatalf("stream did not open: %q", rec.Body.String())
			}
		case http.StatusBadRequest:
			if !strings.Contains(rec.Body.String(), `"invalid_cursor"`) {
				t.Fatalf("400 without invalid_cursor: %q", rec.Body.String())
			}
		default:
			t.Fatalf("cursor %q: status %d", cursor, rec.Code)
		}
	})
}
