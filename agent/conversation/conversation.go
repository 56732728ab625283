// Package conversation rebuilds a thread's conversation, as an LLM agent
// sends it to its model, from what storage holds: the user messages (the
// message store) and everything else folded from the event log with the
// same reducer the browser uses, so the model sees the conversation the
// person sees. It reads the thread as the history endpoints do
// (instanceai/history): the list of runs from the log's sizes, then only
// the runs it sends, in pages bounded in bytes, so a model call reads the
// runs it sends and not the whole thread.
package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/instanceai/history"
)

// MaxRuns bounds how many earlier runs Load returns (the most recent ones).
// Every model call resends the whole history, so an unbounded thread would
// sooner or later overflow the model's context window and make each call
// slower and dearer. Cutting at run boundaries keeps every assistant
// tool_calls message together with its tool messages, which OpenAI-style
// APIs require, and makes the history start with a user message.
const MaxRuns = 50

// NoResult is the content of the tool message Load makes up for a call that
// has no stored outcome: the run was cancelled or crashed before the tool
// finished, or the client never answered a call to one of its tools.
// OpenAI-style APIs reject an assistant tool_calls message whose calls are
// not all answered by tool messages.
const NoResult = "No result was recorded for this tool call: the run ended before the tool finished, or the client never ran it. Do not assume it succeeded."

// Store is what a conversation is read from: a thread's history window
// and where its log ends (any instanceai.Store, or the Core).
type Store interface {
	history.Store
	NextSeq(ctx context.Context, threadID string) (int64, error)
}

// Load returns the thread's conversation before the run currentRunID: for
// each earlier run (the last MaxRuns), its user message and the assistant
// side folded from the log (text, tool calls with their arguments, and
// their results as tool messages, in order). Reasoning, status updates,
// background agents and the server's error notices are left out: they are
// not part of what the model said. A result stored for a call of the
// previous run after that run finished (a client's frontend-tool result) is
// folded into that run. currentRunID "" (or an id not in the log) returns
// the whole thread.
func Load(ctx context.Context, store Store, threadID, currentRunID string) ([]instanceai.HistoryMessage, error) {
	runs, err := fold(ctx, store, threadID, currentRunID, false)
	if err != nil {
		return nil, err
	}
	var out []instanceai.HistoryMessage
	for _, r := range runs {
		out = append(out, r.messages(nil)...)
	}
	return out, nil
}

// LoadRun returns the conversation up to and including the run runID, for
// continuing that run (after a restart, once a pending confirmation is
// answered). The calls of the run's last assistant message that have no
// outcome yet are returned as open, and the history has no tool messages
// for them: the caller settles them and appends their tool messages. steps
// is how many assistant messages (model calls) the run has made.
func LoadRun(ctx context.Context, store Store, threadID, runID string) (history []instanceai.HistoryMessage, open []instanceai.HistoryToolCall, steps int, err error) {
	if runID == "" {
		return nil, nil, 0, errors.New("conversation: LoadRun needs a run id")
	}
	runs, err := fold(ctx, store, threadID, runID, true)
	if err != nil {
		return nil, nil, 0, err
	}
	for i, r := range runs {
		if i == len(runs)-1 && r.id == runID {
			msgs := r.messages(&open)
			for _, m := range msgs {
				if m.Role == instanceai.RoleAssistant {
					steps++
				}
			}
			history = append(history, msgs...)
			continue
		}
		history = append(history, r.messages(nil)...)
	}
	return history, open, steps, nil
}

// WithToolResult returns history with content as the result of the call
// toolCallID: it replaces the call's tool message, or adds one after the
// assistant message that made the call (keeping the call's position among
// its siblings' messages). It is for a client's tool result that the log
// may not hold yet when the run reads it: the result is written
// asynchronously just before the run starts. History without the call is
// returned unchanged.
func WithToolResult(history []instanceai.HistoryMessage, toolCallID, content string) []instanceai.HistoryMessage {
	for i := range history {
		if history[i].Role == instanceai.RoleTool && history[i].ToolCallID == toolCallID {
			out := slices.Clone(history)
			out[i].Content = content
			return out
		}
	}
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		if m.Role != instanceai.RoleAssistant || !slices.ContainsFunc(m.ToolCalls, func(c instanceai.HistoryToolCall) bool { return c.ID == toolCallID }) {
			continue
		}
		// Insert after the assistant message's existing tool messages.
		at := i + 1
		for at < len(history) && history[at].Role == instanceai.RoleTool {
			at++
		}
		return slices.Insert(slices.Clone(history), at,
			instanceai.HistoryMessage{Role: instanceai.RoleTool, ToolCallID: toolCallID, Content: content})
	}
	return history
}

// ResultText renders a stored tool result as tool message content: a JSON
// string as its text, anything else as compact JSON.
func ResultText(result json.RawMessage) string {
	if len(result) == 0 {
		return "null"
	}
	var s string
	if err := json.Unmarshal(result, &s); err == nil {
		return s
	}
	return string(result)
}

