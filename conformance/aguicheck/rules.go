// Package aguicheck judges one recorded /run-agent response against the
// AG-UI 1.0 rules: the sequence rules @ag-ui/client@1.0.0's verifyEvents
// enforces (split so a failure names exactly what broke), the per-event
// shapes of @ag-ui/core@1.0.0's zod schemas, the producer duties the client
// does not check, and the transport facts of the SSE response.
package aguicheck

import "github.com/threadline/threadline/conformance"

const (
	srcProto   = "PROTOCOLS.md §2"
	srcVerify  = "PROTOCOLS.md §2 (@ag-ui/client verifyEvents)"
	srcSchemas = "@ag-ui/core@1.0.0 events zod schemas"
	srcCore    = "@ag-ui/core@1.0.0 dist/version-*.d.ts"
	srcApply   = "@ag-ui/client@1.0.0 defaultApplyEvents"
)

// Rule ids, named once so Check and the rule list cannot drift apart.
const (
	HTTPContentType = "agui.http.content-type"

	EventJSONObject = "agui.event.json-object"
	EventKnownType  = "agui.event.known-type"
	EventFields     = "agui.event.required-fields"
	EventCamelCase  = "agui.event.camel-case"
	EventNoNull     = "agui.event.no-null"
	EventTimestamp  = "agui.event.timestamp-integer"
	EventCustom     = "agui.event.custom-name-value"

	RunFirst          = "agui.run.first-event"
	RunStartedIDs     = "agui.run.started-ids"
	RunAfterError     = "agui.run.nothing-after-error"
	RunAfterFinished  = "agui.run.nothing-after-finished"
	RunNoNested       = "agui.run.no-nested-start"
	RunFinishedIDs    = "agui.run.finished-ids-match"
	RunEndsTerminal   = "agui.run.ends-terminal"
	TextStartUnique   = "agui.text.start-unique"
	TextOpenBeforeUse = "agui.text.open-before-use"
	TextClosed        = "agui.text.closed-before-finish"
	TextDeltaNonEmpty = "agui.text.delta-nonempty"
	ToolStartUnique   = "agui.tool.start-unique"
	ToolOpenBeforeUse = "agui.tool.open-before-use"
	ToolClosed        = "agui.tool.closed-before-finish"
	ToolResultKnown   = "agui.tool.result-announced"
	ReasonStartUnique = "agui.reasoning.start-unique"
	ReasonOpen        = "agui.reasoning.open-before-use"
	ReasonClosed      = "agui.reasoning.closed-before-finish"
	StepStartUnique   = "agui.step.start-unique"
	StepFinishStarted = "agui.step.finish-started"
	StepClosed        = "agui.step.closed-before-finish"
	SubStartUnique    = "agui.subagent.start-unique"
	SubParentStarted  = "agui.subagent.parent-started"
	SubEndActive      = "agui.subagent.end-active"
	SubClosed         = "agui.subagent.closed-before-finish"
	SubAttribution    = "agui.subagent.attribution"
	StateDeltaShape   = "agui.state.delta-shape"
	StateDeltaApplies = "agui.state.delta-applies"

	RunProtocolVersion = "agui.run.protocol-version"
	RunPendingCalls    = "agui.run.pending-tool-calls"
	ReasonEncrypted    = "agui.reasoning.encrypted-entity"
	ReplayCompacted    = "agui.replay.compacted"
)

