package instanceai

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// TypeCustom is Threadline's one extension of the event model: a named
// value an agent passes on that n8n's schema has no type for, such as a
// custom control frame an n8n workflow writes into its stream. It is not
// in AllTypes (those are n8n's), it is ephemeral (live only, never
// stored), and it is never written to a native stream, whose clients know
// only n8n's types; AG-UI carries it as CUSTOM {name, value}.
const TypeCustom EventType = "custom"

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
