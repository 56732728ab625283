package aguicheck

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/threadline/threadline/agui"
)

// validator returns "" when v has the expected JSON type, else what was
// expected. It is never called with nil: a null is the no-null rule's
// business, so one null fails one rule.
type validator func(v any) string

type field struct {
	name string
	req  bool
	ok   validator
}

func isString(v any) string {
	if _, ok := v.(string); ok {
		return ""
	}
	return "a string"
}

func isObject(v any) string {
	if _, ok := v.(map[string]any); ok {
		return ""
	}
	return "an object"
}

func isArray(v any) string {
	if _, ok := v.([]any); ok {
		return ""
	}
	return "an array"
}

func isBool(v any) string {
	if _, ok := v.(bool); ok {
		return ""
	}
	return "a boolean"
}

func anyValue(any) string { return "" }

func oneOf(vals ...string) validator {
	return func(v any) string {
		s, _ := v.(string)
		for _, x := range vals {
			if s == x {
				return ""
			}
		}
		return "one of " + strings.Join(vals, ", ")
	}
}

func arrayOf(el validator) validator {
	return func(v any) string {
		a, ok := v.([]any)
		if !ok {
			return "an array"
		}
		for i, x := range a {
			if x == nil {
				continue
			}
			if w := el(x); w != "" {
				return fmt.Sprintf("an array whose element %d is %s", i, w)
			}
		}
		return ""
	}
}

func stringOrArray(v any) string {
	switch v.(type) {
	case string, []any:
		return ""
	}
	return "a string or an array of content parts"
}

// nonNegInt accepts a JSON integer literal ≥ 0 (token counts).
func nonNegInt(v any) string {
	n, ok := v.(json.Number)
	if !ok || !integerRE.MatchString(string(n)) || strings.HasPrefix(string(n), "-") {
		return "a non-negative integer"
	}
	return ""
}

// object checks v against fields, reporting the first mismatch.
func object(fields ...field) validator {
	return func(v any) string {
		m, ok := v.(map[string]any)
		if !ok {
			return "an object"
		}
		return checkFields(m, fields)
	}
}

func checkFields(m map[string]any, fields []field) string {
	for _, f := range fields {
		v, ok := m[f.name]
		if !ok {
			if f.req {
				return fmt.Sprintf("%s missing", f.name)
			}
			continue
		}
		if v == nil {
			continue
		}
		if w := f.ok(v); w != "" {
			return fmt.Sprintf("%s is %s, want %s", f.name, describe(v), w)
		}
	}
	return ""
}

func req(name string, ok validator) field { return field{name, true, ok} }
func opt(name string, ok validator) field { return field{name, false, ok} }

var (
	textRoles = oneOf("developer", "system", "assistant", "user")
	usage     = arrayOf(object(opt("provider", isString), opt("model", isString),
		opt("inputTokens", nonNegInt), opt("outputTokens", nonNegInt), opt("totalTokens", nonNegInt),
		opt("reasoningTokens", nonNegInt), opt("cachedInputTokens", nonNegInt), opt("cacheWriteInputTokens", nonNegInt)))
	interrupt = object(req("id", isString), req("reason", isString), opt("message", isString),
		opt("toolCallId", isString), opt("responseSchema", isObject), opt("expiresAt", isString),
		opt("metadata", isObject), opt("subagentRunId", isString))
	message = object(req("id", isString),
		req("role", oneOf("developer", "system", "assistant", "user", "tool", "activity", "reasoning")))
	runInput = object(req("threadId", isString), req("runId", isString), req("messages", arrayOf(message)),
		opt("protocolVersion", isString), opt("parentRunId", isString), opt("tools", isArray), opt("context", isArray),
		opt("resume", isArray))
)

// runOutcome is RUN_FINISHED's outcome: a union discriminated by type.
func runOutcome(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return "an object"
	}
	switch m["type"] {
	case agui.OutcomeSuccess:
		return checkFields(m, []field{opt("pendingToolCallIds", arrayOf(isString))})
	case agui.OutcomeInterrupt:
		if w := checkFields(m, []field{req("interrupts", arrayOf(interrupt))}); w != "" {
			return w
		}
		if a, _ := m["interrupts"].([]any); len(a) == 0 {
			return "an interrupt outcome with at least one interrupt"
		}
		return ""
	case agui.OutcomeCancelled:
		return ""
	}
	return `an outcome of type "success", "interrupt" or "cancelled"`
}

func subagentOutcome(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return "an object"
	}
	switch m["type"] {
	case agui.SubagentSuccess:
		return ""
	case agui.SubagentSuspended:
		return checkFields(m, []field{opt("interruptIds", arrayOf(isString))})
	}
	return `an outcome of type "success" or "suspended"`
}

