package agui

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestDecodeRunAgentInput(t *testing.T) {
	t.Run("camelCase", func(t *testing.T) {
		in, err := DecodeRunAgentInput([]byte(`{"threadId":"th","runId":"r","parentRunId":"p","protocolVersion":"1.0",
			"state":{"a":1},"messages":[{"id":"m1","role":"user","content":"hi"},
			{"id":"m2","role":"assistant","toolCalls":[{"id":"tc","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"id":"m3","role":"tool","toolCallId":"tc","content":"ok"}],
			"tools":[{"name":"f","description":"d","parameters":{"type":"object"}}],
			"context":[{"description":"d","value":"v"}],"forwardedProps":{"x":true},
			"resume":[{"interruptId":"i1","status":"resolved","payload":{"approved":true}}],"extra":42}`))
		if err != nil {
			t.Fatal(err)
		}
		if in.ThreadID != "th" || in.RunID != "r" || in.ParentRunID != "p" || in.ProtocolVersion != "1.0" {
			t.Errorf("ids: %+v", in)
		}
		if len(in.Messages) != 3 || in.Messages[1].ToolCalls[0].Function.Name != "f" || in.Messages[2].ToolCallID != "tc" {
			t.Errorf("messages: %+v", in.Messages)
		}
		if string(in.State) != `{"a":1}` || string(in.ForwardedProps) != `{"x":true}` {
			t.Errorf("state %s forwardedProps %s", in.State, in.ForwardedProps)
		}
		if len(in.Tools) != 1 || len(in.Context) != 1 || len(in.Resume) != 1 || in.Resume[0].InterruptID != "i1" {
			t.Errorf("tools/context/resume: %+v %+v %+v", in.Tools, in.Context, in.Resume)
		}
		if err := in.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("snake_case and id-less messages", func(t *testing.T) {
		in, err := DecodeRunAgentInput([]byte(`{"thread_id":"th","run_id":"r","parent_run_id":"p","forwarded_props":{"k":1},
			"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"tc","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"tc","content":"ok"}],
			"resume":[{"interrupt_id":"i1","status":"cancelled"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if in.ThreadID != "th" || in.RunID != "r" || in.ParentRunID != "p" || string(in.ForwardedProps) != `{"k":1}` {
			t.Errorf("aliases not applied: %+v", in)
		}
		if in.Messages[0].ID != "r:msg:0" || in.Messages[2].ID != "r:msg:2" {
			t.Errorf("ids not assigned: %q %q", in.Messages[0].ID, in.Messages[2].ID)
		}
		if in.Messages[2].ToolCallID != "tc" || len(in.Messages[1].ToolCalls) != 1 || in.Resume[0].InterruptID != "i1" {
			t.Errorf("nested aliases not applied: %+v %+v", in.Messages, in.Resume)
		}
		if err := in.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("camelCase wins over its alias", func(t *testing.T) {
		in, err := DecodeRunAgentInput([]byte(`{"threadId":"camel","thread_id":"snake","runId":"r","messages":[]}`))
		if err != nil || in.ThreadID != "camel" {
			t.Fatalf("got %q, %v", in.ThreadID, err)
		}
	})
	t.Run("nulls are absent", func(t *testing.T) {
		in, err := DecodeRunAgentInput([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant","content":null,"toolCalls":null}],"state":null,"tools":null,"resume":null}`))
		if err != nil {
			t.Fatal(err)
		}
		if in.State != nil || in.Tools != nil || in.Messages[0].Content != nil {
			t.Errorf("null kept: %+v", in)
		}
		out, _ := json.Marshal(in)
		if string(out) != `{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant"}],"tools":[],"context":[]}` {
			t.Errorf("re-encoded as %s", out)
		}
	})
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{`[]`, "body"},
		{`{"threadId":5}`, "threadId"},
		{`{"messages":{}}`, "messages"},
		{`{"messages":[{"id":"a","role":"tool","toolCallId":7}]}`, "messages[0].toolCallId"},
		{`{"resume":[{"interruptId":1}]}`, "resume.interruptId"},
		{`{"tools":"x"}`, "tools"},
	} {
		_, err := DecodeRunAgentInput([]byte(tc.body))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want an error on %s", tc.body, err, tc.field)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct{ name, body, field string }{
		{"ok", `{"threadId":"t","runId":"r","messages":[]}`, ""},
		{"no threadId", `{"runId":"r","messages":[]}`, "threadId"},
		{"no runId", `{"threadId":"t","messages":[]}`, "runId"},
		{"no messages", `{"threadId":"t","runId":"r"}`, "messages"},
		{"bad role", `{"threadId":"t","runId":"r","messages":[{"role":"robot","content":"x"}]}`, "messages[0].role"},
		{"no role", `{"threadId":"t","runId":"r","messages":[{"content":"x"}]}`, "messages[0].role"},
		{"tool without toolCallId", `{"threadId":"t","runId":"r","messages":[{"role":"tool","content":"x"}]}`, "messages[0].toolCallId"},
		{"user without content", `{"threadId":"t","runId":"r","messages":[{"role":"user"}]}`, "messages[0].content"},
		{"system with parts", `{"threadId":"t","runId":"r","messages":[{"role":"system","content":[]}]}`, "messages[0].content"},
		{"user with parts", `{"threadId":"t","runId":"r","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`, ""},
		{"bad tool call", `{"threadId":"t","runId":"r","messages":[{"role":"assistant","toolCalls":[{"id":"c","type":"fn","function":{"name":"f","arguments":""}}]}]}`, "messages[0].toolCalls[0].type"},
		{"resume without id", `{"threadId":"t","runId":"r","messages":[],"resume":[{"status":"resolved"}]}`, "resume[0].interruptId"},
		{"resume bad status", `{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"i","status":"approved"}]}`, "resume[0].status"},
		{"tool without name", `{"threadId":"t","runId":"r","messages":[],"tools":[{"description":"d"}]}`, "tools[0].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := DecodeRunAgentInput([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			err = in.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want an error on %s", err, tc.field)
			}
		})
	}
}

