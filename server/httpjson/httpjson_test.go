package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
		{"draining", fmt.Errorf("start: %w", instanceai.ErrDraining), 503, "server_draining", "", "", "1"},
		{"cancelled", fmt.Errorf("read: %w", context.Canceled), 503, "server_shutting_down", "", "", "1"},
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
