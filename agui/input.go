package agui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// FunctionCall is the function a tool call invokes; Arguments is a JSON
// string.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCall is a tool call carried by an assistant message.
type ToolCall struct {
	ID             string         `json:"id"`
	Type           string         `json:"type"` // "function"
	Function       FunctionCall   `json:"function"`
	EncryptedValue string         `json:"encryptedValue,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
}

// Message is one conversation message. Role selects the variant:
//   - user: Content is a string or an array of content parts;
//   - assistant: Content (string) and ToolCalls are optional;
//   - tool: Content (string or parts), ToolCallID, optional Error;
//   - system, developer, reasoning: Content is a string;
//   - activity: ActivityType and an object Content.
//
// Content is kept as raw JSON so that every variant round-trips; Text reads
// it as text.
type Message struct {
	ID             string          `json:"id"`
	Role           string          `json:"role"`
	Content        json.RawMessage `json:"content,omitempty"`
	Name           string          `json:"name,omitempty"`
	ToolCalls      []ToolCall      `json:"toolCalls,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	Error          string          `json:"error,omitempty"`
	ActivityType   string          `json:"activityType,omitempty"`
	EncryptedValue string          `json:"encryptedValue,omitempty"`
	SubagentRunID  string          `json:"subagentRunId,omitempty"`
	Metadata       map[string]any  `json:"metadata,omitempty"`
}

