package auth

import (
	"fmt"
	"net/http"

	"github.com/threadline/threadline/server/httpjson"
)

// Scope is what a static token may do. An API token acts for its user on
// every route but the publish API; a publish token (--publish-tokens)
// acts for its user on the publish API only: a worker that streams a run
// holds a secret that cannot read the user's threads.
type Scope int

// The scopes.
const (
	ScopeAPI Scope = iota
	ScopePublish
)

// Perms are the permissions of the scope.
func (s Scope) Perms() Perm {
	if s == ScopePublish {
		return PermPublish
	}
	return PermAPI
}

// Gate keeps each request to its token's permissions: need names what the
// matched route takes (0 for a route that decides itself, with Require,
// as the CopilotKit single endpoint does once it read which method its
// body asks for). A request without what it needs gets 403 naming it. In
// single-user mode every request passes.
func Gate(need func(*http.Request) Perm) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := Require(r, need(r)); err != nil {
				Deny(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Deny sends Require's refusal; one of a scope claim carries RFC 6750's
// challenge, naming the scope the request needs.
func Deny(w http.ResponseWriter, e *httpjson.Error) {
	if e.Detail.Code == "insufficient_scope" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="threadline", error="insufficient_scope", scope="`+fmt.Sprint(e.Detail.Details["scope"])+`"`)
	}
	httpjson.WriteError(w, e)
}

// Require answers whether the request's token has need: nil when it does
// (or in single-user mode, or when need is 0), else the 403 to send. The
// codes: publish_scope_required (the publish API with a token that may
// not publish), publish_token (a token that may only publish, elsewhere),
// insufficient_scope (a token whose scope claim lacks read or write).
func Require(r *http.Request, need Perm) *httpjson.Error {
	g, ok := GrantFrom(r.Context())
	if !ok || need == 0 || g.Perms&need == need {
		return nil
	}
	var e *httpjson.Error
	switch {
	case need == PermPublish:
		e = httpjson.NewError(http.StatusForbidden, "publish_scope_required", "Authorization",
			"%s takes a token with the publish scope (--publish-tokens, or a JWT whose scope claim has publish); this token's scope is %s",
			r.URL.Path, g.Perms)
	case g.Perms == PermPublish:
		e = httpjson.NewError(http.StatusForbidden, "publish_token", "Authorization",
			"this token may only publish, under /publish")
	default:
		e = httpjson.NewError(http.StatusForbidden, "insufficient_scope", "Authorization",
			"%s %s needs the %s scope; this token's scope is %s", r.Method, r.URL.Path, need, g.Perms)
	}
	e.Detail.Details["scope"] = need.String()
	return e
}
