package n8n

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/n8n/capture"
	"github.com/threadline/threadline/agent/n8n/ndjson"
	"github.com/threadline/threadline/instanceai"
)

// Provider is the provider name on the error events this agent causes.
const Provider = "n8n"

// Error codes of the *instanceai.ProviderError values the agent returns.
const (
	CodeWebhookNotFound    = "webhook_not_found"
	CodeUnauthorized       = "unauthorized"
	CodeUpstreamError      = "upstream_error"
	CodeHTTPError          = "http_error"
	CodeConnectionFailed   = "connection_failed"
	CodeTimeout            = "timeout"
	CodeStreamInterrupted  = "stream_interrupted"
	CodeWorkflowError      = "workflow_error"
	CodeEmptyResponse      = "empty_response"
	CodeUnexpectedResponse = "unexpected_response"
	CodeTooManyItems       = "too_many_items"
)

// AnnouncedResult is the tool-result that follows a tool call captured from
// the agent's text. The object is the agent announcing what it does (seed
// 004 §3, "Synthetic Tool Events": a tool_call is emitted before the tool
// runs), so the result only records the announcement; it does not claim the
// tool succeeded. Emitting a result at all keeps the call from showing as
// running forever.
//
// The seed's "after execution" event, a tool_result object, is the call's
// real result when it is the next thing the stream says (whitespace aside):
// until then the announced call waits for it, and anything else (text,
// another call, the end of the stream) settles it with AnnouncedResult, so
// the events keep the order they had before tool_result was understood.
var AnnouncedResult = json.RawMessage(`{"status":"announced"}`)

// MalformedUnmatched is the malformed reason of a tool_result object that
// follows no announced call (or names another tool): it is kept as text.
const MalformedUnmatched = "unmatched"

// MaxItems bounds the items (nodeId, runIndex, itemIndex) open at once: each
// holds a capture layer of up to MaxObject bytes.
const MaxItems = 256

// logPrefix is how much of a malformed object a log line carries.
const logPrefix = 200

// CaptureObserver receives what the JSON-capture layer finds; the metrics
// package implements it. A nil observer is a no-op.
type CaptureObserver interface {
	// CaptureObject counts an object recognised in the agent's text:
	// "tool_call", "tool_result" or "regular_message".
	CaptureObject(kind string)
	// CaptureMalformed counts an object released as text: "invalid",
	// "other_shape", "oversize", "unclosed" or "unmatched".
	CaptureMalformed(reason string)
}

// StreamOptions configures MapStream.
type StreamOptions struct {
	// RunID prefixes the response and tool call ids, so they are unique in
	// the thread. Empty means "run".
	RunID string
	// MaxEventBytes is the core's bound on one event (--max-event-bytes;
	// 0 means instanceai.DefaultMaxEventBytes). A line carries one chunk,
	// which becomes at most one event: by default a line may be that and
	// its envelope (bound.Stream). So may the body kept while no chunk
	// has been seen, in case the webhook answered with one JSON document
	// instead of a stream.
	MaxEventBytes int
	// MaxLine bounds one NDJSON line; 0 means the event's bound and its
	// envelope. A longer line ends the stream with
	// instanceai.CodeEventTooLarge.
	MaxLine int
	// MaxObject bounds one captured object; 0 means
	// capture.DefaultMaxObject.
	MaxObject int
	// NoCapture turns the JSON-capture layer off: the agent's text is
	// streamed as it is, objects included, and no tool call is read from
	// it (for agents whose answers contain JSON meant for the reader).
	NoCapture bool
	Observer  CaptureObserver
	Logger    *slog.Logger
}

