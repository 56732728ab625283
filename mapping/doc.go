// Package mapping holds pure, stateful translators between the event
// dialects Threadline speaks. Each translator is a small state machine: it is
// fed one event at a time and returns the events to send, with no I/O.
package mapping