// TextContent returns s as a message's JSON content.
func TextContent(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Text returns the message's text: the string content, or the text parts of
// a parts array joined together.
func (m Message) Text() string {
	var s string
	if firstByte(m.Content) != '[' {
		// (Not tried on an array: Unmarshal would scan it whole, megabytes
		// of a file's base64, to refuse it as a string.)
		_ = json.Unmarshal(m.Content, &s)
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	var buf bytes.Buffer
	for _, p := range parts {
		if p.Type == "text" {
			buf.WriteString(p.Text)
		}
	}
	return buf.String()
}

// Tool is a tool the client offers the agent.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // JSON Schema
	Metadata    map[string]any  `json:"metadata,omitempty"`
}

// Context is a piece of context the client passes along. @ag-ui/core
// sends value as a string; the seed's RunAgentInput (N8N Builder, seed 003)
// allows any JSON value and an optional type. Value is what an agent reads
// as text: a string as it is, any other value as its compact JSON text
// (a number 3 is "3", an object is its JSON, null is "").
type Context struct {
	Description string `json:"description"`
	Value       string `json:"value"`
	Type        string `json:"type,omitempty"`
}

// UnmarshalJSON accepts a value of any JSON type (see Context).
func (c *Context) UnmarshalJSON(data []byte) error {
	var wire struct {
		Description string          `json:"description"`
		Value       json.RawMessage `json:"value"`
		Type        *string         `json:"type"`
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	*c = Context{Description: wire.Description}
	if wire.Type != nil {
		c.Type = *wire.Type
	}
	switch {
	case len(wire.Value) == 0 || isNull(wire.Value):
	case firstByte(wire.Value) == '"':
		if err := json.Unmarshal(wire.Value, &c.Value); err != nil {
			return err
		}
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, wire.Value); err != nil {
			return err
		}
		c.Value = buf.String()
	}
	return nil
}

// Resume statuses.
const (
	ResumeResolved  = "resolved"
	ResumeCancelled = "cancelled"
)

// Resume answers one interrupt of the previous run.
type Resume struct {
	InterruptID string          `json:"interruptId"`
	Status      string          `json:"status"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Metadata    map[string]any  `json:"metadata,omitempty"`
}

// RunAgentInput is the body of a run request.
type RunAgentInput struct {
	ThreadID        string          `json:"threadId"`
	RunID           string          `json:"runId"`
	ProtocolVersion string          `json:"protocolVersion,omitempty"`
	ParentRunID     string          `json:"parentRunId,omitempty"`
	State           json.RawMessage `json:"state,omitempty"`
	Messages        []Message       `json:"messages"`
	Tools           []Tool          `json:"tools"`
	Context         []Context       `json:"context"`
	ForwardedProps  json.RawMessage `json:"forwardedProps,omitempty"`
	Resume          []Resume        `json:"resume,omitempty"`
}

// MarshalJSON writes nil messages, tools and context as [] (the fields
// are required; an agent server that reads the body as it is iterates
// them).
func (in RunAgentInput) MarshalJSON() ([]byte, error) {
	type plain RunAgentInput
	if in.Messages == nil {
		in.Messages = []Message{}
	}
	if in.Tools == nil {
		in.Tools = []Tool{}
	}
	if in.Context == nil {
		in.Context = []Context{}
	}
	return json.Marshal(plain(in))
}

// FieldError is a request error that names the offending field with a JSON
// path such as "messages[2].toolCallId".
type FieldError struct {
	Field  string
	Reason string
	// Status is the HTTP status the error calls for when it is not 400:
	// 413 for a content part over a size limit.
	Status int
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Snake-case spellings accepted on input, by the object they appear in.
var (
	inputAliases = map[string]string{
		"thread_id": "threadId", "run_id": "runId", "parent_run_id": "parentRunId",
		"forwarded_props": "forwardedProps", "protocol_version": "protocolVersion",
	}
	messageAliases = map[string]string{
		"tool_call_id": "toolCallId", "tool_calls": "toolCalls", "activity_type": "activityType",
		"encrypted_value": "encryptedValue", "subagent_run_id": "subagentRunId",
	}
	toolCallAliases = map[string]string{"encrypted_value": "encryptedValue"}
	resumeAliases   = map[string]string{"interrupt_id": "interruptId"}
)

// renameKeys rewrites aliased keys of one JSON object to their canonical
// names; a canonical key present in the input wins over its alias. Values
// that are not objects are returned unchanged.
func renameKeys(raw json.RawMessage, aliases map[string]string, nested func(key string, v json.RawMessage) (json.RawMessage, error)) (json.RawMessage, error) {
	if t := firstByte(raw); t != '{' {
		return raw, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	for alias, canon := range aliases {
		v, ok := obj[alias]
		if !ok {
			continue
		}
		delete(obj, alias)
		if _, has := obj[canon]; !has {
			obj[canon] = v
		}
	}
	if nested != nil {
		for k, v := range obj {
			nv, err := nested(k, v)
			if err != nil {
				return nil, err
			}
			obj[k] = nv
		}
	}
	return json.Marshal(obj)
}

// renameEach applies renameKeys to every element of a JSON array.
func renameEach(raw json.RawMessage, aliases map[string]string, nested func(string, json.RawMessage) (json.RawMessage, error)) (json.RawMessage, error) {
	if firstByte(raw) != '[' {
		return raw, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	for i, it := range items {
		n, err := renameKeys(it, aliases, nested)
		if err != nil {
			return nil, err
		}
		items[i] = n
	}
	return json.Marshal(items)
}

func firstByte(raw json.RawMessage) byte {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// DecodeRunAgentInput decodes a run request body. It accepts the camelCase
// fields of AG-UI and their snake_case aliases (thread_id, run_id,
// forwarded_props, parent_run_id, tool_call_id, …; when both spellings are
// present the camelCase one wins), ignores unknown fields, treats null
// optional fields as absent and gives id-less messages an id
// ("<runId>:msg:<index>"). It does not validate: call Validate.
func DecodeRunAgentInput(data []byte) (RunAgentInput, error) {
	in, err := decodeRunAgentInput(data)
	if err != nil {
		return in, err
	}
	in.nameMessages()
	return in, nil
}

// DecodeRunAgentInputWithIDs is DecodeRunAgentInput for servers that, like
// the seed's N8N Builder (seed 003), take threadId and runId as optional:
// a missing or empty one is made with newID("thread_") or newID("run_")
// before the messages are named after the run id. @ag-ui/core clients
// always send both; the server returns the ids it made on RUN_STARTED.
func DecodeRunAgentInputWithIDs(data []byte, newID func(prefix string) string) (RunAgentInput, error) {
	in, err := decodeRunAgentInput(data)
	if err != nil {
		return in, err
	}
	if in.ThreadID == "" {
		in.ThreadID = newID("thread_")
	}
	if in.RunID == "" {
		in.RunID = newID("run_")
	}
	in.nameMessages()
	return in, nil
}

// nameMessages gives id-less messages the id "<runId>:msg:<index>".
func (in *RunAgentInput) nameMessages() {
	for i := range in.Messages {
		if in.Messages[i].ID == "" {
			in.Messages[i].ID = in.RunID + ":msg:" + strconv.Itoa(i)
		}
	}
}

func decodeRunAgentInput(data []byte) (RunAgentInput, error) {
	var in RunAgentInput
	if firstByte(data) != '{' {
		return in, &FieldError{Field: "body", Reason: "must be a JSON object"}
	}
	normalized, err := data, error(nil)
	if mayHaveAliases(data) {
		normalized, err = renameAliases(data)
	}
	if err != nil {
		return in, &FieldError{Field: "body", Reason: "invalid JSON: " + err.Error()}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(normalized, &obj); err != nil {
		return in, &FieldError{Field: "body", Reason: "invalid JSON: " + err.Error()}
	}
	// Nulls are absent values: drop them so typed decoding sees nothing.
	for k, v := range obj {
		if isNull(v) {
			delete(obj, k)
		}
	}
	for k, v := range obj {
		if err := decodeField(&in, k, v); err != nil {
			return RunAgentInput{}, err
		}
	}
	return in, nil
}

// aliasKeys are every snake_case key renameAliases rewrites, quoted as
// they appear in JSON.
var aliasKeys = func() [][]byte {
	var out [][]byte
	for _, m := range []map[string]string{inputAliases, messageAliases, toolCallAliases, resumeAliases} {
		for k := range m {
			out = append(out, []byte(`"`+k+`"`))
		}
	}
	return out
}()

// mayHaveAliases reports whether the body may hold a snake_case key: one
// of them, quoted, or any \u escape (a key could spell one that way).
// Bodies without (every camelCase client's) skip the renaming pass,
// which parses and writes the whole body again: a message with files is
// megabytes of base64.
func mayHaveAliases(data []byte) bool {
	if bytes.Contains(data, []byte(`\u`)) {
		return true
	}
	for _, k := range aliasKeys {
		if bytes.Contains(data, k) {
			return true
		}
	}
	return false
}

// renameAliases rewrites the snake_case keys of a run request, at every
// level that has them, to their camelCase names.
func renameAliases(data []byte) (json.RawMessage, error) {
	return renameKeys(data, inputAliases, func(key string, v json.RawMessage) (json.RawMessage, error) {
		switch key {
		case "messages":
			return renameEach(v, messageAliases, func(k string, v json.RawMessage) (json.RawMessage, error) {
				if k == "toolCalls" {
					return renameEach(v, toolCallAliases, nil)
				}
				return v, nil
			})
		case "resume":
			return renameEach(v, resumeAliases, nil)
		}
		return v, nil
	})
}

// decodeField decodes one top-level member, naming the field on error.
func decodeField(in *RunAgentInput, key string, v json.RawMessage) error {
	var target any
	switch key {
	case "threadId":
		target = &in.ThreadID
	case "runId":
		target = &in.RunID
	case "protocolVersion":
		target = &in.ProtocolVersion
	case "parentRunId":
		target = &in.ParentRunID
	case "state":
		in.State = append(json.RawMessage(nil), v...)
		return nil
	case "forwardedProps":
		in.ForwardedProps = append(json.RawMessage(nil), v...)
		return nil
	case "messages":
		if firstByte(v) != '[' {
			return &FieldError{Field: "messages", Reason: "must be an array"}
		}
		var items []json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			return &FieldError{Field: "messages", Reason: err.Error()}
		}
		in.Messages = make([]Message, len(items))
		for i, it := range items {
			if err := decodeMessage(&in.Messages[i], it); err != nil {
				var fe *FieldError
				if errors.As(err, &fe) {
					fe.Field = fmt.Sprintf("messages[%d].%s", i, fe.Field)
					return fe
				}
				return &FieldError{Field: fmt.Sprintf("messages[%d]", i), Reason: err.Error()}
			}
		}
		return nil
	case "tools":
		target = &in.Tools
	case "context":
		target = &in.Context
	case "resume":
		target = &in.Resume
	default:
		return nil
	}
	if err := json.Unmarshal(v, target); err != nil {
		return &FieldError{Field: fieldPath(key, err), Reason: reason(err)}
	}
	return nil
}

// decodeMessage decodes one message, keeping content raw and dropping nulls.
func decodeMessage(m *Message, raw json.RawMessage) error {
	if firstByte(raw) != '{' {
		return &FieldError{Field: "", Reason: "must be an object"}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	for k, v := range obj {
		if isNull(v) {
			delete(obj, k)
		}
	}
	clean, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(clean, m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return &FieldError{Field: te.Field, Reason: reason(err)}
		}
		return err
	}
	return nil
}

func fieldPath(key string, err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return key + "." + te.Field
	}
	return key
}

func reason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "must be " + jsonKind(te.Type.Kind().String()) + ", got " + te.Value
	}
	return err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "a " + goKind
}

// Validate checks what AG-UI requires of a run request and returns a
// *FieldError naming the first offending field.
func (in RunAgentInput) Validate() error {
	if in.ThreadID == "" {
		return &FieldError{Field: "threadId", Reason: "is required"}
	}
	if in.RunID == "" {
		return &FieldError{Field: "runId", Reason: "is required"}
	}
	if in.Messages == nil {
		return &FieldError{Field: "messages", Reason: "is required (an array)"}
	}
	for i, m := range in.Messages {
		if err := m.validate(); err != nil {
			err.Field = fmt.Sprintf("messages[%d].%s", i, err.Field)
			return err
		}
	}
	for i, t := range in.Tools {
		if t.Name == "" {
			return &FieldError{Field: fmt.Sprintf("tools[%d].name", i), Reason: "is required"}
		}
	}
	for i, r := range in.Resume {
		if r.InterruptID == "" {
			return &FieldError{Field: fmt.Sprintf("resume[%d].interruptId", i), Reason: "is required"}
		}
		if r.Status != ResumeResolved && r.Status != ResumeCancelled {
			return &FieldError{Field: fmt.Sprintf("resume[%d].status", i), Reason: `must be "resolved" or "cancelled"`}
		}
	}
	return nil
}

func (m Message) validate() *FieldError {
	if m.ID == "" {
		return &FieldError{Field: "id", Reason: "is required"}
	}
	str := func() *FieldError {
		if firstByte(m.Content) != '"' {
			return &FieldError{Field: "content", Reason: "must be a string"}
		}
		return nil
	}
	strOrParts := func() *FieldError {
		if b := firstByte(m.Content); b != '"' && b != '[' {
			return &FieldError{Field: "content", Reason: "must be a string or an array of content parts"}
		}
		return nil
	}
	switch m.Role {
	case RoleUser:
		if err := strOrParts(); err != nil {
			return err
		}
		_, err := m.parseParts()
		return err
	case RoleAssistant:
		if len(m.Content) > 0 {
			if err := str(); err != nil {
				return err
			}
		}
		for j, tc := range m.ToolCalls {
			switch {
			case tc.ID == "":
				return &FieldError{Field: fmt.Sprintf("toolCalls[%d].id", j), Reason: "is required"}
			case tc.Type != "function":
				return &FieldError{Field: fmt.Sprintf("toolCalls[%d].type", j), Reason: `must be "function"`}
			case tc.Function.Name == "":
				return &FieldError{Field: fmt.Sprintf("toolCalls[%d].function.name", j), Reason: "is required"}
			}
		}
	case RoleTool:
		if m.ToolCallID == "" {
			return &FieldError{Field: "toolCallId", Reason: "is required for a tool message"}
		}
		return strOrParts()
	case RoleSystem, RoleDeveloper, RoleReasoning:
		return str()
	case RoleActivity:
		if m.ActivityType == "" {
			return &FieldError{Field: "activityType", Reason: "is required for an activity message"}
		}
		if firstByte(m.Content) != '{' {
			return &FieldError{Field: "content", Reason: "must be an object"}
		}
	case "":
		return &FieldError{Field: "role", Reason: "is required"}
	default:
		return &FieldError{Field: "role", Reason: fmt.Sprintf("%q is not one of user, assistant, tool, system, developer, reasoning, activity", m.Role)}
	}
	return nil
}
