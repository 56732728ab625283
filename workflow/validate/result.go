// Package validate checks an n8n workflow document and reports what is
// wrong with it as the builder API's ValidationResult: errors that make it
// invalid, warnings that do not, each naming the node, field or connection
// at fault and saying how to fix it.
package validate

import "github.com/threadline/threadline/workflow/catalog"

// Options tune a validation.
type Options struct {
	// Catalog, when set, also checks node types, their typeVersions and
	// required parameters against n8n's node descriptions.
	Catalog *catalog.Catalog
}

// Result is the seed's (Enhanced) ValidationResult. WarningDetails is not
// in the seed: it carries, for each entry of Warnings (same order, Message
// equal to the string), the full detail and rule id.
type Result struct {
	IsValid           bool          `json:"is_valid"`
	Errors            []ErrorDetail `json:"errors"`
	Warnings          []string      `json:"warnings"`
	ValidationSummary Summary       `json:"validation_summary"`
	WarningDetails    []ErrorDetail `json:"warning_details"`
}

// Summary counts what was checked and found.
type Summary struct {
	NodesValidated       int `json:"nodes_validated"`
	ConnectionsValidated int `json:"connections_validated"`
	CriticalIssues       int `json:"critical_issues"`
	WarningsCount        int `json:"warnings_count"`
}

// ErrorDetail is the seed's ErrorDetail. Rule is not in the seed: it is the
// stable id of the rule that found the issue (see rules.go), for clients
// and tests that must tell issues apart without parsing prose.
type ErrorDetail struct {
	Category         string   `json:"category"`
	Severity         string   `json:"severity"`
	Title            string   `json:"title"`
	Message          string   `json:"message"`
	UserGuidance     string   `json:"user_guidance"`
	FixSuggestions   []string `json:"fix_suggestions"`
	TechnicalDetails string   `json:"technical_details"`
	Rule             string   `json:"rule"`
}

// Categories and severities the seed names.
const (
	CategoryStructure  = "workflow_structure"
	CategoryValidation = "validation"

	SeverityError   = "error"
	SeverityWarning = "warning"
)
