// Package httpjson writes JSON responses and the project's error shape,
// `{"error": {"code", "message", "details"?}}`, and decodes size-limited
// JSON request bodies into errors that name what was wrong.
package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/threadline/threadline/instanceai"
)

// DefaultMaxBody is the default request body limit (1 MiB).
const DefaultMaxBody = 1 << 20

// DefaultChatMaxBody is the default body limit of the requests that start
// a run with a user message, which may carry files (AG-UI /run-agent,
// CopilotKit's runs, the native chat): 32 MiB. A message may hold 16 MiB
// of base64 (n8n Instance AI's limit, instanceai.MaxMessageAttachmentBytes
// decoded), and an AG-UI client sends the whole conversation with every
// run, so an earlier message's files come again with the new one's.
const DefaultChatMaxBody = 32 << 20

// Write sends v as JSON with the given status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ErrorBody is the error shape of every 4xx and 5xx response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong; Details.field names the request field.
type ErrorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Error is an HTTP error with its JSON body.
type Error struct {
	Status int
	Detail ErrorDetail
	// RetryAfter, when positive, is sent as the Retry-After header (in
	// seconds), for a 503 the client should retry.
	RetryAfter int
}

func (e *Error) Error() string { return e.Detail.Message }

// NewError builds an error; field, when set, goes into details.field.
func NewError(status int, code, field, format string, args ...any) *Error {
	e := &Error{Status: status, Detail: ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...)}}
	if field != "" {
		e.Detail.Details = map[string]any{"field": field}
	}
	return e
}

// With adds details to the error's (beside details.field, which it keeps)
// and returns it.
func (e *Error) With(details map[string]any) *Error {
	if e.Detail.Details == nil {
		e.Detail.Details = make(map[string]any, len(details))
	}
	for k, v := range details {
		e.Detail.Details[k] = v
	}
	return e
}

// WriteError sends err: an *Error as it is, the core's errors as FromCore
// maps them, and anything else as a 500 that does not leak internals (and
// is logged).
func WriteError(w http.ResponseWriter, err error) {
	e := FromCore(err)
	if e == nil && errors.Is(err, instanceai.ErrStorageUnavailable) {
		// The database is down or unreachable: a client should retry, and
		// the operator must hear of it.
		slog.Warn("request failed: the store is unavailable", "err", err)
		e = NewError(http.StatusServiceUnavailable, "storage_unavailable", "",
			"the server's database is unavailable; retry in a moment")
		e.RetryAfter = 2
	}
	if e == nil {
		// The client learns nothing of the cause; the operator must.
		slog.Error("request failed with an internal error", "err", err)
		e = NewError(http.StatusInternalServerError, "internal_error", "", "internal server error")
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	Write(w, e.Status, ErrorBody{Error: e.Detail})
}

// FromCore is the one mapping of the core's errors to HTTP, for every
// surface: an *Error is returned as it is, and nil means err is none of
// them (an internal error).
func FromCore(err error) *Error {
	var (
		e        *Error
		active   *instanceai.RunActiveError
		missing  *instanceai.ThreadNotFoundError
		unknown  *instanceai.UnknownAgentError
		badRun   *instanceai.InvalidRunIDError
		rule     *instanceai.RuleError
		limit    *instanceai.LimitError
		unstored *instanceai.NotStoredError
		inField  *fieldError
		fieldFor = func(def string) string {
			if errors.As(err, &inField) {
				return inField.field
			}
			return def
		}
	)
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &active):
		e = NewError(http.StatusConflict, "run_active", "", "%s", active.Error())
		e.Detail.Details = map[string]any{"runId": active.RunID}
		return e
	case errors.As(err, &missing):
		return NewError(http.StatusNotFound, "thread_not_found", "threadId", "%s", missing.Error())
	case errors.As(err, &unknown):
		return NewError(http.StatusBadRequest, "unknown_agent", fieldFor("agent"), "%s", unknown.Error())
	case errors.As(err, &badRun):
		return NewError(http.StatusBadRequest, "invalid_field", fieldFor("runId"), "%s", badRun.Error())
	case errors.As(err, &rule):
		return NewError(http.StatusBadRequest, instanceai.CodeRuleBroken, fieldFor(rule.Field), "%s", rule.Error()).
			With(map[string]any{"rule": rule.Rule, "eventType": rule.Type})
	case errors.As(err, &limit):
		return NewError(http.StatusRequestEntityTooLarge, limit.Code, fieldFor(""), "%s", limit.Error()).
			With(map[string]any{"limit": limit.Limit, "eventType": limit.Type})
	case errors.As(err, &unstored):
		// The events were not stored: the run ended, or is another
		// instance's now. Its fate is the code; retrying here cannot
		// store them.
		e = NewError(http.StatusConflict, unstored.Fate, "runId", "%s", unstored.Error())
		return e
	case errors.Is(err, instanceai.ErrDraining):
		// A run asked of an instance that drains before a shutdown: a
		// client or a load balancer tries again, elsewhere.
		e = NewError(http.StatusServiceUnavailable, "server_draining", "",
			"this instance is shutting down and takes no new runs; retry in a moment")
		e.RetryAfter = 1
		return e
	case errors.Is(err, instanceai.ErrStartLost):
		// The store did not keep the run's claim while it started (a
		// frozen or partitioned database): nothing was written.
		e = NewError(http.StatusServiceUnavailable, "start_interrupted", "",
			"the run could not begin: its claim on the thread was lost while it started (the store is slow or unreachable); nothing was stored, retry")
		e.RetryAfter = 1
		return e
	case errors.Is(err, context.Canceled):
		// The request was cut short: by the client, which reads no
		// answer, or by a shutdown, whose client should retry elsewhere.
		e = NewError(http.StatusServiceUnavailable, "server_shutting_down", "",
			"the request was interrupted (the instance is shutting down); retry")
		e.RetryAfter = 1
		return e
	}
	return nil
}

