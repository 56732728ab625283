package mapping

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/threadline/threadline/agui"
)

// AGUIFold builds the messages and the state an AG-UI client holds after
// a stream of events, by the rules of @ag-ui/client 1.0.0's
// defaultApplyEvents: a text or reasoning message per start, its content
// the deltas joined; a tool call on its parent assistant message (or a
// new one named after the parent or the call); a result as a tool message
// right after the calls' message and the results before it; the state
// from STATE_SNAPSHOT and STATE_DELTA; MESSAGES_SNAPSHOT merged as the
// client merges it; activity messages; event metadata merged into what
// the event touches. A replayed history made of it is what a client that
// followed the stream live holds, whole messages instead of their deltas.
type AGUIFold struct {
	msgs []*foldedMessage
	// state is nil until a STATE_SNAPSHOT or STATE_DELTA.
	state json.RawMessage
}

// foldedMessage is a message being built: its text content apart, so
// that deltas append without re-encoding.
type foldedMessage struct {
	agui.Message
	text    strings.Builder
	hasText bool // content is text (text), not Message.Content
}

// NewAGUIFold returns an empty fold.
func NewAGUIFold() *AGUIFold { return &AGUIFold{} }

// Messages returns the messages so far.
func (f *AGUIFold) Messages() []agui.Message {
	out := make([]agui.Message, len(f.msgs))
	for i, m := range f.msgs {
		out[i] = m.Message
		if m.hasText {
			out[i].Content = agui.TextContent(m.text.String())
		}
		out[i].ToolCalls = slices.Clone(m.ToolCalls)
	}
	return out
}

// Add appends a message as it is, as a client's own messages are there
// before a run's events.
func (f *AGUIFold) Add(m agui.Message) {
	f.msgs = append(f.msgs, &foldedMessage{Message: m})
}

// State returns the state so far, nil when no event set one.
func (f *AGUIFold) State() json.RawMessage { return f.state }

func (f *AGUIFold) find(id string) (int, *foldedMessage) {
	for i, m := range f.msgs {
		if m.ID == id {
			return i, m
		}
	}
	return -1, nil
}

func (f *AGUIFold) findCall(id string) (*foldedMessage, *agui.ToolCall) {
	for _, m := range f.msgs {
		for i := range m.ToolCalls {
			if m.ToolCalls[i].ID == id {
				return m, &m.ToolCalls[i]
			}
		}
	}
	return nil, nil
}

func mergeMetadata(dst *map[string]any, src map[string]any) {
	if src == nil {
		return
	}
	if *dst == nil {
		*dst = map[string]any{}
	}
	for k, v := range src {
		(*dst)[k] = v
	}
}

// Apply folds one event in. Events the client would warn about (content
// of an unknown message, a patch that does not apply) change nothing, as
// there.
func (f *AGUIFold) Apply(ev agui.Event) {
	if v, ok := ev.(*agui.Verbatim); ok {
		decoded, err := agui.DecodeEvent(v.Data)
		if err != nil {
			return
		}
		ev = decoded
	}
	md := ev.Common().Metadata
	switch e := ev.(type) {
	case *agui.TextMessageStart:
		role := e.Role
		if role == "" {
			role = agui.RoleAssistant
		}
		f.start(e.MessageID, role, e.Name, e.SubagentRunID, md)
	case *agui.TextMessageContent:
		f.appendText(e.MessageID, e.Delta, md)
	case *agui.TextMessageEnd:
		f.touch(e.MessageID, md)
	case *agui.TextMessageChunk:
		// The client turns chunks into start, content and end first.
		if _, m := f.find(e.MessageID); m == nil {
			role := e.Role
			if role == "" {
				role = agui.RoleAssistant
			}
			f.start(e.MessageID, role, e.Name, e.SubagentRunID, md)
		}
		f.appendText(e.MessageID, e.Delta, md)
	case *agui.ReasoningMessageStart:
		f.start(e.MessageID, agui.RoleReasoning, "", e.SubagentRunID, md)
	case *agui.ReasoningMessageContent:
		f.appendText(e.MessageID, e.Delta, md)
	case *agui.ReasoningMessageEnd:
		f.touch(e.MessageID, md)
	case *agui.ReasoningMessageChunk:
		if _, m := f.find(e.MessageID); m == nil {
			f.start(e.MessageID, agui.RoleReasoning, "", e.SubagentRunID, md)
		}
		f.appendText(e.MessageID, e.Delta, md)
	case *agui.ToolCallStart:
		f.toolCallStart(e, md)
	case *agui.ToolCallArgs:
		if _, c := f.findCall(e.ToolCallID); c != nil {
			c.Function.Arguments += e.Delta
			mergeMetadata(&c.Metadata, md)
		}
	case *agui.ToolCallEnd:
		if _, c := f.findCall(e.ToolCallID); c != nil {
			mergeMetadata(&c.Metadata, md)
		}
	case *agui.ToolCallResult:
		f.toolCallResult(e, md)
	case *agui.StateSnapshot:
		f.state = orNullJSON(e.Snapshot)
	case *agui.StateDelta:
		f.patchState(e.Delta)
	case *agui.MessagesSnapshot:
		f.messagesSnapshot(e.Messages)
	case *agui.ActivitySnapshot:
		f.activitySnapshot(e, md)
	case *agui.ActivityDelta:
		f.activityDelta(e, md)
	case *agui.ReasoningEncryptedValue:
		if e.Subtype == "tool-call" {
			if _, c := f.findCall(e.EntityID); c != nil {
				c.EncryptedValue = e.EncryptedValue
			}
		} else if _, m := f.find(e.EntityID); m != nil && m.Role != agui.RoleActivity {
			m.EncryptedValue = e.EncryptedValue
		}
	}
}

