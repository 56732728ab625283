package instanceai

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by stores for a thread (or other record) that does
// not exist.
var ErrNotFound = errors.New("not found")

// StoredEvent is one row of a thread's durable log.
type StoredEvent struct {
	Seq   int64
	Event Event
}

// Thread is a conversation: the unit of ordering and replay.
type Thread struct {
	ID        string
	OwnerID   string
	Title     string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// EventLog is the durable, per-thread ordered log. Seqs are contiguous per
// thread, start at 1 and are assigned inside the append's transaction.
type EventLog interface {
	// Append stores events in one transaction (one multi-row insert) and
	// returns the seq of the first; the rest follow contiguously. The thread
	// must exist (ErrNotFound otherwise).
	Append(ctx context.Context, threadID string, events []Event) (firstSeq int64, err error)
	// ReadAfter returns up to limit events with seq > after, in seq order.
	// limit <= 0 means no limit.
	ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]StoredEvent, error)
	// NextSeq returns MAX(seq)+1 of the thread's log (1 when empty).
	NextSeq(ctx context.Context, threadID string) (int64, error)
}

// ThreadStore keeps threads with their owner and title.
type ThreadStore interface {
	// EnsureThread creates the thread if it does not exist and returns the
	// stored record; created reports whether this call made it.
	EnsureThread(ctx context.Context, t Thread) (stored Thread, created bool, err error)
	GetThread(ctx context.Context, id string) (Thread, error)
	// ListThreads returns the owner's threads, newest first.
	ListThreads(ctx context.Context, ownerID string, limit, offset int) ([]Thread, error)
	RenameThread(ctx context.Context, id, title string) error
	// DeleteThread removes the thread and, with it, its log.
	DeleteThread(ctx context.Context, id string) error
}

// Store is everything the core needs from a storage backend.
type Store interface {
	EventLog
	ThreadStore
	// Migrate applies the embedded schema migrations.
	Migrate(ctx context.Context) error
	Close() error
}
