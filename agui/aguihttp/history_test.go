package aguihttp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

func TestHistory(t *testing.T) {
	user := func(s string) agui.Message { return agui.Message{Role: agui.RoleUser, Content: agui.TextContent(s)} }
	call := agui.ToolCall{ID: "c1", Type: "function", Function: agui.FunctionCall{Name: "weather", Arguments: `{"city":"Oslo"}`}}
	badCall := agui.ToolCall{ID: "c2", Type: "function", Function: agui.FunctionCall{Name: "weather", Arguments: `{"city":`}}
	for _, tc := range []struct {
		name string
		in   []agui.Message
		want []instanceai.HistoryMessage
	}{
		{"only the new message: the stored conversation is used", []agui.Message{user("hi")}, nil},
		{"only a tool answer: the stored conversation is used", []agui.Message{{Role: agui.RoleTool, ToolCallID: "c1", Content: agui.TextContent("sunny")}}, nil},
		{"a conversation before the new message",
			[]agui.Message{
				{Role: "system", Content: agui.TextContent("be brief")},
				user("weather?"),
				{Role: agui.RoleAssistant, ToolCalls: []agui.ToolCall{call, badCall}},
				{Role: agui.RoleTool, ToolCallID: "c1", Content: agui.TextContent("sunny")},
				{Role: agui.RoleTool, ToolCallID: "c2", Error: "bad arguments"},
				{Role: "reasoning", Content: agui.TextContent("thinking")},
				{Role: agui.RoleAssistant, Content: agui.TextContent("It is sunny.")},
				user("thanks"),
			},
			[]instanceai.HistoryMessage{
				{Role: "system", Content: "be brief"},
				{Role: "user", Content: "weather?"},
				{Role: "assistant", ToolCalls: []instanceai.HistoryToolCall{
					{ID: "c1", Name: "weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)},
					{ID: "c2", Name: "weather", Arguments: json.RawMessage(`"{\"city\":"`)},
				}},
				{Role: "tool", ToolCallID: "c1", Content: "sunny"},
				{Role: "tool", ToolCallID: "c2", Content: "bad arguments"},
				{Role: "assistant", Content: "It is sunny."},
			}},
		{"a conversation ending with a tool answer keeps it",
			[]agui.Message{user("weather?"), {Role: agui.RoleAssistant, ToolCalls: []agui.ToolCall{call}}, {Role: agui.RoleTool, ToolCallID: "c1", Content: agui.TextContent("sunny")}},
			[]instanceai.HistoryMessage{
				{Role: "user", Content: "weather?"},
				{Role: "assistant", ToolCalls: []instanceai.HistoryToolCall{{ID: "c1", Name: "weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)}}},
				{Role: "tool", ToolCallID: "c1", Content: "sunny"},
			}},
	} {
		if got := history(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}
