// Package validate checks an n8n workflow document and reports what is
// wrong with it as the builder API's ValidationResult: errors that make it
// invalid, warnings that do not, each naming the node, field or connection
// at fault and saying how to fix it.
package validate

import (
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/catalog"
)

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

// ErrorDetail is the builder's error object (workflow.ErrorDetail); each
// finding's Rule names the rule that found it (see rules.go).
type ErrorDetail = workflow.ErrorDetail

// Categories and severities the seed names.
const (
	CategoryStructure  = workflow.CategoryWorkflowStructure
	CategoryValidation = workflow.CategoryValidation

	SeverityError   = workflow.SeverityError
	SeverityWarning = workflow.SeverityWarning
)
