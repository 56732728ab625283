package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// TestWriteErrorMapsCoreErrors pins the one mapping of the core's errors
// to HTTP that both surfaces rely on, wrapped or not.
func TestWriteErrorMapsCoreErrors(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		status     int
		code       string
		field      string
		runID      string
		retryAfter string
	}{
		{"run active", &instanceai.RunActiveError{ThreadID: "th", RunID: "run_1"}, 409, "run_active", "", "run_1", ""},
		{"run active, wrapped and at a field", AtField(fmt.Errorf("start: %w", &instanceai.RunActiveError{ThreadID: "th", RunID: "run_2"}), "agent"),
			409, "run_active", "", "run_2", ""},
		{"thread not found", &instanceai.ThreadNotFoundError{ThreadID: "th"}, 404, "thread_not_found", "threadId", "", ""},
		{"thread not found at another field keeps threadId", AtField(&instanceai.ThreadNotFoundError{ThreadID: "th"}, "agent"),
			404, "thread_not_found", "threadId", "", ""},
		{"unknown agent", &instanceai.UnknownAgentError{Name: "x"}, 400, "unknown_agent", "agent", "", ""},
		{"unknown agent at the surface's field", AtField(&instanceai.UnknownAgentError{Name: "x"}, "forwardedProps.agent"),
			400, "unknown_agent", "forwardedProps.agent", "", ""},
		{"invalid run id", AtField(&instanceai.InvalidRunIDError{RunID: "../x"}, "run_id"), 400, "invalid_field", "run_id", "", ""},
		{"a broken rule keeps its field beside the rule", &instanceai.RuleError{Rule: "unknown_agent", Type: instanceai.TypeToolCall, Field: "agentId", Reason: "x"},
			400, instanceai.CodeRuleBroken, "agentId", "", ""},
		{"a size over its bound keeps the surface's field", AtField(&instanceai.LimitError{Code: instanceai.CodeEventTooLarge, Size: 9, Limit: 8}, "events[1]"),
			413, instanceai.CodeEventTooLarge, "events[1]", "", ""},
		{"draining", fmt.Errorf("start: %w", instanceai.ErrDraining), 503, "server_draining", "", "", "1"},
		{"cancelled", fmt.Errorf("read: %w", context.Canceled), 503, "server_shutting_down", "", "", "1"},
		{"a start that lost its claim", fmt.Errorf("start run: %w", instanceai.ErrStartLost), 503, "start_interrupted", "", "", "1"},
		{"an *Error as it is", NewError(418, "teapot", "pot", "short and stout"), 418, "teapot", "pot", "", ""},
		{"anything else", errors.New("disk on fire"), 500, "internal_error", "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteError(rec, c.err)
			var body ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			field, _ := body.Error.Details["field"].(string)
			runID, _ := body.Error.Details["runId"].(string)
			if rec.Code != c.status || body.Error.Code != c.code || field != c.field || runID != c.runID ||
				rec.Header().Get("Retry-After") != c.retryAfter || body.Error.Message == "" {
				t.Fatalf("got %d %+v Retry-After %q; want %d %s field %q runId %q Retry-After %q",
					rec.Code, body.Error, rec.Header().Get("Retry-After"), c.status, c.code, c.field, c.runID, c.retryAfter)
			}
			if c.status == http.StatusInternalServerError && body.Error.Message != "internal server error" {
				t.Fatalf("a 500 leaks its cause: %q", body.Error.Message)
			}
		})
	}
	if AtField(nil, "agent") != nil {
		t.Fatal("AtField(nil) must stay nil")
	}
}

// A store that cannot reach its database is a 503 storage_unavailable with
// Retry-After; other internal errors stay 500s, a closed store's among
// them. Which driver errors mean an unreachable database is the stores'
// to say (storage/internal/storeerr): they mark them with
// instanceai.ErrStorageUnavailable.
func TestStorageOutagesAre503(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"unavailable", instanceai.ErrStorageUnavailable, http.StatusServiceUnavailable},
		{"unavailable, wrapped", fmt.Errorf("postgres: append: %w", fmt.Errorf("read: %w", instanceai.ErrStorageUnavailable)), http.StatusServiceUnavailable},
		{"unavailable beside the cause", errors.Join(errors.New("dial tcp: connection refused"), instanceai.ErrStorageUnavailable), http.StatusServiceUnavailable},
		{"closed store", fmt.Errorf("memory: %w", instanceai.ErrClosed), http.StatusInternalServerError},
		{"a bug", errors.New("nil map"), http.StatusInternalServerError},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, c.err)
		if rec.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, rec.Code, c.want)
		}
		if c.want == http.StatusServiceUnavailable && (rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"storage_unavailable"`)) {
			t.Errorf("%s: %s, Retry-After %q", c.name, rec.Body, rec.Header().Get("Retry-After"))
		}
	}
}

// A body or field of the wrong JSON kind is named in the request's terms:
// JSON kinds and the field's path, never the server's Go types.
func TestDecodeNamesJSONKinds(t *testing.T) {
	type inner struct {
		Count int `json:"count"`
	}
	type Embedded struct {
		RunID string `json:"run_id"`
	}
	type body struct {
		Name  string   `json:"name"`
		Tags  []string `json:"tags"`
		Inner inner    `json:"inner"`
		On    *bool    `json:"on"`
		List  []inner  `json:"list"`
		Embedded
	}
	cases := []struct{ in, code, field, message string }{
		{`[1]`, "invalid_json", "", "request body must be a JSON object, got array"},
		{`"x"`, "invalid_json", "", "request body must be a JSON object, got string"},
		{`{"name":7}`, "invalid_field", "name", `field "name" must be a JSON string, got number`},
		{`{"tags":"a"}`, "invalid_field", "tags", `field "tags" must be a JSON array, got string`},
		{`{"inner":{"count":"1"}}`, "invalid_field", "inner.count", `field "inner.count" must be a JSON integer, got string`},
		{`{"on":"yes"}`, "invalid_field", "on", `field "on" must be a JSON boolean, got string`},
		// An embedded struct's fields are the body's own.
		{`{"run_id":5}`, "invalid_field", "run_id", `field "run_id" must be a JSON string, got number`},
		{`{"list":[{"count":true}]}`, "invalid_field", "list.count", `field "list.count" must be a JSON integer, got boolean`},
	}
	for _, c := range cases {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.in))
		var v body
		err := Decode(httptest.NewRecorder(), req, 1<<10, &v)
		var he *Error
		if !errors.As(err, &he) || he.Detail.Code != c.code || fieldOf(he) != c.field || he.Detail.Message != c.message {
			t.Errorf("%s: %+v, want %s %q %q", c.in, err, c.code, c.field, c.message)
		}
		if strings.Contains(fmt.Sprint(err), "httpjson.") {
			t.Errorf("%s: the error names a Go type: %v", c.in, err)
		}
	}
}

// fieldOf is the field an error names, "" for none.
func fieldOf(e *Error) string {
	f, _ := e.Detail.Details["field"].(string)
	return f
}
