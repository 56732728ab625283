// Package mapping translates between the core's Instance AI events and
// the other dialects Threadline speaks: InstanceToAGUI renders a run as
// AG-UI 1.0 for clients, InstanceToBuilder as the N8N Builder API's
// events, and AGUIToInstance reads an upstream AG-UI agent's run back
// into Instance AI events. Each translator is a small state machine: it
// is fed one event at a time and returns the events to send, with no I/O.
// What the other agents receive from their upstreams (OpenAI chunks, n8n
// NDJSON) is decoded by each agent's own packages under agent/.
package mapping
