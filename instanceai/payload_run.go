package instanceai

import "encoding/json"

// The payloads of a run's own events: its start and finish, text and
// reasoning, tool calls, agents, its checklist, status, title and errors.

// Text is the payload of text-delta, reasoning-delta, text-block and
// reasoning-block.
type Text struct {
	Text string `json:"text"`
}

// RunStart opens a run.
type RunStart struct {
	MessageID      string `json:"messageId"`
	TraceID        string `json:"traceId,omitempty"`
	MessageGroupID string `json:"messageGroupId,omitempty"`
	// LangsmithRunID and LangsmithTraceID let feedback annotate a trace.
	LangsmithRunID   string `json:"langsmithRunId,omitempty"`
	LangsmithTraceID string `json:"langsmithTraceId,omitempty"`
}

// Run-finish statuses. Completed, cancelled and error are also the statuses
// of agent-completed.
const (
	RunCompleted   = "completed"
	RunCancelled   = "cancelled"
	RunError       = "error"
	RunInterrupted = "interrupted"
)

// Well-known run-finish reasons.
const (
	ReasonUserCancelled   = "user_cancelled"
	ReasonTimeout         = "timeout"
	ReasonServiceShutdown = "service_shutdown"
	ReasonCrashed         = "crash_interrupted"
)

// RunFinish ends the orchestrator's part of a run.
type RunFinish struct {
	Status              string   `json:"status"`
	Reason              string   `json:"reason,omitempty"`
	ArchivedWorkflowIDs []string `json:"archivedWorkflowIds,omitempty"`
	// Usage is the model tokens the run spent, one entry per provider and
	// model. It is an extension of n8n's payload (whose schema strips
	// unknown keys); AG-UI carries it on RUN_FINISHED and RUN_ERROR.
	Usage []TokenUsage `json:"usage,omitempty"`
}

// TokenUsage counts the tokens one model spent.
type TokenUsage struct {
	Provider     string `json:"provider,omitempty"`
	Model        string `json:"model,omitempty"`
	InputTokens  int64  `json:"inputTokens"`
	OutputTokens int64  `json:"outputTokens"`
	TotalTokens  int64  `json:"totalTokens"`
}

// ToolInputStart announces a tool call whose arguments are still streaming.
type ToolInputStart struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
}

// ToolCall is a tool invocation with complete arguments (a JSON object; nil
// marshals as {}).
type ToolCall struct {
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Args       json.RawMessage `json:"args"`
}

// MarshalJSON writes args as {} when unset.
func (p ToolCall) MarshalJSON() ([]byte, error) {
	type plain ToolCall
	p.Args = objectOrEmpty(p.Args)
	return json.Marshal(plain(p))
}

// ToolResult is a tool's successful result (any JSON value; nil marshals as
// null).
type ToolResult struct {
	ToolCallID string          `json:"toolCallId"`
	Result     json.RawMessage `json:"result"`
}

// ToolError is the payload of tool-error and tool-interrupted.
type ToolError struct {
	ToolCallID string `json:"toolCallId"`
	Error      string `json:"error"`
}

// Target resource types of agent-spawned.
const (
	TargetWorkflow   = "workflow"
	TargetDataTable  = "data-table"
	TargetCredential = "credential"
	TargetOther      = "other"
	TargetAgent      = "agent"
	TargetConfigEval = "config-eval"
)

// TargetResource names what a spawned agent works on.
type TargetResource struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	ProjectID string `json:"projectId,omitempty"`
}

// Agent kinds of agent-spawned (they pick the card the UI shows).
const (
	AgentKindBuilder      = "builder"
	AgentKindDataTable    = "data-table"
	AgentKindPlanner      = "planner"
	AgentKindEvalSetup    = "eval-setup"
	AgentKindAgentBuilder = "agent-builder"
)

// AgentSpawned adds an agent (the envelope's agentId) under ParentID.
type AgentSpawned struct {
	ParentID       string          `json:"parentId"`
	Role           string          `json:"role"`
	Tools          []string        `json:"tools"`
	TaskID         string          `json:"taskId,omitempty"`
	Kind           string          `json:"kind,omitempty"`
	Title          string          `json:"title,omitempty"`
	Subtitle       string          `json:"subtitle,omitempty"`
	Goal           string          `json:"goal,omitempty"`
	TargetResource *TargetResource `json:"targetResource,omitempty"`
}

// MarshalJSON writes tools as [] when unset.
func (p AgentSpawned) MarshalJSON() ([]byte, error) {
	type plain AgentSpawned
	p.Tools = nonNil(p.Tools)
	return json.Marshal(plain(p))
}

// AgentCompleted settles a spawned agent. Result is always present.
type AgentCompleted struct {
	Role   string `json:"role"`
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	Status string `json:"status,omitempty"`
}

// Task statuses of the shipped schema.
const (
	TaskTodo       = "todo"
	TaskInProgress = "in_progress"
	TaskDone       = "done"
	TaskFailed     = "failed"
	TaskCancelled  = "cancelled"
)

// Task is one checklist entry.
type Task struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	Detail      string `json:"detail,omitempty"`
	Status      string `json:"status"`
}

// TaskList is the nested checklist object of the shipped schema.
type TaskList struct {
	Tasks []Task `json:"tasks"`
}

// MarshalJSON writes tasks as [] when unset.
func (p TaskList) MarshalJSON() ([]byte, error) {
	type plain TaskList
	p.Tasks = nonNil(p.Tasks)
	return json.Marshal(plain(p))
}

// TasksUpdate replaces the run's checklist.
type TasksUpdate struct {
	Tasks     TaskList      `json:"tasks"`
	PlanItems []PlannedTask `json:"planItems,omitzero"`
}

// Status is a transient indicator; an empty message clears it.
type Status struct {
	Message string `json:"message"`
}

// ThreadTitle announces a new thread title.
type ThreadTitle struct {
	Title string `json:"title"`
}

// ErrorCodeQuotaExhausted is the one error code n8n's UI knows.
const ErrorCodeQuotaExhausted = "quota_exhausted"

// ErrorPayload is a system-level error shown to the user.
type ErrorPayload struct {
	Content          string `json:"content"`
	StatusCode       int    `json:"statusCode,omitempty"`
	Code             string `json:"code,omitempty"`
	Provider         string `json:"provider,omitempty"`
	TechnicalDetails string `json:"technicalDetails,omitempty"`
}
