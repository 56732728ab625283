package instanceai

import (
	"slices"
	"testing"
)

// wantDurability is the protocol's table: ephemeral events are live only,
// blocks are replay only, everything else is stored and live.
var wantDurability = map[EventType]Durability{
	TypeTextDelta:          Ephemeral,
	TypeReasoningDelta:     Ephemeral,
	TypeStatus:             Ephemeral,
	TypeFilesystemRequest:  Ephemeral,
	TypeTextBlock:          Coalesced,
	TypeReasoningBlock:     Coalesced,
	TypeRunStart:           Structural,
	TypeRunFinish:          Structural,
	TypeToolInputStart:     Structural,
	TypeToolCall:           Structural,
	TypeToolResult:         Structural,
	TypeToolError:          Structural,
	TypeToolInterrupted:    Structural,
	TypeAgentSpawned:       Structural,
	TypeAgentCompleted:     Structural,
	TypeConfirmRequest:     Structural,
	TypeTasksUpdate:        Structural,
	TypeThreadTitleUpdated: Structural,
	TypeError:              Structural,
	TypeSetupItems:         Structural,
	TypePreferencesApplied: Structural,
}

func TestDurabilityOfEveryType(t *testing.T) {
	if len(wantDurability) != len(AllTypes) {
		t.Fatalf("durability table has %d types, AllTypes %d", len(wantDurability), len(AllTypes))
	}
	for _, typ := range AllTypes {
		want, ok := wantDurability[typ]
		if !ok {
			t.Errorf("%s: missing from the durability table", typ)
			continue
		}
		got := DurabilityOf(typ)
		if got != want {
			t.Errorf("DurabilityOf(%s) = %s, want %s", typ, got, want)
		}
		stored, live := want != Ephemeral, want != Coalesced
		if got.Stored() != stored || got.Live() != live {
			t.Errorf("%s (%s): Stored=%v Live=%v, want %v %v", typ, got, got.Stored(), got.Live(), stored, live)
		}
	}
}

func TestDurabilityNames(t *testing.T) {
	for d, want := range map[Durability]string{Ephemeral: "ephemeral", Coalesced: "coalesced", Structural: "structural"} {
		if d.String() != want {
			t.Errorf("%d.String() = %q, want %q", d, d.String(), want)
		}
	}
}

func TestAllTypesAreDistinctAndDecodable(t *testing.T) {
	seen := map[EventType]bool{}
	for _, typ := range AllTypes {
		if seen[typ] {
			t.Errorf("%s listed twice", typ)
		}
		seen[typ] = true
		if newPayload(typ) == nil {
			t.Errorf("%s has no payload type", typ)
		}
	}
}

// TestEphemeralTypesMatchN8n compares the ephemeral class with n8n's
// INSTANCE_AI_EPHEMERAL_EVENT_TYPES (needs the Node packages; see
// event_test.go).
func TestEphemeralTypesMatchN8n(t *testing.T) {
	rep, _ := n8nSchema(t)
	var ours []string
	for _, typ := range AllTypes {
		if DurabilityOf(typ) == Ephemeral {
			ours = append(ours, string(typ))
		}
	}
	theirs := slices.Clone(rep.Ephemeral)
	slices.Sort(ours)
	slices.Sort(theirs)
	if !slices.Equal(ours, theirs) {
		t.Errorf("ephemeral types: ours %v, n8n %v", ours, theirs)
	}
}