func (f *AGUIFold) start(id, role, name, sub string, md map[string]any) {
	_, m := f.find(id)
	if m != nil && m.Role == agui.RoleActivity {
		return
	}
	if m == nil {
		m = &foldedMessage{Message: agui.Message{ID: id, Role: role, Name: name, SubagentRunID: sub}, hasText: true}
		f.msgs = append(f.msgs, m)
	}
	mergeMetadata(&m.Metadata, md)
}

func (f *AGUIFold) appendText(id, delta string, md map[string]any) {
	_, m := f.find(id)
	if m == nil || m.Role == agui.RoleActivity {
		return
	}
	if !m.hasText {
		// A message from a snapshot whose content was text: carry on
		// from it.
		m.text.WriteString(m.Text())
		m.hasText = true
	}
	m.text.WriteString(delta)
	mergeMetadata(&m.Metadata, md)
}

func (f *AGUIFold) touch(id string, md map[string]any) {
	if _, m := f.find(id); m != nil && m.Role != agui.RoleActivity {
		mergeMetadata(&m.Metadata, md)
	}
}

func (f *AGUIFold) toolCallStart(e *agui.ToolCallStart, md map[string]any) {
	if _, c := f.findCall(e.ToolCallID); c != nil {
		c.Function.Name = e.ToolCallName
		mergeMetadata(&c.Metadata, md)
		return
	}
	var parent *foldedMessage
	created := false
	if e.ParentMessageID != "" {
		_, found := f.find(e.ParentMessageID)
		if found != nil && found.Role == agui.RoleAssistant {
			parent = found
		} else {
			id := e.ParentMessageID
			if found != nil {
				id = e.ToolCallID
			}
			parent = &foldedMessage{Message: agui.Message{ID: id, Role: agui.RoleAssistant}}
			created = true
		}
	} else {
		parent = &foldedMessage{Message: agui.Message{ID: e.ToolCallID, Role: agui.RoleAssistant}}
		created = true
	}
	if created {
		parent.SubagentRunID = e.SubagentRunID
		f.msgs = append(f.msgs, parent)
	}
	call := agui.ToolCall{ID: e.ToolCallID, Type: "function", Function: agui.FunctionCall{Name: e.ToolCallName}}
	mergeMetadata(&call.Metadata, md)
	parent.ToolCalls = append(parent.ToolCalls, call)
}

func (f *AGUIFold) toolCallResult(e *agui.ToolCallResult, md map[string]any) {
	role := e.Role
	if role == "" {
		role = agui.RoleTool
	}
	m := &foldedMessage{Message: agui.Message{ID: e.MessageID, Role: role, ToolCallID: e.ToolCallID, SubagentRunID: e.SubagentRunID},
		hasText: true}
	m.text.WriteString(e.Content)
	mergeMetadata(&m.Metadata, md)
	at := -1
	for i, c := range f.msgs {
		if c.Role == agui.RoleAssistant && slices.ContainsFunc(c.ToolCalls, func(t agui.ToolCall) bool { return t.ID == e.ToolCallID }) {
			at = i + 1
			for at < len(f.msgs) && f.msgs[at].Role == agui.RoleTool {
				at++
			}
			break
		}
	}
	if at < 0 {
		f.msgs = append(f.msgs, m)
		return
	}
	f.msgs = slices.Insert(f.msgs, at, m)
}

