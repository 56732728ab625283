// Package auth authenticates API callers by bearer token.
//
// Tokens map to user ids. They come from a comma-separated list
// ("token1=alice,token2=bob", the --tokens flag) and from a file with one
// token per line (--tokens-file). A request presents its token in an
// `Authorization: Bearer <token>` header; the middleware resolves it to the
// user id every handler scopes its work to. Without any token configured the
// server runs in single-user mode: every request acts as LocalUser,
// and CheckListen keeps such a server on loopback unless told otherwise.
//
// Beside static tokens the authenticator may take JWTs (UseJWT, with a
// Verifier such as jwtauth's). Either kind resolves to a Grant: the user,
// what the token may do (Perm: read, write, publish; Gate checks each
// route's need) and, for a JWT that says so, the threads it may touch,
// which the core enforces (instanceai.WithThreadLimit).
//
// Tokens are secrets: no error message and no log line built here contains
// one. Errors name where a token was configured (the list entry or the file
// line) instead.
package auth

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// Entry is one configured token and the user it authenticates.
type Entry struct {
	Token string
	User  string
	// Source says where the entry was configured ("--tokens entry 2",
	// "tokens.txt:7"), for messages that must not show the token.
	Source string
	// Scope is what the token may do: the API (the zero value) or only
	// publish (--publish-tokens).
	Scope Scope
}

// WeakTokenLength is the length under which a token is reported as weak.
const WeakTokenLength = 16

// ParseList parses the list form, "token1=alice,token2=bob". source names
// the list in errors (the flag or variable it came from). An empty list has
// no entries. A token may contain '=' (base64 padding): the user is what
// follows the last '='.
func ParseList(list, source string) ([]Entry, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []Entry
	for i, item := range strings.Split(list, ",") {
		where := fmt.Sprintf("%s entry %d", source, i+1)
		e, err := parseEntry(strings.TrimSpace(item), false)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		e.Source = where
		out = append(out, e)
	}
	return out, nil
}

