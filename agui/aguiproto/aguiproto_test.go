package aguiproto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/agui/aguipb"
)

// prefixLen is the size of a frame's length prefix.
const prefixLen = 4

// goldens returns the SSE JSON of one populated event of every type: the
// agui package's golden files.
func goldens(t *testing.T) map[agui.EventType][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[agui.EventType][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[agui.EventType(strings.TrimSuffix(filepath.Base(f), ".golden"))] = []byte(strings.TrimSpace(string(data)))
	}
	for _, typ := range agui.AllTypes {
		if out[typ] == nil {
			t.Fatalf("no golden of %s", typ)
		}
	}
	return out
}

// extras are events whose protobuf form differs most from their JSON: the
// outcome variants, every patch op, content parts, an activity message, a
// RUN_STARTED echoing a whole input, metadata and rawEvent on any event.
var extras = []string{
	`{"type":"RUN_FINISHED","threadId":"th","runId":"r","outcome":{"type":"success","pendingToolCallIds":["tc1","tc2"]}}`,
	`{"type":"RUN_FINISHED","threadId":"th","runId":"r","outcome":{"type":"cancelled"}}`,
	`{"type":"RUN_FINISHED","threadId":"th","runId":"r","result":{"n":[1,2.5,null,true]},"usage":[{"provider":"openai","model":"m","inputTokens":1,"outputTokens":2,"totalTokens":3,"reasoningTokens":4,"cachedInputTokens":5,"cacheWriteInputTokens":6}]}`,
	`{"type":"RUN_ERROR","message":"boom","usage":[{"model":"m","inputTokens":9}]}`,
	`{"type":"SUBAGENT_FINISHED","subagentRunId":"s1","outcome":{"type":"suspended","interruptIds":["i1"]}}`,
	`{"type":"SUBAGENT_FINISHED","subagentRunId":"s1"}`,
	`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":null},{"op":"remove","path":"/b"},{"op":"replace","path":"/c","value":[1]},{"op":"move","from":"/c","path":"/d"},{"op":"copy","from":"/d","path":"/e"},{"op":"test","path":"/e","value":"x"}]}`,
	`{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"plan","content":{"steps":[{"done":false}]},"replace":false}`,
	`{"type":"MESSAGES_SNAPSHOT","messages":[` +
		`{"id":"u1","role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"url","value":"https://x/y.png","mimeType":"image/png"}},` +
		`{"type":"document","id":"p3","source":{"type":"data","value":"aGk=","mimeType":"text/plain"},"metadata":{"title":"t"}},{"type":"audio","source":{"type":"file","value":"file-1","provider":"openai"}}]},` +
		`{"id":"a1","role":"assistant","content":"ok","toolCalls":[{"id":"tc1","type":"function","function":{"name":"f","arguments":"{}"},"metadata":{"k":1},"encryptedValue":"e"}],"metadata":{"m":true},"subagentRunId":"s1"},` +
		`{"id":"t1","role":"tool","toolCallId":"tc1","content":[{"type":"text","text":"done"}],"error":"partly"},` +
		`{"id":"act","role":"activity","activityType":"plan","content":{"steps":[]}},` +
		`{"id":"r1","role":"reasoning","content":"hmm","encryptedValue":"enc"},` +
		`{"id":"s1","role":"system","content":"be brief","name":"sys"},{"id":"d1","role":"developer","content":"dev"}]}`,
	`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"tc","content":[{"type":"text","text":"a"},{"type":"video","source":{"type":"url","value":"https://v"}}]}`,
	`{"type":"RUN_STARTED","threadId":"th","runId":"r","parentRunId":"p","protocolVersion":"1.0","input":{"threadId":"th","runId":"r","protocolVersion":"1.0","parentRunId":"p","state":{"s":1},` +
		`"messages":[{"id":"u","role":"user","content":"hi"}],"tools":[{"name":"t","description":"d","parameters":{"type":"object"},"metadata":{"x":1}}],` +
		`"context":[{"description":"c","value":"v"}],"forwardedProps":{"f":[1]},"resume":[{"interruptId":"i","status":"resolved","payload":{"ok":true}}]}}`,
	`{"type":"TEXT_MESSAGE_CONTENT","timestamp":1700000000123,"messageId":"m","delta":"","subagentRunId":"s","rawEvent":{"vendor":[1,"two"]},"metadata":{"nested":{"n":null},"k":"v"}}`,
	`{"type":"CUSTOM","name":"n","value":null}`,
	`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":[{"type":"binary","mimeType":"image/png","data":"aGk=","filename":"a.png"},{"type":"binary","mimeType":"text/plain","url":"https://f"}]}]}`,
	`{"type":"RAW","event":"just a string","source":"src"}`,
}