// MapStream reads an n8n streaming-webhook body and hands the events it
// stands for to emit, in order. It is the whole chunk→event mapping, free of
// HTTP, so that it can be tested and fuzzed on bytes alone.
//
// It returns nil when the stream ended cleanly; the first error emit
// returns; or a *instanceai.ProviderError (Provider "n8n") when n8n reported
// an error chunk (CodeWorkflowError), the body ended with items still open
// or could not be read (CodeStreamInterrupted, after everything received was
// emitted), or the body was neither a stream nor an agent's JSON output.
// MapStream never emits the error event itself: the run registry turns the
// returned error into one.
func MapStream(r io.Reader, opts StreamOptions, emit func(instanceai.Event) error) error {
	limit := bound.Stream(opts.MaxEventBytes)
	if opts.MaxLine <= 0 {
		opts.MaxLine = limit
	}
	rec := &recorder{r: r, limit: limit}
	m := newMapper(opts)
	reader := ndjson.NewReader(rec, opts.MaxLine)
	badLines := 0
	for {
		c, err := reader.Next()
		var de *ndjson.DecodeError
		switch {
		case err == nil:
		case errors.As(err, &de):
			if m.sawChunk {
				badLines++
				if badLines <= 3 {
					m.log.Warn("n8n stream: skipping a line that is not a chunk", "line", de.Line, "err", de.Err)
				}
			}
			continue
		case err == io.EOF:
			return m.finishEOF(rec, reader.Stats(), emit)
		default:
			if errors.Is(err, ndjson.ErrLineTooLong) {
				if ferr := m.flushAll(emit); ferr != nil {
					return ferr
				}
				named := bound.Named(opts.MaxEventBytes)
				if opts.MaxLine != limit {
					named = bound.Size(opts.MaxLine) + ", the bound on one line"
				}
				return &instanceai.ProviderError{Provider: Provider, Code: instanceai.CodeEventTooLarge,
					Message: fmt.Sprintf("The n8n stream sent one line larger than %s, so the run was stopped; the text received "+
						"before it is kept. Shorten what the workflow streams at once.", named),
					Details: fmt.Sprintf("%v (the event's bound and %d bytes for a chunk's envelope)", err, bound.Envelope)}
			}
			if ferr := m.flushAll(emit); ferr != nil {
				return ferr
			}
			return interrupted(err.Error())
		}
		if !m.sawChunk {
			m.sawChunk = true
			rec.stop()
		}
		if err := m.chunk(c, emit); err != nil {
			return err
		}
	}
}

func interrupted(details string) *instanceai.ProviderError {
	return &instanceai.ProviderError{Provider: Provider, Code: CodeStreamInterrupted,
		Message: "The connection to n8n broke before the workflow finished answering; the text received so far is kept. " +
			"Check the workflow's execution in n8n, and any proxy between this server and n8n that may cut long responses.",
		Details: details}
}

// recorder keeps the bytes read through it until stop, up to limit, so that
// a body that turns out not to be a stream can be parsed whole.
type recorder struct {
	r        io.Reader
	limit    int
	buf      []byte
	stopped  bool
	overflow bool
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if !r.stopped && n > 0 {
		if len(r.buf)+n > r.limit {
			r.overflow = true
			r.stop()
		} else {
			r.buf = append(r.buf, p[:n]...)
		}
	}
	return n, err
}

func (r *recorder) stop() { r.stopped, r.buf = true, nil }

// item is the state of one streamed item (nodeId, runIndex, itemIndex).
type item struct {
	layer      *capture.Layer // nil when capture is off
	responseID string
}

// feed passes item text through the capture layer, or as it is when
// capture is off.
func (it *item) feed(text string) []capture.Output {
	if it.layer == nil {
		return []capture.Output{{Kind: capture.Text, Text: text, Raw: text}}
	}
	return it.layer.Feed([]byte(text))
}

// flush ends the item's text.
func (it *item) flush() []capture.Output {
	if it.layer == nil {
		return nil
	}
	return it.layer.Flush()
}

// announced is a tool call captured from text that waits for its
// tool_result (see AnnouncedResult).
type announced struct {
	id   string
	name string
	// held are the whitespace-only text deltas seen since the call: they
	// follow its result.
	held []instanceai.Event
}

// openTool is a call announced by a tool-call-start chunk (n8n PR 20499)
// that has not ended yet.
type openTool struct {
	upstreamID string
	name       string
	id         string
}

// mapper turns chunks into events; see MapStream.
type mapper struct {
	runID     string
	maxObject int
	noCapture bool
	obs       CaptureObserver
	log       *slog.Logger

	waiting *announced // the last captured call, until its result

	items    map[ndjson.Key]*item
	order    []ndjson.Key // open items in order of appearance
	tools    []openTool
	usedIDs  map[string]bool
	nextTool int
	sawChunk bool
}

