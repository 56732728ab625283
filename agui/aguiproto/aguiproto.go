// Package aguiproto writes AG-UI events in AG-UI's protobuf binding, the
// one @ag-ui/proto 1.0.0 defines: each event an ag_ui.Event message
// (package agui/aguipb) preceded by its length as 4 big-endian bytes, in a
// response of Content-Type application/vnd.ag-ui.event+proto.
//
// An event is converted from its AG-UI JSON, the very bytes the SSE binding
// sends, not from its Go fields: what a protobuf client decodes is then the
// SSE event by construction, events kept verbatim from an upstream agent
// (agui.Verbatim) convert like any other, and the reshaping below is the
// same @ag-ui/proto's own encode does to a JSON event (an outcome object
// becomes a string and its payload fields, a content-parts array moves to
// contentParts, a patch op becomes an enum, and so on). The reshaped JSON is
// read into the generated types by protojson, whose field names are AG-UI's
// camelCase names: no wire bytes are written here by hand.
//
// The stream cursor, which SSE frames carry as `id:`, follows the event's
// bytes inside the frame as an aguipb.FrameCursor: AG-UI's decoders skip it
// as an unknown field, and Cursor reads it back.
package aguiproto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/agui/aguipb"
)

// MediaType is the binding's media type, the Content-Type of its responses
// and what a request's Accept names to ask for it.
const MediaType = "application/vnd.ag-ui.event+proto"

// Convert returns ev as the binding's Event message. Fields of ev that the
// 1.0.0 schema has no place for (only an upstream's verbatim event can carry
// them) are left out.
func Convert(ev agui.Event) (*aguipb.Event, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return fromJSON(data, true)
}

// AppendFrame appends ev as one frame of the binding (length prefix and
// message) to dst. A positive cursor, the SSE binding's `id:`, follows the
// event's bytes as an aguipb.FrameCursor: a field every ag_ui.Event decoder
// skips as unknown, and FrameCursor reads back (see Cursor).
func AppendFrame(dst []byte, ev agui.Event, cursor int64) ([]byte, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return dst, err
	}
	msg, err := fromJSON(data, true)
	if err != nil {
		return dst, err
	}
	var trailer *aguipb.FrameCursor
	if cursor > 0 {
		trailer = &aguipb.FrameCursor{EventId: proto.Int64(cursor)}
	}
	return appendMessage(dst, msg, trailer)
}

// Cursor returns the cursor of a frame's message (the bytes after the
// length prefix), 0 when it carries none.
func Cursor(message []byte) (int64, error) {
	var c aguipb.FrameCursor
	if err := proto.Unmarshal(message, &c); err != nil {
		return 0, fmt.Errorf("aguiproto: %w", err)
	}
	return c.GetEventId(), nil
}

// appendMessage appends the length of msg and trailer together, then
// their bytes, to dst: protobuf reads the two concatenated as one message.
func appendMessage(dst []byte, msg *aguipb.Event, trailer *aguipb.FrameCursor) ([]byte, error) {
	size := proto.Size(msg)
	if trailer != nil {
		size += proto.Size(trailer)
	}
	if size > math.MaxUint32 {
		return dst, fmt.Errorf("aguiproto: an event of %d bytes does not fit the 4-byte length prefix", size)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	// Deterministic keeps a Struct's keys in one order, so that the same
	// event is the same bytes on every stream.
	opts := proto.MarshalOptions{Deterministic: true}
	dst, err := opts.MarshalAppend(dst, msg)
	if err == nil && trailer != nil {
		dst, err = opts.MarshalAppend(dst, trailer)
	}
	return dst, err
}

// ErrNoProtobufForm is returned for an event the binding cannot carry: a
// type the 1.0.0 schema does not have, or a value its fields cannot hold
// (say a JSON Patch op that is not one of RFC 6902's six).
var ErrNoProtobufForm = errors.New("aguiproto: the event has no protobuf form")

// fromJSON converts an AG-UI event's JSON. discard leaves out the members
// the schema has no field for; without it they are an error (the tests
// check that none of Threadline's own events has any).
func fromJSON(data []byte, discard bool) (*aguipb.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers reach protojson as written
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("aguiproto: %w", err)
	}
	typ, _ := obj["type"].(string)
	arm, ok := armOf(typ)
	if !ok {
		return nil, fmt.Errorf("%w: type %q is not in @ag-ui/proto 1.0.0", ErrNoProtobufForm, typ)
	}
	body, err := reshape(agui.EventType(typ), obj)
	if err != nil {
		return nil, err
	}
	wire, err := json.Marshal(map[string]any{arm: body})
	if err != nil {
		return nil, fmt.Errorf("aguiproto: %w", err)
	}
	msg := &aguipb.Event{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: discard}).Unmarshal(wire, msg); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoProtobufForm, typ, err)
	}
	return msg, nil
}

