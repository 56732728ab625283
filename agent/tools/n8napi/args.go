package n8napi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// args is a tool call's arguments, decoded field by field so each problem
// names its field. Unknown fields are never looked at.
type args map[string]json.RawMessage

func decodeArgs(raw json.RawMessage) (args, error) {
	raw = bytes.TrimSpace(raw)
	// A model calling a tool without parameters may send nothing or null.
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return args{}, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("arguments must be a JSON object")
	}
	var a args
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	return a, nil
}

// present reports whether name was given with a non-null value.
func (a args) present(name string) bool {
	v, ok := a[name]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// idPattern is what a workflow id looks like: n8n makes nanoids of letters
// and digits (older releases used numeric ids). Checking it keeps the id a
// single, harmless path segment.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func (a args) id(name string, required bool) (string, error) {
	if !a.present(name) {
		if required {
			return "", fmt.Errorf("%s: required", name)
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(a[name], &s); err != nil {
		return "", fmt.Errorf("%s: must be a string", name)
	}
	if s == "" {
		return "", fmt.Errorf("%s: must not be empty", name)
	}
	if !idPattern.MatchString(s) {
		return "", fmt.Errorf("%s: %q is not a workflow id (1-128 letters, digits, _ or -)", name, clip(s))
	}
	return s, nil
}

// str returns an optional (or required) non-empty string.
func (a args) str(name string, required bool) (string, bool, error) {
	if !a.present(name) {
		if required {
			return "", false, fmt.Errorf("%s: required", name)
		}
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(a[name], &s); err != nil {
		return "", false, fmt.Errorf("%s: must be a string", name)
	}
	if s == "" {
		return "", false, fmt.Errorf("%s: must not be empty", name)
	}
	return s, true, nil
}

func (a args) boolean(name string) (value, ok bool, err error) {
	if !a.present(name) {
		return false, false, nil
	}
	if err := json.Unmarshal(a[name], &value); err != nil {
		return false, false, fmt.Errorf("%s: must be true or false", name)
	}
	return value, true, nil
}

// integer returns an optional integer in [lo, hi]. 5.0 is not an integer
// here: the schema says "integer", and accepting it would be a guess.
func (a args) integer(name string, lo, hi int64) (int64, bool, error) {
	if !a.present(name) {
		return 0, false, nil
	}
	// The raw value is valid JSON, so a plain integer literal parses here and
	// anything else (a string, a fraction, an exponent) does not.
	v, err := strconv.ParseInt(string(bytes.TrimSpace(a[name])), 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, false, fmt.Errorf("%s: must be an integer from %d to %d", name, lo, hi)
	}
	return v, true, nil
}

func (a args) enum(name string, allowed ...string) (string, bool, error) {
	if !a.present(name) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(a[name], &s); err == nil {
		for _, v := range allowed {
			if s == v {
				return s, true, nil
			}
		}
	}
	return "", false, fmt.Errorf("%s: must be one of %q", name, allowed)
}

// object returns a required JSON object, as given.
func (a args) object(name string) (json.RawMessage, error) {
	if !a.present(name) {
		return nil, fmt.Errorf("%s: required", name)
	}
	v := bytes.TrimSpace(a[name])
	if v[0] != '{' {
		return nil, fmt.Errorf("%s: must be a JSON object", name)
	}
	return json.RawMessage(v), nil
}

// objects returns a required array whose items are all JSON objects.
func (a args) objects(name string) (json.RawMessage, error) {
	if !a.present(name) {
		return nil, fmt.Errorf("%s: required", name)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(a[name], &items); err != nil {
		return nil, fmt.Errorf("%s: must be an array of objects", name)
	}
	for i, it := range items {
		if t := bytes.TrimSpace(it); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("%s[%d]: must be an object", name, i)
		}
	}
	return json.RawMessage(bytes.TrimSpace(a[name])), nil
}
