package instanceai

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Threadline's extensions of the event model carry what n8n's schema has
// no type for. They are not in AllTypes (those are n8n's) and are never
// written to a native stream, whose clients know only n8n's types.
const (
	// TypeCustom is a named value an agent passes on, such as a custom
	// control frame an n8n workflow writes into its stream. It is
	// ephemeral (live only, never stored); AG-UI carries it as CUSTOM
	// {name, value}.
	TypeCustom EventType = "custom"
	// TypeAGUI is an event of an upstream AG-UI agent that has no Instance
	// AI counterpart (state, steps, activity, snapshots, sub-agents, its
	// own CUSTOM and RAW, and its run's lifecycle), kept as it came. It
	// is structural (stored, replayed): the AG-UI stream serves it back
	// as the upstream sent it, so its meaning survives a reload.
	TypeAGUI EventType = "ag-ui"
)

// Extension reports whether t is one of Threadline's extension types,
// which native streams leave out.
func (t EventType) Extension() bool { return t == TypeCustom || t == TypeAGUI }

// AGUIEvent is the payload of an ag-ui event.
type AGUIEvent struct {
	// Event is the upstream's AG-UI event, a JSON object with its "type".
	Event json.RawMessage `json:"event"`
	// Upstream names the upstream agent that sent it.
	Upstream string `json:"upstream,omitempty"`
}

// EventType returns the AG-UI type of the event ("" when it has none).
func (p *AGUIEvent) EventType() string {
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(p.Event, &head) // validate has checked it
	return head.Type
}

func (p *AGUIEvent) validate(EventType) error {
	if len(p.Event) == 0 || p.Event[0] != '{' || !json.Valid(p.Event) {
		return &ValidationError{Field: "event", Reason: "must be a JSON object"}
	}
	if p.EventType() == "" {
		return &ValidationError{Field: "event.type", Reason: "is required (a string naming the AG-UI event type)"}
	}
	if utf8.RuneCountInString(p.Upstream) > MaxCustomName {
		return &ValidationError{Field: "upstream", Reason: fmt.Sprintf("is longer than %d characters", MaxCustomName)}
	}
	return nil
}

// MaxCustomName bounds a custom event's name.
const MaxCustomName = 200

// Custom is the payload of a custom event.
type Custom struct {
	Name string `json:"name"`
	// Value is any JSON value.
	Value json.RawMessage `json:"value"`
}

func (p *Custom) validate(EventType) error {
	if err := required("name", p.Name); err != nil {
		return err
	}
	if utf8.RuneCountInString(p.Name) > MaxCustomName {
		return &ValidationError{Field: "name", Reason: fmt.Sprintf("is longer than %d characters", MaxCustomName)}
	}
	if len(p.Value) == 0 || !json.Valid(p.Value) {
		return &ValidationError{Field: "value", Reason: "must be a JSON value"}
	}
	return nil
}