func newMapper(opts StreamOptions) *mapper {
	if opts.RunID == "" {
		opts.RunID = "run"
	}
	if opts.MaxObject <= 0 {
		opts.MaxObject = capture.DefaultMaxObject
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &mapper{runID: opts.RunID, maxObject: opts.MaxObject, noCapture: opts.NoCapture, obs: opts.Observer, log: opts.Logger,
		items: map[ndjson.Key]*item{}, usedIDs: map[string]bool{}}
}

// responseID is stable for a key within a run: the same item always speaks
// under the same response id. The node id is hashed because its length is
// only bounded by the line limit.
func (m *mapper) responseID(k ndjson.Key) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(k.NodeID))
	return fmt.Sprintf("%s:n8n:%016x:%d:%d", m.runID, h.Sum64(), k.RunIndex, k.ItemIndex)
}

func (m *mapper) item(k ndjson.Key) (*item, error) {
	if it := m.items[k]; it != nil {
		return it, nil
	}
	if len(m.items) >= MaxItems {
		return nil, &instanceai.ProviderError{Provider: Provider, Code: CodeTooManyItems,
			Message: fmt.Sprintf("The n8n stream opened more than %d items at once, more than this server follows. "+
				"Check that the workflow streams one agent answer per request.", MaxItems)}
	}
	it := &item{responseID: m.responseID(k)}
	if !m.noCapture {
		it.layer = capture.New(m.maxObject)
		it.layer.OnMalformed(m.malformed)
	}
	m.items[k] = it
	m.order = append(m.order, k)
	return it, nil
}

// malformed logs and counts an object kept as text.
func (m *mapper) malformed(reason string, raw []byte) {
	m.log.Warn("n8n stream: an object in the agent's text was not a tool_call, tool_result or regular_message; kept as text",
		"reason", reason, "size", len(raw), "prefix", prefix(raw, logPrefix))
	if m.obs != nil {
		m.obs.CaptureMalformed(reason)
	}
}

func (m *mapper) drop(k ndjson.Key) {
	delete(m.items, k)
	if i := slices.Index(m.order, k); i >= 0 {
		m.order = slices.Delete(m.order, i, i+1)
	}
}

func (m *mapper) chunk(c ndjson.Chunk, emit func(instanceai.Event) error) error {
	k := c.Key()
	switch c.Type {
	case ndjson.ChunkBegin:
		_, err := m.item(k)
		return err
	case ndjson.ChunkItem:
		it, err := m.item(k)
		if err != nil {
			return err
		}
		if c.Content == "" {
			return nil
		}
		return m.outputs(it, it.feed(c.Content), emit)
	case ndjson.ChunkEnd:
		it := m.items[k]
		if it == nil {
			return nil
		}
		m.drop(k)
		return m.outputs(it, it.flush(), emit)
	case ndjson.ChunkError:
		if err := m.flushAll(emit); err != nil {
			return err
		}
		msg := c.Content
		if strings.TrimSpace(msg) == "" {
			// n8n leaves content out when the node error has no
			// description; n8n 1.123 does so when the agent's model server
			// refuses the connection (testdata/real/stream-model-down.ndjson).
			where := "the workflow"
			if c.Metadata.NodeName != "" {
				where = "node " + c.Metadata.NodeName
			}
			msg = "n8n reported an error in " + where + " without a description. Open the workflow's executions in n8n " +
				"to see it; a model or tool the node could not reach fails this way."
		}
		details := "error chunk"
		if c.Metadata.NodeName != "" || c.Metadata.NodeID != "" {
			details = fmt.Sprintf("error chunk from node %q (id %q, run %d, item %d)",
				c.Metadata.NodeName, c.Metadata.NodeID, c.Metadata.RunIndex, c.Metadata.ItemIndex)
		}
		return &instanceai.ProviderError{Provider: Provider, Code: CodeWorkflowError,
			Message: validText(msg), Details: validText(details)}
	case ndjson.ChunkToolCallFrame, ndjson.ChunkToolResultFrame:
		return m.frame(c, emit)
	case ndjson.ChunkCustomFrame:
		if m.noCapture {
			return nil
		}
		// Passed on whole, under its own type: AG-UI clients get it as
		// CUSTOM; native streams, whose clients know only n8n's types,
		// leave it out.
		return emit(instanceai.Event{Type: instanceai.TypeCustom,
			Payload: &instanceai.Custom{Name: c.FrameType, Value: json.RawMessage(c.Raw)}})
	case ndjson.ChunkToolCallStart:
		if err := m.settle(emit); err != nil {
			return err
		}
		return m.toolStart(c, emit)
	case ndjson.ChunkToolCallEnd:
		if err := m.settle(emit); err != nil {
			return err
		}
		return m.toolEnd(c, emit)
	}
	return nil
}

