package chunk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/threadline/threadline/instanceai"
)

// Finish reasons of an OpenAI-compatible Chat Completions stream.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishToolCalls     = "tool_calls"
	FinishContentFilter = "content_filter"
)

// DoneMarker is the SSE data payload that ends a Chat Completions stream.
const DoneMarker = "[DONE]"

const (
	openaiThinkOpen  = "<think>"
	openaiThinkClose = "</think>"
	// openaiArgsEcho bounds how much of a bad argument string a tool-error
	// message repeats back.
	openaiArgsEcho = 200
)

// Usage is the token accounting of a stream (sent only when the request
// asked for stream_options.include_usage).
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (u Usage) add(o Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + o.PromptTokens,
		CompletionTokens: u.CompletionTokens + o.CompletionTokens,
		TotalTokens:      u.TotalTokens + o.TotalTokens,
	}
}

// StreamError is an error object a server sent inside the stream
// (OpenAI and vLLM send {"error":{message,type,code}} when generation fails
// after the response has begun), so callers can report its fields.
type StreamError struct {
	Message string
	Type    string
	// Code is the error's code as sent (a string or a number), "" if none.
	Code string
}

func (e *StreamError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "(no message)"
	}
	if e.Code != "" {
		msg += " (code " + e.Code + ")"
	}
	return "openai stream: server error: " + msg
}

// wireChunk is the part of a chat.completion.chunk the translator reads.
type wireChunk struct {
	ID      string       `json:"id"`
	Choices []wireChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
	Error   *struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
}

type wireChoice struct {
	Index        int       `json:"index"`
	Delta        wireDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

type wireDelta struct {
	Content          *string             `json:"content"`
	ReasoningContent *string             `json:"reasoning_content"`
	Reasoning        *string             `json:"reasoning"`
	ToolCalls        []wireToolCallDelta `json:"tool_calls"`
}

type wireToolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// pendingCall is one tool call being accumulated.
type pendingCall struct {
	id        string
	synthetic bool // id was made up because the server sent none
	name      string
	announced bool // tool-input-start emitted
	args      strings.Builder
}

// Translator turns an OpenAI-compatible Chat Completions stream (OpenAI,
// LM Studio, Ollama, vLLM) into Instance AI events. Feed it each decoded SSE
// data payload with Push; it returns the events to publish with Type, Payload
// and ResponseID set. RunID and AgentID are left for the caller.
//
// Text becomes text-delta; reasoning (delta.reasoning_content,
// delta.reasoning, or <think>…</think> inlined in content) becomes
// reasoning-delta. Tool-call fragments are accumulated per index: the first
// fragment that names the tool yields tool-input-start, and when the call is
// complete (any finish_reason, [DONE], or Finish) it yields tool-call with
// the parsed arguments, or tool-error when the arguments are not a JSON
// object.
//
// One translator may carry several model responses in sequence: after [DONE]
// (or Finish) the next chunk starts a new response. The zero value is ready
// to use.
type Translator struct {
	// NewID, when set, makes the identifiers the stream lacks: kind is
	// "response" or "call". When nil, identifiers are "openai-<kind>-<n>".
	NewID func(kind string) string

	seq        int
	responseID string
	active     bool // a response is in progress
	finish     string
	respUsage  *Usage // last usage seen in the current response
	usage      Usage  // usage of finished responses
	inThink    bool
	pending    string // held-back content that may be the start of a tag
	calls      []*pendingCall
	byIndex    map[int]*pendingCall
	lastCall   *pendingCall
	maxIndex   int
	done       bool
}

// NewTranslator returns a translator ready for a stream.
func NewTranslator() *Translator { return &Translator{} }

// FinishReason is the finish_reason of the current (or last) response, "" if
// none was sent yet.
func (t *Translator) FinishReason() string { return t.finish }

// Usage is the token usage of every response so far, summed. Within one
// response the last usage seen counts (servers that report usage on every
// chunk report running totals).
func (t *Translator) Usage() Usage {
	if t.respUsage != nil {
		return t.usage.add(*t.respUsage)
	}
	return t.usage
}

// ResponseID is the responseId of the current (or last) response.
func (t *Translator) ResponseID() string { return t.responseID }

// Done reports whether the stream has ended ([DONE] or Finish) and no new
// response has begun since.
func (t *Translator) Done() bool { return t.done }

// Push translates one SSE data payload. "[DONE]" ends the stream (like
// Finish). An empty payload yields nothing. A payload that is not a chunk, or
// an error object the server sends in the stream, is returned as an error and
// leaves the translator as it was.
func (t *Translator) Push(data []byte) ([]instanceai.Event, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	if string(data) == DoneMarker {
		return t.Finish(), nil
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("openai stream: malformed chunk: want a JSON object, got %q", echo(string(data)))
	}
	var c wireChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("openai stream: malformed chunk: %w", err)
	}
	if c.Error != nil {
		e := &StreamError{Message: c.Error.Message, Type: c.Error.Type}
		if len(c.Error.Code) > 0 && string(c.Error.Code) != "null" {
			e.Code = strings.Trim(string(c.Error.Code), `"`)
		}
		return nil, e
	}

	var out []instanceai.Event
	if !t.active {
		t.begin(c.ID)
	}
	if c.Usage != nil {
		u := *c.Usage
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		t.respUsage = &u
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // only the first choice is followed
		}
		d := ch.Delta
		// Servers moving from reasoning_content to reasoning may send the
		// same text in both: one of them is read.
		switch {
		case d.Reasoning != nil && *d.Reasoning != "":
			out = t.emitText(out, instanceai.TypeReasoningDelta, *d.Reasoning)
		case d.ReasoningContent != nil:
			out = t.emitText(out, instanceai.TypeReasoningDelta, *d.ReasoningContent)
		}
		if d.Content != nil {
			out = t.content(out, *d.Content)
		}
		for i := range d.ToolCalls {
			out = t.toolFragment(out, &d.ToolCalls[i])
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = *ch.FinishReason
			out = t.flushContent(out)
			out = t.completeCalls(out)
		}
	}
	return out, nil
}

