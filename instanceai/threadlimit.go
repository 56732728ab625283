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
