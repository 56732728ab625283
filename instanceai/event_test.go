// The schema check in this file (TestGoldensMatchN8nSchema and the tests that
// share its result) runs n8n's own zod schema under Node. It needs the pinned
// packages installed once:
//
//	cd instanceai/testdata/n8n-schema && npm ci
//
// Without node_modules there the check is skipped, except when CI=true, where
// it fails. Rewrite the golden files with:
//
//	go test ./instanceai/ -run 'TestGoldenEvents' -update
package instanceai

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/events/*.golden from the test tables")

func goldenPtr[T any](v T) *T { return &v }

// goldenCase is one representative event, stored as testdata/events/<name>.golden.
type goldenCase struct {
	name string
	ev   Event
}

const goldenTS = 1767225600000 // 2026-01-01T00:00:00Z

func goldenEnv(t EventType, p Payload) Event {
	return Event{Type: t, RunID: "run_1", AgentID: "orchestrator-run_1", TS: goldenTS, Payload: p}
}

// goldenFullEnv sets every optional envelope field.
func goldenFullEnv(t EventType, p Payload) Event {
	ev := goldenEnv(t, p)
	ev.UserID = "user_1"
	ev.ResponseID = "msg_resp_1"
	return ev
}

func goldenSetupHint() *CredentialSetupHint {
	return &CredentialSetupHint{
		Template: CredentialTemplate{
			Headers: map[string]string{"Authorization": "Bearer {{apiKey}}"},
			QS:      map[string]string{"region": "{{region}}"},
			Body:    json.RawMessage(`{"client":"threadline"}`),
		},
		Placeholders: []CredentialPlaceholder{
			{Name: "apiKey", Title: "API key", Info: "From the dashboard", Type: "password", Optional: goldenPtr(false)},
			{Name: "region", Title: "Region", Type: "plain", Optional: goldenPtr(true)},
		},
		DocsURL:             "https://docs.example.com/api",
		SuggestedName:       "Example API",
		TestURL:             "https://api.example.com/me",
		AcceptedStatusCodes: []int{200, 204},
		ServiceHost:         "api.example.com",
		ServiceOrigin:       "https://api.example.com",
	}
}

func goldenPlanItems() []PlannedTask {
	return []PlannedTask{
		{ID: "t1", Title: "Build the workflow", Kind: "build-workflow", Spec: "Webhook to Slack", Deps: []string{}},
		{ID: "t2", Title: "Seed the table", Kind: "data-table", Spec: "Create a leads table", Deps: []string{"t1"},
			Tools: []string{"create-data-table"}, WorkflowID: "wf_1", IsSupportingWorkflow: goldenPtr(true)},
	}
}

func goldenRows() []RowPreview {
	return []RowPreview{{Values: []ValuePreview{{Column: "name", Value: goldenPtr("Ada")}, {Column: "email", Value: nil}}, RemainingColumns: 2}}
}

func goldenFilter() *FilterPreview {
	return &FilterPreview{Type: "and", Filters: []FilterCondition{
		{ColumnName: "age", Condition: "gte", Value: json.RawMessage(`18`)},
		{ColumnName: "email", Condition: "eq", Value: nil},
		{ColumnName: "name", Condition: "ilike", Value: json.RawMessage(`"%ada%"`)},
	}}
}

// goldenApprovalDetails has one value per approval action, each with all the
// fields of its variant set.
func goldenApprovalDetails() []ApprovalDetails {
	return []ApprovalDetails{
		{Action: ApprovalEditWorkflow, Summary: "Add a Slack node"},
		{Action: ApprovalDeleteTable},
		{Action: ApprovalAddColumn, Column: "score", ColumnType: "number"},
		{Action: ApprovalDeleteColumn, Column: "score"},
		{Action: ApprovalRenameColumn, Column: "score", NewName: "rating"},
		{Action: ApprovalInsertRows, Count: 0, Rows: nil},
		{Action: ApprovalUpdateRows, Changes: &goldenRows()[0], Filter: goldenFilter()},
		{Action: ApprovalDeleteRows, Filter: goldenFilter()},
		{Action: ApprovalArchiveWorkflow, Name: goldenPtr("Lead intake"), ID: "wf_1"},
		{Action: ApprovalRestoreWorkflow, Name: goldenPtr("Lead intake"), ID: "wf_1"},
		{Action: ApprovalUnpublishWorkflow, Name: goldenPtr(""), ID: "wf_1"},
		{Action: ApprovalRestoreVersion, Version: "v3", CreatedAt: "2026-01-01T00:00:00.000Z"},
		{Action: ApprovalUpdateVersion, Version: "v3", Name: goldenPtr("Stable"), Description: goldenPtr("Before the refactor")},
		{Action: ApprovalRunWorkflow, Summary: "Runs once with test data", Trigger: "Webhook"},
		{Action: ApprovalPublishWorkflow, Summary: "Publish lead intake", SelectedVersion: false, SupportingCount: 0,
			Verification: &PublishVerification{Level: "partial", Cause: "trigger not fired", PendingTriggers: []string{"Webhook"},
				PlannedNodeCount: 4, SimulatedNodes: []string{"Slack"}}},
	}
}

func goldenCases() []goldenCase {
	cases := []goldenCase{
		{"run-start", goldenEnv(TypeRunStart, &RunStart{MessageID: "msg_user_1"})},
		{"run-start-full", goldenFullEnv(TypeRunStart, &RunStart{MessageID: "msg_user_1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
			MessageGroupID: "grp_1", LangsmithRunID: "ls_run_1", LangsmithTraceID: "ls_trace_1"})},
		{"run-finish", goldenEnv(TypeRunFinish, &RunFinish{Status: RunCompleted})},
		{"run-finish-full", goldenFullEnv(TypeRunFinish, &RunFinish{Status: RunCancelled, Reason: ReasonUserCancelled,
			ArchivedWorkflowIDs: []string{"wf_old"}})},
		{"text-delta", goldenFullEnv(TypeTextDelta, &Text{Text: "Hello, "})},
		{"reasoning-delta", goldenFullEnv(TypeReasoningDelta, &Text{Text: "The user wants"})},
		{"text-block", goldenFullEnv(TypeTextBlock, &Text{Text: "Hello, world. <b>&</b> ✓"})},
		{"reasoning-block", goldenFullEnv(TypeReasoningBlock, &Text{Text: "The user wants a workflow."})},
		{"tool-input-start", goldenEnv(TypeToolInputStart, &ToolInputStart{ToolCallID: "call_1", ToolName: "search-nodes"})},
		{"tool-call", goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "call_1", ToolName: "search-nodes",
			Args: json.RawMessage(`{"query":"slack","limit":5,"filters":{"trigger":false},"tags":["a",null]}`)})},
		{"tool-call-no-args", goldenEnv(TypeToolCall, &ToolCall{ToolCallID: "call_2", ToolName: "list-workflows"})},
		{"tool-result", goldenEnv(TypeToolResult, &ToolResult{ToolCallID: "call_1", Result: json.RawMessage(`{"nodes":["n8n-nodes-base.slack"]}`)})},
		{"tool-result-null", goldenEnv(TypeToolResult, &ToolResult{ToolCallID: "call_2"})},
		{"tool-result-string", goldenEnv(TypeToolResult, &ToolResult{ToolCallID: "call_3", Result: json.RawMessage(`"done"`)})},
		{"tool-error", goldenEnv(TypeToolError, &ToolError{ToolCallID: "call_1", Error: "node type not found"})},
		{"tool-interrupted", goldenEnv(TypeToolInterrupted, &ToolError{ToolCallID: "call_1", Error: "Interrupted by user"})},
		{"agent-spawned", goldenEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "orchestrator-run_1", Role: "researcher"})},
		{"agent-spawned-full", goldenFullEnv(TypeAgentSpawned, &AgentSpawned{ParentID: "orchestrator-run_1", Role: "workflow builder",
			Tools: []string{"search-nodes", "build-workflow"}, TaskID: "task_1", Kind: AgentKindBuilder, Title: "Building workflow",
			Subtitle: "Lead intake", Goal: "Build a webhook that posts leads to Slack",
			TargetResource: &TargetResource{Type: TargetWorkflow, ID: "wf_1", Name: "Lead intake", ProjectID: "proj_1"}})},
		{"agent-completed", goldenEnv(TypeAgentCompleted, &AgentCompleted{Role: "researcher"})},
		{"agent-completed-full", goldenFullEnv(TypeAgentCompleted, &AgentCompleted{Role: "workflow builder",
			Result: "Built workflow wf_1", Error: "one node could not be configured", Status: RunError})},
		{"confirmation-request", goldenEnv(TypeConfirmRequest, &ConfirmationRequest{RequestID: "req_1", ToolCallID: "call_1",
			ToolName: "delete-workflow", Severity: SeverityDestructive, Message: "Delete workflow Lead intake?"})},
		{"confirmation-request-questions", goldenEnv(TypeConfirmRequest, &ConfirmationRequest{RequestID: "req_2", ToolCallID: "call_2",
			ToolName: "ask-user", Args: json.RawMessage(`{}`), Severity: SeverityInfo, InputType: InputQuestions,
			IntroMessage: "A few questions first",
			Questions: []Question{
				{ID: "q1", Question: "Which channel?", Type: QuestionSingle, Options: []string{"#leads", "#sales"}},
				{ID: "q2", Question: "Which fields?", Type: QuestionMulti, Options: []string{"name", "email"}},
				{ID: "q3", Question: "Anything else?", Type: QuestionText},
			}})},
		{"confirmation-request-plan-review", goldenEnv(TypeConfirmRequest, &ConfirmationRequest{RequestID: "req_3", ToolCallID: "call_3",
			ToolName: "plan", Severity: SeverityInfo, InputType: InputPlanReview, IntroMessage: "Here is the plan",
			Tasks: &TaskList{Tasks: []Task{{ID: "t1", Description: "Build the workflow", Status: TaskTodo},
				{ID: "t2", Description: "Seed the table", Status: TaskTodo}}},
			PlanItems: goldenPlanItems()})},
		{"confirmation-request-setup", goldenEnv(TypeConfirmRequest, &ConfirmationRequest{RequestID: "req_4", ToolCallID: "call_4",
			ToolName: "setup-workflow", Severity: SeverityWarning, WorkflowID: "wf_1", ProjectID: "proj_1",
			CredentialFlow:        &CredentialFlow{Stage: "finalize"},
			CredentialDestination: &CredentialDestination{Origin: "https://api.example.com", NodeNames: []string{"HTTP Request"}},
			RequireUserSelection:  goldenPtr(true),
			CredentialRequests: []CredentialRequest{
				{CredentialType: "slackApi", Reason: "Post to Slack"},
				{CredentialType: "httpHeaderAuth", Reason: "Call the API", ExistingCredentials: []CredentialRef{{ID: "cred_1", Name: "Old key"}},
					SuggestedName: "Example API", SetupHint: goldenSetupHint(), PreferNew: goldenPtr(true)},
			},
			SetupRequests: []WorkflowSetupNode{
				{Node: SetupNode{Name: "Webhook", Type: "n8n-nodes-base.webhook", TypeVersion: 2, ID: "node_1",
					Position: [2]float64{0, 0}}, IsTrigger: true},
				{Node: SetupNode{Name: "HTTP Request", Type: "n8n-nodes-base.httpRequest", TypeVersion: 4.2, ID: "node_2",
					Parameters: json.RawMessage(`{"url":"https://api.example.com/leads","method":"POST"}`),
					Position:   [2]float64{220, -40.5},
					Credentials: map[string]NodeCredential{
						"httpHeaderAuth": {ID: goldenPtr("cred_1"), Name: "Old key"},
						"openAiApi":      {ID: nil, Name: "AI gateway", AIGatewayManaged: true},
					}},
					CredentialType: "httpHeaderAuth", ExistingCredentials: []CredentialRef{{ID: "cred_1", Name: "Old key"}},
					SetupHint: goldenSetupHint(), IsTrigger: false, IsFirstTrigger: goldenPtr(false), IsTestable: goldenPtr(true),
					IsAutoApplied: goldenPtr(false), PreferNewCredential: goldenPtr(false),
					CredentialTestResult: &CredentialTestResult{Success: false, Message: "401 Unauthorized"},
					TriggerTestResult:    &TriggerTestResult{Status: "listening", Error: "waiting for a call"},
					ParameterIssues:      map[string][]string{"url": {"Parameter \"URL\" is required."}, "method": nil},
					EditableParameters: []EditableParameter{
						{Name: "url", DisplayName: "URL", Type: "string", Required: goldenPtr(true), Default: json.RawMessage(`""`)},
						{Name: "method", DisplayName: "Method", Type: "options", Default: json.RawMessage(`"GET"`),
							Options: []ParameterOption{{Name: "GET", Value: json.RawMessage(`"GET"`)}, {Name: "Retries", Value: json.RawMessage(`3`)},
								{Name: "Follow", Value: json.RawMessage(`true`)}}},
					},
					NeedsAction: goldenPtr(true), CredentialNeedsAction: goldenPtr(false)},
			}})},
		{"confirmation-request-full", goldenFullEnv(TypeConfirmRequest, &ConfirmationRequest{RequestID: "req_5", InputThreadID: "input_1",
			ToolCallID: "call_5", ToolName: "fetch-url", Args: json.RawMessage(`{"url":"https://example.com/a?b=1"}`),
			Severity: SeverityWarning, Message: "Allow access to example.com?",
			ApprovalDetails: &ApprovalDetails{Action: ApprovalRunWorkflow, Summary: "Runs once", Trigger: "Manual"},
			ResourceName:    "Lead intake",
			TargetApproval:  &TargetApproval{ToolName: "http-request", DisplayName: "HTTP request", Args: json.RawMessage(`{"url":"https://example.com"}`)},
			InputType:       InputResourceDecision, IntroMessage: "One more thing",
			Questions: []Question{{ID: "q1", Question: "Why?", Type: QuestionText}},
			Tasks:     &TaskList{Tasks: []Task{{ID: "t1", Description: "Fetch", Detail: "waiting for approval", Status: TaskInProgress}}},
			PlanItems: goldenPlanItems()[:1],
			CredentialRequests: []CredentialRequest{{CredentialType: "slackApi", Reason: "Post to Slack",
				ExistingCredentials: []CredentialRef{}}},
			RequireUserSelection:  goldenPtr(false),
			CredentialFlow:        &CredentialFlow{Stage: "generic"},
			CredentialDestination: &CredentialDestination{Origin: "http://127.0.0.1:8080", NodeNames: []string{"HTTP Request", "Slack"}},
			SetupRequests: []WorkflowSetupNode{{Node: SetupNode{Name: "Slack", Type: "n8n-nodes-base.slack", TypeVersion: 2.3,
				ID: "node_3", Parameters: json.RawMessage(`{}`), Position: [2]float64{440, 0}}, IsTrigger: false}},
			WorkflowID:        "wf_1",
			ProjectID:         "proj_1",
			DomainAccess:      &DomainAccess{URL: "https://example.com/a?b=1", Host: "example.com"},
			WebSearch:         &WebSearch{Query: "n8n slack node"},
			ResourceDecision:  &ResourceDecision{ToolGroup: "filesystem", Resource: "/home/ada/notes", Description: "Read notes", Options: []string{DecisionDenyOnce, DecisionAllowOnce, DecisionAllowForSession}},
			ChannelConfig:     &ChannelConfig{IntegrationType: "slack", AgentID: "agent_1"},
			MCPConnectRequest: &MCPConnectRequest{Servers: []MCPConnectServer{{ServerSlug: "github", Title: "GitHub", Tagline: "Issues and PRs", UsesCredentials: []MCPCredentialUse{{CredentialType: "githubApi", Name: "GitHub", Value: "cred_9"}}}}},
		})},
		{"tasks-update", goldenEnv(TypeTasksUpdate, &TasksUpdate{})},
		{"tasks-update-full", goldenFullEnv(TypeTasksUpdate, &TasksUpdate{Tasks: TaskList{Tasks: []Task{
			{ID: "t1", Description: "Build the workflow", Status: TaskDone},
			{ID: "t2", Description: "Seed the table", Detail: "42 rows", Status: TaskInProgress},
			{ID: "t3", Description: "Test it", Status: TaskTodo},
			{ID: "t4", Description: "Publish", Status: TaskFailed, Detail: "needs approval"},
			{ID: "t5", Description: "Announce", Status: TaskCancelled},
		}}, PlanItems: goldenPlanItems()})},
		{"status", goldenEnv(TypeStatus, &Status{Message: "Searching nodes..."})},
		{"status-clear", goldenEnv(TypeStatus, &Status{})},
		{"thread-title-updated", goldenEnv(TypeThreadTitleUpdated, &ThreadTitle{Title: "Lead intake to Slack"})},
		{"error", goldenEnv(TypeError, &ErrorPayload{Content: "Something went wrong"})},
		{"error-full", goldenFullEnv(TypeError, &ErrorPayload{Content: "The model provider is unavailable", StatusCode: 503,
			Code: ErrorCodeQuotaExhausted, Provider: "anthropic", TechnicalDetails: "upstream 503 after 3 retries"})},
		{"filesystem-request", goldenEnv(TypeFilesystemRequest, &FilesystemRequest{RequestID: "fs_1",
			ToolCall: FilesystemToolCall{Name: "read_file", Arguments: json.RawMessage(`{"path":"notes/todo.md"}`)}})},
		{"filesystem-request-no-args", goldenEnv(TypeFilesystemRequest, &FilesystemRequest{RequestID: "fs_2",
			ToolCall: FilesystemToolCall{Name: "list_roots"}})},
		{"setup-items", goldenEnv(TypeSetupItems, &SetupItems{WorkflowID: "wf_1"})},
		{"setup-items-full", goldenFullEnv(TypeSetupItems, &SetupItems{WorkflowID: "wf_1", Items: []SetupItem{
			{ID: "si_1", Kind: SetupItemCredential, CredentialType: "slackApi"},
			{ID: "si_2", Kind: SetupItemCredential, CredentialType: "httpHeaderAuth", AppDisplayName: "Example API",
				NodeBindings: []NodeBinding{{NodeName: "HTTP Request"}}, SetupHint: goldenSetupHint(), Reason: "Call the API"},
			{ID: "si_3", Kind: SetupItemParameters, NodeName: "HTTP Request", ParameterNames: []string{"url"}},
			{ID: "si_4", Kind: SetupItemParameters, NodeName: "Slack"},
		}})},
		{"preferences-applied", goldenEnv(TypePreferencesApplied, &PreferencesApplied{InjectedThisTurn: true})},
		{"preferences-applied-full", goldenFullEnv(TypePreferencesApplied, &PreferencesApplied{
			Preferences: []AppliedPreference{{ID: "pref_1", Scope: PreferenceInstance}, {ID: "pref_2", Scope: PreferenceUser},
				{ID: "pref_3", Scope: PreferenceProject, ProjectID: "proj_1", ProjectName: "Sales"}},
			RenderedLength: 412, InjectedThisTurn: false, CarriedFromRunID: "run_0"})},
	}
	for _, d := range goldenApprovalDetails() {
		cases = append(cases, goldenCase{"confirmation-request-approval-" + d.Action, goldenEnv(TypeConfirmRequest,
			&ConfirmationRequest{RequestID: "req_" + d.Action, ToolCallID: "call_" + d.Action, ToolName: "data-tables",
				Args: json.RawMessage(`{"table":"leads"}`), Severity: SeverityDestructive, Message: "Apply " + d.Action + "?",
				ResourceName: "leads", ApprovalDetails: goldenPtr(d)})})
	}
	// insert-rows with rows, to go with the one with none above.
	cases = append(cases, goldenCase{"confirmation-request-approval-insert-rows-full", goldenEnv(TypeConfirmRequest,
		&ConfirmationRequest{RequestID: "req_ins", ToolCallID: "call_ins", ToolName: "data-tables", Severity: SeverityWarning,
			Message: "Insert 3 rows?", ApprovalDetails: &ApprovalDetails{Action: ApprovalInsertRows, Count: 3, Rows: goldenRows()}})})
	return cases
}

func goldenPath(name string) string { return filepath.Join("testdata", "events", name+".golden") }

// goldenBytes is the golden form of an event: json.Marshal, indented.
func goldenBytes(t *testing.T, ev Event) []byte {
	t.Helper()
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		t.Fatalf("indent: %v", err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func TestGoldenEvents(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			if seen[c.name] {
				t.Fatalf("duplicate golden name %s", c.name)
			}
			seen[c.name] = true
			if err := c.ev.Validate(); err != nil {
				t.Fatalf("golden event does not validate: %v", err)
			}
			got := goldenBytes(t, c.ev)
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(goldenPath(c.name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(goldenPath(c.name), got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath(c.name))
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("marshalled event differs from %s (run with -update if the change is intended)\ngot:\n%s\nwant:\n%s",
					goldenPath(c.name), got, want)
			}
		})
	}
	if *updateGolden {
		return
	}
	// Every golden on disk belongs to a case: the schema check reads them all.
	files, err := filepath.Glob(filepath.Join("testdata", "events", "*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".golden"); !seen[name] {
			t.Errorf("%s has no case in goldenCases: delete it or add the case", f)
		}
	}
}

func TestGoldensCoverEveryType(t *testing.T) {
	have := map[EventType]int{}
	for _, c := range goldenCases() {
		have[c.ev.Type]++
	}
	for _, typ := range AllTypes {
		if have[typ] == 0 {
			t.Errorf("no golden event of type %s", typ)
		}
	}
}

// readGoldens returns every golden file's name and bytes.
func readGoldens(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "events", "*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files in testdata/events (run TestGoldenEvents with -update)")
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".golden")] = b
	}
	return out
}

func TestGoldenRoundTrip(t *testing.T) {
	for name, want := range readGoldens(t) {
		t.Run(name, func(t *testing.T) {
			var ev Event
			if err := json.Unmarshal(want, &ev); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if err := ev.Validate(); err != nil {
				t.Fatalf("decoded golden does not validate: %v", err)
			}
			if got := goldenBytes(t, ev); !bytes.Equal(got, want) {
				t.Errorf("round trip changed the bytes\ngot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestZeroValuesMarshalToSchemaShape pins the rules that keep Go zero values
// valid on the wire: required arrays and objects are [] and {}, optional
// fields are absent, never null.
func TestZeroValuesMarshalToSchemaShape(t *testing.T) {
	for _, c := range []struct {
		p    any
		want string
	}{
		{AgentSpawned{ParentID: "p", Role: "r"}, `{"parentId":"p","role":"r","tools":[]}`},
		{AgentCompleted{Role: "r"}, `{"role":"r","result":""}`},
		{ToolCall{ToolCallID: "c", ToolName: "n"}, `{"toolCallId":"c","toolName":"n","args":{}}`},
		{ToolResult{ToolCallID: "c"}, `{"toolCallId":"c","result":null}`},
		{TasksUpdate{}, `{"tasks":{"tasks":[]}}`},
		{FilesystemRequest{RequestID: "r", ToolCall: FilesystemToolCall{Name: "n"}}, `{"requestId":"r","toolCall":{"name":"n","arguments":{}}}`},
		{ConfirmationRequest{}, `{"requestId":"","toolCallId":"","toolName":"","args":{},"severity":"","message":""}`},
		{RunFinish{Status: "completed", ArchivedWorkflowIDs: []string{}}, `{"status":"completed"}`},
		{SetupItems{WorkflowID: "w"}, `{"workflowId":"w","items":[]}`},
		{SetupItem{ID: "i", Kind: SetupItemParameters}, `{"id":"i","kind":"parameters","nodeName":"","parameterNames":[]}`},
		{SetupItem{ID: "i", Kind: SetupItemCredential}, `{"id":"i","kind":"credential","credentialType":""}`},
		{PreferencesApplied{}, `{"preferences":[],"renderedLength":0,"injectedThisTurn":false}`},
		{ApprovalDetails{Action: ApprovalInsertRows}, `{"action":"insert-rows","count":0,"rows":[]}`},
		{ApprovalDetails{Action: ApprovalPublishWorkflow}, `{"action":"publish-workflow","selectedVersion":false,"supportingCount":0}`},
		{ApprovalDetails{Action: ApprovalUpdateRows}, `{"action":"update-rows","changes":null,"filter":null}`},
		{PublishVerification{Level: "unproven"}, `{"level":"unproven","unprovenTargets":[],"pendingTriggers":[],"nodesNotReached":[],"plannedNodeCount":0,"simulatedNodes":[],"pinnedNodes":[]}`},
		{SetupNode{}, `{"name":"","type":"","typeVersion":0,"parameters":{},"position":[0,0],"id":""}`},
		{NodeCredential{Name: "n", AIGatewayManaged: true}, `{"id":null,"name":"n","__aiGatewayManaged":true}`},
		{WorkflowSetupNode{ParameterIssues: map[string][]string{"x": nil}}, `{"node":{"name":"","type":"","typeVersion":0,"parameters":{},"position":[0,0],"id":""},"isTrigger":false,"parameterIssues":{"x":[]}}`},
		{CredentialRequest{}, `{"credentialType":"","reason":"","existingCredentials":[]}`},
		{ResourceDecision{}, `{"toolGroup":"","resource":"","description":"","options":[]}`},
	} {
		got, err := json.Marshal(c.p)
		if err != nil {
			t.Errorf("%T: %v", c.p, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%T marshals to\n%s\nwant\n%s", c.p, got, c.want)
		}
	}
}

func TestUnmarshalKeepsTypedPayload(t *testing.T) {
	var ev Event
	in := `{"type":"tasks-update","runId":"r","agentId":"a","payload":{"tasks":{"tasks":[{"id":"1","description":"d","status":"done"}]}}}`
	if err := json.Unmarshal([]byte(in), &ev); err != nil {
		t.Fatal(err)
	}
	p, ok := ev.Payload.(*TasksUpdate)
	if !ok {
		t.Fatalf("payload is %T, want *TasksUpdate", ev.Payload)
	}
	if len(p.Tasks.Tasks) != 1 || p.Tasks.Tasks[0].Status != TaskDone {
		t.Fatalf("tasks decoded as %+v", p.Tasks)
	}
}

// ---- n8n schema check (Node) ----

const n8nSchemaDir = "testdata/n8n-schema"

// schemaInput is one event handed to check.js.
type schemaInput struct {
	Name  string          `json:"name"`
	Event json.RawMessage `json:"event"`
}

// schemaResult is check.js's verdict on one event: Success is zod's
// safeParse; Exact says the parsed value equals the input (nothing stripped
// or rewritten).
type schemaResult struct {
	Name    string   `json:"name"`
	Success bool     `json:"success"`
	Exact   bool     `json:"exact"`
	Issues  []string `json:"issues"`
}

type schemaReport struct {
	Types     []string       `json:"types"`
	Ephemeral []string       `json:"ephemeral"`
	Results   []schemaResult `json:"results"`
}

var (
	schemaOnce   sync.Once
	schemaOut    schemaReport
	schemaErr    error
	schemaSkip   string
	schemaInputs []schemaInput
)

// schemaCheckInputs gathers every golden file, every invalid event of the
// validation table that marshals, and every raw invalid event.
func schemaCheckInputs(t *testing.T) []schemaInput {
	var in []schemaInput
	goldens := readGoldens(t)
	for _, name := range sortedKeys(goldens) {
		in = append(in, schemaInput{Name: "golden/" + name, Event: goldens[name]})
	}
	for _, c := range invalidEventCases() {
		raw, err := json.Marshal(c.ev)
		if err != nil {
			continue
		}
		in = append(in, schemaInput{Name: "invalid/" + c.name, Event: raw})
	}
	for _, c := range rawInvalidEventCases() {
		if json.Valid([]byte(c.json)) {
			in = append(in, schemaInput{Name: "raw/" + c.name, Event: json.RawMessage(c.json)})
		}
	}
	for _, c := range extensionCases() {
		raw, err := json.Marshal(c.ev)
		if err != nil {
			t.Fatalf("extension %s: %v", c.name, err)
		}
		in = append(in, schemaInput{Name: "extension/" + c.name, Event: raw})
	}
	return in
}

// extensionCases are fields Threadline adds to n8n's events where n8n's
// schema has no place for them. A browser on n8n's schema must still
// accept the event (zod strips the unknown key); if a later @n8n/api-types
// gives the field a place, TestExtensionsAreStrippedByN8nSchema says so and
// the field should take n8n's shape.
func extensionCases() []goldenCase {
	return []goldenCase{
		{"run-finish-usage", goldenEnv(TypeRunFinish, &RunFinish{Status: RunCompleted,
			Usage: []TokenUsage{{Provider: "openai", Model: "gpt-4o-mini", InputTokens: 120, OutputTokens: 30, TotalTokens: 150}}})},
	}
}

// n8nSchema runs check.js once per test binary and returns its report. It
// skips the calling test when the Node packages are not installed, unless
// CI=true.
func n8nSchema(t *testing.T) (schemaReport, []schemaInput) {
	t.Helper()
	schemaOnce.Do(func() {
		node, err := exec.LookPath("node")
		switch {
		case err != nil:
			schemaSkip = "node is not installed"
			return
		case !fileExists(filepath.Join(n8nSchemaDir, "node_modules", "@n8n", "api-types", "package.json")):
			schemaSkip = "n8n schema packages are not installed: run `npm ci` in instanceai/" + n8nSchemaDir
			return
		}
		schemaInputs = schemaCheckInputs(t)
		body, err := json.Marshal(schemaInputs)
		if err != nil {
			schemaErr = err
			return
		}
		cmd := exec.Command(node, "check.js")
		cmd.Dir = n8nSchemaDir
		cmd.Stdin = bytes.NewReader(body)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			schemaErr = &schemaRunError{err: err, stderr: stderr.String()}
			return
		}
		schemaErr = json.Unmarshal(out, &schemaOut)
	})
	if schemaSkip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("n8n schema check cannot run under CI: %s", schemaSkip)
		}
		t.Skipf("skipping n8n schema check: %s", schemaSkip)
	}
	if schemaErr != nil {
		t.Fatalf("n8n schema check failed to run: %v", schemaErr)
	}
	return schemaOut, schemaInputs
}

type schemaRunError struct {
	err    error
	stderr string
}

func (e *schemaRunError) Error() string { return e.err.Error() + ": " + e.stderr }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func schemaResultsByName(t *testing.T, rep schemaReport, in []schemaInput) map[string]schemaResult {
	t.Helper()
	by := map[string]schemaResult{}
	for _, r := range rep.Results {
		by[r.Name] = r
	}
	if len(by) != len(in) {
		t.Fatalf("check.js answered %d of %d events", len(by), len(in))
	}
	return by
}

func TestGoldensMatchN8nSchema(t *testing.T) {
	rep, in := n8nSchema(t)
	by := schemaResultsByName(t, rep, in)
	n := 0
	for _, i := range in {
		if !strings.HasPrefix(i.Name, "golden/") {
			continue
		}
		n++
		r := by[i.Name]
		if !r.Success {
			t.Errorf("%s: rejected by instanceAiEventSchema: %v", i.Name, r.Issues)
		} else if !r.Exact {
			t.Errorf("%s: accepted but altered by instanceAiEventSchema (a field was stripped or rewritten)", i.Name)
		}
	}
	if n != len(goldenCases()) {
		t.Errorf("checked %d goldens, have %d cases", n, len(goldenCases()))
	}
}

// TestExtensionsAreStrippedByN8nSchema: n8n 1.41.0's runFinishPayloadSchema
// has no usage (the only usage in @n8n/api-types is the eval harness's
// InstanceAiEvalAgentExecutionResult.usage {inputTokens, outputTokens}), so
// Threadline's run-finish usage must parse and be dropped, not refused.
func TestExtensionsAreStrippedByN8nSchema(t *testing.T) {
	rep, in := n8nSchema(t)
	by := schemaResultsByName(t, rep, in)
	for _, c := range extensionCases() {
		r := by["extension/"+c.name]
		switch {
		case !r.Success:
			t.Errorf("%s: n8n's schema refuses the event: %v", c.name, r.Issues)
		case r.Exact:
			t.Errorf("%s: n8n's schema now keeps the extension field; give it n8n's shape", c.name)
		}
	}
}

func TestInvalidEventsAgreeWithN8nSchema(t *testing.T) {
	rep, in := n8nSchema(t)
	by := schemaResultsByName(t, rep, in)
	for _, c := range invalidEventCases() {
		r, sent := by["invalid/"+c.name]
		if !sent {
			if c.schema != schemaUnmarshallable {
				t.Errorf("%s: not sent to the schema check (it does not marshal), but expected %q", c.name, c.schema)
			}
			continue
		}
		var got string
		switch {
		case !r.Success:
			got = schemaRejects
		case !r.Exact:
			got = schemaAlters
		default:
			got = schemaAccepts
		}
		if got != c.schema {
			t.Errorf("%s (Validate: %s): n8n's schema %s it, the table says it %s; issues: %v", c.name, c.field, got, c.schema, r.Issues)
		}
	}
	for _, c := range rawInvalidEventCases() {
		r, sent := by["raw/"+c.name]
		if !sent {
			continue
		}
		if r.Success && r.Exact {
			t.Errorf("raw %s: Go rejects it but n8n's schema accepts it unchanged", c.name)
		}
	}
}

func TestAllTypesMatchN8nSchema(t *testing.T) {
	rep, _ := n8nSchema(t)
	var ours []string
	for _, typ := range AllTypes {
		ours = append(ours, string(typ))
	}
	slices.Sort(ours)
	theirs := slices.Clone(rep.Types)
	slices.Sort(theirs)
	if !slices.Equal(ours, theirs) {
		t.Errorf("AllTypes = %v\nschema   = %v", ours, theirs)
	}
}

// TestEmptyPlanItemsSurviveARoundTrip checks that tasks-update keeps an
// empty planItems list through the log: n8n's reducer treats [] (the plan
// was cleared) differently from an absent list (no change).
func TestEmptyPlanItemsSurviveARoundTrip(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string
	}{
		{`{"tasks":{"tasks":[]},"planItems":[]}`, `"planItems":[]`},
		{`{"tasks":{"tasks":[]}}`, ``},
	} {
		var p TasksUpdate
		if err := json.Unmarshal([]byte(tc.raw), &p); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(string(out), `"planItems"`)
		if tc.want == "" && has || tc.want != "" && !strings.Contains(string(out), tc.want) {
			t.Fatalf("%s encodes as %s", tc.raw, out)
		}
	}
}
