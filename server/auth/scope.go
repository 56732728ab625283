package auth

import (
	"context"
	"net/http"
	"strings"

	"github.com/threadline/threadline/server/httpjson"
)

// Scope is what a token may do. An API token acts for its user on every
// route but the publish API; a publish token (--publish-tokens) acts for
// its user on the publish API only: a worker that streams a run holds a
// secret that cannot read the user's threads.
type Scope int

// The scopes.
const (
	ScopeAPI Scope = iota
	ScopePublish
)

// scopeKey carries the token's scope in a request context; a request of
// single-user mode has none.
type scopeKey struct{}

func withScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// PublishGate keeps each token to its scope: under prefix (the publish
// API) only publish tokens are taken, elsewhere only API tokens; both get
// 403 naming the scope they lack. In single-user mode every request
// passes.
func PublishGate(prefix string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scope, ok := r.Context().Value(scopeKey{}).(Scope)
			publishing := r.URL.Path == prefix || strings.HasPrefix(r.URL.Path, prefix+"/")
			switch {
			case !ok:
			case publishing && scope != ScopePublish:
				httpjson.WriteError(w, httpjson.NewError(http.StatusForbidden, "publish_scope_required", "Authorization",
					"%s takes a publish token (--publish-tokens); this token is for the API", prefix))
				return
			case !publishing && scope == ScopePublish:
				httpjson.WriteError(w, httpjson.NewError(http.StatusForbidden, "publish_token", "Authorization",
					"this token may only publish, under %s", prefix))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
