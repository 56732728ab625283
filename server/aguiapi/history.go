package aguiapi

import (
	"encoding/json"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// clientHistory is the conversation a client sent before the message the run
// answers, for agents that talk to a model. Clients such as CopilotKit send
// the whole conversation on every run; a client that sends only the new
// message (one user message, or a tool answer alone) gets nil, and the agent
// uses the thread's stored conversation instead, so that neither kind of
// client loses context.
//
// The last user message is the run's Message and is left out when it ends
// the input; a trailing tool message (a frontend tool's answer) stays, since
// the model must see it after the call it answers. Reasoning and activity
// messages are display state, not conversation, and are dropped.
func clientHistory(msgs []agui.Message) []instanceai.HistoryMessage {
	n := len(msgs)
	if n > 0 && msgs[n-1].Role == agui.RoleUser {
		n--
	}
	if n == 0 || len(msgs) == 1 {
		return nil
	}
	out := make([]instanceai.HistoryMessage, 0, n)
	for _, m := range msgs[:n] {
		switch m.Role {
		case agui.RoleUser:
			out = append(out, instanceai.HistoryMessage{Role: instanceai.RoleUser, Content: m.Text(), Attachments: m.Attachments()})
		case agui.RoleSystem, agui.RoleDeveloper:
			out = append(out, instanceai.HistoryMessage{Role: instanceai.RoleSystem, Content: m.Text()})
		case agui.RoleAssistant:
			h := instanceai.HistoryMessage{Role: instanceai.RoleAssistant, Content: m.Text()}
			for _, c := range m.ToolCalls {
				args := json.RawMessage(c.Function.Arguments)
				if !json.Valid(args) {
					// Kept as the model wrote it, as a JSON string, so the
					// conversation stays well-formed.
					args, _ = json.Marshal(c.Function.Arguments)
				}
				h.ToolCalls = append(h.ToolCalls, instanceai.HistoryToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
			}
			out = append(out, h)
		case agui.RoleTool:
			content := m.Text()
			if m.Error != "" && content == "" {
				content = m.Error
			}
			out = append(out, instanceai.HistoryMessage{Role: instanceai.RoleTool, Content: content, ToolCallID: m.ToolCallID})
		}
	}
	return out
}

// clientContext is AG-UI input.context as the core carries it.
func clientContext(in []agui.Context) []instanceai.ContextItem {
	if len(in) == 0 {
		return nil
	}
	out := make([]instanceai.ContextItem, len(in))
	for i, c := range in {
		out[i] = instanceai.ContextItem{Description: c.Description, Value: c.Value}
	}
	return out
}
