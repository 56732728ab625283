package aguiapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/storage/memory"
)

func TestParseCursor(t *testing.T) {
	cases := []struct {
		header, query string
		want          int64
		field         string // "" for no error
	}{
		{"", "", 0, ""},
		{"7", "", 7, ""},
		{"", "lastEventId=12", 12, ""},
		{"0", "", 0, ""},
		{"5", "lastEventId=abc", 5, ""}, // the header wins
		{" 9 ", "", 0, "Last-Event-ID"}, // digits only (net/http strips a header's own spaces)
		{"+9", "", 0, "Last-Event-ID"},
		{"", "lastEventId=%2B9", 0, "lastEventId"},
		{"", "lastEventId=%209", 0, "lastEventId"},
		{"abc", "", 0, "Last-Event-ID"},
		{"-1", "", 0, "Last-Event-ID"},
		{"1.5", "lastEventId=3", 0, "Last-Event-ID"},
		{"", "lastEventId=-3", 0, "lastEventId"},
		{"", "lastEventId=x", 0, "lastEventId"},
		{"", "lastEventId=", 0, "lastEventId"},
		{"", "lastEventId=99999999999999999999", 0, "lastEventId"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/agui/threads/th/events?"+c.query, nil)
		if c.header != "" {
			r.Header.Set("Last-Event-ID", c.header)
		}
		got, err := parseCursor(r)
		if c.field == "" {
			if err != nil || got != c.want {
				t.Errorf("header %q query %q: got %d, %v; want %d", c.header, c.query, got, err, c.want)
			}
			continue
		}
		var he *httpjson.Error
		if !errors.As(err, &he) {
			t.Errorf("header %q query %q: got %d, %v; want a 400 naming %s", c.header, c.query, got, err, c.field)
			continue
		}
		if he.Status != http.StatusBadRequest || he.Detail.Details["field"] != c.field {
			t.Errorf("header %q query %q: %d %+v, want 400 naming %s", c.header, c.query, he.Status, he.Detail, c.field)
		}
	}
}

func row(seq int64, runID string, typ instanceai.EventType, p instanceai.Payload) instanceai.StoredEvent {
	return instanceai.StoredEvent{Seq: seq, Event: instanceai.Event{
		Type: typ, RunID: runID, AgentID: "agent-001", ResponseID: "resp-" + runID, TS: 1000 + seq, Payload: p,
	}}
}

// snapshotLog is a thread with two runs: r1 (finished) and r2 (under way).
func snapshotLog() ([]instanceai.Message, []instanceai.StoredEvent) {
	now := time.UnixMilli(1000)
	users := []instanceai.Message{
		{ID: "u1", RunID: "r1", Role: "user", Content: "first", CreatedAt: now},
		{ID: "u2", RunID: "r2", Role: "user", Content: "second", CreatedAt: now},
	}
	rows := []instanceai.StoredEvent{
		row(1, "r1", instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "u1"}),
		row(2, "r1", instanceai.TypeTextBlock, &instanceai.Text{Text: "Hello "}),
		row(3, "r1", instanceai.TypeTextBlock, &instanceai.Text{Text: "there."}),
		row(4, "r1", instanceai.TypeRunFinish, &instanceai.RunFinish{Status: instanceai.RunCompleted}),
		row(5, "r2", instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "u2"}),
		row(6, "r2", instanceai.TypeTextBlock, &instanceai.Text{Text: "Working"}),
		row(7, "r2", instanceai.TypeTextBlock, &instanceai.Text{Text: " on it"}),
	}
	return users, rows
}

