package aguiapi

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
		if got := clientHistory(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// FuzzHistory feeds arbitrary RunAgentInput bodies through the history
// conversion: it must not panic, and every tool call's arguments it passes
// on must be JSON.
func FuzzHistory(f *testing.F) {
	f.Add(`{"threadId":"t","runId":"r","messages":[{"id":"1","role":"user","content":"a"},{"id":"2","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"n","arguments":"{"}}]},{"id":"3","role":"tool","toolCallId":"c","content":[{"type":"text","text":"x"}]},{"id":"4","role":"user","content":"b"}]}`)
	f.Add(`{"threadId":"t","runId":"r","messages":[{"id":"1","role":"developer","content":"d"},{"id":"2","role":"reasoning","content":"r"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		in, err := agui.DecodeRunAgentInput([]byte(body))
		if err != nil {
			return
		}
		for _, m := range clientHistory(in.Messages) {
			for _, c := range m.ToolCalls {
				if !json.Valid(c.Arguments) {
					t.Fatalf("arguments %q are not JSON", c.Arguments)
				}
			}
		}
	})
}