func (f *AGUIFold) patchState(ops []agui.PatchOp) {
	raw, err := json.Marshal(ops)
	if err != nil {
		return
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return
	}
	doc := f.state
	if doc == nil {
		doc = json.RawMessage("{}")
	}
	next, err := applyBounded(patch, doc)
	if err != nil {
		return
	}
	f.state = next
}

// messagesSnapshot merges a snapshot as the client does: messages it
// names are replaced, the others dropped, except reasoning (and
// activity) messages when the snapshot has none of that role; new ones
// are appended.
func (f *AGUIFold) messagesSnapshot(snapshot []agui.Message) {
	byID := map[string]agui.Message{}
	hasActivity, hasReasoning := false, false
	for _, m := range snapshot {
		byID[m.ID] = m
		hasActivity = hasActivity || m.Role == agui.RoleActivity
		hasReasoning = hasReasoning || m.Role == agui.RoleReasoning
	}
	var kept []*foldedMessage
	seen := map[string]bool{}
	for _, m := range f.msgs {
		if s, ok := byID[m.ID]; ok {
			kept = append(kept, &foldedMessage{Message: s})
			seen[m.ID] = true
			continue
		}
		if (m.Role == agui.RoleActivity && !hasActivity) || (m.Role == agui.RoleReasoning && !hasReasoning) {
			kept = append(kept, m)
			seen[m.ID] = true
		}
	}
	for _, s := range snapshot {
		if !seen[s.ID] {
			kept = append(kept, &foldedMessage{Message: s})
			seen[s.ID] = true
		}
	}
	f.msgs = kept
}

func (f *AGUIFold) activitySnapshot(e *agui.ActivitySnapshot, md map[string]any) {
	i, existing := f.find(e.MessageID)
	next := &foldedMessage{Message: agui.Message{ID: e.MessageID, Role: agui.RoleActivity, ActivityType: e.ActivityType,
		Content: orEmptyJSONObject(e.Content), SubagentRunID: e.SubagentRunID}}
	replace := e.Replace == nil || *e.Replace
	switch {
	case existing == nil:
		mergeMetadata(&next.Metadata, md)
		f.msgs = append(f.msgs, next)
	case existing.Role == agui.RoleActivity:
		if replace {
			existing.ActivityType, existing.Content, existing.SubagentRunID = e.ActivityType, next.Content, e.SubagentRunID
		}
		mergeMetadata(&existing.Metadata, md)
	case replace:
		mergeMetadata(&next.Metadata, md)
		f.msgs[i] = next
	}
}

func (f *AGUIFold) activityDelta(e *agui.ActivityDelta, md map[string]any) {
	_, m := f.find(e.MessageID)
	if m == nil || m.Role != agui.RoleActivity {
		return
	}
	mergeMetadata(&m.Metadata, md)
	raw, err := json.Marshal(e.Patch)
	if err != nil {
		return
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return
	}
	next, err := applyBounded(patch, orEmptyJSONObject(m.Content))
	if err != nil {
		return
	}
	m.Content, m.ActivityType = next, e.ActivityType
}

// MaxPatchedBytes bounds a state or activity document a patch makes: the
// events come from an upstream agent, and a few "copy" operations can
// double a document again and again.
const MaxPatchedBytes = 4 << 20

var errPatchTooLarge = errors.New("the patched document is too large")

// applyBounded applies a patch, refusing one whose copies or result exceed
// MaxPatchedBytes (the client's fast-json-patch has no bound: there, such
// a patch is the client's problem; here it would be every reader's).
func applyBounded(patch jsonpatch.Patch, doc []byte) ([]byte, error) {
	next, err := patch.ApplyWithOptions(doc, &jsonpatch.ApplyOptions{SupportNegativeIndices: true,
		AccumulatedCopySizeLimit: MaxPatchedBytes})
	if err != nil {
		return nil, err
	}
	if len(next) > MaxPatchedBytes {
		return nil, errPatchTooLarge
	}
	return next, nil
}

func orNullJSON(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

func orEmptyJSONObject(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("{}")
	}
	return v
}