// ErrorText renders a tool's failure as tool message content.
func ErrorText(msg string) string { return "Error: " + msg }

// foldedRun is one run of the log, folded.
type foldedRun struct {
	id   string
	user string
	// attachments are the user message's files.
	attachments []instanceai.Attachment
	state       *agenttree.State
}

// fold reads the thread and folds each run before stopRunID (and that run
// too when include is set), keeping the last MaxRuns.
func fold(ctx context.Context, store Store, threadID, stopRunID string, include bool) ([]*foldedRun, error) {
	if store == nil {
		return nil, errors.New("conversation: no store")
	}
	next, err := store.NextSeq(ctx, threadID)
	if errors.Is(err, instanceai.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: read the thread's log: %w", err)
	}
	ix, err := history.Load(ctx, store, threadID, next-1)
	if errors.Is(err, instanceai.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: read the thread's messages: %w", err)
	}
	// The runs that started after the stop run are left out; the earlier
	// ones keep every event, those logged after the stop run's start too.
	runs := ix.Runs()
	if i := slices.Index(runs, stopRunID); stopRunID != "" && i >= 0 {
		if include {
			i++
		}
		runs = runs[:i]
	}
	runs = runs[max(len(runs)-MaxRuns, 0):]

	// Each run's first stored user message, and the run, are what is read.
	userOf := map[string]*instanceai.Message{}
	for _, e := range ix.Entries {
		if u := e.User; u != nil && u.Role == instanceai.RoleUser && userOf[u.RunID] == nil {
			userOf[u.RunID] = u
		}
	}
	var entries []history.Entry
	for _, id := range runs {
		if u := userOf[id]; u != nil {
			entries = append(entries, history.Entry{User: u})
		}
		entries = append(entries, history.Entry{RunID: id})
	}
	users, events, err := ix.ReadEvents(ctx, store, threadID, entries)
	if err != nil {
		return nil, fmt.Errorf("conversation: read the thread's runs: %w", err)
	}
	var folded agenttree.Runs
	for _, id := range runs {
		for _, ev := range events[id] {
			if ev.Type == instanceai.TypeError {
				// The server's notice of a failure, not the model's words.
				continue
			}
			folded.Apply(ev)
		}
	}
	order := make([]*foldedRun, 0, len(runs))
	for _, id := range runs {
		r := folded.Get(id)
		if r == nil {
			continue
		}
		var u instanceai.Message
		if head := userOf[id]; head != nil {
			u = users[head.ID]
		}
		order = append(order, &foldedRun{id: id, user: u.Content, attachments: u.Attachments, state: r.State})
	}
	return order, nil
}

// messages renders the run as a user message and the assistant turns of its
// orchestrator's timeline. With open set, calls of the last assistant turn
// that have no outcome are reported there instead of given NoResult.
func (r *foldedRun) messages(open *[]instanceai.HistoryToolCall) []instanceai.HistoryMessage {
	var out []instanceai.HistoryMessage
	if r.user != "" || len(r.attachments) > 0 {
		out = append(out, instanceai.HistoryMessage{Role: instanceai.RoleUser, Content: r.user, Attachments: r.attachments})
	}
	root := r.state.Tree()
	calls := map[string]*agenttree.ToolCallState{}
	for _, tc := range root.ToolCalls {
		calls[tc.ToolCallID] = tc
	}
	type turn struct {
		text  string
		calls []*agenttree.ToolCallState
	}
	var turns []turn
	cur := turn{}
	for _, e := range root.Timeline {
		switch e.Type {
		case agenttree.EntryText:
			if len(cur.calls) > 0 {
				// Text after tool calls is the model's next answer.
				turns = append(turns, cur)
				cur = turn{}
			}
			cur.text += e.Content
		case agenttree.EntryToolCall:
			if tc := calls[e.ToolCallID]; tc != nil && tc.ToolName != "" {
				cur.calls = append(cur.calls, tc)
			}
		}
	}
	if cur.text != "" || len(cur.calls) > 0 {
		turns = append(turns, cur)
	}
	for i, t := range turns {
		msg := instanceai.HistoryMessage{Role: instanceai.RoleAssistant, Content: t.text}
		for _, tc := range t.calls {
			args := tc.Args
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			msg.ToolCalls = append(msg.ToolCalls, instanceai.HistoryToolCall{ID: tc.ToolCallID, Name: tc.ToolName, Arguments: args})
		}
		out = append(out, msg)
		last := i == len(turns)-1
		for j, tc := range t.calls {
			var content string
			switch {
			case tc.Result != nil:
				content = ResultText(tc.Result)
			case tc.Error != nil:
				content = ErrorText(*tc.Error)
			case last && open != nil:
				*open = append(*open, msg.ToolCalls[j])
				continue
			default:
				content = NoResult
			}
			out = append(out, instanceai.HistoryMessage{Role: instanceai.RoleTool, ToolCallID: tc.ToolCallID, Content: content})
		}
	}
	return out
}
