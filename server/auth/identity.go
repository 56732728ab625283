package auth

import "context"

// The caller's identity travels in the request context: the middleware
// puts it there, every surface reads it with UserFrom.

// userKey carries the authenticated user id in a request context.
type userKey struct{}

// WithUser returns a context carrying the caller's user id.
func WithUser(ctx context.Context, userID string) context.Context {
	return context.WithValue(ctx, userKey{}, userID)
}

// LocalUser owns every thread when no authentication is configured.
const LocalUser = "local"

// UserFrom returns the caller's user id (LocalUser when unauthenticated).
func UserFrom(ctx context.Context) string {
	if u, ok := ctx.Value(userKey{}).(string); ok && u != "" {
		return u
	}
	return LocalUser
}
