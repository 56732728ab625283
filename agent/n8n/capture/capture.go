package capture

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Layer is the streaming JSON-capture state machine of seed 004
// ("Introduce a Streaming JSON-Capture Layer"; also PROTOCOLS §3). Agents
// following the seed 004 contract print flat JSON objects inside their text,
// e.g. {"type":"tool_call","name":"show_diff","args":{…}} or
// {"messageType":"regular_message","content":"…"}, and n8n splits one object
// over many item chunks, sometimes inside a multi-byte UTF-8 character.
//
// The machine is idle → capturing → emitting → idle, with sub-states for
// quoted strings, escapes and brace depth:
//
//   - Text outside objects is released at once, except the bytes of a UTF-8
//     character not yet complete, which wait for the next chunk.
//   - A '{' outside an object starts a capture. Braces inside strings, and
//     escaped quotes, do not count. When depth returns to 0 the object is
//     classified: type or messageType "tool_call" with a string name yields a
//     tool call (args defaults to {}); "regular_message" with a string content
//     yields that content as text; "tool_result" (seed 004's "after
//     execution" event) yields a tool result: name when it is a string, the
//     value of result (else output, else the whole object), or a string
//     error for a failed tool. Which call it answers is the consumer's to
//     decide: the layer sees one object at a time.
//   - Anything else that was captured (invalid JSON, JSON of another shape,
//     an object still open at Flush) is released as plain text, counted as
//     malformed, and the machine resets to idle. An object growing past the
//     size cap is released as text at once and the rest of it streams as text
//     until it closes.
//
// Every input byte ends up in exactly one output's Raw.
type Layer struct {
	maxObject int

	carry []byte // incomplete UTF-8 character held back from text output

	capturing   bool
	passthrough bool // oversize object: still tracking depth, emitting text
	depth       int
	inString    bool
	escaped     bool
	obj         []byte
	scratch     []byte // reused buffer for the text of one Feed

	stats       Stats
	onMalformed func(reason string, raw []byte)
}

// Reasons passed to the malformed hook; they match the Stats fields.
const (
	MalformedInvalid    = "invalid"
	MalformedOtherShape = "other_shape"
	MalformedOversize   = "oversize"
	MalformedUnclosed   = "unclosed"
)

// OnMalformed sets a hook called each time a captured object is released as
// text, with the reason and the captured bytes (for an oversize object, the
// part captured up to the byte that passed the cap). raw is only valid
// during the call. The seed asks for malformed JSON to be logged, and only
// the layer knows which bytes the object was once they merge into text.
func (c *Layer) OnMalformed(hook func(reason string, raw []byte)) { c.onMalformed = hook }

func (c *Layer) malformed(reason string, raw []byte) {
	if c.onMalformed != nil {
		c.onMalformed(reason, raw)
	}
}

// DefaultMaxObject is the default size cap of one captured object.
const DefaultMaxObject = 64 << 10

// Kind tells what an output is.
type Kind int

// Output kinds.
const (
	Text       Kind = iota // text outside objects, or released as text
	Message                // the content of a regular_message object
	ToolCall               // a tool_call object
	ToolResult             // a tool_result object
)

// ToolCallData is a captured tool call.
type ToolCallData struct {
	Name string
	Args json.RawMessage // a JSON value, {} when the object had no args
}

// ToolResultData is a captured tool result.
type ToolResultData struct {
	Name   string          // "" when the object names no tool
	Result json.RawMessage // a JSON value; nil when Error is set
	Error  string          // the tool's failure, when the object reports one
}

// Output is one output of the layer. Text is set for Text and
// Message, ToolCall for ToolCall, ToolResult for ToolResult. Raw is the
// input the output stands for: the text itself for Text, the whole object
// otherwise.
type Output struct {
	Kind       Kind
	Text       string
	ToolCall   *ToolCallData
	ToolResult *ToolResultData
	Raw        string
}

// Stats counts the layer's work.
type Stats struct {
	ToolCalls   int
	ToolResults int
	Messages    int
	Malformed   int // Invalid + OtherShape + Oversize + Unclosed
	Invalid     int // captured text was not valid JSON
	OtherShape  int // valid JSON, but neither tool_call nor regular_message
	Oversize    int // object passed the size cap
	Unclosed    int // object still open at Flush
}

// New returns a layer whose captured objects may grow to
// maxObject bytes; 0 or less means DefaultMaxObject.
func New(maxObject int) *Layer {
	if maxObject <= 0 {
		maxObject = DefaultMaxObject
	}
	return &Layer{maxObject: maxObject}
}

// Stats returns the counters so far.
func (c *Layer) Stats() Stats { return c.stats }

