// Package memory is the non-durable storage backend, for tests and demos.
//
// Each thread keeps a bounded window of its most recent events (by default
// 500 events and 2 MB of encoded JSON, whichever is hit first); older events
// are evicted first-in first-out. Seqs keep counting across evictions, so
// cursors stay valid: a reader simply no longer finds the evicted ones.
// Everything is lost when the process ends, and seqs restart at 1.
package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/records"
)

// Defaults of the per-thread window, as the native protocol specifies for
// memory mode.
const (
	DefaultMaxEvents = 500
	DefaultMaxBytes  = 2 << 20
)

// Option configures a Store.
type Option func(*Store)

// WithMaxEvents bounds the number of events kept per thread (n > 0).
func WithMaxEvents(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxEvents = n
		}
	}
}

// WithMaxBytes bounds the encoded JSON kept per thread (n > 0). The newest
// event is always kept, even when it alone is larger.
func WithMaxBytes(n int64) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxBytes = n
		}
	}
}

// Store is an in-memory instanceai.Store. The zero value is not usable; call
// New.
type Store struct {
	// claims lives beside the threads; a process-local store has no other
	// process to share it with.
	claims *instanceai.LocalClaims

	maxEvents int
	maxBytes  int64

	// One lock for everything: memory mode serves tests and demos, and the
	// critical sections are short because encoding and decoding happen
	// outside it.
	mu      sync.Mutex
	threads map[string]*thread
	// Message ids and confirmation request ids are unique across threads,
	// as the SQL backends' primary keys make them.
	messageIDs    map[string]string // message id → thread id
	confirmations map[string]*confirmation
	// added numbers confirmations in insertion order, which breaks ties
	// between equal timestamps.
	added int64
	// b holds the builder's projects and histories (see builder.go).
	b builderData
	// closed is set by Close; every call after it fails with errClosed, as
	// the SQL backends' calls fail on a closed pool.
	closed bool
}

// errClosed is what a Store's methods return after Close.
var errClosed = fmt.Errorf("memory: %w", instanceai.ErrClosed)

// thread is one thread and its window of events.
type thread struct {
	meta instanceai.Thread
	// lastSeq is the seq of the newest event ever appended.
	lastSeq int64
	// events holds the retained events, oldest first, with contiguous seqs
	// ending at lastSeq. Entries are never modified once stored, so readers
	// may use them after the lock is released.
	events []entry
	bytes  int64
	// runs indexes run boundaries by run id. It is kept apart from the
	// window, so a run whose run-start was evicted is still known.
	runs map[string]*runBounds
	// messages are in insertion order.
	messages []instanceai.Message
}

type entry struct {
	seq   int64
	typ   instanceai.EventType
	runID string
	data  []byte
}

// runBounds records whether a run's run-start and run-finish were appended.
type runBounds struct {
	startSeq int64 // seq of the first run-start, 0 when none yet
	finished bool
}

type confirmation struct {
	instanceai.Confirmation
	added int64
}

var (
	_ instanceai.Store = (*Store)(nil)
)

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{claims: instanceai.NewLocalClaims(), maxEvents: DefaultMaxEvents, maxBytes: DefaultMaxBytes, threads: map[string]*thread{},
		messageIDs: map[string]string{}, confirmations: map[string]*confirmation{}, b: newBuilderData()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Migrate does nothing: there is no schema.
func (s *Store) Migrate(context.Context) error { return s.checkOpen() }

// Probe implements instanceai.Prober: a memory store answers while it is
// open, and has no migrations.
func (s *Store) Probe(context.Context) ([]int64, error) { return nil, s.checkOpen() }

var _ instanceai.Prober = (*Store)(nil)

// Close drops the data; later calls fail with an error. Calls already
// holding the lock finish first. A second Close does nothing.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.threads, s.messageIDs, s.confirmations = nil, nil, nil
	s.b = builderData{}
	return nil
}

// lock takes the store's lock, unless the store is closed: then it returns
// errClosed, unlocked.
func (s *Store) lock() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// checkOpen returns errClosed after Close.
func (s *Store) checkOpen() error {
	if err := s.lock(); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

func notFound(op, id string) error {
	return fmt.Errorf("memory: %s thread %q: %w", op, id, instanceai.ErrNotFound)
}

// Append implements instanceai.EventLog. Events are stored encoded, as the
// SQL backends store them, so a caller that later mutates a payload cannot
// change the log, and the byte budget is measured on the real encoding.
func (s *Store) Append(ctx context.Context, threadID string, events []instanceai.Event) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, err)
	}
	data, err := records.EncodeEvents(events)
	if err != nil {
		return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, err)
	}
	return s.AppendEncoded(ctx, threadID, events, data)
}

