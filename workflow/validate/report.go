package validate

import (
	"encoding/json"
	"fmt"
)

// report collects the issues of one validation.
type report struct {
	errors, warnings []ErrorDetail
	nodes, edges     int
}

// issue is what a rule says about one problem.
type issue struct {
	rule, category      string
	title, message      string
	guidance, technical string
	fixes               []string
}

func (r *report) fail(i issue) { r.errors = append(r.errors, i.detail(SeverityError)) }
func (r *report) warn(i issue) { r.warnings = append(r.warnings, i.detail(SeverityWarning)) }

func (i issue) detail(severity string) ErrorDetail {
	technical := i.rule
	if i.technical != "" {
		technical += ": " + i.technical
	}
	return ErrorDetail{
		Category: i.category, Severity: severity, Title: i.title, Message: i.message,
		UserGuidance: i.guidance, FixSuggestions: i.fixes, TechnicalDetails: technical, Rule: i.rule,
	}
}

func (r *report) result() Result {
	res := Result{
		IsValid:        len(r.errors) == 0,
		Errors:         append([]ErrorDetail{}, r.errors...),
		Warnings:       []string{},
		WarningDetails: append([]ErrorDetail{}, r.warnings...),
		ValidationSummary: Summary{
			NodesValidated: r.nodes, ConnectionsValidated: r.edges,
			CriticalIssues: len(r.errors), WarningsCount: len(r.warnings),
		},
	}
	for _, w := range r.warnings {
		res.Warnings = append(res.Warnings, w.Message)
	}
	return res
}

// kind names the JSON kind of raw, for messages ("an array", "a string").
func kind(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "invalid JSON"
	}
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}

// kindOrMissing is kind, or "missing" for a field that is not there.
func kindOrMissing(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	return kind(raw)
}

// excerpt is raw, shortened for technical details.
func excerpt(raw json.RawMessage) string {
	const limit = 80
	if len(raw) > limit {
		return fmt.Sprintf("%s…", raw[:limit])
	}
	return string(raw)
}