// Finish ends the current response as if [DONE] had arrived (for a stream
// that closed without it): held-back content is flushed and pending tool
// calls are completed.
func (t *Translator) Finish() []instanceai.Event {
	if !t.active {
		t.done = true
		return nil
	}
	out := t.flushContent(nil)
	out = t.completeCalls(out)
	if t.respUsage != nil {
		t.usage = t.usage.add(*t.respUsage)
		t.respUsage = nil
	}
	t.active = false
	t.done = true
	return out
}

func (t *Translator) newID(kind string) string {
	if t.NewID != nil {
		if id := t.NewID(kind); id != "" {
			return id
		}
	}
	t.seq++
	return "openai-" + kind + "-" + strconv.Itoa(t.seq)
}

func (t *Translator) begin(id string) {
	if id == "" {
		id = t.newID("response")
	}
	t.responseID = id
	t.active = true
	t.done = false
	t.finish = ""
	t.inThink = false
	t.pending = ""
	t.calls = nil
	t.byIndex = map[int]*pendingCall{}
	t.lastCall = nil
	t.maxIndex = -1
}

func (t *Translator) event(typ instanceai.EventType, p instanceai.Payload) instanceai.Event {
	return instanceai.Event{Type: typ, ResponseID: t.responseID, Payload: p}
}

func (t *Translator) emitText(out []instanceai.Event, typ instanceai.EventType, s string) []instanceai.Event {
	if s == "" {
		return out
	}
	// Merge with a delta of the same kind produced by the same chunk.
	if n := len(out); n > 0 && out[n-1].Type == typ {
		if p, ok := out[n-1].Payload.(*instanceai.Text); ok {
			p.Text += s
			return out
		}
	}
	return append(out, t.event(typ, &instanceai.Text{Text: s}))
}

// content splits content into text and <think> reasoning, holding back a
// trailing fragment that may be the start of a tag.
func (t *Translator) content(out []instanceai.Event, s string) []instanceai.Event {
	s = t.pending + s
	t.pending = ""
	for s != "" {
		tag, typ := openaiThinkOpen, instanceai.TypeTextDelta
		if t.inThink {
			tag, typ = openaiThinkClose, instanceai.TypeReasoningDelta
		}
		if i := strings.Index(s, tag); i >= 0 {
			out = t.emitText(out, typ, s[:i])
			s = s[i+len(tag):]
			t.inThink = !t.inThink
			continue
		}
		keep := partialSuffix(s, tag)
		out = t.emitText(out, typ, s[:len(s)-keep])
		t.pending = s[len(s)-keep:]
		break
	}
	return out
}

