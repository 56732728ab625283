package memory

import (
	"context"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// The claims are instanceai.LocalClaims, behind the store's closed check.

// ClaimThread implements instanceai.RunClaims; like a database's foreign
// key, it refuses a thread that does not exist.
func (s *Store) ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (instanceai.ActiveRun, error) {
	if err := s.lock(); err != nil {
		return instanceai.ActiveRun{}, err
	}
	_, ok := s.threads[threadID]
	s.mu.Unlock()
	if !ok {
		return instanceai.ActiveRun{}, notFound("claim", threadID)
	}
	return s.claims.ClaimThread(ctx, threadID, runID, owner, ttl)
}

// ActiveRun implements instanceai.RunClaims.
func (s *Store) ActiveRun(ctx context.Context, threadID string) (instanceai.ActiveRun, error) {
	if err := s.checkOpen(); err != nil {
		return instanceai.ActiveRun{}, err
	}
	return s.claims.ActiveRun(ctx, threadID)
}

// TakeRun implements instanceai.RunClaims.
func (s *Store) TakeRun(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (bool, error) {
	if err := s.checkOpen(); err != nil {
		return false, err
	}
	return s.claims.TakeRun(ctx, threadID, runID, owner, ttl)
}

// SuspendRun implements instanceai.RunClaims.
func (s *Store) SuspendRun(ctx context.Context, threadID, runID string, suspended bool) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.claims.SuspendRun(ctx, threadID, runID, suspended)
}

// DisownRun implements instanceai.RunClaims.
func (s *Store) DisownRun(ctx context.Context, threadID, runID, owner string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.claims.DisownRun(ctx, threadID, runID, owner)
}

// ReleaseRun implements instanceai.RunClaims.
func (s *Store) ReleaseRun(ctx context.Context, threadID, runID string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.claims.ReleaseRun(ctx, threadID, runID)
}

// RenewRuns implements instanceai.RunClaims.
func (s *Store) RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.RunRef, error) {
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
func (s *Store) ClaimAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	_, ok := s.threads[ref.ThreadID]
	s.mu.Unlock()
	if !ok {
		return notFound("claim an agent of", ref.ThreadID)
	}
	return s.claims.ClaimAgent(ctx, ref, owner, ttl)
}

// ReleaseAgent implements instanceai.AgentClaims.
func (s *Store) ReleaseAgent(ctx context.Context, ref instanceai.AgentRef) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.claims.ReleaseAgent(ctx, ref)
}

// RenewAgents implements instanceai.AgentClaims.
func (s *Store) RenewAgents(ctx context.Context, owner string, ttl time.Duration) ([]instanceai.AgentRef, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.RenewAgents(ctx, owner, ttl)
}

// ExpiredAgents implements instanceai.AgentClaims.
func (s *Store) ExpiredAgents(ctx context.Context) ([]instanceai.AgentClaim, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.claims.ExpiredAgents(ctx)
}

// TakeAgent implements instanceai.AgentClaims.
func (s *Store) TakeAgent(ctx context.Context, ref instanceai.AgentRef, owner string, ttl time.Duration) (bool, error) {
	if err := s.checkOpen(); err != nil {
		return false, err
	}
	return s.claims.TakeAgent(ctx, ref, owner, ttl)
}