// schemas lists, per event type, the fields @ag-ui/core@1.0.0 defines
// beyond type, timestamp, rawEvent, metadata and subagentRunId (checked for
// every event). CUSTOM's name and value have their own rule.
var schemas = map[agui.EventType][]field{
	agui.TypeTextMessageStart:   {req("messageId", isString), opt("role", textRoles), opt("name", isString)},
	agui.TypeTextMessageContent: {req("messageId", isString), req("delta", isString)},
	agui.TypeTextMessageEnd:     {req("messageId", isString)},
	agui.TypeTextMessageChunk: {opt("messageId", isString), opt("role", textRoles), opt("delta", isString),
		opt("name", isString)},
	agui.TypeToolCallStart: {req("toolCallId", isString), req("toolCallName", isString), opt("parentMessageId", isString)},
	agui.TypeToolCallArgs:  {req("toolCallId", isString), req("delta", isString)},
	agui.TypeToolCallEnd:   {req("toolCallId", isString)},
	agui.TypeToolCallChunk: {opt("toolCallId", isString), opt("toolCallName", isString),
		opt("parentMessageId", isString), opt("delta", isString)},
	agui.TypeToolCallResult: {req("messageId", isString), req("toolCallId", isString), req("content", stringOrArray),
		opt("role", oneOf("tool"))},
	agui.TypeStateSnapshot:    {req("snapshot", anyValue)},
	agui.TypeStateDelta:       {req("delta", isArray)},
	agui.TypeMessagesSnapshot: {req("messages", arrayOf(message))},
	agui.TypeActivitySnapshot: {req("messageId", isString), req("activityType", isString), req("content", isObject),
		opt("replace", isBool)},
	agui.TypeActivityDelta: {req("messageId", isString), req("activityType", isString), req("patch", isArray)},
	agui.TypeRaw:           {req("event", anyValue), opt("source", isString)},
	agui.TypeCustom:        {},
	agui.TypeRunStarted: {req("threadId", isString), req("runId", isString), opt("protocolVersion", isString),
		opt("parentRunId", isString), opt("input", runInput)},
	agui.TypeRunFinished: {req("threadId", isString), req("runId", isString), opt("outcome", runOutcome),
		opt("usage", usage)},
	agui.TypeRunError:                {req("message", isString), opt("code", isString), opt("usage", usage)},
	agui.TypeStepStarted:             {req("stepName", isString)},
	agui.TypeStepFinished:            {req("stepName", isString)},
	agui.TypeReasoningStart:          {req("messageId", isString)},
	agui.TypeReasoningMessageStart:   {req("messageId", isString), req("role", oneOf("reasoning"))},
	agui.TypeReasoningMessageContent: {req("messageId", isString), req("delta", isString)},
	agui.TypeReasoningMessageEnd:     {req("messageId", isString)},
	agui.TypeReasoningMessageChunk:   {opt("messageId", isString), opt("delta", isString)},
	agui.TypeReasoningEnd:            {req("messageId", isString)},
	agui.TypeReasoningEncryptedValue: {req("subtype", oneOf("tool-call", "message")), req("entityId", isString),
		req("encryptedValue", isString)},
	agui.TypeSubagentStarted: {req("subagentRunId", isString), req("name", isString), opt("description", isString),
		opt("parentSubagentRunId", isString), opt("parentToolCallId", isString), opt("parentMessageId", isString)},
	agui.TypeSubagentFinished: {req("subagentRunId", isString), opt("outcome", subagentOutcome)},
	agui.TypeSubagentError:    {req("subagentRunId", isString), req("message", isString), opt("code", isString)},
}

var common = []field{opt("metadata", isObject), opt("subagentRunId", isString)}

// opaque members hold application data of any shape: their insides are
// not protocol fields, so neither the camelCase nor the no-null rule looks
// into them.
var opaque = map[string]bool{
	"rawEvent": true, "metadata": true, "snapshot": true, "value": true, "event": true, "result": true,
	"state": true, "forwardedProps": true, "parameters": true, "responseSchema": true, "payload": true,
	"content": true,
}

// nullableRE matches the members that may themselves be null, by where
// they are: the schemas type them as any JSON value (STATE_SNAPSHOT.snapshot,
// CUSTOM.value, RAW.event, a patch operation's value, RunAgentInput.state
// echoed on RUN_STARTED). A member of the same name elsewhere (a context
// item's value, a string) is a protocol field like any other.
var nullableRE = regexp.MustCompile(`^/(snapshot|value|event|input/state)$|^/(delta|patch)/[0-9]+/value$`)

var (
	camelRE   = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	integerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
)

const maxSafeInt = 1<<53 - 1