// frame handles a seed-004 control frame written as its own line: it is read
// as the same flat object the agent's text may hold, so a tool_call frame
// announces a call and a tool_result frame answers it. A frame that is not
// such an object, or answers no waiting call, is logged and skipped: it is
// not the agent's text. With capture off, frames are skipped as before.
func (m *mapper) frame(c ndjson.Chunk, emit func(instanceai.Event) error) error {
	if m.noCapture {
		return nil
	}
	l := capture.New(m.maxObject)
	l.OnMalformed(func(reason string, raw []byte) {
		m.log.Warn("n8n stream: skipping a control frame that is not a tool_call or tool_result object",
			"line", c.Line, "reason", reason, "prefix", prefix(raw, logPrefix))
	})
	outs := append(l.Feed(c.Raw), l.Flush()...)
	for _, o := range outs {
		if o.Kind == capture.ToolCall || o.Kind == capture.ToolResult {
			return m.outputs(nil, []capture.Output{o}, emit)
		}
	}
	return nil
}

// outputs emits what a capture layer released; it is nil for a control
// frame, which has no text.
func (m *mapper) outputs(it *item, outs []capture.Output, emit func(instanceai.Event) error) error {
	for _, o := range outs {
		switch o.Kind {
		case capture.Text, capture.Message:
			if o.Kind == capture.Message && m.obs != nil {
				m.obs.CaptureObject("regular_message")
			}
			if err := m.text(it, o.Text, emit); err != nil {
				return err
			}
		case capture.ToolCall:
			if m.obs != nil {
				m.obs.CaptureObject("tool_call")
			}
			if err := m.settle(emit); err != nil {
				return err
			}
			id := m.freshID()
			name := toolName(o.ToolCall.Name, "")
			if err := emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{
				ToolCallID: id, ToolName: name, Args: objectArgs(o.ToolCall.Args)}}); err != nil {
				return err
			}
			m.waiting = &announced{id: id, name: name}
		case capture.ToolResult:
			if err := m.toolResult(it, o, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// text emits a text delta of the item. While a call waits for its result,
// whitespace is held (an agent writes a newline between the two objects)
// and anything else settles the call first.
func (m *mapper) text(it *item, text string, emit func(instanceai.Event) error) error {
	if text == "" {
		return nil
	}
	ev := instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: it.responseID, Payload: &instanceai.Text{Text: validText(text)}}
	if m.waiting != nil && strings.TrimSpace(text) == "" {
		m.waiting.held = append(m.waiting.held, ev)
		return nil
	}
	if err := m.settle(emit); err != nil {
		return err
	}
	return emit(ev)
}

// toolResult emits a captured tool_result as the result of the call that
// waits for it, when it answers that call (the same tool, or no tool
// named); otherwise the object is kept as text.
func (m *mapper) toolResult(it *item, o capture.Output, emit func(instanceai.Event) error) error {
	r, w := o.ToolResult, m.waiting
	if w == nil || (r.Name != "" && toolName(r.Name, "") != w.name) {
		m.malformed(MalformedUnmatched, []byte(o.Raw))
		if it == nil {
			return nil // a control frame: not text to keep
		}
		return m.text(it, o.Raw, emit)
	}
	if m.obs != nil {
		m.obs.CaptureObject("tool_result")
	}
	m.waiting = nil
	var ev instanceai.Event
	if r.Error != "" {
		ev = instanceai.Event{Type: instanceai.TypeToolError, Payload: &instanceai.ToolError{ToolCallID: w.id, Error: validText(r.Error)}}
	} else {
		result := validJSON(r.Result)
		if result == nil {
			result = json.RawMessage(`null`)
		}
		ev = instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: w.id, Result: result}}
	}
	return emitAll(emit, append([]instanceai.Event{ev}, w.held...))
}

// settle ends the waiting call, if any, with AnnouncedResult, then sends
// the whitespace held after it.
func (m *mapper) settle(emit func(instanceai.Event) error) error {
	w := m.waiting
	if w == nil {
		return nil
	}
	m.waiting = nil
	result := instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: w.id, Result: AnnouncedResult}}
	return emitAll(emit, append([]instanceai.Event{result}, w.held...))
}