// armOf returns the Event oneof member (its JSON name) that carries events
// of type typ: TEXT_MESSAGE_START is textMessageStart, as @ag-ui/proto
// derives it.
func armOf(typ string) (string, bool) {
	if _, ok := aguipb.EventType_value[typ]; !ok {
		return "", false
	}
	words := strings.Split(strings.ToLower(typ), "_")
	for i := 1; i < len(words); i++ {
		words[i] = strings.ToUpper(words[i][:1]) + words[i][1:]
	}
	return strings.Join(words, ""), true
}

// reshape turns an event's JSON object into the JSON form of its oneof
// member: the fields every event carries go to baseEvent, and the members
// whose protobuf form differs from their JSON one are rewritten as
// @ag-ui/proto's encode rewrites them.
func reshape(typ agui.EventType, obj map[string]any) (map[string]any, error) {
	base := map[string]any{"type": string(typ)}
	for _, k := range []string{"timestamp", "rawEvent"} {
		if v, ok := obj[k]; ok {
			base[k] = v
		}
	}
	if meta := objectOrNil(obj["metadata"]); meta != nil {
		base["metadata"] = meta
	}
	delete(obj, "type")
	delete(obj, "timestamp")
	delete(obj, "rawEvent")
	delete(obj, "metadata")
	obj["baseEvent"] = base

	switch typ {
	case agui.TypeMessagesSnapshot:
		obj["messages"] = mapArray(obj["messages"], wireMessage)
	case agui.TypeRunStarted:
		if in := objectOrNil(obj["input"]); in != nil {
			in["messages"] = mapArray(in["messages"], wireMessage)
			in["tools"] = mapArray(in["tools"], withObjectMetadata)
			in["resume"] = mapArray(in["resume"], withObjectMetadata)
		}
	case agui.TypeRunFinished:
		runOutcome(obj)
	case agui.TypeSubagentFinished:
		subagentOutcome(obj)
	case agui.TypeStateDelta:
		return obj, patchOps(obj, "delta")
	case agui.TypeActivityDelta:
		return obj, patchOps(obj, "patch")
	case agui.TypeToolCallResult:
		if parts, ok := obj["content"].([]any); ok {
			obj["contentParts"] = contentParts(parts)
			delete(obj, "content")
		}
	}
	return obj, nil
}

// runOutcome spreads RUN_FINISHED's outcome object over the message's
// outcome string and its payload fields.
func runOutcome(obj map[string]any) {
	out, present := obj["outcome"]
	delete(obj, "outcome")
	o := objectOrNil(out)
	if !present || o == nil {
		return
	}
	t, _ := o["type"].(string)
	obj["outcome"] = t
	switch t {
	case agui.OutcomeSuccess:
		obj["pendingToolCallIds"] = o["pendingToolCallIds"]
	case agui.OutcomeInterrupt:
		obj["interrupts"] = mapArray(o["interrupts"], identity)
	}
}

// subagentOutcome does for SUBAGENT_FINISHED what runOutcome does.
func subagentOutcome(obj map[string]any) {
	out, present := obj["outcome"]
	delete(obj, "outcome")
	o := objectOrNil(out)
	if !present || o == nil {
		return
	}
	t, _ := o["type"].(string)
	obj["outcome"] = t
	if t == agui.SubagentSuspended {
		obj["interruptIds"] = o["interruptIds"]
	}
}

