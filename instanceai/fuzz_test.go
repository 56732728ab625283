package instanceai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzEventUnmarshal feeds arbitrary bytes to the event decoder. It must never
// panic, and an event that decodes and validates must marshal to JSON that
// decodes to the same event: the same encoding (the first decode may keep
// non-canonical fragments such as spaced-out args, or nil for an empty
// array), valid again, and a fixed point from then on.
func FuzzEventUnmarshal(f *testing.F) {
	for _, c := range goldenCases() {
		raw, err := json.Marshal(c.ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	for _, c := range rawInvalidEventCases() {
		f.Add([]byte(c.json))
	}
	f.Add([]byte(`{"type":"tool-call","runId":"r","agentId":"a","payload":{"toolCallId":"c","toolName":"n","args":{ "a" : [1, 2] }}}`))
	f.Add([]byte(`{"TYPE":"status","RunID":"r","agentid":"a","payload":{"Message":"<&>"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e1 Event
		if err := json.Unmarshal(data, &e1); err != nil {
			return
		}
		if e1.Validate() != nil {
			return
		}
		_ = DurabilityOf(e1.Type)
		b1, err := json.Marshal(e1)
		if err != nil {
			t.Fatalf("valid event does not marshal: %v\ninput: %q", err, data)
		}
		var e2 Event
		if err := json.Unmarshal(b1, &e2); err != nil {
			t.Fatalf("marshalled event does not decode: %v\njson: %s", err, b1)
		}
		if err := e2.Validate(); err != nil {
			t.Fatalf("re-decoded event does not validate: %v\njson: %s", err, b1)
		}
		b2, err := json.Marshal(e2)
		if err != nil {
			t.Fatalf("re-decoded event does not marshal: %v", err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("event changed across a round trip\nfirst:  %s\nsecond: %s\ninput: %q", b1, b2, data)
		}
		var e3 Event
		if err := json.Unmarshal(b2, &e3); err != nil || !reflect.DeepEqual(e2, e3) {
			t.Fatalf("decoding is not a fixed point (%v)\n%#v\n%#v", err, e2, e3)
		}
	})
}