func emitAll(emit func(instanceai.Event) error, events []instanceai.Event) error {
	for _, ev := range events {
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}

// flushAll releases what every open item holds, in order of appearance.
func (m *mapper) flushAll(emit func(instanceai.Event) error) error {
	for len(m.order) > 0 {
		k := m.order[0]
		it := m.items[k]
		m.drop(k)
		if err := m.outputs(it, it.flush(), emit); err != nil {
			return err
		}
	}
	return m.settle(emit)
}

// settleTools ends the PR 20499 calls that never got their end chunk, so
// none is left loading in the UI.
func (m *mapper) settleTools(emit func(instanceai.Event) error) error {
	for _, t := range m.tools {
		if err := emit(instanceai.Event{Type: instanceai.TypeToolError, Payload: &instanceai.ToolError{
			ToolCallID: t.id, Error: "The n8n stream ended before this tool call finished."}}); err != nil {
			return err
		}
	}
	m.tools = nil
	return nil
}

func (m *mapper) finishEOF(rec *recorder, stats ndjson.ReaderStats, emit func(instanceai.Event) error) error {
	if !m.sawChunk {
		return m.nonStreaming(rec, stats, emit)
	}
	open := len(m.order)
	if err := m.flushAll(emit); err != nil {
		return err
	}
	if err := m.settleTools(emit); err != nil {
		return err
	}
	if open > 0 {
		return interrupted(fmt.Sprintf("the body ended with %d item(s) begun but not ended", open))
	}
	return nil
}

// nonStreaming handles a body without a single chunk: a webhook in "When
// Last Node Finishes" mode answers with the last node's JSON, which for an
// AI Agent is {"output": "..."} (n8n 1.123 sends that object,
// testdata/real/lastnode.json; arrays of such items are accepted too, as
// the "All Entries" response data option returns them). Its text is
// still the agent's text, so it goes through the capture layer like a
// streamed item.
func (m *mapper) nonStreaming(rec *recorder, stats ndjson.ReaderStats, emit func(instanceai.Event) error) error {
	if rec.overflow {
		return &instanceai.ProviderError{Provider: Provider, Code: CodeUnexpectedResponse,
			Message: "n8n answered with a large body that is not a stream. Set the Webhook node's Response mode to Streaming " +
				"and turn on streaming in the AI Agent node."}
	}
	body := bytes.TrimSpace(rec.buf)
	text, ok := outputText(body)
	if !ok && stats.Malformed == 0 {
		// Only blank lines, keepalives or chunk types we skip.
		body = nil
	}
	if len(body) == 0 {
		// A streaming webhook in front of an AI Agent whose own streaming is
		// off answers 200 with an empty body: the agent's answer is lost
		// (testdata/real/stream-agent-streaming-off.ndjson).
		return &instanceai.ProviderError{Provider: Provider, Code: CodeEmptyResponse,
			Message: "n8n answered with an empty stream: the workflow streamed no text. This is what n8n does when the Webhook " +
				"node streams but the AI Agent node does not: enable streaming in the AI Agent node options (Enable Streaming). " +
				"Otherwise check the workflow's execution in n8n."}
	}
	if !ok && startedMessage(body) {
		// Response mode "Immediately" (testdata/real/onreceived.json).
		return &instanceai.ProviderError{Provider: Provider, Code: CodeUnexpectedResponse,
			Message: "n8n only confirmed that the workflow started: the Webhook node answers Immediately. Set its Response mode " +
				"to Streaming and enable streaming in the AI Agent node options.",
			Details: "body: " + prefix(body, logPrefix)}
	}
	if !ok {
		return &instanceai.ProviderError{Provider: Provider, Code: CodeUnexpectedResponse,
			Message: "n8n answered with something that is neither a stream nor an agent's output. Set the Webhook node's " +
				"Response mode to Streaming and turn on streaming in the AI Agent node.",
			Details: "body starts with: " + prefix(body, logPrefix)}
	}
	it, err := m.item(ndjson.Key{NodeID: "response"})
	if err != nil {
		return err
	}
	m.drop(ndjson.Key{NodeID: "response"})
	if err := m.outputs(it, it.feed(text), emit); err != nil {
		return err
	}
	if err := m.outputs(it, it.flush(), emit); err != nil {
		return err
	}
	return m.settle(emit)
}

// startedMessage reports whether body is the answer of a Webhook node in
// Response mode "Immediately": {"message":"Workflow was started"}.
func startedMessage(body []byte) bool {
	var v map[string]any
	if json.Unmarshal(body, &v) != nil || len(v) != 1 {
		return false
	}
	s, _ := v["message"].(string)
	return s == "Workflow was started"
}

// outputText extracts the agent's text from a non-streaming answer: a JSON
// string, an object with a string "output" (the AI Agent node's field) or
// "text", or an array of those, joined by blank lines.
func outputText(body []byte) (string, bool) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return "", false
	}
	one := func(v any) (string, bool) {
		switch x := v.(type) {
		case string:
			return x, true
		case map[string]any:
			for _, key := range []string{"output", "text"} {
				if s, ok := x[key].(string); ok {
					return s, true
				}
			}
		}
		return "", false
	}
	if arr, isArr := v.([]any); isArr {
		var parts []string
		for _, e := range arr {
			if s, ok := one(e); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\n\n"), len(parts) > 0
	}
	return one(v)
}

