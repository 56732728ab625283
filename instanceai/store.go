package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrNotFound is returned by stores for a thread (or other record) that does
// not exist.
var ErrNotFound = errors.New("not found")

// ErrClosed is matched (errors.Is) by every call to a store once its Close
// has returned.
var ErrClosed = errors.New("store is closed")

// ErrStorageUnavailable is matched (errors.Is) by every store call that
// failed because the store could not reach its database (a refused or cut
// connection, a server shutting down or out of connections), rather than
// for a fault of the call or of the code: a caller may retry it later.
// Each store knows its driver's errors and marks them so; nothing above
// the stores reads a driver's error.
var ErrStorageUnavailable = errors.New("storage is unavailable")

// StoredEvent is one row of a thread's durable log.
type StoredEvent struct {
	Seq   int64
	Event Event
	// Data is the event's JSON as the log holds it, when the log returns
	// it (every built-in store does): replay sends these bytes instead of
	// encoding the event again.
	Data json.RawMessage
}

// StoredRow is a stored event as its row holds it, not decoded: its seq,
// its type (kept beside the bytes by every built-in log) and its bytes. A
// native replay sends the bytes as they are and needs no more than the
// type (for channels), so decoding each row into an Event would be most of
// its cost.
type StoredRow struct {
	Seq  int64
	Type EventType
	// RunID is the event's run (kept beside the bytes by every built-in
	// log), so that a replay knows which runs it resumes without decoding.
	RunID string
	Data  json.RawMessage
	// Size is the row's bytes when a light read (PartReader) or a page of
	// sizes (PageQuery.SizesOnly) left Data out; 0 otherwise.
	Size int
}

// RowReader is the part of EventLog that reads rows without decoding
// them. ReadRowsAfter follows ReadAfter's contract (order, limit,
// eviction, ErrNotFound) and returns the same seqs and bytes, and stops
// early at a byte budget: with maxBytes > 0 it returns the rows up to and
// including the first whose bytes bring the page's total to maxBytes or
// more, so a page holds less than maxBytes plus one row, and never nothing
// when a row follows. Feeds read the log through it. Every built-in log
// cuts the page where it reads it, as PageReader promises, so a page costs
// what it holds.
type RowReader interface {
	ReadRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes int) ([]StoredRow, error)
}

// PartReader is implemented by a log that can leave a large row's bytes
// out of a page and read them in parts, so that a connection replaying a
// log of large events never holds one whole (see Feed.SkipDecode).
type PartReader interface {
	// ReadLightRowsAfter is ReadRowsAfter, except that a row of more
	// than large bytes comes without its Data, with its Size.
	ReadLightRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes, large int) ([]StoredRow, error)
	// ReadRowPart returns n bytes of the data of row seq from byte off
	// (fewer at its end, none past it). A missing row is ErrNotFound.
	ReadRowPart(ctx context.Context, threadID string, seq int64, off, n int) ([]byte, error)
}

// PageQuery names a page of a thread's log for a PageReader.
type PageQuery struct {
	// After and Limit select the rows ReadAfter(After, Limit) returns.
	After int64
	Limit int
	// MaxBytes, when > 0, cuts them by RowReader's rule: the rows up to
	// and including the first whose bytes bring the page's total to
	// MaxBytes or more. A row counts its bytes whether or not it comes
	// with them.
	MaxBytes int
	// SizesOnly leaves every row's bytes out: each comes with its seq,
	// type, run and Size alone, as a light row does (see PartReader).
	SizesOnly bool
}

// PageReader is the part of EventLog that keeps a page's byte budget
// where it reads the rows, not after: what it reads for a page is the
// page. ReadPage returns the rows ReadRowsAfter(q.After, q.Limit,
// q.MaxBytes) returns (the same seqs, types, runs and bytes, in order,
// never none when a row follows; ReadAfter's eviction and ErrNotFound
// rules), each row's bytes left out when q.SizesOnly; and it reads no row
// past the page's last, nor the bytes of a row it leaves out. A database
// server works the budget out over the rows' sizes, which it reads from
// each value's header, and sends nothing past the page; a log that reads
// in the process stops at the page's last row, where a RowReader alone
// could read up to limit rows to return a page the budget ends after a few.
//
// Pages bounded by bytes read this way cost what they return, whatever the
// size of the rows; a reader that needs to know the sizes of many rows
// (a thread's history, to choose what fits in a window) reads them with
// SizesOnly, which costs a few dozen bytes a row however large the row.
type PageReader interface {
	ReadPage(ctx context.Context, threadID string, q PageQuery) ([]StoredRow, error)
}

// WithinBytes returns how many of rows, of the sizes size(i) gives, a page
// of maxBytes holds by RowReader's rule (all of them when maxBytes <= 0).
func WithinBytes(n, maxBytes int, size func(i int) int) int {
	if maxBytes <= 0 {
		return n
	}
	total := 0
	for i := range n {
		if total >= maxBytes {
			return i
		}
		total += size(i)
	}
	return n
}

