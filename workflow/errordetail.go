package workflow

// ErrorDetail is the builder API's error object (seed "ErrorDetail"):
// what went wrong, for a person, with what to do about it. Validation
// findings, an unavailable model and a request that cannot be carried out
// all use it.
type ErrorDetail struct {
	// Category is "validation", "llm_service" or "workflow_structure".
	Category string `json:"category"`
	// Severity is "error", "warning" or "info".
	Severity         string   `json:"severity"`
	Title            string   `json:"title"`
	Message          string   `json:"message"`
	UserGuidance     string   `json:"user_guidance"`
	FixSuggestions   []string `json:"fix_suggestions"`
	TechnicalDetails string   `json:"technical_details"`
	// Rule is not in the seed: the stable id of the validation rule that
	// found the issue (workflow/validate), for clients and tests that must
	// tell issues apart without parsing prose; empty for other errors.
	Rule string `json:"rule,omitempty"`
}

// Error categories and severities.
const (
	CategoryValidation        = "validation"
	CategoryLLMService        = "llm_service"
	CategoryWorkflowStructure = "workflow_structure"

	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
)

func (e *ErrorDetail) Error() string { return e.Title + ": " + e.Message }