// AppendEncoded implements instanceai.EventLog: the writer encodes each
// event once. The store keeps the slices.
func (s *Store) AppendEncoded(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte) (int64, error) {
	return s.append(ctx, threadID, events, data, nil)
}

// AppendFenced implements instanceai.FencedAppender: the tokens are
// checked against the claims under the store's lock, which every change
// of the claims takes too.
func (s *Store) AppendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	tokens, err := records.Fences(events, fences)
	if err != nil {
		return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, err)
	}
	return s.append(ctx, threadID, events, data, tokens)
}

// append stores events if the thread is their user's and claims of the
// thread hold every one of tokens.
func (s *Store) append(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, tokens []int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, err)
	}
	if err := records.CheckEncoded(events, data); err != nil {
		return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, err)
	}
	owner, err := records.EventsUser(events)
	if err != nil {
		return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, err)
	}
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	t := s.threads[threadID]
	if t == nil || (owner != "" && t.meta.OwnerID != owner) {
		return 0, notFound("append to", threadID)
	}
	if len(tokens) > 0 {
		if stale := s.claims.StaleFences(threadID, tokens); len(stale) > 0 {
			return 0, fmt.Errorf("memory: append to thread %q: %w", threadID, &instanceai.StaleFenceError{Tokens: stale})
		}
	}
	first := t.lastSeq + 1
	if len(events) == 0 {
		return first, nil
	}
	for i, b := range data {
		seq := first + int64(i)
		t.events = append(t.events, entry{seq: seq, typ: events[i].Type, runID: events[i].RunID, data: b})
		t.bytes += int64(len(b))
		t.noteRun(&events[i], seq)
	}
	t.lastSeq += int64(len(events))
	t.meta.UpdatedAt = now()
	s.evict(t)
	return first, nil
}

// evict drops the oldest events until the window fits, keeping at least the
// newest one.
func (s *Store) evict(t *thread) {
	drop := 0
	for len(t.events)-drop > 1 && (len(t.events)-drop > s.maxEvents || t.bytes > s.maxBytes) {
		t.bytes -= int64(len(t.events[drop].data))
		drop++
	}
	if drop == 0 {
		return
	}
	// Reslicing alone would pin the evicted entries' data through the
	// backing array until the next growth; clear them so the GC can take it.
	clear(t.events[:drop])
	t.events = t.events[drop:]
}

// ReadAfter implements instanceai.EventLog.
func (s *Store) ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	window, err := s.window(ctx, threadID, after, limit)
	if err != nil || len(window) == 0 {
		return nil, err
	}
	out := make([]instanceai.StoredEvent, len(window))
	for i, e := range window {
		out[i].Seq, out[i].Data = e.seq, e.data
		if err := json.Unmarshal(e.data, &out[i].Event); err != nil {
			return nil, fmt.Errorf("memory: read thread %q: decode event %d: %w", threadID, e.seq, err)
		}
	}
	return out, nil
}

// ReadRowsAfter implements instanceai.RowReader.
func (s *Store) ReadRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	window, err := s.window(ctx, threadID, after, limit)
	if err != nil || len(window) == 0 {
		return nil, err
	}
	window = window[:instanceai.WithinBytes(len(window), maxBytes, func(i int) int { return len(window[i].data) })]
	out := make([]instanceai.StoredRow, len(window))
	for i, e := range window {
		out[i] = instanceai.StoredRow{Seq: e.seq, Type: e.typ, RunID: e.runID, Data: e.data}
	}
	return out, nil
}

// ReadPage implements instanceai.PageReader: the store holds its rows in
// memory, so a page reads nothing past itself.
func (s *Store) ReadPage(ctx context.Context, threadID string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	rows, err := s.ReadRowsAfter(ctx, threadID, q.After, q.Limit, q.MaxBytes)
	if q.SizesOnly {
		for i := range rows {
			rows[i].Size, rows[i].Data = len(rows[i].Data), nil
		}
	}
	return rows, err
}

