// Package retention deletes threads that have been idle longer than a
// configured age, with every row that belongs to them, in small batches
// that never hold the store's writer for long.
//
// A thread is idle when its updated time is older than the cutoff: every
// append to its log stamps that time (so do a rename and an archive), so
// it is the time of its last event or change. A thread with work is never
// touched, however old: one with an active or suspended run (an
// active_runs row), a background agent at work (a background_agents row)
// or a pending confirmation. Stores check both conditions again in the
// transaction that deletes, so a thread that wakes up between the listing
// and the delete is left alone.
package retention

import (
	"context"
	"maps"
	"slices"
	"time"
)

// Tables whose rows a pruned thread takes with it, as Counts names them.
// The claim tables (active_runs, background_agents) hold no row of a
// prunable thread, by the idle condition. The builder's tables are keyed
// by owner and workflow, not by thread, and outlive every thread.
const (
	Threads       = "threads"
	Events        = "events"
	Messages      = "messages"
	Confirmations = "confirmations"
	Checkpoints   = "segment_checkpoints"
)

// Tables lists the tables Counts names, in the order reports print them.
var Tables = []string{Threads, Events, Messages, Confirmations, Checkpoints}

// Counts is a number of rows by table.
type Counts map[string]int64

// Add adds o's rows to c.
func (c Counts) Add(o Counts) {
	for k, v := range o {
		c[k] += v
	}
}

// Total is the number of rows of every table.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// Clone returns a copy of c.
func (c Counts) Clone() Counts {
	if c == nil {
		return Counts{}
	}
	return maps.Clone(c)
}

// Sorted returns c's tables in report order (Tables first, then others).
func (c Counts) Sorted() []string {
	var out []string
	for _, t := range Tables {
		if _, ok := c[t]; ok {
			out = append(out, t)
		}
	}
	var rest []string
	for t := range c {
		if !slices.Contains(Tables, t) {
			rest = append(rest, t)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// Candidate is an idle thread found by Store.IdleThreads.
type Candidate struct {
	ID string
	// Rows is how many rows the thread holds, its own included: what
	// deleting it costs.
	Rows int64
	// Events is how many of those are events.
	Events int64
}

// Size is how much the event log holds.
type Size struct {
	Events int64
	// Bytes is the space the log takes where the store can tell cheaply
	// (a table's or a file's size), 0 where it cannot.
	Bytes int64
}

// Store is a store whose idle threads can be pruned. Every built-in store
// implements it; storagetest checks each one.
type Store interface {
	// IdleThreads returns up to limit threads, of ids greater than after,
	// that are idle since before cutoff and have no work (see the package
	// comment), in id order.
	IdleThreads(ctx context.Context, cutoff time.Time, after string, limit int) ([]Candidate, error)
	// ThreadRows counts the rows the threads hold, by table, threads
	// included.
	ThreadRows(ctx context.Context, ids []string) (Counts, error)
	// TrimEvents deletes up to n of the oldest events of the thread, if it
	// is still idle since before cutoff and has no work, in one
	// transaction, and returns how many it deleted (0 otherwise). It
	// splits a thread too large for one transaction: what remains is
	// still a contiguous log, whose start a replay reports as evicted.
	TrimEvents(ctx context.Context, id string, cutoff time.Time, n int) (int64, error)
	// PruneThreads deletes those of the threads that are still idle since
	// before cutoff and have no work, with every row they hold, in one
	// transaction, and returns their ids and the rows deleted, by table.
	PruneThreads(ctx context.Context, ids []string, cutoff time.Time) ([]string, Counts, error)
	// LogSize reports how much the event log holds.
	LogSize(ctx context.Context) (Size, error)
}

// Locker is a Store that several processes share (PostgreSQL): the lock
// keeps their pruning passes from running at once.
type Locker interface {
	// TryPruneLock takes the store-wide prune lock if no process holds it;
	// ok is false when another one does. release gives it back (a lock of
	// a process that dies is released with its connection).
	TryPruneLock(ctx context.Context) (release func(), ok bool, err error)
}

// Capper is a Store that can cap the runs a thread keeps: the part of its
// log before its newest runs goes, oldest first, as a bounded store's
// window would let it go, so that a replay from before it gets the reset
// of evicted events and the rest of the log unchanged.
type Capper interface {
	// CrowdedThreads returns up to limit threads, of ids greater than
	// after, that hold more than keep runs, in id order.
	CrowdedThreads(ctx context.Context, keep int, after string, limit int) ([]string, error)
	// CapRuns deletes, in one transaction, up to maxRows of the oldest
	// events that precede the thread's keep newest runs (the run-start of
	// the oldest of them), and once none is left, the messages,
	// confirmations and checkpoints of the runs that started there. It
	// deletes nothing unless each of those runs is closed: a run-finish
	// stored, no claim row, no background agent at work, no pending
	// confirmation. It returns the rows deleted, by table; none when
	// there is nothing (more) to delete. Dry, it deletes nothing and
	// returns everything it would delete, in any number of transactions.
	CapRuns(ctx context.Context, id string, keep, maxRows int, dry bool) (Counts, error)
}
