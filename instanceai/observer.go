package instanceai

import "time"

// Observer receives the core's measurements; the metrics endpoint
// implements it. Methods are called on hot paths (once per event, batch or
// tool call) and must be cheap and safe for concurrent use.
type Observer interface {
	// EventPublished counts an event handed to live subscribers, stored
	// or ephemeral.
	EventPublished(t EventType)
	// BatchCommitted reports one append to the log: its rows and how long
	// it took, retries included.
	BatchCommitted(rows int, took time.Duration)
	// FirstText reports how long a run took from its run-start to its
	// first text-delta: the wait a person sees before words appear.
	FirstText(after time.Duration)
	// ToolCallFinished reports a tool call's outcome ("result", "error" or
	// "cancelled") and its duration from tool-call to outcome.
	ToolCallFinished(tool, outcome string, took time.Duration)
}

// RunObserver is an Observer also told of the runs this instance starts
// and finishes (a run settled by the sweep of another instance is not
// one). Agent is the named upstream, a work's name ("builder",
// "publish"), or "" for the default agent; status is the run-finish's.
type RunObserver interface {
	RunStarted(agent string)
	RunFinished(agent, status string)
}

// BusObserver is an Observer also told how long frames took on the bus:
// from the moment the writer handed them to the bus (on another instance)
// to the moment this instance's hub took them. Clocks of different hosts
// enter it: their offset is part of what it measures.
type BusObserver interface {
	BusLag(took time.Duration)
}

// RefusalObserver is an Observer also told of each event a run's door
// refused: reason is the rule it broke (RuleError.Rule) or the bound it
// crossed (CodeEventTooLarge, CodeSegmentTooLarge). A producer that
// keeps breaking the log's rules shows here before anyone reads a log.
type RefusalObserver interface {
	EventRefused(reason string)
}

// NopObserver discards every measurement.
type NopObserver struct{}

// EventPublished does nothing.
func (NopObserver) EventPublished(EventType) {}

// BatchCommitted does nothing.
func (NopObserver) BatchCommitted(int, time.Duration) {}

// FirstText does nothing.
func (NopObserver) FirstText(time.Duration) {}

// ToolCallFinished does nothing.
func (NopObserver) ToolCallFinished(string, string, time.Duration) {}
