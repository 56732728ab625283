package instanceai

// Durability says how an event type travels: whether it is stored in the log,
// whether it is sent to live subscribers, and whether its SSE frame has an id.
type Durability int

const (
	// Ephemeral events are sent live only and never stored; frames carry no id.
	Ephemeral Durability = iota
	// Coalesced events (blocks) are stored and served on replay only.
	Coalesced
	// Structural events are stored, then sent live with their seq as id.
	Structural
)

func (d Durability) String() string {
	switch d {
	case Ephemeral:
		return "ephemeral"
	case Coalesced:
		return "coalesced"
	default:
		return "structural"
	}
}

// DurabilityOf returns the durability class of an event type.
func DurabilityOf(t EventType) Durability {
	switch t {
	case TypeTextDelta, TypeReasoningDelta, TypeStatus, TypeFilesystemRequest, TypeCustom:
		return Ephemeral
	case TypeTextBlock, TypeReasoningBlock:
		return Coalesced
	default:
		return Structural
	}
}

// Stored reports whether events of this type are written to the log.
func (d Durability) Stored() bool { return d != Ephemeral }

// Live reports whether events of this type are sent to live subscribers.
func (d Durability) Live() bool { return d != Coalesced }