// Feed consumes the next chunk of item text and returns what it completes.
func (c *Layer) Feed(chunk []byte) []Output {
	var out []Output
	text := append(c.scratch[:0], c.carry...) // pending text of this call, carry first
	c.carry = c.carry[:0]
	defer func() { c.scratch = text[:0] }()
	i := 0
	for i < len(chunk) {
		if !c.capturing && !c.passthrough {
			// Idle: release everything up to the next '{'.
			j := bytes.IndexByte(chunk[i:], '{')
			if j < 0 {
				text = append(text, chunk[i:]...)
				break
			}
			text = append(text, chunk[i:i+j]...)
			out = captureAppendText(out, text)
			text = text[:0]
			c.capturing, c.depth, c.inString, c.escaped = true, 0, false, false
			c.obj = c.obj[:0]
			i += j
			continue
		}
		// Inside an object: scan until depth returns to 0, the capture
		// passes the size cap, or the chunk ends.
		start := i
		closed, over := false, false
		for i < len(chunk) {
			b := chunk[i]
			i++
			if c.inString {
				switch {
				case c.escaped:
					c.escaped = false
				case b == '\\':
					c.escaped = true
				case b == '"':
					c.inString = false
				}
			} else {
				switch b {
				case '"':
					c.inString = true
				case '{':
					c.depth++
				case '}':
					c.depth--
					closed = c.depth == 0
				}
			}
			if closed {
				break
			}
			if !c.passthrough && len(c.obj)+i-start > c.maxObject {
				over = true
				break
			}
		}
		seg := chunk[start:i]
		if c.passthrough {
			text = append(text, seg...)
			c.passthrough = !closed
			continue
		}
		c.obj = append(c.obj, seg...)
		switch {
		case closed && len(c.obj) <= c.maxObject:
			c.capturing = false
			out = c.emitObject(captureAppendText(out, text))
			text = text[:0]
		case closed || over:
			c.stats.Oversize++
			c.stats.Malformed++
			c.malformed(MalformedOversize, c.obj)
			c.capturing, c.passthrough = false, over
			text = append(text, c.obj...)
			c.obj = c.obj[:0]
		}
	}
	// Hold back an incomplete trailing UTF-8 character.
	if cut := captureIncompleteTail(text); cut < len(text) {
		c.carry = append(c.carry, text[cut:]...)
		out = captureAppendText(out, text[:cut])
	} else {
		out = captureAppendText(out, text)
	}
	return out
}

// Flush ends the stream: it releases held-back bytes and any open object as
// text, and resets the machine.
func (c *Layer) Flush() []Output {
	text := append(c.scratch[:0], c.carry...)
	c.scratch = text[:0]
	c.carry = c.carry[:0]
	if c.capturing {
		c.stats.Unclosed++
		c.stats.Malformed++
		c.malformed(MalformedUnclosed, c.obj)
		text = append(text, c.obj...)
	}
	c.capturing, c.passthrough, c.depth, c.inString, c.escaped = false, false, 0, false, false
	c.obj = c.obj[:0]
	return captureAppendText(nil, text)
}

// emitObject classifies the complete object in c.obj.
func (c *Layer) emitObject(out []Output) []Output {
	defer func() { c.obj = c.obj[:0] }()
	// Decoding into a struct is much cheaper than into a map; note that
	// encoding/json matches keys case-insensitively when there is no exact
	// match.
	var fields struct {
		Type        json.RawMessage `json:"type"`
		MessageType json.RawMessage `json:"messageType"`
		Name        json.RawMessage `json:"name"`
		Args        json.RawMessage `json:"args"`
		Content     json.RawMessage `json:"content"`
		Result      json.RawMessage `json:"result"`
		Output      json.RawMessage `json:"output"`
		Error       json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(c.obj, &fields); err != nil {
		c.stats.Invalid++
		c.stats.Malformed++
		c.malformed(MalformedInvalid, c.obj)
		return captureAppendText(out, c.obj)
	}
	kind, _ := captureString(fields.Type)
	if kind != "tool_call" && kind != "regular_message" && kind != "tool_result" {
		kind, _ = captureString(fields.MessageType)
	}
	switch kind {
	case "tool_call":
		name, ok := captureString(fields.Name)
		if !ok {
			break
		}
		args := fields.Args
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		c.stats.ToolCalls++
		return append(out, Output{Kind: ToolCall, ToolCall: &ToolCallData{Name: name, Args: args}, Raw: string(c.obj)})
	case "tool_result":
		name, _ := captureString(fields.Name)
		r := &ToolResultData{Name: name}
		if msg, failed := captureString(fields.Error); failed && msg != "" {
			r.Error = msg
		} else {
			r.Result = fields.Result
			if len(r.Result) == 0 {
				r.Result = fields.Output
			}
			if len(r.Result) == 0 {
				r.Result = json.RawMessage(c.obj)
			}
			r.Result = append(json.RawMessage(nil), r.Result...)
		}
		c.stats.ToolResults++
		return append(out, Output{Kind: ToolResult, ToolResult: r, Raw: string(c.obj)})
	case "regular_message":
		content, ok := captureString(fields.Content)
		if !ok {
			break
		}
		c.stats.Messages++
		return append(out, Output{Kind: Message, Text: content, Raw: string(c.obj)})
	}
	c.stats.OtherShape++
	c.stats.Malformed++
	c.malformed(MalformedOtherShape, c.obj)
	return captureAppendText(out, c.obj)
}

// captureString decodes a JSON string value.
func captureString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// captureAppendText appends text as a Text output, merged into a
// preceding Text output.
func captureAppendText(out []Output, text []byte) []Output {
	if len(text) == 0 {
		return out
	}
	if n := len(out); n > 0 && out[n-1].Kind == Text {
		s := out[n-1].Text + string(text)
		out[n-1].Text, out[n-1].Raw = s, s
		return out
	}
	s := string(text)
	return append(out, Output{Kind: Text, Text: s, Raw: s})
}

// captureIncompleteTail returns where a trailing incomplete (but so far
// valid) UTF-8 sequence starts in b, or len(b) when there is none.
func captureIncompleteTail(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return len(b) // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}