// AtField names the request field a core error is about, for the errors
// that concern one value the client sent (an unknown agent name): each
// surface spells its fields its own way (AG-UI nests the agent under
// forwardedProps), and the core knows none of them. A nil err stays nil.
func AtField(err error, field string) error {
	if err == nil {
		return nil
	}
	return &fieldError{err: err, field: field}
}

type fieldError struct {
	err   error
	field string
}

func (f *fieldError) Error() string { return f.err.Error() }
func (f *fieldError) Unwrap() error { return f.err }

// ReadBody reads a request body of at most limit bytes: 413 for a larger
// one, 408 for one the client did not finish sending in time (the server's
// body timeout), 400 for one that could not be read otherwise.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return nil, NewError(http.StatusRequestEntityTooLarge, "body_too_large", "",
				"request body exceeds the limit of %d bytes", limit)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, NewError(http.StatusRequestTimeout, "request_timeout", "",
				"the request body did not arrive in time")
		}
		return nil, NewError(http.StatusBadRequest, "unreadable_body", "", "could not read the request body: %v", err)
	}
	return data, nil
}

// Decode reads a JSON body of at most limit bytes into v. It answers 413
// for a larger body and 400 for malformed JSON or a wrongly typed field,
// naming the field when it can. Unknown fields are ignored.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	data, err := ReadBody(w, r, limit)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return NewError(http.StatusBadRequest, "invalid_json", "", "request body is empty; expected a JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			if typeErr.Field == "" {
				return NewError(http.StatusBadRequest, "invalid_json", "",
					"request body must be a JSON %s, got %s", jsonKind(typeErr.Type), valueKind(typeErr.Value))
			}
			field := jsonPath(reflect.TypeOf(v), typeErr.Field)
			return NewError(http.StatusBadRequest, "invalid_field", field,
				"field %q must be a JSON %s, got %s", field, jsonKind(typeErr.Type), valueKind(typeErr.Value))
		}
		return NewError(http.StatusBadRequest, "invalid_json", "", "request body is not valid JSON: %v", err)
	}
	return nil
}

// valueKind names the kind of JSON value encoding/json reports as a type
// error's Value in JSON's words ("bool" is a boolean).
func valueKind(v string) string {
	if v == "bool" {
		return "boolean"
	}
	return v
}

// jsonPath is the path encoding/json reports for a field of t (dotted, in
// the JSON's names) without the names of embedded structs, which it puts
// in although the JSON has no such level: "tracking.run_id" is the
// client's "run_id".
func jsonPath(t reflect.Type, path string) string {
	var out []string
	for seg := range strings.SplitSeq(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			out, t = append(out, seg), nil
			continue
		}
		next, embedded := fieldType(t, seg)
		if !embedded {
			out = append(out, seg)
		}
		t = next
	}
	return strings.Join(out, ".")
}

// fieldType finds the field of struct t that a path segment names: by its
// JSON name, or an embedded struct by its Go name.
func fieldType(t reflect.Type, seg string) (ft reflect.Type, embedded bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Name == seg {
			return f.Type, true
		}
		if name == seg || (name == "" && strings.EqualFold(f.Name, seg)) {
			return f.Type, false
		}
	}
	return nil, false
}

// jsonKind names the JSON kind a Go type decodes from, so that an error
// speaks of the request's JSON and not of the server's types.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "value"
}
