package builderapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/go-playground/validator/v10"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/workflow"
)

// The request bodies of the operations, with the seed's field names. The
// validate tags are checked before any stream byte is written.
type (
	// tracking is the optional thread and run every operation may name.
	tracking struct {
		ThreadID string `json:"thread_id" validate:"omitempty,id"`
		RunID    string `json:"run_id" validate:"omitempty,id"`
	}
	generateRequest struct {
		Description string `json:"description" validate:"notblank,text,max=20000"`
		// WorkflowID is not in the seed's generate body: a client may name
		// the workflow it will iterate on; else one is made.
		WorkflowID string `json:"workflow_id" validate:"omitempty,id"`
		tracking
	}
	modifyRequest struct {
		ExistingWorkflowJSON    workflowText `json:"existing_workflow_json" validate:"notblank,max=5000000"`
		ModificationDescription string       `json:"modification_description" validate:"notblank,text,max=20000"`
		WorkflowID              string       `json:"workflow_id" validate:"omitempty,id"`
		tracking
	}
	iterateRequest struct {
		WorkflowID             string       `json:"workflow_id" validate:"required,id"`
		ExistingWorkflowJSON   workflowText `json:"existing_workflow_json" validate:"notblank,max=5000000"`
		FeedbackFromTesting    string       `json:"feedback_from_testing" validate:"notblank,text,max=20000"`
		AdditionalRequirements string       `json:"additional_requirements" validate:"text,max=20000"`
		tracking
	}
	validateRequest struct {
		WorkflowJSON workflowText `json:"workflow_json" validate:"notblank,max=5000000"`
	}
)

// workflowText is a workflow document sent as the seed does, a JSON
// string holding the workflow's JSON, or as the JSON object itself: both
// are the document's text here.
type workflowText string

func (w *workflowText) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*w = workflowText(s)
		return nil
	}
	trimmed := strings.TrimSpace(string(data))
	if strings.HasPrefix(trimmed, "{") {
		*w = workflowText(trimmed)
		return nil
	}
	return &json.UnmarshalTypeError{Value: "a JSON " + kindOf(trimmed), Type: reflect.TypeFor[string]()}
}

func kindOf(v string) string {
	switch {
	case v == "null":
		return "null"
	case strings.HasPrefix(v, "["):
		return "array"
	case v == "true" || v == "false":
		return "boolean"
	}
	return "number"
}

// checker validates the request structs, naming fields as the JSON does.
var checker = func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name
	})
	_ = v.RegisterValidation("id", func(fl validator.FieldLevel) bool { return instanceai.ValidThreadID(fl.Field().String()) })
	_ = v.RegisterValidation("notblank", func(fl validator.FieldLevel) bool { return strings.TrimSpace(fl.Field().String()) != "" })
	// text is what the stores can keep as text: UTF-8 without NUL.
	_ = v.RegisterValidation("text", func(fl validator.FieldLevel) bool {
		s := fl.Field().String()
		return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
	})
	return v
}()

// decode reads and checks a request body: a 400 before any stream byte,
// naming the field, with the seed's ErrorDetail in details.error_detail.
func (a *API) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if err := httpjson.Decode(w, r, a.cfg.MaxBody, v); err != nil {
		var e *httpjson.Error
		if errors.As(err, &e) && e.Status == http.StatusBadRequest {
			field, _ := e.Detail.Details["field"].(string)
			return withDetail(e, field, "The request body is not what this endpoint reads", e.Detail.Message)
		}
		return err
	}
	err := checker.Struct(v)
	var errs validator.ValidationErrors
	if !errors.As(err, &errs) || len(errs) == 0 {
		return err
	}
	fe := errs[0]
	msg := fieldMessage(fe)
	e := httpjson.NewError(http.StatusBadRequest, "invalid_field", fe.Field(), "%s", msg)
	return withDetail(e, fe.Field(), "Invalid "+fe.Field(), msg)
}

// fieldMessage says what a field's failed rule asks for.
func fieldMessage(fe validator.FieldError) string {
	switch fe.Tag() {
	case "required", "notblank":
		return fmt.Sprintf("%s is required and must not be empty", fe.Field())
	case "max":
		return fmt.Sprintf("%s is longer than %s characters", fe.Field(), fe.Param())
	case "id":
		return fmt.Sprintf("%s %s", fe.Field(), instanceai.ThreadIDRule)
	case "text":
		return fmt.Sprintf("%s must be UTF-8 text without NUL characters", fe.Field())
	}
	return fmt.Sprintf("%s fails the %q rule", fe.Field(), fe.Tag())
}

// withDetail adds the seed's ErrorDetail to a 400.
func withDetail(e *httpjson.Error, field, title, msg string) *httpjson.Error {
	if e.Detail.Details == nil {
		e.Detail.Details = map[string]any{}
	}
	fix := "Check the field " + field + " against the API documentation"
	if field == "" {
		field, fix = "body", "Send a JSON object with the fields this endpoint documents"
	}
	e.Detail.Details["error_detail"] = workflow.ErrorDetail{
		Category: workflow.CategoryValidation, Severity: workflow.SeverityError, Title: title, Message: msg,
		UserGuidance:     "Fix the request body as the message says and send it again; nothing was started.",
		FixSuggestions:   []string{fix},
		TechnicalDetails: "request field " + field + ": " + msg,
	}
	return e
}