// logStore is a store holding the users' messages and the rows, in thread
// "th"; the rows must be seqs 1, 2, … in order.
func logStore(t *testing.T, users []instanceai.Message, rows []instanceai.StoredEvent) *memory.Store {
	t.Helper()
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "th", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range users {
		m.ThreadID = "th"
		if err := store.AddMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rows {
		if first, err := store.Append(ctx, "th", []instanceai.Event{r.Event}); err != nil || first != int64(i+1) || r.Seq != first {
			t.Fatalf("row %d stored at %d, %v", r.Seq, first, err)
		}
	}
	return store
}

// snapshotAt is buildSnapshot of the store's thread without a byte bound.
func snapshotAt(t *testing.T, store *memory.Store, cursor int64) []agui.Message {
	t.Helper()
	snap, err := buildSnapshot(context.Background(), store, "th", cursor, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snap.messages
}

// target is a rejoin target of the store's thread.
func target(t *testing.T, store *memory.Store, runID string, cursor, last int64, runRows []instanceai.StoredEvent) *rejoinTarget {
	return &rejoinTarget{threadID: "th", runID: runID, cursor: cursor, first: 1, last: last, runRows: runRows,
		snapshot: func(through int64, open *openState) (snapshot, error) {
			return buildSnapshot(context.Background(), store, "th", through, 0, open)
		}}
}

type msg struct{ id, role, text string }

func snapshotOf(t *testing.T, ms []agui.Message) []msg {
	t.Helper()
	raw, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "null") {
		t.Errorf("snapshot has a null: %s", raw)
	}
	out := make([]msg, len(ms))
	for i, m := range ms {
		out[i] = msg{m.ID, m.Role, m.Text()}
	}
	return out
}

func TestBuildSnapshot(t *testing.T) {
	users, rows := snapshotLog()
	store := logStore(t, users, rows)
	cases := []struct {
		cursor int64
		want   []msg
	}{
		{0, []msg{{"u1", "user", "first"}, {"u2", "user", "second"}}},
		{2, []msg{{"u1", "user", "first"}, {"resp-r1", "assistant", "Hello "}, {"u2", "user", "second"}}},
		{5, []msg{{"u1", "user", "first"}, {"resp-r1", "assistant", "Hello "}, {"resp-r1:2", "assistant", "there."}, {"u2", "user", "second"}}},
		{6, []msg{{"u1", "user", "first"}, {"resp-r1", "assistant", "Hello "}, {"resp-r1:2", "assistant", "there."}, {"u2", "user", "second"}, {"resp-r2", "assistant", "Working"}}},
		{99, []msg{{"u1", "user", "first"}, {"resp-r1", "assistant", "Hello "}, {"resp-r1:2", "assistant", "there."}, {"u2", "user", "second"}, {"resp-r2", "assistant", "Working"}, {"resp-r2:2", "assistant", " on it"}}},
	}
	for _, c := range cases {
		got := snapshotOf(t, snapshotAt(t, store, c.cursor))
		if len(got) != len(c.want) {
			t.Errorf("cursor %d: %v, want %v", c.cursor, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("cursor %d: message %d is %v, want %v", c.cursor, i, got[i], c.want[i])
			}
		}
	}
}

func TestBuildSnapshotRunWithoutUserMessage(t *testing.T) {
	// A run started through /run-agent has no stored user message: its
	// assistant message follows the stored conversation.
	_, rows := snapshotLog()
	got := snapshotOf(t, snapshotAt(t, logStore(t, nil, rows), 99))
	want := []msg{{"resp-r1", "assistant", "Hello "}, {"resp-r1:2", "assistant", "there."}, {"resp-r2", "assistant", "Working"}, {"resp-r2:2", "assistant", " on it"}}
	if !slices.Equal(got, want) {
		t.Errorf("snapshot %v, want %v", got, want)
	}
	if ms := snapshotAt(t, logStore(t, nil, nil), 0); ms == nil || len(ms) != 0 {
		t.Errorf("empty conversation: %#v, want an empty non-nil list", ms)
	}
}

func TestRejoinStartReopensOpenItems(t *testing.T) {
	users, rows := snapshotLog()
	rows = append(rows,
		row(8, "r2", instanceai.TypeToolInputStart, &instanceai.ToolInputStart{ToolCallID: "tc1", ToolName: "workflows"}),
		row(9, "r2", instanceai.TypeToolCall, &instanceai.ToolCall{ToolCallID: "tc1", ToolName: "workflows", Args: json.RawMessage(`{"a":1}`)}),
	)
	opening, m, cursor, err := rejoinStart(target(t, logStore(t, users, rows), "r2", 8, 9, rows[4:]))
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || cursor != 8 {
		t.Fatalf("mapper %v cursor %d, want a live mapper at 8", m, cursor)
	}
	var got []string
	for _, ev := range opening {
		got = append(got, string(ev.Type()))
	}
	want := "RUN_STARTED MESSAGES_SNAPSHOT TOOL_CALL_START"
	if strings.Join(got, " ") != want {
		t.Fatalf("opening %v, want %s", got, want)
	}
	if rs := opening[0].(*agui.RunStarted); rs.ThreadID != "th" || rs.RunID != "r2" {
		t.Errorf("RUN_STARTED %+v", rs)
	}
	if ms := snapshotOf(t, opening[1].(*agui.MessagesSnapshot).Messages); len(ms) != 6 || ms[5].text != " on it" {
		t.Errorf("snapshot %v", ms)
	}
	// The tool call's row after the cursor continues what was reopened.
	var live []string
	for _, ev := range m.Push(rows[len(rows)-1].Event) {
		live = append(live, string(ev.Type()))
	}
	if strings.Join(live, " ") != "TOOL_CALL_ARGS TOOL_CALL_END" {
		t.Errorf("live %v", live)
	}
}

func TestRejoinStartFinishedRun(t *testing.T) {
	users, rows := snapshotLog()
	opening, m, cursor, err := rejoinStart(target(t, logStore(t, users, rows[:4]), "r1", 2, 4, rows[:4]))
	if err != nil {
		t.Fatal(err)
	}
	if m != nil || cursor != 4 {
		t.Fatalf("mapper %v cursor %d, want none at 4", m, cursor)
	}
	if len(opening) != 3 || opening[0].Type() != agui.TypeRunStarted || opening[1].Type() != agui.TypeMessagesSnapshot ||
		opening[2].Type() != agui.TypeRunFinished {
		t.Fatalf("opening %v", opening)
	}
	if ms := snapshotOf(t, opening[1].(*agui.MessagesSnapshot).Messages); len(ms) != 4 || ms[2].text != "there." {
		t.Errorf("snapshot %v, want the whole conversation", ms)
	}
}

func TestOpenStateReopen(t *testing.T) {
	var st openState
	sub := &agui.SubagentStarted{SubagentRunID: "s1", Name: "builder"}
	text := &agui.TextMessageStart{MessageID: "m1", Role: agui.RoleAssistant}
	text.Attribute("s1")
	st.apply([]agui.Event{
		&agui.RunStarted{ThreadID: "th", RunID: "r"},
		sub,
		text,
		&agui.TextMessageContent{MessageID: "m1", Delta: "ab"},
		&agui.TextMessageContent{MessageID: "m1", Delta: "c"},
		&agui.ReasoningStart{MessageID: "x"},
		&agui.ReasoningMessageStart{MessageID: "x"},
		&agui.ReasoningMessageContent{MessageID: "x", Delta: "hm"},
		&agui.TextMessageStart{MessageID: "m2"},
		&agui.TextMessageEnd{MessageID: "m2"},
		&agui.ToolCallStart{ToolCallID: "t1", ToolCallName: "n"},
		&agui.SubagentStarted{SubagentRunID: "s2", Name: "other"},
		&agui.SubagentFinished{SubagentRunID: "s2"},
	})
	out := st.reopen()
	var got []string
	for _, ev := range out {
		got = append(got, string(ev.Type()))
	}
	want := "SUBAGENT_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT REASONING_START REASONING_MESSAGE_START REASONING_MESSAGE_CONTENT TOOL_CALL_START"
	if strings.Join(got, " ") != want {
		t.Fatalf("reopen %v, want %s", got, want)
	}
	c := out[2].(*agui.TextMessageContent)
	if c.Delta != "abc" || c.SubagentRunID != "s1" {
		t.Errorf("text content %+v, want abc attributed to s1", c)
	}
	if r := out[5].(*agui.ReasoningMessageContent); r.Delta != "hm" {
		t.Errorf("reasoning content %+v", r)
	}
}

// A snapshot holds the newest messages that fit in its byte bound, the
// newest one always.
func TestBuildSnapshotIsBoundedInBytes(t *testing.T) {
	users, rows := snapshotLog()
	store := logStore(t, users, rows)
	ix, err := history.Load(context.Background(), store, "th", 99)
	if err != nil {
		t.Fatal(err)
	}
	newestTwo := ix.Entries[2].Size + ix.Entries[3].Size // u2, r2
	for _, c := range []struct {
		maxBytes int
		want     []msg
	}{
		{1, []msg{{"resp-r2", "assistant", "Working"}, {"resp-r2:2", "assistant", " on it"}}},
		{newestTwo, []msg{{"u2", "user", "second"}, {"resp-r2", "assistant", "Working"}, {"resp-r2:2", "assistant", " on it"}}},
		{newestTwo + ix.Entries[1].Size, []msg{{"resp-r1", "assistant", "Hello "}, {"resp-r1:2", "assistant", "there."}, {"u2", "user", "second"}, {"resp-r2", "assistant", "Working"}, {"resp-r2:2", "assistant", " on it"}}},
	} {
		snap, err := buildSnapshot(context.Background(), store, "th", 99, c.maxBytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := snapshotOf(t, snap.messages); !slices.Equal(got, c.want) {
			t.Errorf("%d bytes: %v, want %v", c.maxBytes, got, c.want)
		}
	}
}

// A run that answered in two responses is two assistant messages, as the
// live stream made them.
func TestBuildSnapshotKeepsResponsesApart(t *testing.T) {
	block := func(seq int64, resp, text string) instanceai.StoredEvent {
		r := row(seq, "r1", instanceai.TypeTextBlock, &instanceai.Text{Text: text})
		r.Event.ResponseID = resp
		return r
	}
	rows := []instanceai.StoredEvent{
		row(1, "r1", instanceai.TypeRunStart, &instanceai.RunStart{MessageID: "u1"}),
		block(2, "a", "Here it is for you."),
		block(3, "b", "Done: all good."),
		row(4, "r1", instanceai.TypeRunFinish, &instanceai.RunFinish{Status: instanceai.RunCompleted}),
	}
	got := snapshotOf(t, snapshotAt(t, logStore(t, nil, rows), 4))
	if want := []msg{{"a", "assistant", "Here it is for you."}, {"b", "assistant", "Done: all good."}}; !slices.Equal(got, want) {
		t.Fatalf("snapshot %v, want %v", got, want)
	}
}
