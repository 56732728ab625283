package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// The claims are instanceai.LocalClaims, behind the store's closed check.
// Every call that changes them holds the store's lock, as appends do while
// they check their tokens: a take or a release is then one step against
// every append of the thread, as a database's transactions make it.

// withLock runs f under the store's lock, unless the store is closed.
func withLock[T any](s *Store, f func() (T, error)) (T, error) {
	if err := s.lock(); err != nil {
		var zero T
		return zero, err
	}
	defer s.mu.Unlock()
	return f()
}

// wrap says what failed on which thread, as the SQL stores do.
func wrap(op, threadID string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("memory: %s thread %q: %w", op, threadID, err)
}

// ClaimThread implements instanceai.RunClaims; like a database's foreign
// key, it refuses a thread that does not exist.
func (s *Store) ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (instanceai.ActiveRun, error) {
	return withLock(s, func() (instanceai.ActiveRun, error) {
		if s.threads[threadID] == nil {
			return instanceai.ActiveRun{}, notFound("claim", threadID)
		}
		return s.claims.ClaimThread(ctx, threadID, runID, owner, ttl)
	})
}

// ActiveRun implements instanceai.RunClaims.
func (s *Store) ActiveRun(ctx context.Context, threadID string) (instanceai.ActiveRun, error) {
	if err := s.checkOpen(); err != nil {
		return instanceai.ActiveRun{}, err
	}
	return s.claims.ActiveRun(ctx, threadID)
}

// takeResult is what a take returns.
type takeResult struct {
	fence int64
	won   bool
}

// TakeRun implements instanceai.RunClaims.
func (s *Store) TakeRun(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (int64, bool, error) {
	r, err := withLock(s, func() (takeResult, error) {
		fence, won, err := s.claims.TakeRun(ctx, threadID, runID, owner, ttl)
		return takeResult{fence, won}, err
	})
	return r.fence, r.won, err
}

// SuspendRun implements instanceai.RunClaims.
func (s *Store) SuspendRun(ctx context.Context, threadID, runID string, fence int64, suspended bool) error {
	_, err := withLock(s, func() (struct{}, error) {
		return struct{}{}, wrap("suspend the run of", threadID, s.claims.SuspendRun(ctx, threadID, runID, fence, suspended))
	})
	return err
}

// DisownRun implements instanceai.RunClaims.
func (s *Store) DisownRun(ctx context.Context, threadID, runID string, fence int64) error {
	_, err := withLock(s, func() (struct{}, error) {
		return struct{}{}, wrap("disown the run of", threadID, s.claims.DisownRun(ctx, threadID, runID, fence))
	})
	return err
}

// ReleaseRun implements instanceai.RunClaims.
func (s *Store) ReleaseRun(ctx context.Context, threadID, runID string, fence int64) error {
	_, err := withLock(s, func() (struct{}, error) {
		return struct{}{}, wrap("release the run of", threadID, s.claims.ReleaseRun(ctx, threadID, runID, fence))
	})
	return err
}

// RenewRuns implements instanceai.RunClaims.
func (s *Store) RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.ActiveRun, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.RenewRuns(ctx, owner, ttl)
}

// ExpiredRuns implements instanceai.RunClaims.
func (s *Store) ExpiredRuns(ctx context.Context) ([]instanceai.ActiveRun, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.ExpiredRuns(ctx)
}

// ClaimAgent implements instanceai.AgentClaims; like a database's foreign
// key, it refuses a thread that does not exist.
func (s *Store) ClaimAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration, runFence int64) (int64, error) {
	return withLock(s, func() (int64, error) {
		if s.threads[ref.ThreadID] == nil {
			return 0, notFound("claim an agent of", ref.ThreadID)
		}
		fence, err := s.claims.ClaimAgent(ctx, ref, owner, ttl, runFence)
		return fence, wrap("claim an agent of", ref.ThreadID, err)
	})
}

// RunAgents implements instanceai.AgentClaims.
func (s *Store) RunAgents(ctx context.Context, threadID, runID string) ([]instanceai.AgentClaim, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.RunAgents(ctx, threadID, runID)
}

// ReleaseAgent implements instanceai.AgentClaims.
func (s *Store) ReleaseAgent(ctx context.Context, ref instanceai.AgentRef, fence int64) error {
	_, err := withLock(s, func() (struct{}, error) {
		return struct{}{}, wrap("release an agent of", ref.ThreadID, s.claims.ReleaseAgent(ctx, ref, fence))
	})
	return err
}

// RenewAgents implements instanceai.AgentClaims.
func (s *Store) RenewAgents(ctx context.Context, owner string, ttl time.Duration, fences []int64) ([]instanceai.AgentClaim, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.RenewAgents(ctx, owner, ttl, fences)
}

// ExpiredAgents implements instanceai.AgentClaims.
func (s *Store) ExpiredAgents(ctx context.Context) ([]instanceai.AgentClaim, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.ExpiredAgents(ctx)
}

// TakeAgent implements instanceai.AgentClaims.
func (s *Store) TakeAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration) (int64, bool, error) {
	r, err := withLock(s, func() (takeResult, error) {
		fence, won, err := s.claims.TakeAgent(ctx, ref, owner, ttl)
		return takeResult{fence, won}, err
	})
	return r.fence, r.won, err
}

// RequestCancel implements instanceai.RunClaims.
func (s *Store) RequestCancel(ctx context.Context, threadID, reason string) (bool, error) {
	if err := s.checkOpen(); err != nil {
		return false, err
	}
	return s.claims.RequestCancel(ctx, threadID, reason)
}

// CancelPending implements instanceai.RunClaims.
func (s *Store) CancelPending(ctx context.Context, threadID string) (bool, error) {
	if err := s.checkOpen(); err != nil {
		return false, err
	}
	return s.claims.CancelPending(ctx, threadID)
}