// patchOps writes the ops of the JSON Patch under key as the enum's names.
func patchOps(obj map[string]any, key string) error {
	ops, _ := obj[key].([]any)
	for i, op := range ops {
		o := objectOrNil(op)
		if o == nil {
			continue
		}
		name, _ := o["op"].(string)
		upper := strings.ToUpper(name)
		if _, ok := aguipb.JsonPatchOperationType_value[upper]; !ok {
			return fmt.Errorf("%w: %s[%d].op %q is not a JSON Patch operation", ErrNoProtobufForm, key, i, name)
		}
		o["op"] = upper
	}
	return nil
}

// wireMessage is a Message as the schema's one Message type holds it: a
// parts array in contentParts, an activity's object in activityContent,
// string content in content.
func wireMessage(v any) any {
	m := objectOrNil(v)
	if m == nil {
		return v
	}
	switch content := m["content"].(type) {
	case []any:
		m["contentParts"] = contentParts(content)
		delete(m, "content")
	default:
		if role, _ := m["role"].(string); role == agui.RoleActivity {
			activity := objectOrNil(content)
			if activity == nil {
				activity = map[string]any{}
			}
			m["activityContent"] = activity
			delete(m, "content")
		}
	}
	withObjectMetadata(m)
	m["toolCalls"] = mapArray(m["toolCalls"], withObjectMetadata)
	return m
}

// contentParts maps a content-parts array to InputContent members. A part
// of a kind the schema has no member for is left out, as @ag-ui/proto does.
func contentParts(parts []any) []any {
	out := make([]any, 0, len(parts))
	for _, p := range parts {
		if part := contentPart(objectOrNil(p)); part != nil {
			out = append(out, part)
		}
	}
	return out
}

func contentPart(p map[string]any) map[string]any {
	if p == nil {
		return nil
	}
	kind, _ := p["type"].(string)
	switch kind {
	case "text":
		return map[string]any{"text": pick(p, "id", "text", "metadata")}
	case "image", "audio", "video", "document":
		part := pick(p, "id", "metadata")
		if src := contentSource(objectOrNil(p["source"])); src != nil {
			part["source"] = src
		}
		return map[string]any{kind: part}
	case "binary":
		// The retired binary part rides as a document part marked
		// legacyBinary, as @ag-ui/proto carries it; it decodes as that
		// document part.
		var src map[string]any
		switch {
		case p["data"] != nil:
			src = map[string]any{"data": map[string]any{"value": p["data"], "mimeType": p["mimeType"]}}
		case p["url"] != nil:
			src = map[string]any{"url": map[string]any{"value": p["url"], "mimeType": p["mimeType"]}}
		case p["id"] != nil:
			src = map[string]any{"url": map[string]any{"value": p["id"], "mimeType": p["mimeType"]}}
		default:
			return nil
		}
		meta := map[string]any{"legacyBinary": true}
		for _, k := range []string{"filename", "id"} {
			if v, ok := p[k]; ok {
				meta[k] = v
			}
		}
		return map[string]any{"document": map[string]any{"source": src, "metadata": meta}}
	}
	return nil
}

func contentSource(s map[string]any) map[string]any {
	if s == nil {
		return nil
	}
	switch kind, _ := s["type"].(string); kind {
	case "data", "url":
		return map[string]any{kind: pick(s, "value", "mimeType")}
	case "file":
		return map[string]any{kind: pick(s, "value", "provider", "mimeType")}
	}
	return nil
}

// withObjectMetadata drops a metadata member that is not an object: the
// schema's field is a Struct.
func withObjectMetadata(v any) any {
	if m := objectOrNil(v); m != nil {
		if _, ok := m["metadata"]; ok && objectOrNil(m["metadata"]) == nil {
			delete(m, "metadata")
		}
	}
	return v
}

func identity(v any) any { return v }

// pick copies the named members of m that are present.
func pick(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func mapArray(v any, f func(any) any) any {
	arr, ok := v.([]any)
	if !ok {
		return v
	}
	for i := range arr {
		arr[i] = f(arr[i])
	}
	return arr
}

func objectOrNil(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
