package instanceai

import "context"

// A request may be limited to some of its user's threads (a token that
// names the threads it may touch). The limit travels in the request's
// context, and the core's ownership checks apply it: a thread outside it
// is answered as another user's thread is, *ThreadNotFoundError, so a
// limited token learns nothing of the threads it may not touch, and every
// surface that finds a thread through the core is covered without knowing
// of tokens.

type threadLimitKey struct{}

// WithThreadLimit returns a context whose requests may touch only the
// threads allow accepts.
func WithThreadLimit(ctx context.Context, allow func(threadID string) bool) context.Context {
	return context.WithValue(ctx, threadLimitKey{}, allow)
}

// ThreadAllowed reports whether ctx may touch the thread: true without a
// limit.
func ThreadAllowed(ctx context.Context, threadID string) bool {
	allow, ok := ctx.Value(threadLimitKey{}).(func(string) bool)
	return !ok || allow(threadID)
}

// ThreadLimited reports whether ctx carries a thread limit.
func ThreadLimited(ctx context.Context) bool {
	_, ok := ctx.Value(threadLimitKey{}).(func(string) bool)
	return ok
}

// listChunk is how many of the owner's threads ListAllowedThreads reads at
// a time while it filters them for a thread-limited request.
const listChunk = 500

// ListAllowedThreads lists a page of q's threads that ctx may touch. Without
// a thread limit it is the store's page. With one, the owner's threads are
// read in order, listChunk at a time, and filtered before they are paged:
// a page then holds q.Limit threads whenever as many allowed ones follow,
// and q.Offset counts allowed threads, so pages neither come short nor
// skip any. (The limit is a function of the token, not of the store's
// query language; a limited token's owner is read in full in the worst
// case, in bounded chunks.)
func ListAllowedThreads(ctx context.Context, s ThreadStore, q ThreadQuery) ([]Thread, error) {
	if !ThreadLimited(ctx) {
		return s.ListThreads(ctx, q)
	}
	skip := max(q.Offset, 0)
	var out []Thread
	for from := 0; ; from += listChunk {
		rows, err := s.ListThreads(ctx, ThreadQuery{OwnerID: q.OwnerID, IncludeArchived: q.IncludeArchived,
			Limit: listChunk, Offset: from})
		if err != nil {
			return nil, err
		}
		for _, t := range rows {
			if !ThreadAllowed(ctx, t.ID) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			out = append(out, t)
			if q.Limit > 0 && len(out) == q.Limit {
				return out, nil
			}
		}
		if len(rows) < listChunk {
			return out, nil
		}
	}
}
