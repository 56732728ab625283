package upstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// input is the RunAgentInput of the run's first upstream run.
func (a *Agent) input(ctx context.Context, run *instanceai.Run) (agui.RunAgentInput, error) {
	in := agui.RunAgentInput{ThreadID: run.ThreadID, RunID: run.ID, State: orEmptyObject(run.State),
		ForwardedProps: orEmptyObject(run.ForwardedProps)}
	if run.History != nil {
		in.Messages = messages(run.History, "m")
	} else {
		var err error
		if in.Messages, err = a.conversation(ctx, run.ThreadID, run.ID, run.ToolResult); err != nil {
			return in, err
		}
	}
	if run.ToolResult == nil && (run.Message != "" || len(run.Attachments) > 0) {
		// A run that answers a client tool has no new user message: the
		// conversation ends with the tool's answer.
		in.Messages = append(in.Messages, agui.Message{ID: run.ID + "-user", Role: agui.RoleUser, Content: agui.PartsContent(run.Message, run.Attachments)})
	}
	for _, t := range run.Tools {
		in.Tools = append(in.Tools, agui.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	for _, c := range run.Context {
		in.Context = append(in.Context, agui.Context{Description: c.Description, Value: c.Value})
	}
	return in, nil
}

// next is the RunAgentInput that answers an upstream run's interrupts: the
// same request under a new run id, with the whole conversation so far
// (this run's part included) unless the client held its own, and resume.
func (a *Agent) next(ctx context.Context, run *instanceai.Run, prev agui.RunAgentInput, runID string, resume []agui.Resume, clientHistory bool) (agui.RunAgentInput, error) {
	in := prev
	in.RunID, in.Resume = runID, resume
	if !clientHistory {
		if err := run.Sync(ctx); err != nil {
			return in, err
		}
		var err error
		if in.Messages, err = a.conversation(ctx, run.ThreadID, "", nil); err != nil {
			return in, err
		}
	}
	return in, nil
}

// messages turns a conversation into AG-UI messages, with ids made of
// prefix and the position (the upstream needs ids; the log keeps none for
// a folded message).
func messages(history []instanceai.HistoryMessage, prefix string) []agui.Message {
	out := make([]agui.Message, 0, len(history))
	for i, h := range history {
		m := agui.Message{ID: fmt.Sprintf("%s%d", prefix, i+1), Role: h.Role}
		switch h.Role {
		case instanceai.RoleAssistant:
			if h.Content != "" {
				m.Content = agui.TextContent(h.Content)
			}
			for _, c := range h.ToolCalls {
				args := string(c.Arguments)
				if args == "" {
					args = "{}"
				}
				m.ToolCalls = append(m.ToolCalls, agui.ToolCall{ID: c.ID, Type: "function",
					Function: agui.FunctionCall{Name: c.Name, Arguments: args}})
			}
		case instanceai.RoleTool:
			m.Content, m.ToolCallID = agui.TextContent(h.Content), h.ToolCallID
		case instanceai.RoleUser:
			m.Content = agui.PartsContent(h.Content, h.Attachments)
		default:
			m.Content = agui.TextContent(h.Content)
		}
		out = append(out, m)
	}
	return out
}

// orEmptyObject is v, or {} when there is none: state and forwardedProps
// are required members of a RunAgentInput.
func orEmptyObject(v json.RawMessage) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return json.RawMessage("{}")
	}
	return v
}
