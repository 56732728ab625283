package instanceai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// What n8n's instanceAiEventSchema does with the JSON an invalid event
// marshals to (checked by TestInvalidEventsAgreeWithN8nSchema).
const (
	// schemaRejects: a schema violation; safeParse fails.
	schemaRejects = "rejects"
	// schemaAlters: safeParse passes but strips or rewrites data (an unknown
	// key, a trimmed string, a dropped setup item).
	schemaAlters = "alters"
	// schemaAccepts: the rule is ours only (stricter than n8n's schema), or
	// the offending Go field is not part of the marshalled variant.
	schemaAccepts = "accepts"
	// schemaUnmarshallable: json.Marshal refuses the event (invalid raw JSON).
	schemaUnmarshallable = "unmarshallable"
)

type invalidEventCase struct {
	name   string
	ev     Event
	field  string // the ValidationError's Field
	schema string // what n8n's schema does with the marshalled event
}

// validConfirmation returns a confirmation request that validates; cases
// break one field of it.
func validConfirmation() *ConfirmationRequest {
	return &ConfirmationRequest{RequestID: "req_1", ToolCallID: "call_1", ToolName: "delete-workflow",
		Severity: SeverityDestructive, Message: "Delete it?"}
}

func confirmWith(mod func(p *ConfirmationRequest)) Event {
	p := validConfirmation()
	mod(p)
	return goldenEnv(TypeConfirmRequest, p)
}

func setupNodeWith(mod func(n *WorkflowSetupNode)) Event {
	return confirmWith(func(p *ConfirmationRequest) {
		n := WorkflowSetupNode{Node: SetupNode{Name: "HTTP Request", Type: "n8n-nodes-base.httpRequest", TypeVersion: 4, ID: "n1"}}
		mod(&n)
		p.SetupRequests = []WorkflowSetupNode{n}
	})
}

func hintWith(mod func(h *CredentialSetupHint)) Event {
	return confirmWith(func(p *ConfirmationRequest) {
		h := goldenSetupHint()
		mod(h)
		p.CredentialRequests = []CredentialRequest{{CredentialType: "httpHeaderAuth", Reason: "r", SetupHint: h}}
	})
}

func approvalWith(d ApprovalDetails) Event {
	return confirmWith(func(p *ConfirmationRequest) { p.ApprovalDetails = &d })
}

func envWith(ev Event, mod func(e *Event)) Event {
	mod(&ev)
	return ev
}