func TestMessageText(t *testing.T) {
	m := Message{Content: json.RawMessage(`[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","value":"u"}},{"type":"text","text":"b"}]`)}
	if m.Text() != "ab" {
		t.Errorf("parts text = %q", m.Text())
	}
	if (Message{Content: TextContent("x")}).Text() != "x" {
		t.Error("string text")
	}
}

// TestInputGolden writes the canonical encoding of a snake_case request; the
// Node checker parses it with RunAgentInputSchema.
func TestInputGolden(t *testing.T) {
	in, err := DecodeRunAgentInput([]byte(`{"thread_id":"th","run_id":"r","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"tc","content":"ok"}],"forwarded_props":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "snake_case.input.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if string(got) != string(want) {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func FuzzDecodeRunAgentInput(f *testing.F) {
	for _, s := range []string{
		`{"threadId":"t","runId":"r","messages":[]}`,
		`{"thread_id":"t","run_id":"r","messages":[{"role":"user","content":"hi"}]}`,
		`{"threadId":"t","runId":"r","messages":[{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"x"}]}],"resume":[{"interrupt_id":"i","status":"resolved"}]}`,
		`{"messages":null,"state":null}`, `[]`, `"x"`, `{`, ``,
		`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"data","value":"iVBORw0KGgo=","mimeType":"image/png"},"metadata":{"filename":"a.png"}}]}]}`,
		`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"document","source":{"type":"file","value":"file-1","provider":"openai"}},{"type":"audio","source":{"type":"data","value":"UklGRg==","mimeType":"audio/wav"}}]}]}`,
		`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"video","source":{"type":"url","value":"https://x/v.mp4"}},{"type":"image","source":{"type":"data","value":"A=A=","mimeType":"image/png"}}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := DecodeRunAgentInput(data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error without a field: %v", err)
			}
			return
		}
		if err := in.Validate(); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) && fe.Status != 0 && fe.Status != 413 {
				t.Fatalf("refusal with status %d: %v", fe.Status, err)
			}
			return
		}
		// A valid user message's parts, stored as attachments, come back
		// as content (MESSAGES_SNAPSHOT) that is valid and reads the same.
		for _, m := range in.Messages {
			if m.Role != RoleUser {
				continue
			}
			back := Message{ID: m.ID, Role: RoleUser, Content: PartsContent(m.Text(), m.Attachments())}
			if err := back.validate(); err != nil {
				t.Fatalf("stored parts of %s come back invalid: %v: %s", m.Content, err, back.Content)
			}
			if back.Text() != m.Text() || !reflect.DeepEqual(back.Attachments(), m.Attachments()) {
				t.Fatalf("stored parts of %s come back as %s", m.Content, back.Content)
			}
		}
		// A valid input re-encodes to camelCase that decodes to the same value.
		out, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := DecodeRunAgentInput(out)
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("re-encoded input invalid: %v\n%s", err, out)
		}
		out2, _ := json.Marshal(again)
		if string(out) != string(out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}

