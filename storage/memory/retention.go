package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/retention"
)

var _ retention.Store = (*Store)(nil)

// idle reports whether t is idle since before cutoff and has no work; the
// store's lock is held.
func (s *Store) idle(t *thread, cutoff time.Time) bool {
	if !t.meta.UpdatedAt.Before(cutoff) || s.claims.HasWork(t.meta.ID) {
		return false
	}
	for _, c := range s.confirmations {
		if c.ThreadID == t.meta.ID && c.Status == instanceai.ConfirmationPending {
			return false
		}
	}
	return true
}

// rows counts the rows t holds, by table, as the SQL stores name them;
// the store's lock is held. The memory store keeps no checkpoints.
func (s *Store) rows(t *thread) retention.Counts {
	var confs int64
	for _, c := range s.confirmations {
		if c.ThreadID == t.meta.ID {
			confs++
		}
	}
	return retention.Counts{retention.Threads: 1, retention.Events: int64(len(t.events)),
		retention.Messages: int64(len(t.messages)), retention.Confirmations: confs}
}

// IdleThreads implements retention.Store.
func (s *Store) IdleThreads(ctx context.Context, cutoff time.Time, after string, limit int) ([]retention.Candidate, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list idle threads: %w", err)
	}
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []retention.Candidate
	for id, t := range s.threads {
		if id > after && s.idle(t, cutoff) {
			rows := s.rows(t)
			out = append(out, retention.Candidate{ID: id, Rows: rows.Total(), Events: rows[retention.Events]})
		}
	}
	slices.SortFunc(out, func(a, b retention.Candidate) int { return strings.Compare(a.ID, b.ID) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ThreadRows implements retention.Store.
func (s *Store) ThreadRows(ctx context.Context, ids []string) (retention.Counts, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := retention.Counts{}
	for _, id := range ids {
		if t := s.threads[id]; t != nil {
			out.Add(s.rows(t))
		}
	}
	return out, nil
}

// TrimEvents implements retention.Store.
func (s *Store) TrimEvents(ctx context.Context, id string, cutoff time.Time, n int) (int64, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil || n < 1 || !s.idle(t, cutoff) {
		return 0, nil
	}
	drop := min(n, len(t.events))
	for _, e := range t.events[:drop] {
		t.bytes -= int64(len(e.data))
	}
	clear(t.events[:drop])
	t.events = t.events[drop:]
	return int64(drop), nil
}

// PruneThreads implements retention.Store: DeleteThread's removal, under
// one hold of the lock with the check.
func (s *Store) PruneThreads(ctx context.Context, ids []string, cutoff time.Time) ([]string, retention.Counts, error) {
	if err := s.lock(); err != nil {
		return nil, nil, err
	}
	defer s.mu.Unlock()
	out := retention.Counts{}
	var pruned []string
	for _, id := range ids {
		t := s.threads[id]
		if t == nil || !s.idle(t, cutoff) {
			continue
		}
		out.Add(s.rows(t))
		s.deleteLocked(id, t)
		pruned = append(pruned, id)
	}
	return pruned, out, nil
}

// LogSize implements retention.Store: the events every thread's window
// holds, and their encoded bytes.
func (s *Store) LogSize(context.Context) (retention.Size, error) {
	if err := s.lock(); err != nil {
		return retention.Size{}, err
	}
	defer s.mu.Unlock()
	var size retention.Size
	for _, t := range s.threads {
		size.Events += int64(len(t.events))
		size.Bytes += t.bytes
	}
	return size, nil
}
