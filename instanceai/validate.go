package instanceai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ValidationError names the field of an event (or request) that is wrong.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func required(field, v string) error {
	if v == "" {
		return &ValidationError{Field: field, Reason: "is required"}
	}
	return nil
}

// unsafeObjectKeys are the ids n8n's agent-run reducer refuses to use as
// object keys (UNSAFE_OBJECT_KEYS): an event keyed by one is silently dropped.
var unsafeObjectKeys = []string{"__proto__", "constructor", "prototype"}

// requiredKey is required plus the reducer's safe-key rule, for ids the
// reducer uses as object keys (agentId, parentId, toolCallId, workflowId).
func requiredKey(field, v string) error {
	if err := required(field, v); err != nil {
		return err
	}
	if slices.Contains(unsafeObjectKeys, v) {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("must not be %q (n8n's agent-run reducer ignores events keyed by it)", v)}
	}
	return nil
}

func oneOf(field, v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("must be one of %v, got %q", allowed, v)}
	}
	return nil
}

func optionalOneOf(field, v string, allowed ...string) error {
	if v == "" {
		return nil
	}
	return oneOf(field, v, allowed...)
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// jsonKind is the kind of a JSON text by its first byte: '{', '[', '"',
// 'n' (null), 't'/'f' (boolean), '0' (number) or 0 when empty or invalid.
// Invalid UTF-8 counts as invalid: encoding/json lets it through in raw
// values, and PostgreSQL would then refuse the row while SQLite kept it.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !json.Valid(raw) || !utf8.Valid(raw) {
		return 0
	}
	switch c := raw[0]; c {
	case '{', '[', '"', 'n', 't', 'f':
		return c
	default:
		return '0'
	}
}

// jsonObject accepts an unset field (it marshals as {}) or a JSON object.
func jsonObject(field string, raw json.RawMessage) error {
	if raw == nil || jsonKind(raw) == '{' {
		return nil
	}
	return &ValidationError{Field: field, Reason: "must be a JSON object"}
}

// jsonValue accepts an unset field (it marshals as null or is omitted) or any
// JSON value.
func jsonValue(field string, raw json.RawMessage) error {
	if raw == nil || jsonKind(raw) != 0 {
		return nil
	}
	return &ValidationError{Field: field, Reason: "must be a JSON value"}
}

func finite(field string, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return invalid(field, "must be a finite number")
	}
	return nil
}

func nonNegative(field string, n int) error {
	if n < 0 {
		return invalid(field, "must not be negative, got %d", n)
	}
	return nil
}

// jsLength is the length of s as JavaScript counts it (UTF-16 code units),
// which is what n8n's length limits measure.
func jsLength(s string) int {
	n := 0
	for _, r := range s {
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// isJSSpace reports whether JavaScript's String.prototype.trim removes r.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

func jsTrim(s string) string { return strings.TrimFunc(s, isJSSpace) }

// exactHTTPOrigin accepts an http or https origin written exactly as a browser
// serialises it (lower-case scheme and host, no default port, no path), at
// most 300 characters. It is conservative: hosts that a browser would rewrite
// (IDN, IPv6, short IPv4 forms) are refused rather than guessed.
func exactHTTPOrigin(field, v string) error {
	bad := func(why string) error {
		return invalid(field, "must be an exact HTTP origin such as https://api.example.com (%s), got %q", why, v)
	}
	if jsLength(v) > 300 {
		return bad("at most 300 characters")
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return bad("scheme http or https")
	}
	host, port, hasPort := strings.Cut(rest, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		switch {
		case err != nil || n < 0 || n > 65535 || strconv.Itoa(n) != port:
			return bad("port")
		case (scheme == "http" && n == 80) || (scheme == "https" && n == 443):
			return bad("no default port")
		}
	}
	if host == "" {
		return bad("host")
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' || strings.HasPrefix(l, "xn--") {
			return bad("host")
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return bad("host")
			}
		}
	}
	// A host whose last label is numeric is an IPv4 address to a browser:
	// only the canonical dotted quad survives unchanged.
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		if len(labels) != 4 {
			return bad("IPv4 address")
		}
		for _, l := range labels {
			n, err := strconv.Atoi(l)
			if err != nil || n > 255 || strconv.Itoa(n) != l {
				return bad("IPv4 address")
			}
		}
	}
	return nil
}

// Validate checks an event the way a producer must before publishing it:
// envelope fields present, payload of the right kind and complete. An event
// that passes marshals to JSON that n8n's instanceAiEventSchema accepts
// unchanged. Some rules are stricter than the schema (identifiers must not be
// empty; a confirmation must be one n8n's UI can show).
func (e *Event) Validate() error {
	if newPayload(e.Type) == nil {
		return &ValidationError{Field: "type", Reason: fmt.Sprintf("unknown event type %q", e.Type)}
	}
	if err := required("runId", e.RunID); err != nil {
		return err
	}
	if err := requiredKey("agentId", e.AgentID); err != nil {
		return err
	}
	if e.Payload == nil {
		return &ValidationError{Field: "payload", Reason: "is required"}
	}
	if want, got := fmt.Sprintf("%T", newPayload(e.Type)), fmt.Sprintf("%T", e.Payload); want != got {
		return &ValidationError{Field: "payload", Reason: fmt.Sprintf("%s needs a %s payload, got %s", e.Type, want, got)}
	}
	if err := e.Payload.validate(e.Type); err != nil {
		if ve, ok := err.(*ValidationError); ok {
			return &ValidationError{Field: "payload." + ve.Field, Reason: ve.Reason}
		}
		return err
	}
	return nil
}
