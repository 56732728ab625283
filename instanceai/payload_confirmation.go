package instanceai

import "encoding/json"

// The payload of confirmation-request: what a run asks the person, and
// the details each kind of question carries.

// Confirmation severities.
const (
	SeverityDestructive = "destructive"
	SeverityWarning     = "warning"
	SeverityInfo        = "info"
)

// Confirmation input types (how the UI asks); approval is the default.
const (
	InputApproval         = "approval"
	InputText             = "text"
	InputQuestions        = "questions"
	InputPlanReview       = "plan-review"
	InputResourceDecision = "resource-decision"
	InputContinue         = "continue"
)

// Question types.
const (
	QuestionSingle = "single"
	QuestionMulti  = "multi"
	QuestionText   = "text"
)

// Question is one entry of a questions-style confirmation.
type Question struct {
	ID       string   `json:"id"`
	Question string   `json:"question"`
	Type     string   `json:"type"`
	Options  []string `json:"options,omitempty"`
}

// DomainAccess asks for access to a network domain.
type DomainAccess struct {
	URL  string `json:"url"`
	Host string `json:"host"`
}

// WebSearch asks for permission to search the web.
type WebSearch struct {
	Query string `json:"query"`
}

// CredentialFlow is the stage of a credential flow: generic or finalize.
type CredentialFlow struct {
	Stage string `json:"stage"`
}

// CredentialDestination is the exact HTTP origin a credential will be sent to
// and the nodes that send it.
type CredentialDestination struct {
	Origin    string   `json:"origin"`
	NodeNames []string `json:"nodeNames"`
}

