package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"time"
)

// ErrNotFound is returned by stores for a thread (or other record) that does
// not exist.
var ErrNotFound = errors.New("not found")

// StoredEvent is one row of a thread's durable log.
type StoredEvent struct {
	Seq   int64
	Event Event
	// Data is the event's JSON as the log holds it, when the log returns
	// it (every built-in store does): replay sends these bytes instead of
	// encoding the event again.
	Data json.RawMessage
}

// threadIDPattern is the thread id rule every surface applies.
var threadIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// ThreadIDRule says the rule in words, for error messages.
const ThreadIDRule = "must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit"

// ValidThreadID reports whether id follows the thread id rule. Thread ids
// appear in URLs and log lines, so the rule keeps them plain.
func ValidThreadID(id string) bool { return threadIDPattern.MatchString(id) }

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
	// AppendEncoded is Append for events the caller has already encoded:
	// the writer encodes each event once, for the log and for the live
	// frame alike. data[i] is the JSON encoding of events[i]; the log may
	// keep the slices.
	AppendEncoded(ctx context.Context, threadID string, events []Event, data [][]byte) (firstSeq int64, err error)
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
	MessageStore
	ConfirmationStore
	RunIndex
	RunClaims
	// Migrate applies the embedded schema migrations.
	Migrate(ctx context.Context) error
	Close() error
}

// ErrAlreadyAnswered is returned when a confirmation was answered before.
var ErrAlreadyAnswered = errors.New("confirmation was already answered")

// Message is a user message, stored when it is sent. Assistant messages are
// not stored: they are folded from the event log.
type Message struct {
	ID        string
	ThreadID  string
	RunID     string
	Role      string // "user"
	Content   string
	CreatedAt time.Time
}

// MessageStore keeps user messages.
type MessageStore interface {
	AddMessage(ctx context.Context, m Message) error
	// ListMessages returns the thread's messages, oldest first.
	ListMessages(ctx context.Context, threadID string) ([]Message, error)
}

// Confirmation statuses.
const (
	ConfirmationPending  = "pending"
	ConfirmationApproved = "approved"
	ConfirmationDenied   = "denied"
)

// Confirmation is a stored confirmation-request and its answer.
type Confirmation struct {
	RequestID  string
	ThreadID   string
	RunID      string
	AgentID    string
	ToolCallID string
	OwnerID    string
	// Request is the confirmation-request payload as sent.
	Request json.RawMessage
	Status  string
	// Answer is the answer body as received (JSON), empty while pending.
	Answer     json.RawMessage
	CreatedAt  time.Time
	AnsweredAt time.Time
}

// ConfirmationStore keeps confirmation requests so they survive a restart.
type ConfirmationStore interface {
	AddConfirmation(ctx context.Context, c Confirmation) error
	// GetConfirmation returns ErrNotFound for an unknown request id.
	GetConfirmation(ctx context.Context, requestID string) (Confirmation, error)
	// AnswerConfirmation moves a pending confirmation to status with answer,
	// atomically: a second answer gets ErrAlreadyAnswered.
	AnswerConfirmation(ctx context.Context, requestID, status string, answer json.RawMessage) error
	// PendingConfirmations returns the thread's pending confirmations, oldest first.
	PendingConfirmations(ctx context.Context, threadID string) ([]Confirmation, error)
}

// RunRef names a run in a thread's log.
type RunRef struct {
	ThreadID string
	RunID    string
}

// RunIndex answers questions about runs from the log.
type RunIndex interface {
	// UnfinishedRuns returns every run with a run-start and no run-finish,
	// across all threads.
	UnfinishedRuns(ctx context.Context) ([]RunRef, error)
	// RunEvents returns the stored events of one run, in seq order.
	RunEvents(ctx context.Context, threadID, runID string) ([]StoredEvent, error)
}
