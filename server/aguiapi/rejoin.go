package aguiapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/ssestream"
)

// Rejoin returns the handler of GET /agui/threads/{threadId}/events, an
// AG-UI extension for a client that lost its /run-agent stream: it streams
// the thread's latest run as one AG-UI run (runId = the instance-ai run id):
// RUN_STARTED, MESSAGES_SNAPSHOT with the conversation up to the cursor,
// the items open at the cursor opened again, then the live tail until the
// terminal event. A run already finished at connect is RUN_STARTED,
// MESSAGES_SNAPSHOT with the whole conversation and its terminal event.
//
// The cursor is the Last-Event-ID header or ?lastEventId (the header wins):
// the seq of the last durable event the client saw, 0 for none. Frames
// mapped from durable events carry their seq as id, so the client's next
// cursor is right. A client leaving a rejoined stream does not cancel the
// run.
func (h *Handler) Rejoin() http.Handler { return http.HandlerFunc(h.rejoin) }

// Cursor sources, as named in 400 answers.
const (
	cursorHeader = "Last-Event-ID"
	cursorQuery  = "lastEventId"
)

// parseCursor reads the rejoin cursor: the Last-Event-ID header when sent
// (non-empty), else ?lastEventId, else 0. It must be a non-negative integer.
func parseCursor(r *http.Request) (int64, error) {
	field, v := cursorHeader, r.Header.Get(cursorHeader)
	if v == "" {
		field, v = cursorQuery, r.URL.Query().Get(cursorQuery)
		if v == "" && !r.URL.Query().Has(cursorQuery) {
			return 0, nil
		}
	}
	n, ok := ssestream.ParseEventID(v)
	if !ok {
		return 0, httpjson.NewError(http.StatusBadRequest, "invalid_cursor", field,
			"%s must be a non-negative integer (the seq of the last event received), got %q", field, v)
	}
	return n, nil
}

// rejoinTarget is what a rejoin streams: the latest run of the thread and
// the log as read at connect.
type rejoinTarget struct {
	threadID string
	runID    string
	cursor   int64
	// first and last are the seqs of the log's first and last events at
	// connect (0 for an empty log).
	first, last int64
	// runRows are the latest run's rows.
	runRows []instanceai.StoredEvent
	// snapshot is the conversation as of a seq (see buildSnapshot).
	snapshot func(through int64, open *openState) (snapshot, error)
}