// ErrStaleFence is matched (errors.Is) by every write refused because the
// fencing token it carries is no longer current: another instance took the
// claim it names, or the claim was released (see RunClaims).
var ErrStaleFence = errors.New("fencing token is no longer current")

// StaleFenceError is a write the store refused for stale fencing tokens.
// It matches ErrStaleFence.
type StaleFenceError struct {
	// Tokens are the distinct tokens of the write that no claim holds, in
	// the order the write gave them.
	Tokens []int64
}

func (e *StaleFenceError) Error() string {
	ts := make([]string, len(e.Tokens))
	for i, t := range e.Tokens {
		ts[i] = strconv.FormatInt(t, 10)
	}
	return fmt.Sprintf("fencing token %s no longer current: another instance took the claim, or it was released",
		strings.Join(ts, ", "))
}

// Is makes the error match ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// FencedAppender is the part of EventLog whose appends are fenced with the
// tokens of RunClaims and AgentClaims. The writer appends through it when
// the run registry's claims are the log's (see Writer.useFences).
//
// AppendFenced is AppendEncoded, with fences[i] the token of the claim
// under which events[i] is written: 0 for an event that no claim covers
// (a rename's thread-title-updated, say). In the same transaction as the
// append, the store looks for each distinct non-zero token among the
// thread's claim rows (its active run's and its background agents'): if
// any is held by none of them, the append stores nothing, takes no seq,
// and returns a *StaleFenceError naming each such token. The check and the
// append are one step against the claims: no claim can change between
// them, so an append that succeeded did so while every token it carried
// was current, and one that a TakeRun overtook is refused. A missing
// thread or another owner's is ErrNotFound, whatever the tokens. A fences
// slice whose length is not the events' is an error and stores nothing.
// With no non-zero token, AppendFenced is AppendEncoded.
//
// A take waits for the append under the token that is in flight. Appends
// under one token are expected from one appender at a time, as the
// writer's drain of a thread makes them: on PostgreSQL, appends under one
// token that overlap without end could keep a take waiting as long, since
// a row's shared lock lets new holders in while a writer waits for it.
type FencedAppender interface {
	AppendFenced(ctx context.Context, threadID string, events []Event, data [][]byte, fences []int64) (firstSeq int64, err error)
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
	ID      string
	OwnerID string
	Title   string
	// Archived threads leave their owner's thread list unless it asks for
	// them; nothing else about them changes.
	Archived  bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ThreadQuery selects a page of an owner's threads.
type ThreadQuery struct {
	OwnerID string
	// Limit <= 0 means no limit.
	Limit, Offset int
	// IncludeArchived lists archived threads too.
	IncludeArchived bool
}

// EventLog is the durable, per-thread ordered log. Every built-in store
// (storage/sqlite, storage/postgres, storage/memory) keeps these promises,
// and the contract suite storage/storagetest checks each of them:
//
// Concurrency. Every method may be called from any number of goroutines at
// once, for the same thread or for different ones; with PostgreSQL, also
// from several processes on one database. Appends to one thread are
// serialised by the store; appends to different threads are independent,
// each thread counting its own seqs, though a backend may still run them
// one at a time (SQLite has one writer, memory one lock).
//
// Seqs. A thread's seqs start at 1 and are contiguous. Each append takes
// the block of seqs right after the previous committed append's, inside its
// own transaction, so seq order is commit order: a reader never sees a seq
// before every smaller one has committed, and an append that has returned
// is visible, with everything before it, to every later read. A deleted and
// recreated thread starts again at 1.
//
// Failure. An append that returns an error, its ctx having ended or not,
// stored none of its events and took no seqs: the next append continues
// where the last successful one ended. (A database connection lost during
// COMMIT is the exception every database has: the commit may have happened
// without the store learning of it.) The writer retries a failed append,
// except one that failed with ErrNotFound, or with ErrStaleFence (see
// FencedAppender): the runs of such a batch (or the runs and agents of the
// stale tokens) are stopped, and nothing more of them is written.
//
// Ownership. An append stores events that carry a user only in a thread
// that user owns; another owner's thread refuses them as a missing one
// would (see AppendEncoded).
//
// Reading. ReadAfter returns the events with seq > after, in ascending and
// contiguous seq order, at most limit of them (limit <= 0: all). A negative
// after reads from the start; an after at or past the end gives no events
// and no error. Paging with after set to the last seq returned reads every
// event exactly once. A bounded log (storage/memory) evicts its oldest
// events: a read then starts at the oldest one kept.
//
// After Store.Close, every method fails with an error matching ErrClosed;
// none panics. A call that failed because the database could not be reached
// matches ErrStorageUnavailable.
type EventLog interface {
	// Append encodes events as JSON and stores them as AppendEncoded does.
	// With no events it stores nothing and returns the seq the next
	// append would take.
	Append(ctx context.Context, threadID string, events []Event) (firstSeq int64, err error)
	// AppendEncoded stores events in one transaction and returns the seq of
	// the first; the rest follow contiguously. data[i] is the JSON encoding
	// of events[i], made once by the caller for the log and the live frame
	// alike; the log may keep the slices, so the caller must not change
	// them. A length mismatch is an error and stores nothing. The thread
	// must exist (ErrNotFound otherwise). Events that carry a UserID must
	// all carry the thread owner's: a batch with another user's event is
	// ErrNotFound too and stores nothing, so that a run that outlived its
	// thread's deletion cannot write into a thread another user created
	// with the same id (events without a UserID are not checked). With no
	// events it stores nothing and returns the seq the next append would
	// take.
	AppendEncoded(ctx context.Context, threadID string, events []Event, data [][]byte) (firstSeq int64, err error)
	// ReadAfter returns up to limit events with seq > after, in seq order,
	// each with the bytes it was stored as. limit <= 0 means no limit. A
	// missing thread is ErrNotFound.
	ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]StoredEvent, error)
	// NextSeq returns one more than the highest seq a reader can see (1
	// when the log is empty; a bounded log counts its evicted events too).
	// A missing thread is ErrNotFound.
	NextSeq(ctx context.Context, threadID string) (int64, error)
	FencedAppender
	RowReader
	PageReader
}