func TestConvertIsStrictForEveryType(t *testing.T) {
	for typ, data := range goldens(t) {
		msg, err := fromJSON(data, false)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if got := armType(t, msg); got != string(typ) {
			t.Errorf("%s went out as %s", typ, got)
		}
	}
	for _, data := range extras {
		if _, err := fromJSON([]byte(data), false); err != nil {
			t.Errorf("%s: %v", data, err)
		}
	}
}

// armType returns the EventType the populated oneof member's baseEvent
// declares, checking it is the member's own.
func armType(t *testing.T, msg *aguipb.Event) string {
	t.Helper()
	m := msg.ProtoReflect()
	oneof := m.Descriptor().Oneofs().ByName("event")
	field := m.WhichOneof(oneof)
	if field == nil {
		t.Fatal("no oneof member set")
	}
	base := m.Get(field).Message().Get(field.Message().Fields().ByName("base_event")).Message().Interface().(*aguipb.BaseEvent)
	return base.GetType().String()
}

func TestConvertLeavesOutWhatTheSchemaLacks(t *testing.T) {
	ev := &agui.Verbatim{T: agui.TypeTextMessageEnd, Data: json.RawMessage(`{"type":"TEXT_MESSAGE_END","messageId":"m","vendorField":1}`)}
	msg, err := Convert(ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.GetTextMessageEnd().GetMessageId(); got != "m" {
		t.Fatalf("messageId %q", got)
	}
	if _, err := fromJSON(ev.Data, false); err == nil {
		t.Fatal("strict conversion took a member the schema does not have")
	}
}

func TestConvertRefusesWhatHasNoProtobufForm(t *testing.T) {
	for _, data := range []string{
		`{"type":"THINKING_START"}`,
		`{"type":"STATE_DELTA","delta":[{"op":"merge","path":"/a"}]}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"p","content":[1]}`,
	} {
		_, err := AppendFrame(nil, &agui.Verbatim{T: "X", Data: json.RawMessage(data)}, 0)
		if !errors.Is(err, ErrNoProtobufForm) {
			t.Errorf("%s: %v, want ErrNoProtobufForm", data, err)
		}
	}
}

func TestFrameIsLengthPrefixedMessage(t *testing.T) {
	ev := &agui.TextMessageContent{MessageID: "m1", Delta: "Hello"}
	frame, err := AppendFrame([]byte("before"), ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	frame = frame[len("before"):]
	n := binary.BigEndian.Uint32(frame)
	if int(n) != len(frame)-prefixLen {
		t.Fatalf("prefix says %d, message is %d bytes", n, len(frame)-prefixLen)
	}
	var msg aguipb.Event
	if err := proto.Unmarshal(frame[prefixLen:], &msg); err != nil {
		t.Fatal(err)
	}
	c := msg.GetTextMessageContent()
	if c.GetMessageId() != "m1" || c.GetDelta() != "Hello" || c.GetBaseEvent().GetType() != aguipb.EventType_TEXT_MESSAGE_CONTENT {
		t.Fatalf("decoded %v", &msg)
	}
	if len(msg.ProtoReflect().GetUnknown()) != 0 {
		t.Fatal("no cursor asked for, yet the message carries more")
	}
	if c, err := Cursor(frame[prefixLen:]); err != nil || c != 0 {
		t.Fatalf("cursor %d, %v", c, err)
	}
}

// TestFrameCarriesCursorBesideTheEvent: the cursor follows the event's
// bytes inside the frame; an Event decoder sees the event unchanged (the
// cursor an unknown field) and Cursor reads it back.
func TestFrameCarriesCursorBesideTheEvent(t *testing.T) {
	ev := &agui.TextMessageEnd{MessageID: "m1"}
	ev.Metadata = map[string]any{"k": "v"}
	plain, err := AppendFrame(nil, ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := AppendFrame(nil, ev, 42)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(frame[prefixLen:], plain[prefixLen:]) {
		t.Fatal("the event's bytes are not the frame's first bytes")
	}
	if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-prefixLen {
		t.Fatalf("prefix says %d, message is %d bytes", n, len(frame)-prefixLen)
	}
	var withCursor, without aguipb.Event
	if err := proto.Unmarshal(frame[prefixLen:], &withCursor); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(plain[prefixLen:], &without); err != nil {
		t.Fatal(err)
	}
	withCursor.ProtoReflect().SetUnknown(nil)
	if !proto.Equal(&withCursor, &without) {
		t.Fatalf("the cursor changed the event: %v vs %v", &withCursor, &without)
	}
	if c, err := Cursor(frame[prefixLen:]); err != nil || c != 42 {
		t.Fatalf("cursor %d, %v", c, err)
	}
}

// TestDecodedByAGUIProtoEqualsSSE frames every golden and every extra,
// decodes them with the pinned @ag-ui/proto's decode and compares each
// with the JSON the SSE binding sends. The only differences allowed are
// the documented ones (see known).
func TestDecodedByAGUIProtoEqualsSSE(t *testing.T) {
	node := nodeWithProto(t)
	var inputs [][]byte
	for _, typ := range agui.AllTypes {
		inputs = append(inputs, goldens(t)[typ])
	}
	for _, e := range extras {
		inputs = append(inputs, []byte(e))
	}
	var stream []byte
	for i, data := range inputs {
		var err error
		cursor := int64(0)
		if i%2 == 1 {
			cursor = int64(1000 + i)
		}
		stream, err = AppendFrame(stream, &agui.Verbatim{T: "", Data: data}, cursor)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
	}
	decoded := decodeWithAGUIProto(t, node, stream)
	if len(decoded) != len(inputs) {
		t.Fatalf("decoded %d events of %d", len(decoded), len(inputs))
	}
	for i, data := range inputs {
		var want map[string]any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got := decoded[i].Event
		wantCursor := int64(0)
		if i%2 == 1 {
			wantCursor = int64(1000 + i)
		}
		if decoded[i].Cursor != wantCursor {
			t.Errorf("%s: cursor %d, want %d", want["type"], decoded[i].Cursor, wantCursor)
		}
		known(want)
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			t.Errorf("%s differs:\n proto %s\n   sse %s", want["type"], g, data)
		}
	}
}

// known applies to an SSE event the differences the protobuf binding
// documents (docs/PROTOCOLS.md, "Protobuf binding"), so that everything
// else can be compared as equal.
func known(ev map[string]any) {
	if msgs, ok := ev["messages"].([]any); ok {
		for _, m := range msgs {
			parts, _ := m.(map[string]any)["content"].([]any)
			for i, p := range parts {
				parts[i] = binaryAsDocument(p.(map[string]any))
			}
		}
	}
	if ev["type"] == "RUN_STARTED" {
		if in, ok := ev["input"].(map[string]any); ok {
			// @ag-ui/proto decodes an absent resume as [] (the field is
			// repeated), and so would any client reading the binding.
			if _, ok := in["resume"]; !ok {
				in["resume"] = []any{}
			}
		}
	}
}

// binaryAsDocument is what a retired binary content part decodes as: the
// document part @ag-ui/proto carries it as, marked legacyBinary.
func binaryAsDocument(p map[string]any) map[string]any {
	if p["type"] != "binary" {
		return p
	}
	kind, value := "url", p["url"]
	if p["data"] != nil {
		kind, value = "data", p["data"]
	}
	meta := map[string]any{"legacyBinary": true}
	for _, k := range []string{"filename", "id"} {
		if v, ok := p[k]; ok {
			meta[k] = v
		}
	}
	return map[string]any{"type": "document", "source": map[string]any{"type": kind, "value": value, "mimeType": p["mimeType"]}, "metadata": meta}
}

// interopDir holds the pinned @ag-ui/proto and proto-decode.js.
const interopDir = "../../conformance/interop"

func nodeWithProto(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(interopDir, "node_modules", "@ag-ui", "proto"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs node and the pinned packages (npm ci in %s): %v", interopDir, err)
		}
		t.Skipf("skipping: %v (run `make node-deps`)", err)
	}
	return node
}

// decodedFrame is one frame as proto-decode.js reports it.
type decodedFrame struct {
	Event  map[string]any `json:"event"`
	Cursor int64          `json:"cursor"`
}

// decodeWithAGUIProto decodes a binding stream with proto-decode.js.
func decodeWithAGUIProto(t *testing.T, node string, stream []byte) []decodedFrame {
	t.Helper()
	f := filepath.Join(t.TempDir(), "stream.bin")
	if err := os.WriteFile(f, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(f)
	cmd := exec.Command(node, "proto-decode.js", abs)
	cmd.Dir = interopDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("proto-decode.js: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Streams [][]decodedFrame `json:"streams"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Streams) != 1 {
		t.Fatalf("report: %v\n%s", err, out)
	}
	return rep.Streams[0]
}

// FuzzFromJSON: an upstream agent's verbatim event is outside input; any
// bytes convert or fail with an error, never a panic, and what converts
// frames into a message protobuf reads back.
func FuzzFromJSON(f *testing.F) {
	for _, e := range extras {
		f.Add([]byte(e))
	}
	f.Add([]byte(`{"type":"TEXT_MESSAGE_CONTENT","messageId":5}`))
	f.Add([]byte(`{"type":"MESSAGES_SNAPSHOT","messages":[null,{"content":[{"type":"binary"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := fromJSON(data, true)
		if err != nil {
			return
		}
		frame, err := appendMessage(nil, msg, &aguipb.FrameCursor{EventId: proto.Int64(7)})
		if err != nil {
			t.Fatal(err)
		}
		var back aguipb.Event
		if err := proto.Unmarshal(frame[prefixLen:], &back); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if c, err := Cursor(frame[prefixLen:]); err != nil || c != 7 {
			t.Fatalf("cursor %d, %v", c, err)
		}
	})
}