// ParseFile parses a tokens file: one `token user` or `token=user` per
// line; blank lines and lines starting with '#' are ignored. name names the
// file in errors, which carry the line number.
func ParseFile(r io.Reader, name string) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out []Entry
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff") // a byte order mark
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, n)
		e, err := parseEntry(line, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		e.Source = where
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		// The scanner's own errors (a line over 1 MiB) hold no content.
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// parseEntry splits "token=user", or with spaced also "token user".
func parseEntry(s string, spaced bool) (Entry, error) {
	if s == "" {
		return Entry{}, errors.New("empty entry: expected token=user")
	}
	var token, user string
	if fields := strings.Fields(s); spaced && len(fields) > 1 {
		if len(fields) > 2 {
			return Entry{}, errors.New("too many fields: expected `token user` or `token=user`")
		}
		token, user = fields[0], fields[1]
	} else {
		i := strings.LastIndexByte(s, '=')
		if i < 0 {
			return Entry{}, errors.New("no user: expected `token user` or `token=user`")
		}
		token, user = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
	}
	switch {
	case token == "":
		return Entry{}, errors.New("empty token")
	case user == "":
		return Entry{}, errors.New("empty user")
	case !visibleASCII(token):
		return Entry{}, errors.New("the token must be printable ASCII without spaces")
	case !ValidUserID(user):
		return Entry{}, errors.New("the user id must not contain spaces, control characters, '=' or ','")
	}
	return Entry{Token: token, User: user}, nil
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// ValidUserID reports whether s may be a user id: valid UTF-8 without
// spaces, control characters, '=' or ','. A JWT's sub follows the same
// rule, so that both kinds of token name users alike.
func ValidUserID(s string) bool {
	if s == "" {
		return false
	}
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '=' || r == ',' {
			return false
		}
	}
	return true
}

// Authenticator resolves bearer tokens to grants: static tokens to their
// user and scope, and, with a Verifier (UseJWT), JWTs to the user and
// limits their claims carry. The zero value (no tokens) is single-user
// mode.
type Authenticator struct {
	// static is the table of static tokens, swapped whole by Reload so
	// that a request sees either the old list or the new one.
	static atomic.Pointer[staticTokens]
	// jwt verifies tokens that are no static token; nil without JWT.
	jwt Verifier
	// on is whether authentication is on: decided when the server is
	// built (static tokens at New, or a Verifier), never by a reload.
	on bool
	// queryToken accepts ?access_token= on GET requests (AllowQueryToken).
	queryToken bool
	// logger hears why tokens are refused, at debug level (LogTo).
	logger *slog.Logger
}

// LogTo sends the middleware's log (why a token was refused, at debug
// level) to logger instead of slog's default. Call it before serving.
func (a *Authenticator) LogTo(logger *slog.Logger) {
	if a != nil {
		a.logger = logger
	}
}

// staticTokens are the configured static tokens.
type staticTokens struct {
	// digests are the SHA-256 digests of the tokens: every comparison is
	// between two 32-byte values, so neither a token's length nor its
	// content shapes the time a comparison takes.
	digests [][sha256.Size]byte
	users   []string
	scopes  []Scope
}

// Verifier checks a token that is not a static one (a JWT) and returns
// what it grants. Its errors are for the operator's debug log: they must
// not hold the token or its claims.
type Verifier interface {
	Verify(ctx context.Context, token string) (Grant, error)
}

// QueryTokenParam is the query parameter that may carry the token.
const QueryTokenParam = "access_token"

// AllowQueryToken makes GET requests without an Authorization header
// authenticate with ?access_token=<token>. A browser EventSource cannot
// send headers, so this is how it follows an event stream with auth on. It
// is off by default: a token in a URL can end up in proxy and browser
// history logs. The parameter is removed from the request before the API
// sees it. JWTs are taken there too.
func (a *Authenticator) AllowQueryToken() {
	if a != nil {
		a.queryToken = true
	}
}

// UseJWT makes the authenticator accept, beside its static tokens, the
// tokens v verifies; it turns authentication on. Call it before the
// server is built.
func (a *Authenticator) UseJWT(v Verifier) {
	a.jwt = v
	a.on = a.on || v != nil
}

// New checks entries (no token twice) and returns their authenticator.
func New(entries []Entry) (*Authenticator, error) {
	t, err := newStatic(entries)
	if err != nil {
		return nil, err
	}
	a := &Authenticator{on: len(t.digests) > 0}
	a.static.Store(t)
	return a, nil
}

func newStatic(entries []Entry) (*staticTokens, error) {
	t := &staticTokens{}
	seen := map[[sha256.Size]byte]string{}
	for _, e := range entries {
		if e.Token == "" || e.User == "" {
			return nil, fmt.Errorf("%s: empty token or user", e.Source)
		}
		d := sha256.Sum256([]byte(e.Token))
		if first, dup := seen[d]; dup {
			return nil, fmt.Errorf("%s: duplicate token (already configured at %s)", e.Source, first)
		}
		seen[d] = e.Source
		t.digests = append(t.digests, d)
		t.users = append(t.users, e.User)
		t.scopes = append(t.scopes, e.Scope)
	}
	return t, nil
}

// ErrReloadDisables is Reload's refusal of a list that would leave no
// way to authenticate: the server cannot fall back to single-user mode
// while it serves.
var ErrReloadDisables = errors.New("no tokens left and no JWT configured: keeping the current tokens")

// Reload replaces the static tokens with entries, checked as New checks
// them. On an error the current tokens stay. Requests already
// authenticated (open event streams among them) are not touched: a token
// is checked when a request begins.
func (a *Authenticator) Reload(entries []Entry) error {
	t, err := newStatic(entries)
	if err != nil {
		return err
	}
	if len(t.digests) == 0 && a.jwt == nil {
		return ErrReloadDisables
	}
	a.static.Store(t)
	return nil
}

// Enabled reports whether authentication is on (any token configured, or
// JWT).
func (a *Authenticator) Enabled() bool { return a != nil && a.on }

// JWT reports whether JWTs are accepted.
func (a *Authenticator) JWT() bool { return a != nil && a.jwt != nil }

// Users returns the number of distinct users with a static token.
func (a *Authenticator) Users() int {
	if a == nil {
		return 0
	}
	set := map[string]bool{}
	if t := a.static.Load(); t != nil {
		for _, u := range t.users {
			set[u] = true
		}
	}
	return len(set)
}

// compare is the comparison Match makes, a variable so that a test can
// count its calls.
var compare = subtle.ConstantTimeCompare

// Match returns the user of token. It compares the token's digest with
// every configured digest, all of them whatever matched, and picks the
// user without branching on a comparison, so the time it takes does not
// tell which token (if any) matched.
func (a *Authenticator) Match(token string) (user string, ok bool) {
	user, _, ok = a.MatchScope(token)
	return user, ok
}

// MatchScope is Match that also returns the token's scope.
func (a *Authenticator) MatchScope(token string) (user string, scope Scope, ok bool) {
	if a == nil {
		return "", ScopeAPI, false
	}
	t := a.static.Load()
	if t == nil {
		return "", ScopeAPI, false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.digests {
		found = subtle.ConstantTimeSelect(compare(d[:], t.digests[i][:]), i, found)
	}
	if found < 0 {
		return "", ScopeAPI, false
	}
	return t.users[found], t.scopes[found], true
}

// Authenticate resolves a bearer token to its grant: a static token
// first, then a JWT. ok is false for a token neither takes; err then says
// why a JWT was refused, for the debug log (it holds no token text).
func (a *Authenticator) Authenticate(ctx context.Context, token string) (g Grant, ok bool, err error) {
	if user, scope, ok := a.MatchScope(token); ok {
		return Grant{User: user, Perms: scope.Perms()}, true, nil
	}
	if a == nil || a.jwt == nil {
		return Grant{}, false, nil
	}
	g, err = a.jwt.Verify(ctx, token)
	if err != nil {
		return Grant{}, false, err
	}
	return g, true, nil
}

// bearerToken returns the token of an `Authorization: Bearer <token>`
// header; the scheme is case-insensitive (RFC 7235).
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// queryToken takes the token from ?access_token= and removes it from the
// request's URL, so nothing downstream logs or echoes it.
func queryToken(r *http.Request) (string, bool) {
	q := r.URL.Query()
	token := strings.TrimSpace(q.Get(QueryTokenParam))
	if token == "" {
		return "", false
	}
	q.Del(QueryTokenParam)
	r.URL.RawQuery = q.Encode()
	r.RequestURI = r.URL.RequestURI()
	return token, true
}

// Middleware authenticates every request before next: the caller's user id
// goes into the request context (WithUser), with its Grant (GrantFrom)
// and, for a token limited to some threads, the limit the core checks
// (instanceai.WithThreadLimit). A request without a bearer token, or with
// one that matches none, gets 401 with `WWW-Authenticate: Bearer`; every
// refused token, whatever the reason (unknown, expired, wrong audience,
// bad signature), gets the same answer. In single-user mode every request
// is LocalUser's.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	if !a.Enabled() {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), LocalUser)))
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok && a.queryToken && r.Method == http.MethodGet {
			token, ok = queryToken(r)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="threadline"`)
			how := "send an Authorization: Bearer <token> header"
			switch {
			case a.queryToken:
				how += " (GET requests may pass ?" + QueryTokenParam + "=<token> instead)"
			case r.URL.Query().Has(QueryTokenParam):
				// The token was sent where this server does not look:
				// say why, rather than only that one is missing.
				how += "; ?" + QueryTokenParam + " is accepted only when the server runs with --query-token"
			}
			httpjson.WriteError(w, httpjson.NewError(http.StatusUnauthorized, "unauthorized", "",
				"authentication required: %s", how))
			return
		}
		g, ok, err := a.Authenticate(r.Context(), token)
		if !ok {
			if err != nil {
				// Why a JWT was refused, for an operator who debugs a
				// client: the reason only (expired, wrong audience), never
				// the token or its claims.
				log := a.logger
				if log == nil {
					log = slog.Default()
				}
				log.DebugContext(r.Context(), "bearer token refused", "reason", err.Error())
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="threadline", error="invalid_token"`)
			httpjson.WriteError(w, httpjson.NewError(http.StatusUnauthorized, "invalid_token", "",
				"the bearer token is not valid"))
			return
		}
		ctx := withGrant(WithUser(r.Context(), g.User), g)
		if g.Threads != nil {
			ctx = instanceai.WithThreadLimit(ctx, g.Threads.Allows)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// IsLoopback reports whether a listen address (host:port) only accepts
// connections from this machine: a host of "localhost", or an IP in
// 127.0.0.0/8 or ::1. An empty host (":8080") listens on every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// ErrNoAuthOnNetwork is CheckListen's refusal.
var ErrNoAuthOnNetwork = errors.New("refusing to listen on a non-loopback address without authentication")

// CheckListen refuses to serve addr without authentication unless addr is
// loopback or insecure (--insecure-no-auth) is set.
func CheckListen(addr string, a *Authenticator, insecure bool) error {
	if a.Enabled() || insecure || IsLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%w: %s is reachable from other machines and no tokens are configured; "+
		"configure --tokens or --tokens-file (THREADLINE_TOKENS, THREADLINE_TOKENS_FILE) or JWT keys (--jwt-jwks, the other --jwt-… flags), "+
		"or pass --insecure-no-auth (THREADLINE_INSECURE_NO_AUTH=true) to serve it without authentication",
		ErrNoAuthOnNetwork, addr)
}