func TestDecodeRunAgentInputWithIDs(t *testing.T) {
	n := 0
	newID := func(prefix string) string { n++; return prefix + "gen" + string(rune('0'+n)) }
	t.Run("the seed's body: ids missing, snake_case, string contents", func(t *testing.T) {
		n = 0
		// Seed 003's /run-agent example, less its optional ids.
		in, err := DecodeRunAgentInputWithIDs([]byte(`{"forwarded_props":{"agent":"support"},
			"messages":[{"role":"user","content":"Generate a workflow that sends email notifications for new files","timestamp":1704067106}],
			"context":[{"description":"Workflow generation request","value":"email notification workflow"}],
			"tools":[],"state":null}`), newID)
		if err != nil {
			t.Fatal(err)
		}
		if in.ThreadID != "thread_gen1" || in.RunID != "run_gen2" {
			t.Fatalf("ids %q %q, want the generated thread_gen1 run_gen2", in.ThreadID, in.RunID)
		}
		if in.Messages[0].ID != "run_gen2:msg:0" || in.Messages[0].Text() == "" {
			t.Errorf("message %+v, want it named after the generated run id", in.Messages[0])
		}
		if string(in.ForwardedProps) != `{"agent":"support"}` || in.State != nil {
			t.Errorf("forwarded_props %s, state %s", in.ForwardedProps, in.State)
		}
		if err := in.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("given ids are kept, camelCase over snake_case", func(t *testing.T) {
		n = 0
		in, err := DecodeRunAgentInputWithIDs([]byte(`{"threadId":"camel","thread_id":"snake","run_id":"r","messages":[]}`), newID)
		if err != nil || in.ThreadID != "camel" || in.RunID != "r" || n != 0 {
			t.Fatalf("got %q %q (%d generated), %v", in.ThreadID, in.RunID, n, err)
		}
	})
	t.Run("an empty id is a missing one", func(t *testing.T) {
		n = 0
		in, err := DecodeRunAgentInputWithIDs([]byte(`{"threadId":"","runId":"r","messages":[]}`), newID)
		if err != nil || in.ThreadID != "thread_gen1" {
			t.Fatalf("got %q, %v", in.ThreadID, err)
		}
	})
	t.Run("invalid input still names the field", func(t *testing.T) {
		_, err := DecodeRunAgentInputWithIDs([]byte(`{"messages":[{"role":"user","content":"x"}],"context":[{"description":7}]}`), newID)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "context.description" {
			t.Fatalf("got %v, want an error on context.description", err)
		}
	})
}

func TestContextValueOfAnyType(t *testing.T) {
	in, err := DecodeRunAgentInput([]byte(`{"threadId":"t","runId":"r","messages":[],"context":[
		{"description":"s","value":"text"},
		{"description":"n","value":3.5,"type":"number"},
		{"description":"o","value":{"b": [1, 2], "a": null}},
		{"description":"a","value":["x", 1]},
		{"description":"z","value":null},
		{"description":"missing"},
		{"description":"b","value":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Context{
		{Description: "s", Value: "text"},
		{Description: "n", Value: "3.5", Type: "number"},
		{Description: "o", Value: `{"b":[1,2],"a":null}`},
		{Description: "a", Value: `["x",1]`},
		{Description: "z", Value: ""},
		{Description: "missing", Value: ""},
		{Description: "b", Value: "true"},
	}
	if len(in.Context) != len(want) {
		t.Fatalf("context %+v", in.Context)
	}
	for i := range want {
		if in.Context[i] != want[i] {
			t.Errorf("context[%d] = %+v, want %+v", i, in.Context[i], want[i])
		}
	}
	if _, err := DecodeRunAgentInput([]byte(`{"context":["x"]}`)); err == nil {
		t.Error("a context entry that is not an object was accepted")
	}
}
