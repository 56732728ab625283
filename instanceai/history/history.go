// Package history reads a thread's conversation (its stored user messages
// and one assistant message per run) a window at a time, in bounded
// memory: the list of messages is built from the messages' heads and one
// pass over the log's rows' sizes, without contents; only the messages of
// the window are then read whole and only their runs' stretch of the log
// folded, in pages bounded in bytes where they are read
// (instanceai.PageReader). A long thread's history costs a request what
// its window holds, not what the thread holds, in memory and in what the
// store reads. The native /messages, the AG-UI rejoin snapshot, CopilotKit's
// connect, the console and the LLM agents' conversation read it so.
package history

import (
	"context"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// DefaultMaxBytes bounds what one window holds of a thread's messages
// (see Window): a few MB, far more than a screen of chat, far less than
// what a thread of long tool outputs or pasted documents may hold.
const DefaultMaxBytes = 4 << 20

// Store is what the history is read from: a thread's log a page at a time
// (instanceai.PageReader) and its user messages. The surfaces read it
// through their instanceai.Core.
type Store interface {
	instanceai.PageReader
	MessageHeads(ctx context.Context, threadID string) ([]instanceai.Message, error)
	MessagesByID(ctx context.Context, threadID string, ids []string) ([]instanceai.Message, error)
}

// Entry is one message of the conversation, as a head: a stored user
// message without its content, or the assistant message of a run.
type Entry struct {
	// User is the user message's head (Content empty), nil for an
	// assistant message.
	User *instanceai.Message
	// RunID is the assistant message's run (a user message's run is in
	// User.RunID).
	RunID string
	// Size is the message's bytes: a user message's content, a run's
	// stored events (what its folded text and tree are made from).
	Size int
}

// Index is the conversation's list of messages up to a cursor.
type Index struct {
	Entries []Entry
	// runStart is the seq of each run's run-start: a fold of some runs
	// starts reading the log at the first of theirs.
	runStart map[string]int64
	// runEnd is the seq of each run's last row up to the cursor: a fold
	// of some runs reads the log up to the last of theirs, not to the
	// cursor, so an older window does not read the newer runs.
	runEnd map[string]int64
	// runs are the runs in the order they started.
	runs    []string
	through int64
}

// Load lists the thread's conversation as of the log's seq through: each
// stored user message, followed by the assistant message of its run once
// the run has started, then the assistant messages of runs no stored
// user message names, in the order they started.
func Load(ctx context.Context, store Store, threadID string, through int64) (*Index, error) {
	heads, err := store.MessageHeads(ctx, threadID)
	if err != nil {
		return nil, err
	}
	ix := &Index{runStart: map[string]int64{}, runEnd: map[string]int64{}, through: through}
	size := map[string]int{}
	// The rows' sizes alone: what a run holds is all the list needs, and
	// reading the rows' bytes here would read the whole thread.
	err = scan(ctx, store, threadID, 0, through, true, func(r *instanceai.StoredRow) error {
		if r.RunID == "" {
			return nil
		}
		if r.Type == instanceai.TypeRunStart {
			if _, ok := ix.runStart[r.RunID]; !ok {
				ix.runStart[r.RunID] = r.Seq
				ix.runs = append(ix.runs, r.RunID)
			}
		}
		size[r.RunID] += len(r.Data) + r.Size
		ix.runEnd[r.RunID] = r.Seq
		return nil
	})
	if err != nil {
		return nil, err
	}
	placed := map[string]bool{}
	for i := range heads {
		h := &heads[i]
		ix.Entries = append(ix.Entries, Entry{User: h, Size: h.Size})
		if _, ok := ix.runStart[h.RunID]; ok && !placed[h.RunID] {
			placed[h.RunID] = true
			ix.Entries = append(ix.Entries, Entry{RunID: h.RunID, Size: size[h.RunID]})
		}
	}
	for _, id := range ix.runs {
		if !placed[id] {
			ix.Entries = append(ix.Entries, Entry{RunID: id, Size: size[id]})
		}
	}
	return ix, nil
}

// Window returns the start of the newest messages before end: at most
// limit of them (limit <= 0: no such bound) and, counted from the newest,
// as many as fit in maxBytes (maxBytes <= 0: no such bound), but always
// the newest one, however large.
func (ix *Index) Window(end, limit, maxBytes int) (start int) {
	end = min(max(end, 0), len(ix.Entries))
	total := 0
	for start = end; start > 0; start-- {
		n := end - start
		size := ix.Entries[start-1].Size
		if n > 0 && ((limit > 0 && n >= limit) || (maxBytes > 0 && total+size > maxBytes)) {
			break
		}
		total += size
	}
	return start
}

// Messages is what a window holds, read whole.
type Messages struct {
	// Users are the user messages of the window, by id.
	Users map[string]instanceai.Message
	// Runs are the window's runs folded from their run-start up to the
	// index's cursor.
	Runs *agenttree.Runs
}

// Read reads the user messages of entries whole and folds their runs.
func (ix *Index) Read(ctx context.Context, store Store, threadID string, entries []Entry) (*Messages, error) {
	out := &Messages{Runs: &agenttree.Runs{}}
	var err error
	out.Users, err = ix.read(ctx, store, threadID, entries, out.Runs.Apply)
	return out, err
}

// ReadEvents reads the user messages of entries whole and their runs'
// events, by run, in log order.
func (ix *Index) ReadEvents(ctx context.Context, store Store, threadID string, entries []Entry) (map[string]instanceai.Message, map[string][]instanceai.Event, error) {
	runs := map[string][]instanceai.Event{}
	users, err := ix.read(ctx, store, threadID, entries, func(ev instanceai.Event) { runs[ev.RunID] = append(runs[ev.RunID], ev) })
	return users, runs, err
}

// read reads the user messages of entries and hands each event of their
// runs to apply.
func (ix *Index) read(ctx context.Context, store Store, threadID string, entries []Entry, apply func(instanceai.Event)) (map[string]instanceai.Message, error) {
	var ids []string
	runs := map[string]bool{}
	from, to := int64(-1), int64(0)
	for _, e := range entries {
		if e.User != nil {
			ids = append(ids, e.User.ID)
			continue
		}
		runs[e.RunID] = true
		if s := ix.runStart[e.RunID]; from < 0 || s < from {
			from = s
		}
		to = max(to, ix.runEnd[e.RunID])
	}
	users := map[string]instanceai.Message{}
	if len(ids) > 0 {
		got, err := store.MessagesByID(ctx, threadID, ids)
		if err != nil {
			return nil, err
		}
		for _, m := range got {
			users[m.ID] = m
		}
	}
	if len(runs) == 0 {
		return users, nil
	}
	err := scan(ctx, store, threadID, from-1, to, false, func(r *instanceai.StoredRow) error {
		if !runs[r.RunID] {
			return nil
		}
		var ev instanceai.Event
		if err := ev.UnmarshalJSON(r.Data); err != nil {
			return err
		}
		apply(ev)
		return nil
	})
	return users, err
}

// RunRows returns the stored events of one run, from its run-start up to
// the index's cursor.
func (ix *Index) RunRows(ctx context.Context, store Store, threadID, runID string) ([]instanceai.StoredEvent, error) {
	var out []instanceai.StoredEvent
	err := scan(ctx, store, threadID, ix.runStart[runID]-1, ix.runEnd[runID], false, func(r *instanceai.StoredRow) error {
		if r.RunID != runID {
			return nil
		}
		row := instanceai.StoredEvent{Seq: r.Seq, Data: r.Data}
		if err := row.Event.UnmarshalJSON(r.Data); err != nil {
			return err
		}
		out = append(out, row)
		return nil
	})
	return out, err
}

// Runs returns the runs of the index in the order they started.
func (ix *Index) Runs() []string { return ix.runs }

// RunStart is the seq of a run's run-start, 0 when the index has none.
func (ix *Index) RunStart(runID string) int64 { return ix.runStart[runID] }

// LatestRun is the run that started last, "" for none.
func (ix *Index) LatestRun() string {
	var id string
	var at int64
	for run, seq := range ix.runStart {
		if seq > at {
			id, at = run, seq
		}
	}
	return id
}

// Pages of the scans: sizesPage rows of sizes (a few dozen bytes each),
// or rows with their bytes up to instanceai.ReplayPageBytes, of at most
// bytesPage rows.
const (
	sizesPage = 1000
	bytesPage = 1000
)

// scan calls fn with each row of the log after after up to through, in
// pages read through the log's ReadPage: with sizesOnly, the rows' sizes
// without their bytes; otherwise the rows whole, in pages bounded in
// bytes. A page asks for no row past through (seqs are contiguous), so
// the scan reads nothing of the log beyond it.
func scan(ctx context.Context, store Store, threadID string, after, through int64, sizesOnly bool, fn func(*instanceai.StoredRow) error) error {
	for {
		left := through - max(after, 0) // the most rows up to through
		if left <= 0 {
			return nil
		}
		q := instanceai.PageQuery{After: after, Limit: int(min(left, bytesPage)), MaxBytes: instanceai.ReplayPageBytes}
		if sizesOnly {
			q = instanceai.PageQuery{After: after, Limit: int(min(left, sizesPage)), SizesOnly: true}
		}
		rows, err := store.ReadPage(ctx, threadID, q)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		for i := range rows {
			if rows[i].Seq > through {
				return nil
			}
			if err := fn(&rows[i]); err != nil {
				return err
			}
			after = rows[i].Seq
		}
	}
}