// freshID returns a new tool call id for a call captured from text.
func (m *mapper) freshID() string {
	for {
		m.nextTool++
		id := m.runID + ":tc:" + strconv.Itoa(m.nextTool)
		if !m.usedIDs[id] {
			m.usedIDs[id] = true
			return id
		}
	}
}

// upstreamID turns an id n8n sent into one unique in the thread (run id
// prefix) and in the run (a suffix when n8n repeats an id).
func (m *mapper) upstreamID(raw string) string {
	if raw == "" {
		return m.freshID()
	}
	if len(raw) > 128 || !utf8.ValidString(raw) {
		h := fnv.New64a()
		_, _ = h.Write([]byte(raw))
		raw = fmt.Sprintf("%016x", h.Sum64())
	}
	id := m.runID + ":n8n-tool:" + raw
	for n := 2; m.usedIDs[id]; n++ {
		id = m.runID + ":n8n-tool:" + raw + ":" + strconv.Itoa(n)
	}
	m.usedIDs[id] = true
	return id
}

func (m *mapper) toolStart(c ndjson.Chunk, emit func(instanceai.Event) error) error {
	t := openTool{upstreamID: c.Metadata.ToolCallID, name: toolName(c.Metadata.ToolName, c.Metadata.NodeName)}
	t.id = m.upstreamID(t.upstreamID)
	m.tools = append(m.tools, t)
	return emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{
		ToolCallID: t.id, ToolName: t.name, Args: objectArgs(c.Metadata.ToolInput)}})
}

func (m *mapper) toolEnd(c ndjson.Chunk, emit func(instanceai.Event) error) error {
	name := toolName(c.Metadata.ToolName, c.Metadata.NodeName)
	i := -1
	if c.Metadata.ToolCallID != "" {
		i = slices.IndexFunc(m.tools, func(t openTool) bool { return t.upstreamID == c.Metadata.ToolCallID })
	} else {
		i = slices.IndexFunc(m.tools, func(t openTool) bool { return t.name == name })
	}
	var id string
	if i >= 0 {
		id = m.tools[i].id
		m.tools = slices.Delete(m.tools, i, i+1)
	} else {
		// An end without its start: announce the call so the result has
		// something to attach to.
		id = m.upstreamID(c.Metadata.ToolCallID)
		if err := emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{
			ToolCallID: id, ToolName: name, Args: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
	}
	result := validJSON(c.Metadata.ToolOutput)
	if result == nil {
		result = json.RawMessage(`null`)
	}
	return emit(instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{
		ToolCallID: id, Result: result}})
}

func toolName(name, fallback string) string {
	name = strings.TrimSpace(validText(name))
	if name == "" {
		name = strings.TrimSpace(validText(fallback))
	}
	if name == "" {
		name = "tool"
	}
	return name
}

// objectArgs makes tool arguments a JSON object, as tool-call requires:
// absent or null is {}, any other non-object value v is {"input": v}.
func objectArgs(raw json.RawMessage) json.RawMessage {
	raw = validJSON(raw)
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return json.RawMessage(`{}`)
	}
	if trimmed[0] == '{' {
		return trimmed
	}
	b, err := json.Marshal(map[string]json.RawMessage{"input": trimmed})
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// validJSON returns raw when it is valid JSON in valid UTF-8, raw
// re-encoded when only its UTF-8 is broken (encoding/json lets invalid
// bytes through raw values; storage would refuse them), and nil when it is
// not JSON at all.
func validJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil
	}
	if utf8.Valid(raw) {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// prefix returns at most n bytes of b, cut on a character boundary, as
// valid UTF-8.
func prefix(b []byte, n int) string {
	if len(b) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return validText(string(b[:cut])) + "…"
	}
	return validText(string(b))
}