func (h *Handler) rejoin(w http.ResponseWriter, r *http.Request) {
	wire, ok := negotiate(r.Header.Values("Accept"), true)
	if !ok {
		httpjson.WriteError(w, notAcceptable(r, true))
		return
	}
	t, err := h.rejoinTarget(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	h.streamRejoin(w, r, t, wire)
}

func (h *Handler) rejoinTarget(r *http.Request) (*rejoinTarget, error) {
	cursor, err := parseCursor(r)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	id := mux.Vars(r)["threadId"]
	if !instanceai.ValidThreadID(id) {
		// The rejoin path is the client's thread id as it is: a malformed
		// one names no thread, as an unknown one does.
		return nil, &instanceai.ThreadNotFoundError{ThreadID: id}
	}
	if _, err := h.core.Thread(ctx, id, auth.UserFrom(ctx)); err != nil {
		return nil, err
	}
	next, err := h.core.NextSeq(ctx, id)
	if err != nil {
		return nil, err
	}
	ix, err := history.Load(ctx, h.core, id, next-1)
	if err != nil {
		return nil, err
	}
	runID := ix.LatestRun()
	if runID == "" {
		return nil, httpjson.NewError(http.StatusNotFound, "run_not_found", "threadId", "thread %q has no run to rejoin", id)
	}
	rows, err := ix.RunRows(ctx, h.core, id, runID)
	if err != nil {
		return nil, err
	}
	return h.newRejoinTarget(ctx, id, runID, cursor, next-1, rows)
}

// newRejoinTarget continues the run whose rows are runRows from cursor, on
// the log as read up to last.
func (h *Handler) newRejoinTarget(ctx context.Context, threadID, runID string, cursor, last int64,
	runRows []instanceai.StoredEvent) (*rejoinTarget, error) {
	t := &rejoinTarget{threadID: threadID, runID: runID, cursor: cursor, last: last, runRows: runRows}
	first, err := h.core.FirstSeq(ctx, threadID)
	if err != nil {
		return nil, err
	}
	t.first = first
	t.snapshot = func(through int64, open *openState) (snapshot, error) {
		return buildSnapshot(ctx, h.core, threadID, through, h.cfg.HistoryMaxBytes, open)
	}
	return t, nil
}

// events are the events of stored rows, in the rows' order.
func events(rows []instanceai.StoredEvent) []instanceai.Event {
	out := make([]instanceai.Event, len(rows))
	for i := range rows {
		out[i] = rows[i].Event
	}
	return out
}

// snapshot is the conversation and the shared state a client rejoining
// at a cursor starts from.
type snapshot struct {
	messages []agui.Message
	// state is nil when no event of the window set one.
	state json.RawMessage
}

// buildSnapshot is the conversation as of the cursor: the user messages as
// stored, each followed by the messages its run's AG-UI events make (text,
// reasoning, tool calls and results, an upstream agent's own snapshots
// and activity), folded as the client folds them live
// (mapping.AGUIFold), so that a client rejoining holds what one that
// followed the stream holds; items still open at the cursor (open) are
// left out, as the rejoin opens them again. The state is what the window's
// events set. It holds the newest entries that fit in maxBytes (the newest
// one always; see history): a client that wants older ones pages
// /messages.
func buildSnapshot(ctx context.Context, store history.Store, threadID string, cursor int64, maxBytes int, open *openState) (snapshot, error) {
	ix, err := history.Load(ctx, store, threadID, cursor)
	if err != nil {
		return snapshot{}, err
	}
	entries := ix.Entries[ix.Window(len(ix.Entries), 0, maxBytes):]
	users, runs, err := ix.ReadEvents(ctx, store, threadID, entries)
	if err != nil {
		return snapshot{}, err
	}
	fold := mapping.NewAGUIFold()
	for _, e := range entries {
		if e.User != nil {
			u := users[e.User.ID]
			fold.Add(agui.Message{ID: e.User.ID, Role: agui.RoleUser, Content: agui.PartsContent(u.Content, u.Attachments)})
			continue
		}
		m := mapping.NewInstanceToAGUI(threadID, e.RunID)
		for _, ev := range runs[e.RunID] {
			if m.Suspended() {
				m.Resume(e.RunID)
			}
			if m.Finished() {
				// Stored after the run's end: a client's result for a
				// call to one of its tools, which the next request
				// carried.
				m = mapping.NewInstanceToAGUI(threadID, e.RunID)
			}
			for _, out := range m.Push(ev) {
				fold.Apply(out)
			}
		}
	}
	return snapshot{messages: open.leaveOut(fold.Messages()), state: fold.State()}, nil
}

// leaveOut drops from msgs the text and reasoning messages open in s, and
// the tool calls open in s from their messages (and a message left with
// neither content nor calls).
func (s *openState) leaveOut(msgs []agui.Message) []agui.Message {
	if s == nil || len(s.byID) == 0 {
		return msgs
	}
	out := msgs[:0]
	for _, m := range msgs {
		if s.byID[itemKey("text", m.ID)] != nil || s.byID[itemKey("reasoning", m.ID)] != nil {
			continue
		}
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = slices.DeleteFunc(m.ToolCalls, func(c agui.ToolCall) bool { return s.byID[itemKey("tool", c.ID)] != nil })
			if len(m.ToolCalls) == 0 && m.Text() == "" {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// openItem is a text message, reasoning span or tool call open at the
// cursor, with what was streamed into it so far.
type openItem struct {
	start agui.Event
	// msgStart is a reasoning span's REASONING_MESSAGE_START, if open.
	msgStart agui.Event
	buf      strings.Builder
}

// openState tracks, over mapped events, what a client that received them
// has open: sub-agents, and text, reasoning and tool calls by id.
type openState struct {
	subs  []*agui.SubagentStarted
	items []*openItem
	byID  map[string]*openItem
}

func itemKey(kind, id string) string { return kind + "\x00" + id }

func (s *openState) apply(events []agui.Event) {
	if s.byID == nil {
		s.byID = map[string]*openItem{}
	}
	open := func(k string, ev agui.Event) {
		it := &openItem{start: ev}
		s.items = append(s.items, it)
		s.byID[k] = it
	}
	closeItem := func(k string) {
		it := s.byID[k]
		if it == nil {
			return
		}
		delete(s.byID, k)
		for i, x := range s.items {
			if x == it {
				s.items = append(s.items[:i], s.items[i+1:]...)
				break
			}
		}
	}
	write := func(k, delta string) {
		if it := s.byID[k]; it != nil {
			it.buf.WriteString(delta)
		}
	}
	for _, ev := range events {
		switch e := ev.(type) {
		case *agui.TextMessageStart:
			open(itemKey("text", e.MessageID), e)
		case *agui.TextMessageContent:
			write(itemKey("text", e.MessageID), e.Delta)
		case *agui.TextMessageEnd:
			closeItem(itemKey("text", e.MessageID))
		case *agui.ReasoningStart:
			open(itemKey("reasoning", e.MessageID), e)
		case *agui.ReasoningMessageStart:
			if it := s.byID[itemKey("reasoning", e.MessageID)]; it != nil {
				it.msgStart = e
			}
		case *agui.ReasoningMessageContent:
			write(itemKey("reasoning", e.MessageID), e.Delta)
		case *agui.ReasoningMessageEnd:
			if it := s.byID[itemKey("reasoning", e.MessageID)]; it != nil {
				it.msgStart = nil
			}
		case *agui.ReasoningEnd:
			closeItem(itemKey("reasoning", e.MessageID))
		case *agui.ToolCallStart:
			open(itemKey("tool", e.ToolCallID), e)
		case *agui.ToolCallArgs:
			write(itemKey("tool", e.ToolCallID), e.Delta)
		case *agui.ToolCallEnd:
			closeItem(itemKey("tool", e.ToolCallID))
		case *agui.SubagentStarted:
			s.subs = append(s.subs, e)
		case *agui.SubagentFinished:
			s.endSub(e.SubagentRunID)
		case *agui.SubagentError:
			s.endSub(e.SubagentRunID)
		}
	}
}

func (s *openState) endSub(id string) {
	for i, e := range s.subs {
		if e.SubagentRunID == id {
			s.subs = append(s.subs[:i], s.subs[i+1:]...)
			return
		}
	}
}

// reopen returns the events that open again, on a new stream, what is open:
// the active sub-agents, then each open item's START with one CONTENT (or
// ARGS) carrying what it received so far.
func (s *openState) reopen() []agui.Event {
	var out []agui.Event
	for _, e := range s.subs {
		out = append(out, e)
	}
	for _, it := range s.items {
		text := it.buf.String()
		out = append(out, it.start)
		var more agui.Event
		sub := ""
		switch e := it.start.(type) {
		case *agui.TextMessageStart:
			sub = e.SubagentRunID
			if text != "" {
				more = &agui.TextMessageContent{MessageID: e.MessageID, Delta: text}
			}
		case *agui.ReasoningStart:
			sub = e.SubagentRunID
			if it.msgStart != nil {
				out = append(out, it.msgStart)
				if text != "" {
					more = &agui.ReasoningMessageContent{MessageID: e.MessageID, Delta: text}
				}
			}
		case *agui.ToolCallStart:
			sub = e.SubagentRunID
			if text != "" {
				more = &agui.ToolCallArgs{ToolCallID: e.ToolCallID, Delta: text}
			}
		}
		if more != nil {
			more.Common().Timestamp = it.start.Common().Timestamp
			if a, ok := more.(agui.Attributable); ok && sub != "" {
				a.Attribute(sub)
			}
			out = append(out, more)
		}
	}
	return out
}

// events opens a rejoined stream: RUN_STARTED, MESSAGES_SNAPSHOT and,
// when the window set one, STATE_SNAPSHOT.
func (s snapshot) events(ts int64, started *agui.RunStarted) []agui.Event {
	msgs := &agui.MessagesSnapshot{Messages: s.messages}
	msgs.Timestamp = ts
	out := []agui.Event{started, msgs}
	if s.state != nil {
		state := &agui.StateSnapshot{Snapshot: s.state}
		state.Timestamp = ts
		out = append(out, state)
	}
	return out
}

// rejoinStart returns the events that open a rejoined stream and the mapper
// that carries on with the live tail (nil when the run is already over,
// the opening events then ending with its terminal event), with the id to
// put on the last opening frame.
func rejoinStart(t *rejoinTarget) (opening []agui.Event, m *mapping.InstanceToAGUI, cursor int64, err error) {
	if t.first > 1 {
		// A bounded store evicted the thread's first events: the
		// snapshot, which replaces the client's whole conversation,
		// would silently lack them, so the rejoin ends at once.
		reset := &instanceai.Reset{Reason: instanceai.ReasonEventsEvicted, ThreadID: t.threadID,
			LastEventID: t.cursor, NextEventID: t.first}
		return mapping.NewInstanceToAGUI(t.threadID, t.runID).Close(reset), nil, 0, nil
	}
	cursor = t.cursor
	lastSeq := t.last
	if cursor > lastSeq {
		// A cursor the log never reached (a thread deleted and created
		// again under the client): whatever the client holds lines up
		// with nothing here, so the rejoin ends at once, as for evicted
		// events, rather than continue from a point that does not exist.
		reset := &instanceai.Reset{Reason: instanceai.ReasonCursorAhead, ThreadID: t.threadID,
			LastEventID: cursor, NextEventID: 1}
		return mapping.NewInstanceToAGUI(t.threadID, t.runID).Close(reset), nil, 0, nil
	}
	var startTS int64
	if len(t.runRows) > 0 {
		startTS = t.runRows[0].Event.TS
	}
	started := &agui.RunStarted{ThreadID: t.threadID, RunID: t.runID, ProtocolVersion: agui.ProtocolVersion}
	started.Timestamp = startTS

	probe := mapping.NewInstanceToAGUI(t.threadID, t.runID)
	all := mapping.FoldRun(probe, t.runID, events(t.runRows))
	if probe.Finished() && len(all) > 0 {
		snap, err := t.snapshot(lastSeq, nil)
		if err != nil {
			return nil, nil, 0, err
		}
		return append(snap.events(startTS, started), all[len(all)-1]), nil, lastSeq, nil
	}

	// The run's rows up to the cursor (its run-start always) rebuild the
	// mapper's state without being sent; what they left open is sent again.
	var prefix []instanceai.StoredEvent
	for i, row := range t.runRows {
		if i > 0 && row.Seq > cursor {
			break
		}
		prefix = append(prefix, row)
	}
	m = mapping.NewInstanceToAGUI(t.threadID, t.runID)
	var st openState
	st.apply(mapping.FoldRun(m, t.runID, events(prefix)))
	if m.Suspended() {
		// The run went on after the interrupt (it is not over at connect).
		st.apply(m.Resume(t.runID))
	}
	// The tail carries this run only: whatever came before its start is
	// the snapshot's, whatever the cursor.
	through := cursor
	if len(prefix) > 0 && prefix[0].Seq > through {
		through = prefix[0].Seq
	}
	snap, err := t.snapshot(through, &st)
	if err != nil {
		return nil, nil, 0, err
	}
	opening = append(snap.events(startTS, started), st.reopen()...)
	return opening, m, cursor, nil
}

// streamRejoin writes the rejoined run, then its live tail.
func (h *Handler) streamRejoin(w http.ResponseWriter, r *http.Request, t *rejoinTarget, wire binding) {
	log := h.cfg.Logger.With("thread", t.threadID, "run", t.runID)
	opening, m, cursor, err := rejoinStart(t)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	s, err := h.open(w, wire)
	if err != nil {
		return
	}
	out := &writer{s: s, binding: wire, log: log}
	if err := out.write(cursor, opening); err != nil || s.Flush() != nil || m == nil {
		return
	}
	// Nobody's run ends with a rejoin: a client gone is only a stream less.
	h.follow(r.Context(), out, t.threadID, t.runID, cursor, m, log.With("stream", "rejoin"), nil)
}
