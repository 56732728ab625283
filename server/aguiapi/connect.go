package aguiapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/history"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpmetrics"
	"github.com/threadline/threadline/ssestream"
)

// ConnectOptions adapt Connect to a surface.
type ConnectOptions struct {
	// Dialect, as RunOptions.Dialect.
	Dialect func() func([]agui.Event) []agui.Event
	// After, when positive, is the seq of the last event the client holds:
	// the id of the last frame it read from a run or connect stream of
	// this thread. Runs it holds whole are left out; a run it holds in
	// part goes on as the rejoin continues one (RUN_STARTED, the
	// conversation as of the cursor as MESSAGES_SNAPSHOT, what was open
	// at the cursor opened again, then the rest), and the runs that
	// started later follow. A cursor beyond the log's end (a thread
	// deleted and made again) is no cursor: the thread is replayed.
	After int64
}

// Connect streams the thread's conversation as a client that lost it
// (a reloaded page) reads it back run by run, as CopilotKit's runtime
// replays a thread: each finished run as its own AG-UI run, its
// RUN_STARTED carrying the run's user message as input (so the client
// shows it again), its text and tool arguments whole; a failed run before
// the last restated as finished (a client's verifier refuses anything
// after a RUN_ERROR); then the run under way from its start, followed live
// on any instance until it ends. The runs are the newest that fit in the
// history bound. An unknown thread, another user's, or one without a run
// is an empty stream.
func (h *Handler) Connect(w http.ResponseWriter, r *http.Request, threadID string, opts ConnectOptions) {
	ctx := r.Context()
	s, err := ssestream.Open(w, ssestream.Options{WriteTimeout: h.cfg.WriteTimeout})
	if err != nil {
		return
	}
	defer s.Flush()
	if !instanceai.ValidThreadID(threadID) {
		return
	}
	if _, err := h.core.Thread(ctx, threadID, auth.UserFrom(ctx)); err != nil {
		return
	}
	next, err := h.core.NextSeq(ctx, threadID)
	if err != nil {
		return
	}
	ix, err := history.Load(ctx, h.core, threadID, next-1)
	if err != nil {
		return
	}
	entries := ix.Entries[ix.Window(len(ix.Entries), 0, h.cfg.HistoryMaxBytes):]
	users, runs, err := ix.ReadEvents(ctx, h.core, threadID, entries)
	if err != nil {
		return
	}
	inputs := map[string]*agui.RunAgentInput{}
	var order []string
	var user *agui.Message
	for _, e := range entries {
		if e.User != nil {
			u := users[e.User.ID]
			user = &agui.Message{ID: u.ID, Role: agui.RoleUser, Content: agui.PartsContent(u.Content, u.Attachments)}
			continue
		}
		in := &agui.RunAgentInput{ThreadID: threadID, RunID: e.RunID}
		if user != nil {
			in.Messages = []agui.Message{*user}
			user = nil
		}
		inputs[e.RunID] = in
		order = append(order, e.RunID)
	}
	var dialect func([]agui.Event) []agui.Event
	if opts.Dialect != nil {
		dialect = opts.Dialect()
	}
	out := &writer{s: s, dialect: func(evs []agui.Event) []agui.Event {
		for _, ev := range evs {
			if rs, ok := ev.(*agui.RunStarted); ok && rs.Input == nil {
				rs.Input = inputs[rs.RunID]
			}
		}
		if dialect != nil {
			return dialect(evs)
		}
		return evs
	}}
	log := h.cfg.Logger.With("thread", threadID, "stream", "connect")
	head := next - 1
	if opts.After > 0 && opts.After <= head {
		var cont *rejoinTarget
		if order, cont, err = h.afterCursor(ctx, ix, threadID, order, opts.After, head); err != nil {
			return
		}
		if cont != nil {
			opening, m, cursor, err := rejoinStart(cont)
			if err != nil {
				return
			}
			if m == nil && len(order) > 0 {
				opening = restateFailure(opening, threadID, cont.runID)
			}
			if out.write(cursor, opening) != nil || s.Flush() != nil {
				return
			}
			if m != nil {
				h.follow(ctx, out, threadID, cont.runID, cursor, m, log, nil)
				return
			}
		}
	}
	var state json.RawMessage // the shared state after the runs restated so far
	replayed := httpmetrics.ReplayCounter(ctx)
	for i, runID := range order {
		evs := runs[runID]
		m := mapping.NewInstanceToAGUI(threadID, runID)
		mapped := mapping.FoldRun(m, runID, evs)
		if !m.Finished() && i == len(order)-1 {
			// The run under way: from its start, live until it ends.
			h.follow(ctx, out, threadID, runID, ix.RunStart(runID)-1, mapping.NewInstanceToAGUI(threadID, runID), log, nil)
			return
		}
		mapped = append(mapped, m.Close(nil)...)
		// History is restated, not streamed again: the run's state as one
		// STATE_SNAPSHOT (its text and tool arguments are whole already).
		mapped, state = mapping.CompactState(mapped, state)
		id := head // the last block's last frame: a cursor the next connect takes
		if i < len(order)-1 {
			mapped = restateFailure(mapped, threadID, runID)
			id = 0
		}
		if out.write(id, mapped) != nil || s.Flush() != nil {
			return
		}
		if replayed != nil {
			replayed(len(evs))
		}
	}
}

// afterCursor splits the runs of a connect at the client's cursor: order
// keeps the runs that started after it, and cont is the run that started
// at or before it and has events after it (nil when there is none), to be
// continued as a rejoin would.
func (h *Handler) afterCursor(ctx context.Context, ix *history.Index, threadID string, order []string, after, head int64) (
	later []string, cont *rejoinTarget, err error) {
	first := len(order)
	for i, id := range order {
		if ix.RunStart(id) > after {
			first = i
			break
		}
	}
	later = order[first:]
	if first == 0 {
		return later, nil, nil
	}
	runID := order[first-1]
	rows, err := ix.RunRows(ctx, h.core, threadID, runID)
	if err != nil || len(rows) == 0 {
		return later, nil, err
	}
	// A run that ended at or before the cursor is the client's whole; one
	// not over goes on even with nothing stored after the cursor (its
	// text may be streaming).
	ended := slices.ContainsFunc(rows, func(r instanceai.StoredEvent) bool { return r.Event.Type == instanceai.TypeRunFinish })
	if ended && rows[len(rows)-1].Seq <= after {
		return later, nil, nil
	}
	cont, err = h.newRejoinTarget(ctx, threadID, runID, after, head, rows)
	return later, cont, err
}

// restateFailure ends a failed run with RUN_FINISHED instead of RUN_ERROR,
// the error told as CUSTOM run_error before it, for a replay that goes on.
func restateFailure(evs []agui.Event, threadID, runID string) []agui.Event {
	n := len(evs)
	if n == 0 {
		return evs
	}
	e, ok := evs[n-1].(*agui.RunError)
	if !ok {
		return evs
	}
	raw, _ := json.Marshal(map[string]string{"message": e.Message, "code": e.Code})
	return append(evs[:n-1], &agui.Custom{Name: "run_error", Value: raw}, &agui.RunFinished{ThreadID: threadID, RunID: runID})
}
