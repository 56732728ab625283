package sqlite

import (
	"context"

	"github.com/threadline/threadline/instanceai"
)

// The reads an SSE stream makes run on a goroutine of their own. The
// driver is SQLite's C translated to Go, with deep call chains: run on the
// stream's goroutine, which lives as long as the connection, one query
// grows that goroutine's stack to tens of kilobytes, and the runtime keeps
// it until a collection shrinks it, so each idle stream of a SQLite server
// held about twice the stack of one on the memory store
// (BenchmarkIdleStreamMemory). On a short-lived goroutine the growth goes
// away with it; the extra goroutine costs about a microsecond per query.
func onFreshStack[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	r := <-done
	return r.v, r.err
}

// ReadAfter implements instanceai.EventLog (see onFreshStack).
func (s *Store) ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	return onFreshStack(func() ([]instanceai.StoredEvent, error) { return s.Log.ReadAfter(ctx, threadID, after, limit) })
}

// ReadRowsAfter implements instanceai.RowReader (see onFreshStack).
func (s *Store) ReadRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	return onFreshStack(func() ([]instanceai.StoredRow, error) {
		return s.Log.ReadRowsAfter(ctx, threadID, after, limit, maxBytes)
	})
}

// NextSeq implements instanceai.EventLog (see onFreshStack).
func (s *Store) NextSeq(ctx context.Context, threadID string) (int64, error) {
	return onFreshStack(func() (int64, error) { return s.Log.NextSeq(ctx, threadID) })
}

// RunEvents implements instanceai.RunIndex (see onFreshStack).
func (s *Store) RunEvents(ctx context.Context, threadID, runID string) ([]instanceai.StoredEvent, error) {
	return onFreshStack(func() ([]instanceai.StoredEvent, error) { return s.Log.RunEvents(ctx, threadID, runID) })
}

// GetThread implements instanceai.ThreadStore (see onFreshStack).
func (s *Store) GetThread(ctx context.Context, id string) (instanceai.Thread, error) {
	return onFreshStack(func() (instanceai.Thread, error) { return s.getThread(ctx, id) })
}

// ActiveRun implements instanceai.RunClaims (see onFreshStack).
func (s *Store) ActiveRun(ctx context.Context, threadID string) (instanceai.ActiveRun, error) {
	return onFreshStack(func() (instanceai.ActiveRun, error) { return s.Table.ActiveRun(ctx, threadID) })
}

// ReadLightRowsAfter implements instanceai.PartReader (see onFreshStack).
func (s *Store) ReadLightRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes, large int) ([]instanceai.StoredRow, error) {
	return onFreshStack(func() ([]instanceai.StoredRow, error) {
		return s.Log.ReadLightRowsAfter(ctx, threadID, after, limit, maxBytes, large)
	})
}

// ReadRowPart implements instanceai.PartReader (see onFreshStack).
func (s *Store) ReadRowPart(ctx context.Context, threadID string, seq int64, off, n int) ([]byte, error) {
	return onFreshStack(func() ([]byte, error) { return s.Log.ReadRowPart(ctx, threadID, seq, off, n) })
}

// ReadPage implements instanceai.PageReader (see onFreshStack).
func (s *Store) ReadPage(ctx context.Context, threadID string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	return onFreshStack(func() ([]instanceai.StoredRow, error) { return s.Log.ReadPage(ctx, threadID, q) })
}
