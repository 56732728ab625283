package instanceai

import "encoding/json"

// Conversation roles of HistoryMessage.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
	RoleSystem    = "system"
)

// HistoryMessage is one turn of a conversation as an LLM agent sends it to
// its model: a user or system message, an assistant message (text and the
// tool calls it made), or a tool message carrying one call's result.
type HistoryMessage struct {
	Role    string
	Content string
	// Attachments are a user message's files.
	Attachments []Attachment
	// ToolCalls are the calls an assistant message made.
	ToolCalls []HistoryToolCall
	// ToolCallID names the call a tool message answers.
	ToolCallID string
}

// HistoryToolCall is a tool call in an assistant message.
type HistoryToolCall struct {
	ID   string
	Name string
	// Arguments is the call's arguments (a JSON object).
	Arguments json.RawMessage
}