// invalidEventCases has, for every event type, events that Validate rejects,
// with the field it must name.
func invalidEventCases() []invalidEventCase {
	text := func(t EventType) Event { return goldenEnv(t, &Text{Text: "x"}) }
	return []invalidEventCase{
		// Envelope.
		{"unknown-type", goldenEnv("message", &Text{Text: "x"}), "type", schemaRejects},
		{"empty-type", goldenEnv("", &Text{Text: "x"}), "type", schemaRejects},
		{"run-start/no-runId", envWith(goldenEnv(TypeRunStart, &RunStart{MessageID: "m"}), func(e *Event) { e.RunID = "" }), "runId", schemaAccepts},
		{"run-start/no-agentId", envWith(goldenEnv(TypeRunStart, &RunStart{MessageID: "m"}), func(e *Event) { e.AgentID = "" }), "agentId", schemaAccepts},
		{"run-start/agentId-proto", envWith(goldenEnv(TypeRunStart, &RunStart{MessageID: "m"}), func(e *Event) { e.AgentID = "__proto__" }), "agentId", schemaAccepts},
		{"text-block/nil-payload", goldenEnv(TypeTextBlock, nil), "payload", schemaRejects},

		// Payload of another type.
		{"text-delta/status-payload", goldenEnv(TypeTextDelta, &Status{Message: "x"}), "payload", schemaRejects},
		{"reasoning-block/run-start-payload", goldenEnv(TypeReasoningBlock, &RunStart{MessageID: "m"}), "payload", schemaRejects},
		{"status/title-payload", goldenEnv(TypeStatus, &ThreadTitle{Title: "t"}), "payload", schemaRejects},
		{"tool-interrupted/tool-call-payload", goldenEnv(TypeToolInterrupted, &ToolCall{ToolCallID: "c", ToolName: "n"}), "payload", schemaRejects},
		{"reasoning-delta/no-runId", envWith(text(TypeReasoningDelta), func(e *Event) { e.RunID = "" }), "runId", schemaAccepts},

		{"run-start/no-messageId", goldenEnv(TypeRunStart, &RunStart{}), "payload.messageId", schemaAccepts},
		{"run-finish/status-done", goldenEnv(TypeRunFinish, &RunFinish{Status: "done"}), "payload.status", schemaRejects},
		{"run-finish/no-status", goldenEnv(TypeRunFinish, &RunFinish{}), "payload.status", schemaRejects},

		{"tool-input-start/no-toolCallId", goldenEnv(TypeToolInputStart, &ToolInputStart{ToolName: "n"}), "payload.toolCallId", schemaAccepts},
		{"tool-input-start/no-toolName", goldenEnv(TypeToolInputStart, &ToolInputStart{ToolCallID: "c"}), "payload.toolName", schemaAccepts},
		{"tool-call/toolCallId-constructor", goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "constructor", ToolName: "n"}), "payload.toolCallId", schemaAccepts},
		{"tool-call/no-toolCallId", goldenEnv(TypeToolCall, &ToolCall{ToolName: "n"}), "payload.toolCallId", schemaAccepts},
		{"tool-call/args-array", goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "c", ToolName: "n", Args: json.RawMessage(`[1]`)}), "payload.args", schemaRejects},
		{"tool-call/args-null", goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "c", ToolName: "n", Args: json.RawMessage(`null`)}), "payload.args", schemaRejects},
		{"tool-call/args-string", goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "c", ToolName: "n", Args: json.RawMessage(`"{}"`)}), "payload.args", schemaRejects},
		{"tool-result/no-toolCallId", goldenEnv(TypeToolResult, &ToolResult{Result: json.RawMessage(`1`)}), "payload.toolCallId", schemaAccepts},
		{"tool-result/bad-json", goldenEnv(TypeToolResult, &ToolResult{ToolCallID: "c", Result: json.RawMessage(`{`)}), "payload.result", schemaUnmarshallable},
		{"tool-error/no-toolCallId", goldenEnv(TypeToolError, &ToolError{Error: "e"}), "payload.toolCallId", schemaAccepts},
		{"tool-interrupted/no-toolCallId", goldenEnv(TypeToolInterrupted, &ToolError{Error: "e"}), "payload.toolCallId", schemaAccepts},

		{"agent-spawned/no-parentId", goldenEnv(TypeAgentSpawned, &AgentSpawned{Role: "r"}), "payload.parentId", schemaAccepts},
		{"agent-spawned/parentId-prototype", goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "prototype", Role: "r"}), "payload.parentId", schemaAccepts},
		{"agent-spawned/no-role", goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "p"}), "payload.role", schemaAccepts},
		{"agent-spawned/kind", goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "p", Role: "r", Kind: "researcher"}), "payload.kind", schemaRejects},
		{"agent-spawned/target-type-empty", goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "p", Role: "r", TargetResource: &TargetResource{ID: "x"}}), "payload.targetResource.type", schemaRejects},
		{"agent-spawned/target-type", goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "p", Role: "r", TargetResource: &TargetResource{Type: "project"}}), "payload.targetResource.type", schemaRejects},
		{"agent-completed/no-role", goldenEnv(TypeAgentCompleted, &AgentCompleted{Result: "x"}), "payload.role", schemaAccepts},
		{"agent-completed/status-interrupted", goldenEnv(TypeAgentCompleted, &AgentCompleted{Role: "r", Status: RunInterrupted}), "payload.status", schemaRejects},

		{"confirmation-request/no-requestId", confirmWith(func(p *ConfirmationRequest) { p.RequestID = "" }), "payload.requestId", schemaAccepts},
		{"confirmation-request/no-toolCallId", confirmWith(func(p *ConfirmationRequest) { p.ToolCallID = "" }), "payload.toolCallId", schemaAccepts},
		{"confirmation-request/no-toolName", confirmWith(func(p *ConfirmationRequest) { p.ToolName = "" }), "payload.toolName", schemaAccepts},
		{"confirmation-request/args-array", confirmWith(func(p *ConfirmationRequest) { p.Args = json.RawMessage(`[]`) }), "payload.args", schemaRejects},
		{"confirmation-request/severity-message", confirmWith(func(p *ConfirmationRequest) { p.Severity = "message" }), "payload.severity", schemaRejects},
		{"confirmation-request/no-severity", confirmWith(func(p *ConfirmationRequest) { p.Severity = "" }), "payload.severity", schemaRejects},
		{"confirmation-request/inputType", confirmWith(func(p *ConfirmationRequest) { p.InputType = "form" }), "payload.inputType", schemaRejects},
		{"confirmation-request/blank-message", confirmWith(func(p *ConfirmationRequest) { p.Message = "  " }), "payload.message", schemaAccepts},
		{"confirmation-request/continue-blank-message", confirmWith(func(p *ConfirmationRequest) { p.Message = ""; p.InputType = InputContinue }), "payload.message", schemaAccepts},
		{"confirmation-request/questions-none", confirmWith(func(p *ConfirmationRequest) { p.InputType = InputQuestions }), "payload.questions", schemaAccepts},
		{"confirmation-request/plan-review-empty", confirmWith(func(p *ConfirmationRequest) {
			p.InputType = InputPlanReview
			p.Args = json.RawMessage(`{"tasks":[{"id":"t1","title":"x"}]}`)
		}), "payload.planItems", schemaAccepts},
		{"confirmation-request/resource-decision-missing", confirmWith(func(p *ConfirmationRequest) { p.InputType = InputResourceDecision }), "payload.resourceDecision", schemaAccepts},
		{"confirmation-request/question-type", confirmWith(func(p *ConfirmationRequest) {
			p.Questions = []Question{{ID: "q1", Question: "?", Type: QuestionText}, {ID: "q2", Question: "?", Type: "dropdown"}}
		}), "payload.questions[1].type", schemaRejects},
		{"confirmation-request/question-id", confirmWith(func(p *ConfirmationRequest) { p.Questions = []Question{{Question: "?", Type: QuestionText}} }), "payload.questions[0].id", schemaAccepts},
		{"confirmation-request/task-status", confirmWith(func(p *ConfirmationRequest) {
			p.Tasks = &TaskList{Tasks: []Task{{ID: "t1", Description: "d", Status: "pending"}}}
		}), "payload.tasks.tasks[0].status", schemaRejects},
		{"confirmation-request/plan-item-id", confirmWith(func(p *ConfirmationRequest) { p.PlanItems = []PlannedTask{{Title: "x"}} }), "payload.planItems[0].id", schemaAccepts},
		{"confirmation-request/target-approval-tool", confirmWith(func(p *ConfirmationRequest) { p.TargetApproval = &TargetApproval{} }), "payload.targetApproval.toolName", schemaAccepts},
		{"confirmation-request/credential-type", confirmWith(func(p *ConfirmationRequest) { p.CredentialRequests = []CredentialRequest{{Reason: "r"}} }), "payload.credentialRequests[0].credentialType", schemaAccepts},
		{"confirmation-request/credential-flow", confirmWith(func(p *ConfirmationRequest) { p.CredentialFlow = &CredentialFlow{Stage: "start"} }), "payload.credentialFlow.stage", schemaRejects},
		{"confirmation-request/destination-path", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://api.example.com/", NodeNames: []string{"n"}}
		}), "payload.credentialDestination.origin", schemaRejects},
		{"confirmation-request/destination-case", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://API.example.com", NodeNames: []string{"n"}}
		}), "payload.credentialDestination.origin", schemaRejects},
		{"confirmation-request/destination-default-port", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://api.example.com:443", NodeNames: []string{"n"}}
		}), "payload.credentialDestination.origin", schemaRejects},
		{"confirmation-request/destination-ftp", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "ftp://files.example.com", NodeNames: []string{"n"}}
		}), "payload.credentialDestination.origin", schemaRejects},
		{"confirmation-request/destination-short-ipv4", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "http://127.1", NodeNames: []string{"n"}}
		}), "payload.credentialDestination.origin", schemaRejects},
		{"confirmation-request/destination-no-nodes", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://api.example.com"}
		}), "payload.credentialDestination.nodeNames", schemaRejects},
		{"confirmation-request/destination-node-space", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://api.example.com", NodeNames: []string{"ok", " HTTP Request"}}
		}), "payload.credentialDestination.nodeNames[1]", schemaAlters},
		{"confirmation-request/destination-node-blank", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://api.example.com", NodeNames: []string{"\u3000"}}
		}), "payload.credentialDestination.nodeNames[0]", schemaRejects},
		{"confirmation-request/destination-node-long", confirmWith(func(p *ConfirmationRequest) {
			p.CredentialDestination = &CredentialDestination{Origin: "https://api.example.com", NodeNames: []string{strings.Repeat("😀", 128)}}
		}), "payload.credentialDestination.nodeNames[0]", schemaRejects},
		{"confirmation-request/domain-host", confirmWith(func(p *ConfirmationRequest) { p.DomainAccess = &DomainAccess{URL: "https://x.io"} }), "payload.domainAccess.host", schemaAccepts},
		{"confirmation-request/web-search", confirmWith(func(p *ConfirmationRequest) { p.WebSearch = &WebSearch{} }), "payload.webSearch.query", schemaAccepts},
		{"confirmation-request/resource-option", confirmWith(func(p *ConfirmationRequest) {
			p.InputType = InputResourceDecision
			p.ResourceDecision = &ResourceDecision{ToolGroup: "fs", Resource: "/", Description: "d", Options: []string{DecisionAllowOnce, "always"}}
		}), "payload.resourceDecision.options[1]", schemaRejects},
		{"confirmation-request/channel-agent", confirmWith(func(p *ConfirmationRequest) { p.ChannelConfig = &ChannelConfig{IntegrationType: "slack"} }), "payload.channelConfig.agentId", schemaAccepts},
		{"confirmation-request/mcp-no-servers", confirmWith(func(p *ConfirmationRequest) { p.MCPConnectRequest = &MCPConnectRequest{} }), "payload.mcpConnectRequest.servers", schemaRejects},
		{"confirmation-request/mcp-no-credentials", confirmWith(func(p *ConfirmationRequest) {
			p.MCPConnectRequest = &MCPConnectRequest{Servers: []MCPConnectServer{{ServerSlug: "gh", Title: "GitHub"}}}
		}), "payload.mcpConnectRequest.servers[0].usesCredentials", schemaRejects},
		{"confirmation-request/hint-no-placeholders", hintWith(func(h *CredentialSetupHint) { h.Placeholders = nil }), "payload.credentialRequests[0].setupHint.placeholders", schemaRejects},
		{"confirmation-request/hint-placeholder-type", hintWith(func(h *CredentialSetupHint) { h.Placeholders[1].Type = "secret" }), "payload.credentialRequests[0].setupHint.placeholders[1].type", schemaRejects},
		{"confirmation-request/hint-status-codes", hintWith(func(h *CredentialSetupHint) { h.AcceptedStatusCodes = make([]int, 11) }), "payload.credentialRequests[0].setupHint.acceptedStatusCodes", schemaRejects},
		{"confirmation-request/hint-origin", hintWith(func(h *CredentialSetupHint) { h.ServiceOrigin = "https://api.example.com/v1" }), "payload.credentialRequests[0].setupHint.serviceOrigin", schemaRejects},
		{"confirmation-request/hint-body", hintWith(func(h *CredentialSetupHint) { h.Template.Body = json.RawMessage(`"x"`) }), "payload.credentialRequests[0].setupHint.template.body", schemaRejects},
		{"confirmation-request/setup-node-name", setupNodeWith(func(n *WorkflowSetupNode) { n.Node.Name = "" }), "payload.setupRequests[0].node.name", schemaAccepts},
		{"confirmation-request/setup-node-parameters", setupNodeWith(func(n *WorkflowSetupNode) { n.Node.Parameters = json.RawMessage(`[]`) }), "payload.setupRequests[0].node.parameters", schemaRejects},
		{"confirmation-request/setup-credential-null-id", setupNodeWith(func(n *WorkflowSetupNode) {
			n.Node.Credentials = map[string]NodeCredential{"slackApi": {Name: "Slack"}}
		}), "payload.setupRequests[0].node.credentials.slackApi.id", schemaRejects},
		{"confirmation-request/setup-managed-with-id", setupNodeWith(func(n *WorkflowSetupNode) {
			n.Node.Credentials = map[string]NodeCredential{"openAiApi": {ID: goldenPtr("c1"), Name: "AI", AIGatewayManaged: true}}
		}), "payload.setupRequests[0].node.credentials.openAiApi.id", schemaAlters},
		{"confirmation-request/setup-trigger-status", setupNodeWith(func(n *WorkflowSetupNode) { n.TriggerTestResult = &TriggerTestResult{Status: "ok"} }), "payload.setupRequests[0].triggerTestResult.status", schemaRejects},
		{"confirmation-request/setup-option-value", setupNodeWith(func(n *WorkflowSetupNode) {
			n.EditableParameters = []EditableParameter{{Name: "m", DisplayName: "M", Type: "options", Options: []ParameterOption{{Name: "a", Value: json.RawMessage(`null`)}}}}
		}), "payload.setupRequests[0].editableParameters[0].options[0].value", schemaRejects},
		{"confirmation-request/setup-existing-id", setupNodeWith(func(n *WorkflowSetupNode) { n.ExistingCredentials = []CredentialRef{{Name: "x"}} }), "payload.setupRequests[0].existingCredentials[0].id", schemaAccepts},
		{"confirmation-request/approval-action", approvalWith(ApprovalDetails{Action: "drop-database"}), "payload.approvalDetails.action", schemaRejects},
		{"confirmation-request/approval-column-type", approvalWith(ApprovalDetails{Action: ApprovalAddColumn, Column: "c", ColumnType: "uuid"}), "payload.approvalDetails.columnType", schemaRejects},
		{"confirmation-request/approval-column", approvalWith(ApprovalDetails{Action: ApprovalDeleteColumn}), "payload.approvalDetails.column", schemaAccepts},
		{"confirmation-request/approval-foreign-field", approvalWith(ApprovalDetails{Action: ApprovalDeleteTable, Summary: "s"}), "payload.approvalDetails.summary", schemaAccepts},
		{"confirmation-request/approval-count", approvalWith(ApprovalDetails{Action: ApprovalInsertRows, Count: -1}), "payload.approvalDetails.count", schemaRejects},
		{"confirmation-request/approval-remaining", approvalWith(ApprovalDetails{Action: ApprovalInsertRows, Count: 1, Rows: []RowPreview{{RemainingColumns: -2}}}), "payload.approvalDetails.rows[0].remainingColumns", schemaRejects},
		{"confirmation-request/approval-no-changes", approvalWith(ApprovalDetails{Action: ApprovalUpdateRows, Filter: goldenFilter()}), "payload.approvalDetails.changes", schemaRejects},
		{"confirmation-request/approval-no-filter", approvalWith(ApprovalDetails{Action: ApprovalDeleteRows}), "payload.approvalDetails.filter", schemaRejects},
		{"confirmation-request/approval-filter-type", approvalWith(ApprovalDetails{Action: ApprovalDeleteRows, Filter: &FilterPreview{Type: "xor"}}), "payload.approvalDetails.filter.type", schemaRejects},
		{"confirmation-request/approval-condition", approvalWith(ApprovalDetails{Action: ApprovalDeleteRows,
			Filter: &FilterPreview{Type: "or", Filters: []FilterCondition{{ColumnName: "a", Condition: "in"}}}}), "payload.approvalDetails.filter.filters[0].condition", schemaRejects},
		{"confirmation-request/approval-filter-value", approvalWith(ApprovalDetails{Action: ApprovalDeleteRows,
			Filter: &FilterPreview{Type: "or", Filters: []FilterCondition{{ColumnName: "a", Condition: "eq", Value: json.RawMessage(`[1]`)}}}}), "payload.approvalDetails.filter.filters[0].value", schemaRejects},
		{"confirmation-request/approval-name", approvalWith(ApprovalDetails{Action: ApprovalArchiveWorkflow, ID: "wf"}), "payload.approvalDetails.name", schemaAccepts},
		{"confirmation-request/approval-version", approvalWith(ApprovalDetails{Action: ApprovalRestoreVersion}), "payload.approvalDetails.version", schemaAccepts},
		{"confirmation-request/approval-verification", approvalWith(ApprovalDetails{Action: ApprovalPublishWorkflow,
			Verification: &PublishVerification{Level: "verified"}}), "payload.approvalDetails.verification.level", schemaRejects},
		{"confirmation-request/approval-supporting", approvalWith(ApprovalDetails{Action: ApprovalPublishWorkflow, SupportingCount: -1}), "payload.approvalDetails.supportingCount", schemaRejects},

		{"tasks-update/status-pending", goldenEnv(TypeTasksUpdate, &TasksUpdate{Tasks: TaskList{Tasks: []Task{
			{ID: "t1", Description: "d", Status: TaskDone}, {ID: "t2", Description: "d", Status: "pending"}}}}), "payload.tasks.tasks[1].status", schemaRejects},
		{"tasks-update/status-completed", goldenEnv(TypeTasksUpdate, &TasksUpdate{Tasks: TaskList{Tasks: []Task{
			{ID: "t1", Description: "d", Status: "completed"}}}}), "payload.tasks.tasks[0].status", schemaRejects},
		{"tasks-update/no-id", goldenEnv(TypeTasksUpdate, &TasksUpdate{Tasks: TaskList{Tasks: []Task{{Description: "d", Status: TaskTodo}}}}), "payload.tasks.tasks[0].id", schemaAccepts},
		{"tasks-update/no-description", goldenEnv(TypeTasksUpdate, &TasksUpdate{Tasks: TaskList{Tasks: []Task{{ID: "t", Status: TaskTodo}}}}), "payload.tasks.tasks[0].description", schemaAccepts},
		{"tasks-update/plan-item-id", goldenEnv(TypeTasksUpdate, &TasksUpdate{PlanItems: []PlannedTask{{Title: "t"}}}), "payload.planItems[0].id", schemaAccepts},

		{"thread-title-updated/empty", goldenEnv(TypeThreadTitleUpdated, &ThreadTitle{}), "payload.title", schemaAccepts},
		{"error/no-content", goldenEnv(TypeError, &ErrorPayload{Code: "x"}), "payload.content", schemaAccepts},

		{"filesystem-request/no-requestId", goldenEnv(TypeFilesystemRequest, &FilesystemRequest{ToolCall: FilesystemToolCall{Name: "read"}}), "payload.requestId", schemaAccepts},
		{"filesystem-request/no-name", goldenEnv(TypeFilesystemRequest, &FilesystemRequest{RequestID: "r"}), "payload.toolCall.name", schemaAccepts},
		{"filesystem-request/arguments-array", goldenEnv(TypeFilesystemRequest, &FilesystemRequest{RequestID: "r",
			ToolCall: FilesystemToolCall{Name: "read", Arguments: json.RawMessage(`["a"]`)}}), "payload.toolCall.arguments", schemaRejects},

		{"setup-items/no-workflowId", goldenEnv(TypeSetupItems, &SetupItems{}), "payload.workflowId", schemaRejects},
		{"setup-items/workflowId-long", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: strings.Repeat("w", 65)}), "payload.workflowId", schemaRejects},
		{"setup-items/workflowId-utf16", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: strings.Repeat("😀", 33)}), "payload.workflowId", schemaRejects},
		{"setup-items/workflowId-proto", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "__proto__"}), "payload.workflowId", schemaAccepts},
		{"setup-items/kind", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "w", Items: []SetupItem{{ID: "i", Kind: "secret"}}}), "payload.items[0].kind", schemaAlters},
		{"setup-items/no-id", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "w", Items: []SetupItem{{Kind: SetupItemParameters, NodeName: "n"}}}), "payload.items[0].id", schemaAccepts},
		{"setup-items/credential-type", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "w", Items: []SetupItem{{ID: "i", Kind: SetupItemCredential}}}), "payload.items[0].credentialType", schemaAccepts},
		{"setup-items/foreign-field", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "w", Items: []SetupItem{{ID: "i", Kind: SetupItemCredential, CredentialType: "c", NodeName: "n"}}}), "payload.items[0].nodeName", schemaAccepts},
		{"setup-items/hint", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "w", Items: []SetupItem{{ID: "i", Kind: SetupItemCredential, CredentialType: "c",
			SetupHint: &CredentialSetupHint{}}}}), "payload.items[0].setupHint.placeholders", schemaAlters},

		{"preferences-applied/scope", goldenEnv(TypePreferencesApplied, &PreferencesApplied{Preferences: []AppliedPreference{{ID: "p", Scope: "team"}}}), "payload.preferences[0].scope", schemaRejects},
		{"preferences-applied/carried-when-injected", goldenEnv(TypePreferencesApplied, &PreferencesApplied{InjectedThisTurn: true, CarriedFromRunID: "run_0"}), "payload.carriedFromRunId", schemaRejects},
		{"preferences-applied/length", goldenEnv(TypePreferencesApplied, &PreferencesApplied{RenderedLength: -1}), "payload.renderedLength", schemaAccepts},
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range invalidEventCases() {
		t.Run(c.name, func(t *testing.T) {
			err := c.ev.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want a *ValidationError for %s", err, c.field)
			}
			if ve.Field != c.field {
				t.Fatalf("Validate() names %q (%v), want %q", ve.Field, ve, c.field)
			}
			if ve.Reason == "" || !strings.HasPrefix(err.Error(), c.field+": ") {
				t.Fatalf("error %q does not read as %q plus a reason", err, c.field)
			}
			if _, merr := json.Marshal(c.ev); (merr != nil) != (c.schema == schemaUnmarshallable) {
				t.Fatalf("json.Marshal error = %v, table says %s", merr, c.schema)
			}
		})
	}
}