// partialSuffix is the length of the longest proper prefix of tag that
// s ends with.
func partialSuffix(s, tag string) int {
	for n := min(len(tag)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

// flushContent emits held-back content: the stream ended, so a partial tag
// was literal text (or reasoning).
func (t *Translator) flushContent(out []instanceai.Event) []instanceai.Event {
	if t.pending == "" {
		return out
	}
	typ := instanceai.TypeTextDelta
	if t.inThink {
		typ = instanceai.TypeReasoningDelta
	}
	out = t.emitText(out, typ, t.pending)
	t.pending = ""
	return out
}

// slot finds or creates the call a fragment belongs to.
func (t *Translator) slot(f *wireToolCallDelta) *pendingCall {
	newCall := func() *pendingCall {
		c := &pendingCall{}
		t.calls = append(t.calls, c)
		return c
	}
	if f.Index == nil {
		// No index: a fragment that names a call starts one; anything else
		// continues the latest call.
		if f.ID != "" || f.Function.Name != "" || t.lastCall == nil {
			if t.lastCall != nil && t.lastCall.synthetic && !t.lastCall.announced && t.lastCall.name == "" && f.ID != "" {
				return t.lastCall
			}
			t.maxIndex++
			c := newCall()
			t.byIndex[t.maxIndex] = c
			return c
		}
		return t.lastCall
	}
	idx := *f.Index
	c := t.byIndex[idx]
	// A different id under an index already in use is a new call (some
	// servers reuse index 0 for every call).
	if c == nil || (f.ID != "" && !c.synthetic && c.id != f.ID) {
		c = newCall()
		t.byIndex[idx] = c
	}
	t.maxIndex = max(t.maxIndex, idx)
	return c
}

func (t *Translator) toolFragment(out []instanceai.Event, f *wireToolCallDelta) []instanceai.Event {
	c := t.slot(f)
	t.lastCall = c
	switch {
	case c.id == "" && f.ID != "":
		c.id = f.ID
	case c.id == "":
		c.id, c.synthetic = t.newID("call"), true
	case c.synthetic && !c.announced && f.ID != "":
		c.id, c.synthetic = f.ID, false
	}
	if c.name == "" && f.Function.Name != "" {
		c.name = f.Function.Name
	}
	c.args.WriteString(f.Function.Arguments)
	if !c.announced && c.name != "" {
		c.announced = true
		out = append(out, t.event(instanceai.TypeToolInputStart,
			&instanceai.ToolInputStart{ToolCallID: c.id, ToolName: c.name}))
	}
	return out
}

// completeCalls emits tool-call (or tool-error) for every pending call, in
// the order the calls began.
func (t *Translator) completeCalls(out []instanceai.Event) []instanceai.Event {
	calls := t.calls
	t.calls = nil
	t.byIndex = map[int]*pendingCall{}
	t.lastCall = nil
	t.maxIndex = -1
	for _, c := range calls {
		if c.name == "" {
			out = append(out, t.event(instanceai.TypeToolError, &instanceai.ToolError{
				ToolCallID: c.id, Error: "tool call has no function name"}))
			continue
		}
		args, err := parseArgs(c.args.String())
		if err != nil {
			out = append(out, t.event(instanceai.TypeToolError, &instanceai.ToolError{
				ToolCallID: c.id,
				Error:      fmt.Sprintf("invalid arguments for tool %q: %v", c.name, err)}))
			continue
		}
		out = append(out, t.event(instanceai.TypeToolCall, &instanceai.ToolCall{
			ToolCallID: c.id, ToolName: c.name, Args: args}))
	}
	return out
}

// parseArgs checks that a tool call's argument string is a JSON object
// and returns it compacted. Empty (or null) arguments are {}.
func parseArgs(s string) (json.RawMessage, error) {
	trimmed := strings.TrimSpace(s)
	if trimmed == "" || trimmed == "null" {
		return json.RawMessage(`{}`), nil
	}
	echo := echo(trimmed)
	if !json.Valid([]byte(trimmed)) {
		var v any
		err := json.Unmarshal([]byte(trimmed), &v)
		return nil, fmt.Errorf("not valid JSON (%v); arguments must be a JSON object, got %s", err, echo)
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("arguments must be a JSON object, got %s", echo)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(trimmed)); err != nil {
		return nil, fmt.Errorf("not valid JSON (%v)", err)
	}
	return json.RawMessage(buf.Bytes()), nil
}

// echo shortens s for an error message.
func echo(s string) string {
	if r := []rune(s); len(r) > openaiArgsEcho {
		return string(r[:openaiArgsEcho]) + "…"
	}
	return s
}