func (c *checker) shape(e *event) {
	t := c.t
	typ := agui.EventType(e.typ)
	fields := append(append([]field{}, common...), schemas[typ]...)
	if w := checkFields(e.m, fields); w != "" {
		t.Fail(EventFields, "%s: %s", e, w)
	} else {
		t.Pass(EventFields)
	}

	var badKey, nullAt string
	walk(e.m, "", &badKey, &nullAt)
	t.Expect(EventCamelCase, badKey == "", "%s: field %s is not camelCase", e, badKey)
	t.Expect(EventNoNull, nullAt == "", "%s: %s is null (omit an absent optional field)", e, nullAt)

	if ts, ok := e.m["timestamp"]; ok && ts != nil {
		n, isNum := ts.(json.Number)
		switch {
		case !isNum || !integerRE.MatchString(string(n)):
			t.Fail(EventTimestamp, "%s: timestamp is %s, not an integer", e, describe(ts))
		case strings.HasPrefix(string(n), "-"):
			t.Fail(EventTimestamp, "%s: negative timestamp %s", e, n)
		default:
			if v, err := n.Int64(); err != nil || v > maxSafeInt {
				t.Fail(EventTimestamp, "%s: timestamp %s is beyond 2^53-1", e, n)
			} else {
				t.Pass(EventTimestamp)
			}
		}
	}

	switch typ {
	case agui.TypeCustom:
		name, isStr := e.m["name"].(string)
		_, hasValue := e.m["value"]
		switch {
		case !isStr:
			t.Fail(EventCustom, "%s: name is %s, want a string", e, describe(e.m["name"]))
		case !hasValue:
			t.Fail(EventCustom, "%s (%q): value is missing (null is allowed, absence is not)", e, name)
		default:
			t.Pass(EventCustom)
		}
	case agui.TypeTextMessageContent:
		if d, ok := e.m["delta"].(string); ok {
			t.Expect(TextDeltaNonEmpty, d != "", "%s: empty delta", e)
		}
	case agui.TypeStateDelta:
		c.patchShape(e, "delta")
	case agui.TypeActivityDelta:
		c.patchShape(e, "patch")
	}
}

// walk finds the first non-camelCase key and the first null outside opaque
// payloads; path is a JSON Pointer to where they are.
func walk(v any, path string, badKey, nullAt *string) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			p := path + "/" + k
			if *badKey == "" && !camelRE.MatchString(k) {
				*badKey = p
			}
			x := v[k]
			if x == nil {
				if *nullAt == "" && !nullableRE.MatchString(p) {
					*nullAt = p
				}
				continue
			}
			if !opaque[k] {
				walk(x, p, badKey, nullAt)
			}
		}
	case []any:
		for i, x := range v {
			p := fmt.Sprintf("%s/%d", path, i)
			if x == nil {
				if *nullAt == "" {
					*nullAt = p
				}
				continue
			}
			walk(x, p, badKey, nullAt)
		}
	}
}

// patchShape checks an RFC 6902 operation array as JsonPatchSchema does.
func (c *checker) patchShape(e *event, key string) {
	ops, ok := e.m[key].([]any)
	if !ok {
		return // absent or not an array: the required-fields rule's
	}
	if w := patchProblem(ops); w != "" {
		c.t.Fail(StateDeltaShape, "%s: %s %s", e, key, w)
		return
	}
	c.t.Pass(StateDeltaShape)
}

func patchProblem(ops []any) string {
	for i, o := range ops {
		op, ok := o.(map[string]any)
		if !ok {
			return fmt.Sprintf("operation %d is %s, not an object", i, describe(o))
		}
		name, _ := op["op"].(string)
		switch name {
		case "add", "remove", "replace", "move", "copy", "test":
		default:
			return fmt.Sprintf("operation %d: op is %s, not add/remove/replace/move/copy/test", i, describe(op["op"]))
		}
		ptrs := []string{"path"}
		if name == "move" || name == "copy" {
			ptrs = append(ptrs, "from")
		}
		for _, k := range ptrs {
			p, ok := op[k].(string)
			if !ok {
				return fmt.Sprintf("operation %d (%s): %s is %s, want a JSON Pointer string", i, name, k, describe(op[k]))
			}
			if !pointerRE.MatchString(p) {
				return fmt.Sprintf("operation %d (%s): %s %q is not a JSON Pointer (\"\" or /-prefixed, ~ only as ~0 or ~1)", i, name, k, p)
			}
		}
		if name == "add" || name == "replace" || name == "test" {
			if _, ok := op["value"]; !ok {
				return fmt.Sprintf("operation %d (%s): value is missing", i, name)
			}
		}
	}
	return ""
}