func TestInvalidCasesCoverEveryType(t *testing.T) {
	have := map[EventType]bool{}
	for _, c := range invalidEventCases() {
		have[c.ev.Type] = true
	}
	for _, typ := range AllTypes {
		if !have[typ] {
			t.Errorf("no invalid-event case of type %s", typ)
		}
	}
}

// rawInvalidEvent is JSON from outside that must not come out of
// json.Unmarshal + Validate as a valid event.
type rawInvalidEvent struct {
	name  string
	json  string
	field string // the ValidationError's Field, or "" for a plain decoding error
}

func rawInvalidEventCases() []rawInvalidEvent {
	return []rawInvalidEvent{
		{"not-json", `{"type":`, ""},
		{"array", `[]`, ""},
		{"unknown-type", `{"type":"message","runId":"r","agentId":"a","payload":{}}`, "type"},
		{"no-payload", `{"type":"status","runId":"r","agentId":"a"}`, "payload"},
		{"null-payload", `{"type":"status","runId":"r","agentId":"a","payload":null}`, "payload"},
		{"payload-string", `{"type":"status","runId":"r","agentId":"a","payload":"hi"}`, "payload"},
		{"runId-number", `{"type":"status","runId":5,"agentId":"a","payload":{"message":""}}`, ""},
		{"ts-string", `{"type":"status","runId":"r","agentId":"a","ts":"1","payload":{"message":""}}`, ""},
		{"no-runId", `{"type":"status","agentId":"a","payload":{"message":""}}`, "runId"},
		{"text-number", `{"type":"text-delta","runId":"r","agentId":"a","payload":{"text":1}}`, "payload"},
		// The seed document's flat task list; the shipped schema nests it.
		{"tasks-flat", `{"type":"tasks-update","runId":"r","agentId":"a","payload":{"tasks":[{"id":"1","description":"d","status":"pending"}]}}`, "payload"},
		{"tasks-status", `{"type":"tasks-update","runId":"r","agentId":"a","payload":{"tasks":{"tasks":[{"id":"1","description":"d","status":"pending"}]}}}`, "payload.tasks.tasks[0].status"},
		{"run-finish-status", `{"type":"run-finish","runId":"r","agentId":"a","payload":{"status":"ok"}}`, "payload.status"},
		{"tool-call-args-null", `{"type":"tool-call","runId":"r","agentId":"a","payload":{"toolCallId":"c","toolName":"n","args":null}}`, "payload.args"},
		{"fs-arguments-null", `{"type":"filesystem-request","runId":"r","agentId":"a","payload":{"requestId":"q","toolCall":{"name":"n","arguments":null}}}`, "payload.toolCall.arguments"},
		{"confirmation-severity", `{"type":"confirmation-request","runId":"r","agentId":"a","payload":{"requestId":"q","toolCallId":"c","toolName":"n","args":{},"severity":"message","message":"m"}}`, "payload.severity"},
		{"agent-completed-status", `{"type":"agent-completed","runId":"r","agentId":"a","payload":{"role":"x","result":"","status":"interrupted"}}`, "payload.status"},
		{"managed-credential-without-flag", `{"type":"confirmation-request","runId":"r","agentId":"a","payload":{"requestId":"q","toolCallId":"c","toolName":"n","args":{},"severity":"info","message":"m",` +
			`"setupRequests":[{"node":{"name":"n","type":"t","typeVersion":1,"parameters":{},"credentials":{"x":{"id":null,"name":"y"}},"position":[0,0],"id":"i"},"isTrigger":false}]}}`,
			"payload.setupRequests[0].node.credentials.x.id"},
		{"preferences-carried", `{"type":"preferences-applied","runId":"r","agentId":"a","payload":{"preferences":[],"renderedLength":0,"injectedThisTurn":true,"carriedFromRunId":"x"}}`, "payload.carriedFromRunId"},
		{"approval-archive-no-name", `{"type":"confirmation-request","runId":"r","agentId":"a","payload":{"requestId":"q","toolCallId":"c","toolName":"n","args":{},"severity":"info","message":"m",` +
			`"approvalDetails":{"action":"archive-workflow","id":"w"}}}`, "payload.approvalDetails.name"},
	}
}

