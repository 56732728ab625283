package memory

import (
	"context"

	"github.com/threadline/threadline/instanceai"
)

var _ instanceai.HeadReader = (*Store)(nil)

// Heads implements instanceai.HeadReader.
func (s *Store) Heads(_ context.Context, threadIDs []string) (map[string]int64, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make(map[string]int64, len(threadIDs))
	for _, id := range threadIDs {
		if t := s.threads[id]; t != nil {
			out[id] = t.lastSeq
		}
	}
	return out, nil
}