// Rules is every rule Check judges.
var Rules = []conformance.Rule{
	{ID: HTTPContentType, Title: "the response's Content-Type is text/event-stream", Source: srcProto},

	{ID: EventJSONObject, Title: "each data frame's data is exactly one JSON object", Source: srcProto},
	{ID: EventKnownType, Title: "type is a string naming an AG-UI 1.0 event type", Source: srcSchemas},
	{ID: EventFields, Title: "an event's required fields are present and every known field has its schema's JSON type or value", Source: srcSchemas},
	{ID: EventCamelCase, Title: "protocol field names are camelCase (no thread_id, message_id, …)", Source: srcProto},
	{ID: EventNoNull, Title: "no protocol field is JSON null (omit optional fields); null only inside opaque payloads", Source: srcProto},
	{ID: EventTimestamp, Title: "timestamp, when present, is a non-negative integer of milliseconds", Source: srcProto + "; " + srcSchemas + " (integer); conformance/aguiverify (non-negative)"},
	{ID: EventCustom, Title: "CUSTOM carries a string name and a present value", Source: srcSchemas},

	{ID: RunFirst, Title: "the first event is RUN_STARTED (or RUN_ERROR)", Source: srcVerify},
	{ID: RunStartedIDs, Title: "RUN_STARTED carries non-empty threadId and runId", Source: srcVerify},
	{ID: RunAfterError, Title: "nothing follows RUN_ERROR except a new RUN_STARTED", Source: srcVerify},
	{ID: RunAfterFinished, Title: "nothing follows RUN_FINISHED except a new RUN_STARTED or a RUN_ERROR", Source: srcVerify},
	{ID: RunNoNested, Title: "no RUN_STARTED while a run is active", Source: srcVerify},
	{ID: RunFinishedIDs, Title: "RUN_FINISHED's threadId and runId equal its run's RUN_STARTED's", Source: srcProto + " (RUN_FINISHED threadId, runId)"},
	{ID: RunEndsTerminal, Title: "the last data frame is RUN_FINISHED or RUN_ERROR (the client resolves silently otherwise)", Source: srcProto},
	{ID: TextStartUnique, Title: "no TEXT_MESSAGE_START for a messageId already open", Source: srcVerify},
	{ID: TextOpenBeforeUse, Title: "TEXT_MESSAGE_CONTENT and TEXT_MESSAGE_END name an open message", Source: srcVerify},
	{ID: TextClosed, Title: "every text message is ended before RUN_FINISHED", Source: srcVerify},
	{ID: TextDeltaNonEmpty, Title: "TEXT_MESSAGE_CONTENT delta is not empty", Source: "https://docs.ag-ui.com/concepts/events#textmessagecontent"},
	{ID: ToolStartUnique, Title: "no TOOL_CALL_START for a toolCallId already open", Source: srcVerify},
	{ID: ToolOpenBeforeUse, Title: "TOOL_CALL_ARGS and TOOL_CALL_END name an open tool call", Source: srcVerify},
	{ID: ToolClosed, Title: "every tool call is ended before RUN_FINISHED", Source: srcVerify},
	{ID: ToolResultKnown, Title: "TOOL_CALL_RESULT names a toolCallId a TOOL_CALL_START of this stream announced", Source: srcProto + " (Human in the loop)"},
	{ID: ReasonStartUnique, Title: "no REASONING_START / REASONING_MESSAGE_START for a messageId already open", Source: srcVerify},
	{ID: ReasonOpen, Title: "REASONING_MESSAGE_CONTENT/END and REASONING_END name an open reasoning message or span", Source: srcVerify},
	{ID: ReasonClosed, Title: "every reasoning message and span is ended before RUN_FINISHED", Source: srcVerify},
	{ID: StepStartUnique, Title: "no STEP_STARTED for a step already active", Source: srcVerify},
	{ID: StepFinishStarted, Title: "STEP_FINISHED names an active step of the same agent", Source: srcVerify},
	{ID: StepClosed, Title: "every step is finished before RUN_FINISHED", Source: srcVerify},
	{ID: SubStartUnique, Title: "SUBAGENT_STARTED names a subagentRunId not active nor finished in this run", Source: srcVerify},
	{ID: SubParentStarted, Title: "SUBAGENT_STARTED's parentSubagentRunId was started in this run", Source: srcVerify},
	{ID: SubEndActive, Title: "SUBAGENT_FINISHED and SUBAGENT_ERROR name an active sub-agent", Source: srcVerify},
	{ID: SubClosed, Title: "every sub-agent is finished before RUN_FINISHED", Source: srcVerify},
	{ID: SubAttribution, Title: "events of a message, tool call or reasoning message carry its opener's subagentRunId", Source: srcVerify},
	{ID: StateDeltaShape, Title: "STATE_DELTA delta (and ACTIVITY_DELTA patch) is an array of RFC 6902 operations with JSON Pointer paths", Source: srcSchemas + " (JsonPatchSchema)"},
	{ID: StateDeltaApplies, Title: "STATE_DELTA applies cleanly to the state the stream's STATE_SNAPSHOT built", Source: srcProto + "; RFC 6902"},

	{ID: RunProtocolVersion, Title: "RUN_STARTED's protocolVersion, when present, is a major.minor version (\"1.0\"); it is present when the run's input declared one",
		Source: srcCore + " (RunStartedEvent.protocolVersion, RunAgentInput.protocolVersion, PROTOCOL_VERSION \"1.0\"); @ag-ui/client@1.0.0 RUN_STARTED version check"},
	{ID: RunPendingCalls, Title: "a success outcome's non-empty pendingToolCallIds lists the run's tool calls left without TOOL_CALL_RESULT, in start order",
		Source: srcCore + " (RunFinishedSuccessOutcome.pendingToolCallIds); " + srcApply + " (RUN_FINISHED)"},
	{ID: ReasonEncrypted, Title: "REASONING_ENCRYPTED_VALUE names a tool call or message the client already holds (else it drops the value)",
		Source: srcApply + " (REASONING_ENCRYPTED_VALUE); " + srcCore + " (ReasoningEncryptedValueEvent)"},
	{ID: ReplayCompacted, Title: "a stream restating a thread's history carries each run before its last compacted: one TEXT_MESSAGE_CONTENT per message, one TOOL_CALL_ARGS per call, state as STATE_SNAPSHOT (no STATE_DELTA)",
		Source: "ag-ui docs/concepts/serialization.mdx (Event Compaction) @821b8c2; @ag-ui/client@1.0.0 compactEvents"},
}