// TargetApproval shows a target agent's tool call instead of the outer one.
type TargetApproval struct {
	ToolName    string          `json:"toolName"`
	DisplayName string          `json:"displayName,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
}

// Resource-decision options of a gateway confirmation.
const (
	DecisionDenyOnce        = "denyOnce"
	DecisionAllowOnce       = "allowOnce"
	DecisionAllowForSession = "allowForSession"
)

// ResourceDecision is a gateway resource-access question
// (inputType resource-decision).
type ResourceDecision struct {
	ToolGroup   string   `json:"toolGroup"`
	Resource    string   `json:"resource"`
	Description string   `json:"description"`
	Options     []string `json:"options"`
}

// MarshalJSON writes options as [] when unset.
func (p ResourceDecision) MarshalJSON() ([]byte, error) {
	type plain ResourceDecision
	p.Options = nonNil(p.Options)
	return json.Marshal(plain(p))
}

// ChannelConfig asks to set up a chat channel for an agent.
type ChannelConfig struct {
	IntegrationType string `json:"integrationType"`
	AgentID         string `json:"agentId"`
}

// MCPCredentialUse is one credential an MCP server needs.
type MCPCredentialUse struct {
	CredentialType string `json:"credentialType"`
	Name           string `json:"name"`
	Value          string `json:"value"`
}

// MCPConnectServer is one MCP server offered for connection.
type MCPConnectServer struct {
	ServerSlug      string             `json:"serverSlug"`
	Title           string             `json:"title"`
	Tagline         string             `json:"tagline,omitempty"`
	UsesCredentials []MCPCredentialUse `json:"usesCredentials"`
}

// MCPConnectRequest offers MCP servers to connect (at least one).
type MCPConnectRequest struct {
	Servers []MCPConnectServer `json:"servers"`
}

// CredentialRef names an existing credential.
type CredentialRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// CredentialPlaceholder is a value the user fills into a credential template.
type CredentialPlaceholder struct {
	Name     string `json:"name"`
	Title    string `json:"title"`
	Info     string `json:"info,omitempty"`
	Type     string `json:"type,omitempty"` // password or plain
	Optional *bool  `json:"optional,omitempty"`
}

// CredentialTemplate is where the placeholders go in a request.
type CredentialTemplate struct {
	Headers map[string]string `json:"headers,omitempty"`
	QS      map[string]string `json:"qs,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"` // a JSON object
}

// CredentialSetupHint describes how to build a generic credential.
type CredentialSetupHint struct {
	Template            CredentialTemplate      `json:"template"`
	Placeholders        []CredentialPlaceholder `json:"placeholders"`
	DocsURL             string                  `json:"docsUrl,omitempty"`
	SuggestedName       string                  `json:"suggestedName,omitempty"`
	TestURL             string                  `json:"testUrl,omitempty"`
	AcceptedStatusCodes []int                   `json:"acceptedStatusCodes,omitempty"`
	ServiceHost         string                  `json:"serviceHost,omitempty"`
	ServiceOrigin       string                  `json:"serviceOrigin,omitempty"`
}

// CredentialRequest asks the user to pick or create a credential.
type CredentialRequest struct {
	CredentialType      string               `json:"credentialType"`
	Reason              string               `json:"reason"`
	ExistingCredentials []CredentialRef      `json:"existingCredentials"`
	SuggestedName       string               `json:"suggestedName,omitempty"`
	SetupHint           *CredentialSetupHint `json:"setupHint,omitempty"`
	PreferNew           *bool                `json:"preferNew,omitempty"`
}

// MarshalJSON writes existingCredentials as [] when unset.
func (p CredentialRequest) MarshalJSON() ([]byte, error) {
	type plain CredentialRequest
	p.ExistingCredentials = nonNil(p.ExistingCredentials)
	return json.Marshal(plain(p))
}

// NodeCredential is a credential assigned to a workflow node. ID is nil
// (null on the wire) only for an AI-gateway-managed credential.
type NodeCredential struct {
	ID               *string `json:"id"`
	Name             string  `json:"name"`
	AIGatewayManaged bool    `json:"__aiGatewayManaged,omitempty"`
}

// SetupNode is the workflow node a setup card configures.
type SetupNode struct {
	Name        string                    `json:"name"`
	Type        string                    `json:"type"`
	TypeVersion float64                   `json:"typeVersion"`
	Parameters  json.RawMessage           `json:"parameters"` // a JSON object; nil marshals as {}
	Credentials map[string]NodeCredential `json:"credentials,omitempty"`
	Position    [2]float64                `json:"position"`
	ID          string                    `json:"id"`
}

// MarshalJSON writes parameters as {} when unset.
func (p SetupNode) MarshalJSON() ([]byte, error) {
	type plain SetupNode
	p.Parameters = objectOrEmpty(p.Parameters)
	return json.Marshal(plain(p))
}

// CredentialTestResult is the outcome of testing a node's credential.
type CredentialTestResult struct {
	Success bool   `json:"success"`
	Message string `json:"message,omitempty"`
}

// TriggerTestResult is the outcome of testing a trigger node: success, error
// or listening.
type TriggerTestResult struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// ParameterOption is one choice of an editable parameter; Value is a JSON
// string, number or boolean.
type ParameterOption struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// EditableParameter is a node parameter the setup card lets the user edit.
type EditableParameter struct {
	Name        string            `json:"name"`
	DisplayName string            `json:"displayName"`
	Type        string            `json:"type"`
	Required    *bool             `json:"required,omitempty"`
	Default     json.RawMessage   `json:"default,omitempty"` // any JSON value
	Options     []ParameterOption `json:"options,omitempty"`
}

// WorkflowSetupNode is one per-node setup card of a confirmation.
type WorkflowSetupNode struct {
	Node                  SetupNode             `json:"node"`
	CredentialType        string                `json:"credentialType,omitempty"`
	ExistingCredentials   []CredentialRef       `json:"existingCredentials,omitempty"`
	SetupHint             *CredentialSetupHint  `json:"setupHint,omitempty"`
	IsTrigger             bool                  `json:"isTrigger"`
	IsFirstTrigger        *bool                 `json:"isFirstTrigger,omitempty"`
	IsTestable            *bool                 `json:"isTestable,omitempty"`
	IsAutoApplied         *bool                 `json:"isAutoApplied,omitempty"`
	PreferNewCredential   *bool                 `json:"preferNewCredential,omitempty"`
	CredentialTestResult  *CredentialTestResult `json:"credentialTestResult,omitempty"`
	TriggerTestResult     *TriggerTestResult    `json:"triggerTestResult,omitempty"`
	ParameterIssues       map[string][]string   `json:"parameterIssues,omitempty"`
	EditableParameters    []EditableParameter   `json:"editableParameters,omitempty"`
	NeedsAction           *bool                 `json:"needsAction,omitempty"`
	CredentialNeedsAction *bool                 `json:"credentialNeedsAction,omitempty"`
}

// MarshalJSON writes each parameterIssues entry as [] when unset.
func (p WorkflowSetupNode) MarshalJSON() ([]byte, error) {
	type plain WorkflowSetupNode
	if len(p.ParameterIssues) > 0 {
		issues := make(map[string][]string, len(p.ParameterIssues))
		for k, v := range p.ParameterIssues {
			issues[k] = nonNil(v)
		}
		p.ParameterIssues = issues
	}
	return json.Marshal(plain(p))
}

// Approval-detail actions.
const (
	ApprovalEditWorkflow      = "edit-workflow"
	ApprovalDeleteTable       = "delete-table"
	ApprovalAddColumn         = "add-column"
	ApprovalDeleteColumn      = "delete-column"
	ApprovalRenameColumn      = "rename-column"
	ApprovalInsertRows        = "insert-rows"
	ApprovalUpdateRows        = "update-rows"
	ApprovalDeleteRows        = "delete-rows"
	ApprovalArchiveWorkflow   = "archive-workflow"
	ApprovalRestoreWorkflow   = "restore-workflow"
	ApprovalUnpublishWorkflow = "unpublish-workflow"
	ApprovalRestoreVersion    = "restore-version"
	ApprovalUpdateVersion     = "update-version"
	ApprovalRunWorkflow       = "run-workflow"
	ApprovalPublishWorkflow   = "publish-workflow"
)

// ValuePreview is one column value of a previewed row; a nil Value is null.
type ValuePreview struct {
	Column string  `json:"column"`
	Value  *string `json:"value"`
}

// RowPreview is a previewed data-table row.
type RowPreview struct {
	Values           []ValuePreview `json:"values"`
	RemainingColumns int            `json:"remainingColumns"`
}

// MarshalJSON writes values as [] when unset.
func (p RowPreview) MarshalJSON() ([]byte, error) {
	type plain RowPreview
	p.Values = nonNil(p.Values)
	return json.Marshal(plain(p))
}

// FilterCondition is one condition of a previewed filter. Value is a JSON
// string, number, boolean or null (nil marshals as null).
type FilterCondition struct {
	ColumnName string          `json:"columnName"`
	Condition  string          `json:"condition"`
	Value      json.RawMessage `json:"value"`
}

// FilterPreview is a previewed row filter: type "and" or "or".
type FilterPreview struct {
	Type    string            `json:"type"`
	Filters []FilterCondition `json:"filters"`
}

// MarshalJSON writes filters as [] when unset.
func (p FilterPreview) MarshalJSON() ([]byte, error) {
	type plain FilterPreview
	p.Filters = nonNil(p.Filters)
	return json.Marshal(plain(p))
}

// PublishVerification is how well a workflow about to be published was
// verified.
type PublishVerification struct {
	Level            string   `json:"level"`
	Cause            string   `json:"cause,omitempty"`
	UnprovenTargets  []string `json:"unprovenTargets"`
	PendingTriggers  []string `json:"pendingTriggers"`
	NodesNotReached  []string `json:"nodesNotReached"`
	PlannedNodeCount float64  `json:"plannedNodeCount"`
	SimulatedNodes   []string `json:"simulatedNodes"`
	PinnedNodes      []string `json:"pinnedNodes"`
}

// MarshalJSON writes the node lists as [] when unset.
func (p PublishVerification) MarshalJSON() ([]byte, error) {
	type plain PublishVerification
	p.UnprovenTargets = nonNil(p.UnprovenTargets)
	p.PendingTriggers = nonNil(p.PendingTriggers)
	p.NodesNotReached = nonNil(p.NodesNotReached)
	p.SimulatedNodes = nonNil(p.SimulatedNodes)
	p.PinnedNodes = nonNil(p.PinnedNodes)
	return json.Marshal(plain(p))
}

// ApprovalDetails describes what a confirmation approves. Action selects the
// variant; only the fields of that variant are marshalled (see
// approvalFields for which belong to which).
type ApprovalDetails struct {
	Action string `json:"action"`

	Summary         string               `json:"summary,omitempty"`    // edit-workflow, run-workflow, publish-workflow
	Column          string               `json:"column,omitempty"`     // add-, delete-, rename-column (required)
	ColumnType      string               `json:"columnType,omitempty"` // add-column: string, number, boolean, date
	NewName         string               `json:"newName,omitempty"`    // rename-column
	Count           int                  `json:"count,omitempty"`      // insert-rows
	Rows            []RowPreview         `json:"rows,omitempty"`       // insert-rows
	Changes         *RowPreview          `json:"changes,omitempty"`    // update-rows
	Filter          *FilterPreview       `json:"filter,omitempty"`     // update-rows, delete-rows
	Name            *string              `json:"name,omitempty"`       // archive/restore/unpublish-workflow (required), update-version
	ID              string               `json:"id,omitempty"`         // archive/restore/unpublish-workflow
	Version         string               `json:"version,omitempty"`    // restore-version, update-version
	CreatedAt       string               `json:"createdAt,omitempty"`  // restore-version
	Description     *string              `json:"description,omitempty"`
	Trigger         string               `json:"trigger,omitempty"` // run-workflow
	SelectedVersion bool                 `json:"selectedVersion,omitempty"`
	SupportingCount int                  `json:"supportingCount,omitempty"`
	Verification    *PublishVerification `json:"verification,omitempty"`
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// MarshalJSON writes the fields of the action's variant, required ones even
// when zero.
func (d ApprovalDetails) MarshalJSON() ([]byte, error) {
	type (
		withSummary struct {
			Action  string `json:"action"`
			Summary string `json:"summary,omitempty"`
		}
		withColumn struct {
			Action string `json:"action"`
			Column string `json:"column"`
		}
		named struct {
			Action string `json:"action"`
			Name   string `json:"name"`
			ID     string `json:"id"`
		}
	)
	var v any
	switch d.Action {
	case ApprovalEditWorkflow:
		v = withSummary{d.Action, d.Summary}
	case ApprovalDeleteTable:
		v = struct {
			Action string `json:"action"`
		}{d.Action}
	case ApprovalAddColumn:
		v = struct {
			Action     string `json:"action"`
			Column     string `json:"column"`
			ColumnType string `json:"columnType"`
		}{d.Action, d.Column, d.ColumnType}
	case ApprovalDeleteColumn:
		v = withColumn{d.Action, d.Column}
	case ApprovalRenameColumn:
		v = struct {
			Action  string `json:"action"`
			Column  string `json:"column"`
			NewName string `json:"newName"`
		}{d.Action, d.Column, d.NewName}
	case ApprovalInsertRows:
		v = struct {
			Action string       `json:"action"`
			Count  int          `json:"count"`
			Rows   []RowPreview `json:"rows"`
		}{d.Action, d.Count, nonNil(d.Rows)}
	case ApprovalUpdateRows:
		v = struct {
			Action  string         `json:"action"`
			Changes *RowPreview    `json:"changes"`
			Filter  *FilterPreview `json:"filter"`
		}{d.Action, d.Changes, d.Filter}
	case ApprovalDeleteRows:
		v = struct {
			Action string         `json:"action"`
			Filter *FilterPreview `json:"filter"`
		}{d.Action, d.Filter}
	case ApprovalArchiveWorkflow, ApprovalRestoreWorkflow, ApprovalUnpublishWorkflow:
		v = named{d.Action, derefOr(d.Name), d.ID}
	case ApprovalRestoreVersion:
		v = struct {
			Action    string `json:"action"`
			Version   string `json:"version"`
			CreatedAt string `json:"createdAt,omitempty"`
		}{d.Action, d.Version, d.CreatedAt}
	case ApprovalUpdateVersion:
		v = struct {
			Action      string  `json:"action"`
			Version     string  `json:"version"`
			Name        *string `json:"name,omitempty"`
			Description *string `json:"description,omitempty"`
		}{d.Action, d.Version, d.Name, d.Description}
	case ApprovalRunWorkflow:
		v = struct {
			Action  string `json:"action"`
			Summary string `json:"summary,omitempty"`
			Trigger string `json:"trigger,omitempty"`
		}{d.Action, d.Summary, d.Trigger}
	case ApprovalPublishWorkflow:
		v = struct {
			Action          string               `json:"action"`
			Summary         string               `json:"summary,omitempty"`
			SelectedVersion bool                 `json:"selectedVersion"`
			SupportingCount int                  `json:"supportingCount"`
			Verification    *PublishVerification `json:"verification,omitempty"`
		}{d.Action, d.Summary, d.SelectedVersion, d.SupportingCount, d.Verification}
	default:
		type plain ApprovalDetails
		v = plain(d)
	}
	return json.Marshal(v)
}

// PlannedTask is a planned task's full detail (plan review and tasks-update).
type PlannedTask struct {
	ID                   string   `json:"id"`
	Title                string   `json:"title"`
	Kind                 string   `json:"kind"`
	Spec                 string   `json:"spec"`
	Deps                 []string `json:"deps"`
	Tools                []string `json:"tools,omitempty"`
	WorkflowID           string   `json:"workflowId,omitempty"`
	IsSupportingWorkflow *bool    `json:"isSupportingWorkflow,omitempty"`
}

// MarshalJSON writes deps as [] when unset.
func (p PlannedTask) MarshalJSON() ([]byte, error) {
	type plain PlannedTask
	p.Deps = nonNil(p.Deps)
	return json.Marshal(plain(p))
}

// ConfirmationRequest pauses a tool until a person answers.
type ConfirmationRequest struct {
	RequestID string `json:"requestId"`
	// InputThreadID links the telemetry of one confirmation session.
	InputThreadID string          `json:"inputThreadId,omitempty"`
	ToolCallID    string          `json:"toolCallId"`
	ToolName      string          `json:"toolName"`
	Args          json.RawMessage `json:"args"` // a JSON object; nil marshals as {}
	Severity      string          `json:"severity"`
	Message       string          `json:"message"`

	ApprovalDetails       *ApprovalDetails       `json:"approvalDetails,omitempty"`
	ResourceName          string                 `json:"resourceName,omitempty"`
	TargetApproval        *TargetApproval        `json:"targetApproval,omitempty"`
	InputType             string                 `json:"inputType,omitempty"`
	Questions             []Question             `json:"questions,omitempty"`
	Tasks                 *TaskList              `json:"tasks,omitempty"`
	PlanItems             []PlannedTask          `json:"planItems,omitempty"`
	IntroMessage          string                 `json:"introMessage,omitempty"`
	CredentialRequests    []CredentialRequest    `json:"credentialRequests,omitempty"`
	RequireUserSelection  *bool                  `json:"requireUserSelection,omitempty"`
	CredentialFlow        *CredentialFlow        `json:"credentialFlow,omitempty"`
	CredentialDestination *CredentialDestination `json:"credentialDestination,omitempty"`
	SetupRequests         []WorkflowSetupNode    `json:"setupRequests,omitempty"`
	WorkflowID            string                 `json:"workflowId,omitempty"`
	ProjectID             string                 `json:"projectId,omitempty"`
	DomainAccess          *DomainAccess          `json:"domainAccess,omitempty"`
	WebSearch             *WebSearch             `json:"webSearch,omitempty"`
	ResourceDecision      *ResourceDecision      `json:"resourceDecision,omitempty"`
	ChannelConfig         *ChannelConfig         `json:"channelConfig,omitempty"`
	MCPConnectRequest     *MCPConnectRequest     `json:"mcpConnectRequest,omitempty"`
}

// MarshalJSON writes args as {} when unset.
func (p ConfirmationRequest) MarshalJSON() ([]byte, error) {
	type plain ConfirmationRequest
	p.Args = objectOrEmpty(p.Args)
	return json.Marshal(plain(p))
}
