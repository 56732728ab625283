package catalog

import (
	"encoding/json"
	"strings"
)

// MissingRequired returns the required properties that are shown for a node
// of this description with params (the node's parameters) at typeVersion
// version and that have no value: absent with an empty default, null, or
// an empty string (as n8n's editor flags them, NodeHelpers.getParameterIssues).
//
// Only top-level properties are checked: required options inside
// collections and fixed collections are not. displayOptions are evaluated
// on plain value equality, "@version", root paths ("/name") and the _cnd
// conditions eq, not, gt, gte, lt, lte, between and exists; a property whose
// display depends on anything else (startsWith, endsWith, includes, regex,
// expressions) is assumed hidden, so an unevaluated rule never reports a
// parameter n8n would not.
func (d *Description) MissingRequired(params map[string]json.RawMessage, version float64) []Property {
	var missing []Property
	for _, p := range d.Properties {
		if !p.Required || !d.shown(p, params, version) {
			continue
		}
		value, ok := params[p.Name]
		if !ok {
			value = p.Default
		}
		if isEmpty(value) {
			missing = append(missing, p)
		}
	}
	return missing
}

// isEmpty is a value n8n treats as not set.
func isEmpty(raw json.RawMessage) bool {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return true
	}
	switch v := v.(type) {
	case string:
		return strings.TrimSpace(v) == ""
	case map[string]any:
		// A resource locator ({"__rl": true, "value": "", "mode": "list"}).
		if rl, _ := v["__rl"].(bool); rl {
			s, isString := v["value"].(string)
			return v["value"] == nil || isString && strings.TrimSpace(s) == ""
		}
	}
	return false
}

// shown reports whether p is displayed; a condition it cannot evaluate
// hides it.
func (d *Description) shown(p Property, params map[string]json.RawMessage, version float64) bool {
	if p.DisplayOptions == nil {
		return true
	}
	for key, want := range p.DisplayOptions.Show {
		match, ok := d.matches(key, want, params, version)
		if !ok || !match {
			return false
		}
	}
	for key, want := range p.DisplayOptions.Hide {
		match, ok := d.matches(key, want, params, version)
		if !ok || match {
			return false
		}
	}
	return true
}

// matches reports whether the value of key matches one of want; ok is
// false when that cannot be told.
func (d *Description) matches(key string, want []json.RawMessage, params map[string]json.RawMessage, version float64) (match, ok bool) {
	var value any
	if key == "@version" {
		value = version
	} else {
		name := strings.TrimPrefix(key, "/")
		if strings.Contains(name, ".") {
			return false, false // a path into a collection
		}
		raw, set := params[name]
		if !set {
			raw = d.defaultOf(name)
		}
		if len(raw) > 0 && json.Unmarshal(raw, &value) != nil {
			return false, false
		}
		if s, isString := value.(string); isString && strings.HasPrefix(s, "=") {
			return false, false // an expression, known only at run time
		}
	}
	values := []any{value}
	if list, isList := value.([]any); isList {
		values = list // a multiOptions value matches when one of its entries does
	}
	for _, w := range want {
		for _, v := range values {
			m, known := matchOne(w, v)
			if !known {
				return false, false
			}
			if m {
				return true, true
			}
		}
	}
	return false, true
}

// defaultOf is the default of the first property named name.
func (d *Description) defaultOf(name string) json.RawMessage {
	for _, p := range d.Properties {
		if p.Name == name {
			return p.Default
		}
	}
	return nil
}

// matchOne compares a value with one displayOptions entry: a plain value or
// a {"_cnd": {op: operand}} condition.
func matchOne(want json.RawMessage, value any) (match, known bool) {
	var cond struct {
		Cnd map[string]json.RawMessage `json:"_cnd"`
	}
	if json.Unmarshal(want, &cond) != nil || cond.Cnd == nil {
		var w any
		if json.Unmarshal(want, &w) != nil {
			return false, false
		}
		return value != nil && equal(w, value), true
	}
	if len(cond.Cnd) != 1 {
		return false, false
	}
	for op, raw := range cond.Cnd {
		var operand any
		if json.Unmarshal(raw, &operand) != nil {
			return false, false
		}
		switch op {
		case "eq":
			return equal(operand, value), true
		case "not":
			return !equal(operand, value), true
		case "exists":
			return value != nil, true
		case "between":
			r, _ := operand.(map[string]any)
			from, ok1 := r["from"].(float64)
			to, ok2 := r["to"].(float64)
			n, ok3 := value.(float64)
			if !ok1 || !ok2 || !ok3 {
				return false, ok1 && ok2
			}
			return n >= from && n <= to, true
		case "gt", "gte", "lt", "lte":
			bound, okBound := operand.(float64)
			n, okValue := value.(float64)
			if !okBound {
				return false, false
			}
			if !okValue {
				return false, true
			}
			switch op {
			case "gt":
				return n > bound, true
			case "gte":
				return n >= bound, true
			case "lt":
				return n < bound, true
			default:
				return n <= bound, true
			}
		}
	}
	return false, false
}

// equal compares decoded JSON scalars.
func equal(a, b any) bool {
	switch a := a.(type) {
	case string, float64, bool:
		return a == b
	}
	return false
}
