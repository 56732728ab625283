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

var _ retention.Capper = (*Store)(nil)

// keptRuns returns the runs of t whose run-start the window still holds,
// oldest first; the lock is held.
func keptRuns(t *thread) []string {
	first := t.lastSeq + 1
	if len(t.events) > 0 {
		first = t.events[0].seq
	}
	var out []string
	for id, b := range t.runs {
		if b.startSeq >= first {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return int(t.runs[a].startSeq - t.runs[b].startSeq) })
	return out
}

// CrowdedThreads implements retention.Capper.
func (s *Store) CrowdedThreads(ctx context.Context, keep int, after string, limit int) ([]string, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []string
	for id, t := range s.threads {
		if id > after && len(keptRuns(t)) > keep {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// CapRuns implements retention.Capper as the SQL stores do.
func (s *Store) CapRuns(ctx context.Context, id string, keep, maxRows int, dry bool) (retention.Counts, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := retention.Counts{}
	t := s.threads[id]
	if t == nil || keep < 1 {
		return out, nil
	}
	runs := keptRuns(t)
	if len(runs) < keep {
		return out, nil
	}
	// With keep runs left, events of the last old run that followed its
	// run-start may still precede the cut: they go too.
	old := runs[:len(runs)-keep]
	cut := t.runs[runs[len(runs)-keep]].startSeq
	for _, run := range old {
		if !t.runs[run].finished || s.claims.HasRunWork(id, run) {
			return out, nil
		}
		for _, c := range s.confirmations {
			if c.ThreadID == id && c.RunID == run && c.Status == instanceai.ConfirmationPending {
				return out, nil
			}
		}
	}
	var messages []instanceai.Message
	for _, m := range t.messages {
		if slices.Contains(old, m.RunID) {
			out[retention.Messages]++
			if !dry {
				delete(s.messageIDs, m.ID)
			}
			continue
		}
		messages = append(messages, m)
	}
	for rid, c := range s.confirmations {
		if c.ThreadID == id && slices.Contains(old, c.RunID) {
			out[retention.Confirmations]++
			if !dry {
				delete(s.confirmations, rid)
			}
		}
	}
	chunk := max(int64(maxRows)-out.Total(), 1)
	drop := 0
	for drop < len(t.events) && t.events[drop].seq < cut && (dry || int64(drop) < chunk) {
		drop++
	}
	out[retention.Events] = int64(drop)
	if dry {
		return out, nil
	}
	t.messages = messages
	for _, e := range t.events[:drop] {
		t.bytes -= int64(len(e.data))
	}
	clear(t.events[:drop])
	t.events = t.events[drop:]
	return out, nil
}