func TestRawInvalidEventsAreRejected(t *testing.T) {
	for _, c := range rawInvalidEventCases() {
		t.Run(c.name, func(t *testing.T) {
			var ev Event
			err := json.Unmarshal([]byte(c.json), &ev)
			if err == nil {
				err = ev.Validate()
			}
			if err == nil {
				t.Fatal("decoded and validated; want an error")
			}
			var ve *ValidationError
			switch {
			case c.field == "" && errors.As(err, &ve):
				t.Fatalf("got validation error %v, want a decoding error", err)
			case c.field != "" && !errors.As(err, &ve):
				t.Fatalf("got %v, want a validation error naming %s", err, c.field)
			case c.field != "" && ve.Field != c.field:
				t.Fatalf("error names %q (%v), want %q", ve.Field, ve, c.field)
			}
		})
	}
}

func TestExactHTTPOrigin(t *testing.T) {
	for _, ok := range []string{"https://api.example.com", "http://localhost", "http://127.0.0.1:8080",
		"https://a-b.example.co.uk:8443", "http://10.0.0.1", "http://example.com:0"} {
		if err := exactHTTPOrigin("o", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "example.com", "https://", "https://example.com/", "https://example.com:443",
		"http://example.com:80", "HTTPS://example.com", "https://Example.com", "https://user@example.com",
		"https://example.com?x", "https://example.com#x", "https://ex ample.com", "http://127.1", "http://256.0.0.1",
		"http://1.2.3.04", "http://0x7f.0.0.1", "https://example.com:080", "https://example.com:99999",
		"https://-a.example.com", "https://a..b", "https://xn--nxasmq6b.com", "http://[::1]", "https://é.com",
		"https://example.com:", "https://" + strings.Repeat("a", 300) + ".com"} {
		if err := exactHTTPOrigin("o", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestJSLengthCountsUTF16Units(t *testing.T) {
	for s, want := range map[string]int{"": 0, "abc": 3, "é": 1, "😀": 2, "a😀b": 4, "\xff": 1} {
		if got := jsLength(s); got != want {
			t.Errorf("jsLength(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestValidateAcceptsSchemaEdgeValues(t *testing.T) {
	for name, ev := range map[string]Event{
		"status-clear":     goldenEnv(TypeStatus, &Status{}),
		"empty-text-delta": goldenEnv(TypeTextDelta, &Text{}),
		"nil-tools":        goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "p", Role: "r"}),
		"nil-args":         goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "c", ToolName: "n"}),
		"null-result":      goldenEnv(TypeToolResult, &ToolResult{ToolCallID: "c", Result: json.RawMessage(`null`)}),
		"empty-tasks":      goldenEnv(TypeTasksUpdate, &TasksUpdate{}),
		"workflowId-64":    goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: strings.Repeat("😀", 32)}),
		"plan-review-in-args": confirmWith(func(p *ConfirmationRequest) {
			p.Message = ""
			p.InputType = InputPlanReview
			p.Args = json.RawMessage(`{"tasks":[{"id":"t","title":"x","kind":"k","spec":"s","deps":[]}]}`)
		}),
		"questions-no-message": confirmWith(func(p *ConfirmationRequest) {
			p.Message = ""
			p.InputType = InputQuestions
			p.Questions = []Question{{ID: "q", Question: "?", Type: QuestionText}}
		}),
		"setup-no-message": confirmWith(func(p *ConfirmationRequest) {
			p.Message = ""
			p.SetupRequests = []WorkflowSetupNode{{Node: SetupNode{Name: "n", Type: "t", ID: "i"}}}
		}),
		"carried-not-injected": goldenEnv(TypePreferencesApplied, &PreferencesApplied{CarriedFromRunID: "run_0"}),
	} {
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRawJSONMustBeValidUTF8(t *testing.T) {
	ev := Event{Type: TypeToolCall, RunID: "r", AgentID: "a",
		Payload: &ToolCall{ToolCallID: "c", ToolName: "n", Args: json.RawMessage("{\"k\":\"\xff\"}")}}
	err := ev.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "payload.args" {
		t.Fatalf("invalid UTF-8 in args: %v", err)
	}
}
