// Package mapping renders the core's Instance AI events in the other
// dialects Threadline serves: today AG-UI 1.0 (InstanceToAGUI). Each
// translator is a small state machine: it is fed one event at a time and
// returns the events to send, with no I/O. What agents receive from their
// upstreams (OpenAI chunks, n8n NDJSON) is decoded by each agent's own
// packages under agent/, not here.
package mapping