// ThreadStore keeps threads with their owner and title.
type ThreadStore interface {
	// EnsureThread creates the thread if it does not exist and returns the
	// stored record; created reports whether this call made it.
	EnsureThread(ctx context.Context, t Thread) (stored Thread, created bool, err error)
	GetThread(ctx context.Context, id string) (Thread, error)
	// ListThreads returns a page of the owner's threads, newest first
	// (created_at, then id, descending, so that pages never overlap).
	ListThreads(ctx context.Context, q ThreadQuery) ([]Thread, error)
	RenameThread(ctx context.Context, id, title string) error
	// ArchiveThread sets the thread's archived flag and its updated time.
	ArchiveThread(ctx context.Context, id string, archived bool) error
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
	AgentClaims
	// Migrate applies the embedded schema migrations. It is idempotent, and
	// several processes may run it at once on one database.
	Migrate(ctx context.Context) error
	// Close releases the store. It is idempotent: a second call does
	// nothing and returns nil. Once Close has returned, every other method
	// fails with an error that matches ErrClosed, and none panics. Close does not wait for
	// calls in flight: each of them either completes, as if it had come
	// first, or fails; an append is never left half done.
	Close() error
}

// Prober is a Store that a readiness probe can question: Probe runs one
// cheap query and returns the versions of the embedded schema migrations
// the database lacks (none once Migrate has run). An error means the
// database did not answer; the probe bounds the call with its context.
type Prober interface {
	Probe(ctx context.Context) (pending []int64, err error)
}

// ErrAlreadyAnswered is returned when a confirmation was answered before.
var ErrAlreadyAnswered = errors.New("confirmation was already answered")

// Message is a user message, stored when it is sent. Assistant messages are
// not stored: they are folded from the event log.
type Message struct {
	ID       string
	ThreadID string
	RunID    string
	Role     string // "user"
	Content  string
	// Attachments are the files sent with the message (none for a message
	// stored before they were kept).
	Attachments []Attachment
	CreatedAt   time.Time
	// Size is the content's length in bytes, with its attachments' JSON,
	// set by MessageHeads (which leaves Content and Attachments empty).
	Size int
}

// MessageStore keeps user messages.
type MessageStore interface {
	AddMessage(ctx context.Context, m Message) error
	// ListMessages returns the thread's messages, oldest first.
	ListMessages(ctx context.Context, threadID string) ([]Message, error)
	// MessageHeads returns what ListMessages does without the contents:
	// Content is empty and Size is its length in bytes. A view of a long
	// thread picks its messages from them, then reads those alone.
	MessageHeads(ctx context.Context, threadID string) ([]Message, error)
	// MessagesByID returns the thread's messages of the ids (those that
	// exist), whole, oldest first as ListMessages orders them.
	MessagesByID(ctx context.Context, threadID string, ids []string) ([]Message, error)
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
	// Fence, when not 0, is the fencing token of the claim the request is
	// made under (see RunClaims): AddConfirmation stores nothing and
	// returns a *StaleFenceError unless a claim row of the thread holds
	// it. It is checked, not stored: read back, it is 0.
	Fence int64
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
	// AddConfirmation stores a pending request. The thread must exist
	// (ErrNotFound otherwise); a request with a stale Fence is refused.
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