// window returns a copy of the entries ReadAfter reads.
func (s *Store) window(ctx context.Context, threadID string, after int64, limit int) ([]entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: read thread %q: %w", threadID, err)
	}
	if err := s.lock(); err != nil {
		return nil, err
	}
	t := s.threads[threadID]
	if t == nil {
		s.mu.Unlock()
		return nil, notFound("read", threadID)
	}
	var window []entry
	if n := len(t.events); n > 0 && after < t.lastSeq {
		// Seqs are contiguous, so the position of after+1 is arithmetic
		// (after clamped first so that the subtraction cannot overflow).
		start := max(max(after, 0)+1-t.events[0].seq, 0)
		if start < int64(n) {
			window = t.events[start:]
			if limit > 0 && len(window) > limit {
				window = window[:limit]
			}
			// Copy the headers: a later append may reuse the array.
			window = slices.Clone(window)
		}
	}
	s.mu.Unlock()
	return window, nil
}

// NextSeq implements instanceai.EventLog. It counts evicted events too: the
// next seq never goes back.
func (s *Store) NextSeq(_ context.Context, threadID string) (int64, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	t := s.threads[threadID]
	if t == nil {
		return 0, notFound("next seq of", threadID)
	}
	return t.lastSeq + 1, nil
}

// now is truncated to microseconds like the SQL backends, so that every
// backend returns the same timestamps for the same input.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// EnsureThread implements instanceai.ThreadStore. A zero t.CreatedAt means
// now. An existing thread is returned as stored, whatever t says.
func (s *Store) EnsureThread(ctx context.Context, t instanceai.Thread) (instanceai.Thread, bool, error) {
	if t.ID == "" {
		return instanceai.Thread{}, false, errors.New("memory: ensure thread: empty id")
	}
	if err := ctx.Err(); err != nil {
		return instanceai.Thread{}, false, fmt.Errorf("memory: ensure thread %q: %w", t.ID, err)
	}
	if err := s.lock(); err != nil {
		return instanceai.Thread{}, false, err
	}
	defer s.mu.Unlock()
	if old := s.threads[t.ID]; old != nil {
		return old.meta, false, nil
	}
	at := t.CreatedAt.UTC().Truncate(time.Microsecond)
	if t.CreatedAt.IsZero() {
		at = now()
	}
	meta := instanceai.Thread{ID: t.ID, OwnerID: t.OwnerID, Title: t.Title, CreatedAt: at, UpdatedAt: at}
	s.threads[t.ID] = &thread{meta: meta, runs: map[string]*runBounds{}}
	return meta, true, nil
}

// GetThread implements instanceai.ThreadStore.
func (s *Store) GetThread(_ context.Context, id string) (instanceai.Thread, error) {
	if err := s.lock(); err != nil {
		return instanceai.Thread{}, err
	}
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil {
		return instanceai.Thread{}, notFound("get", id)
	}
	return t.meta, nil
}

// ListThreads implements instanceai.ThreadStore: newest first, ties broken
// by id descending, as the SQL backends order them.
func (s *Store) ListThreads(_ context.Context, q instanceai.ThreadQuery) ([]instanceai.Thread, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	var out []instanceai.Thread
	for _, t := range s.threads {
		if t.meta.OwnerID == q.OwnerID && (q.IncludeArchived || !t.meta.Archived) {
			out = append(out, t.meta)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b instanceai.Thread) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	offset := max(q.Offset, 0)
	if offset >= len(out) {
		return nil, nil
	}
	out = out[offset:]
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// RenameThread implements instanceai.ThreadStore.
func (s *Store) RenameThread(_ context.Context, id, title string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil {
		return notFound("rename", id)
	}
	t.meta.Title = title
	t.meta.UpdatedAt = now()
	return nil
}

// ArchiveThread implements instanceai.ThreadStore.
func (s *Store) ArchiveThread(_ context.Context, id string, archived bool) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil {
		return notFound("archive", id)
	}
	t.meta.Archived = archived
	t.meta.UpdatedAt = now()
	return nil
}

// DeleteThread implements instanceai.ThreadStore; the thread's events,
// messages and confirmations go with it.
func (s *Store) DeleteThread(_ context.Context, id string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil {
		return notFound("delete", id)
	}
	s.deleteLocked(id, t)
	return nil
}

// deleteLocked removes thread t and everything of it; the lock is held.
func (s *Store) deleteLocked(id string, t *thread) {
	for _, m := range t.messages {
		delete(s.messageIDs, m.ID)
	}
	for rid, c := range s.confirmations {
		if c.ThreadID == id {
			delete(s.confirmations, rid)
		}
	}
	delete(s.threads, id)
	s.claims.ForgetThread(id)
}
