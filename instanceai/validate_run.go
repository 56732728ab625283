package instanceai

import "fmt"

// The checks of a run's own payloads (see payload_run.go).

func (p *Text) validate(EventType) error { return nil }

func (p *RunStart) validate(EventType) error { return required("messageId", p.MessageID) }

func (p *RunFinish) validate(EventType) error {
	if err := oneOf("status", p.Status, RunCompleted, RunCancelled, RunError, RunInterrupted); err != nil {
		return err
	}
	for i, u := range p.Usage {
		if u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < 0 {
			return &ValidationError{Field: fmt.Sprintf("usage[%d]", i), Reason: "token counts must not be negative"}
		}
	}
	return nil
}

func (p *ToolInputStart) validate(EventType) error {
	return firstErr(requiredKey("toolCallId", p.ToolCallID), required("toolName", p.ToolName))
}

func (p *ToolCall) validate(EventType) error {
	return firstErr(requiredKey("toolCallId", p.ToolCallID), required("toolName", p.ToolName),
		jsonObject("args", p.Args))
}

func (p *ToolResult) validate(EventType) error {
	return firstErr(requiredKey("toolCallId", p.ToolCallID), jsonValue("result", p.Result))
}

func (p *ToolError) validate(EventType) error {
	return requiredKey("toolCallId", p.ToolCallID)
}

func (p *AgentSpawned) validate(EventType) error {
	if err := firstErr(requiredKey("parentId", p.ParentID), required("role", p.Role),
		optionalOneOf("kind", p.Kind, AgentKindBuilder, AgentKindDataTable, AgentKindPlanner,
			AgentKindEvalSetup, AgentKindAgentBuilder)); err != nil {
		return err
	}
	if p.TargetResource != nil {
		return oneOf("targetResource.type", p.TargetResource.Type, TargetWorkflow, TargetDataTable,
			TargetCredential, TargetOther, TargetAgent, TargetConfigEval)
	}
	return nil
}

func (p *AgentCompleted) validate(EventType) error {
	return firstErr(required("role", p.Role),
		optionalOneOf("status", p.Status, RunCompleted, RunCancelled, RunError))
}

func validTasks(field string, tl TaskList) error {
	for i, t := range tl.Tasks {
		f := fmt.Sprintf("%s.tasks[%d]", field, i)
		if err := firstErr(required(f+".id", t.ID), required(f+".description", t.Description),
			oneOf(f+".status", t.Status, TaskTodo, TaskInProgress, TaskDone, TaskFailed, TaskCancelled)); err != nil {
			return err
		}
	}
	return nil
}

func (p *TasksUpdate) validate(EventType) error {
	return firstErr(validTasks("tasks", p.Tasks), validPlanItems("planItems", p.PlanItems))
}

func (p *Status) validate(EventType) error { return nil }

func (p *ThreadTitle) validate(EventType) error { return required("title", p.Title) }

func (p *ErrorPayload) validate(EventType) error { return required("content", p.Content) }
