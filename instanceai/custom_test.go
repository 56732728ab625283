package instanceai

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// The custom event is an extension: live only, outside n8n's AllTypes,
// with a name and any JSON value, which survive a round trip.
func TestCustomEvent(t *testing.T) {
	if DurabilityOf(TypeCustom) != Ephemeral || slices.Contains(AllTypes, TypeCustom) {
		t.Fatalf("custom: durability %v, in AllTypes %v", DurabilityOf(TypeCustom), slices.Contains(AllTypes, TypeCustom))
	}
	ev := Event{Type: TypeCustom, RunID: "r", AgentID: "a", Payload: &Custom{Name: "progress", Value: json.RawMessage(`{"percent":5}`)}}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(&ev)
	if err != nil {
		t.Fatal(err)
	}
	var back Event
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if p, ok := back.Payload.(*Custom); !ok || p.Name != "progress" || string(p.Value) != `{"percent":5}` {
		t.Fatalf("round trip: %s → %+v", raw, back.Payload)
	}
	for name, p := range map[string]*Custom{
		"no name":      {Value: json.RawMessage(`1`)},
		"long name":    {Name: strings.Repeat("n", MaxCustomName+1), Value: json.RawMessage(`1`)},
		"no value":     {Name: "x"},
		"broken value": {Name: "x", Value: json.RawMessage(`{`)},
	} {
		ev.Payload = p
		if err := ev.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
