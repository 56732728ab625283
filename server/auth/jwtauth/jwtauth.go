// Package jwtauth verifies the JSON Web Tokens that the apps in front of
// Threadline mint for their users, and turns them into auth grants.
//
// Keys: HS256 with a shared secret, RS256 and ES256 with the keys of a
// JWKS (a file read at start, or a URL that keyfunc fetches and
// refreshes). Each key source accepts only its own algorithms, chosen by
// the token's header and pinned before a key is looked up: an HS256 token
// is checked with the secret and nothing else, so it cannot be "signed"
// with an RSA public key taken from the JWKS (algorithm confusion), and
// `alg: none` is never accepted.
//
// Claims: sub is the user; exp is required and, with nbf, checked with
// Leeway; aud and iss are checked when configured. Two optional claims
// narrow a token, after Centrifugo's channel claims: ScopeClaim (what it
// may do) and ThreadsClaim (which threads); a token without them may do
// what a static API token may.
package jwtauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/threadline/threadline/server/auth"
)

// The claims a token may carry beside the registered ones.
const (
	// ScopeClaim limits what the token may do: "read", "write" and/or
	// "publish", as a space-separated string (OAuth's "scope") or an
	// array. Other values are ignored; a claim with none of these allows
	// nothing.
	ScopeClaim = "scope"
	// ThreadsClaim limits the threads the token may touch: an array of
	// thread ids and prefixes ending in '*' ("proj-7:*"). An empty array
	// allows no thread.
	ThreadsClaim = "threads"
)

// The defaults.
const (
	// DefaultLeeway is the clock skew allowed on exp and nbf.
	DefaultLeeway = 30 * time.Second
	// DefaultRefreshInterval is how often a JWKS URL is fetched again
	// (keyfunc's default).
	DefaultRefreshInterval = time.Hour
	// DefaultUnknownKIDInterval is the least time between two fetches of
	// a JWKS URL caused by a token whose kid the set does not hold (a key
	// rotated in before the next refresh): a flood of made-up kids costs
	// the key server one request a minute.
	DefaultUnknownKIDInterval = time.Minute
	// fetchTimeout bounds one fetch of a JWKS URL.
	fetchTimeout = 10 * time.Second
)

// Config says which tokens are valid. At least one of Secret and JWKS is
// set.
type Config struct {
	// Secret is the HS256 shared secret.
	Secret []byte
	// JWKS is a JWK Set for RS256 and ES256: a file, read once, or an
	// http(s) URL, fetched at start and refreshed.
	JWKS string
	// Audience and Issuer, when set, must be the token's aud (one of its
	// values) and iss.
	Audience, Issuer string
	// Leeway is the clock skew allowed on exp and nbf (DefaultLeeway is
	// the command's default; 0 allows none).
	Leeway time.Duration
	// RefreshInterval and UnknownKIDInterval shape the fetches of a JWKS
	// URL (the defaults when 0).
	RefreshInterval    time.Duration
	UnknownKIDInterval time.Duration
	// Client fetches the JWKS URL (http.DefaultClient when nil).
	Client *http.Client
	// Logger hears of failed JWKS fetches (slog.Default when nil).
	Logger *slog.Logger
}

// Verifier checks tokens against a Config. It is safe for concurrent use.
type Verifier struct {
	parser *jwt.Parser
	secret []byte
	jwks   keyfunc.Keyfunc
	// Keys is the number of keys the JWKS held at start (0 for a URL that
	// could not be fetched), for the start-up log.
	Keys int
}

// New builds a verifier. A JWKS URL that cannot be fetched at start is no
// error: the server starts, logs it, and refuses the tokens signed with
// those keys until a fetch succeeds (the hourly refresh, or a token with
// an unknown kid, at most once per UnknownKIDInterval). A refresh that
// fails later keeps the keys of the last one that succeeded. ctx ends the
// refreshes.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if len(cfg.Secret) == 0 && cfg.JWKS == "" {
		return nil, errors.New("no key: configure a secret (HS256) or a JWKS (RS256, ES256)")
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.UnknownKIDInterval <= 0 {
		cfg.UnknownKIDInterval = DefaultUnknownKIDInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v := &Verifier{}
	var methods []string
	if len(cfg.Secret) > 0 {
		v.secret = cfg.Secret
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.JWKS != "" {
		kf, err := openJWKS(ctx, cfg)
		if err != nil {
			return nil, err
		}
		v.jwks = kf
		methods = append(methods, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg())
		if keys, err := kf.Storage().KeyReadAll(ctx); err == nil {
			v.Keys = len(keys)
		}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithLeeway(cfg.Leeway),
		// A token without exp would be valid for ever: the apps mint
		// short-lived ones, and one that forgot exp is refused.
		jwt.WithExpirationRequired(),
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// openJWKS reads the JWKS file, or starts keyfunc on the URL.
func openJWKS(ctx context.Context, cfg Config) (keyfunc.Keyfunc, error) {
	if strings.HasPrefix(cfg.JWKS, "https://") || strings.HasPrefix(cfg.JWKS, "http://") {
		log := cfg.Logger
		return keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKS}, keyfunc.Override{
			Client:          cfg.Client,
			HTTPTimeout:     fetchTimeout,
			RefreshInterval: cfg.RefreshInterval,
			// One fetch for an unknown kid per interval. A token that
			// comes sooner waits for the next allowed fetch only if it
			// is due within RateLimitWaitMax, and is refused at once
			// otherwise: a request never hangs on the limiter.
			RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDInterval), 1),
			RateLimitWaitMax:  fetchTimeout,
			RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
				return func(_ context.Context, err error) {
					log.Warn("could not fetch the JWKS; the keys of its last good fetch stay in use", "url", u, "err", err)
				}
			},
		})
	}
	raw, err := os.ReadFile(cfg.JWKS)
	if err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	kf, err := keyfunc.NewJWKSetJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("JWKS %s: %w", cfg.JWKS, err)
	}
	return kf, nil
}

// claims are the claims a token is read into.
type claims struct {
	jwt.RegisteredClaims
	Scope   *wordList `json:"scope"`
	Threads *wordList `json:"threads"`
}

// wordList is a claim given as an array of strings or as one string of
// space-separated words (OAuth's scope).
type wordList []string

func (l *wordList) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*l = strings.Fields(s)
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*l = list
	return nil
}

// Errors name why a token was refused in fixed words: they reach the
// debug log, and must hold nothing of the token (no claim, no kid).
var (
	ErrMalformed    = errors.New("malformed token")
	ErrAlgorithm    = errors.New("algorithm not accepted, or no key for the token")
	ErrSignature    = errors.New("bad signature")
	ErrExpired      = errors.New("expired")
	ErrNotYetValid  = errors.New("not yet valid")
	ErrAudience     = errors.New("wrong audience")
	ErrIssuer       = errors.New("wrong issuer")
	ErrMissingClaim = errors.New("a required claim is missing (exp; aud or iss when configured)")
	ErrSubject      = errors.New("no valid sub claim")
	ErrInvalid      = errors.New("invalid token")
)

// Verify checks token and returns its grant.
func (v *Verifier) Verify(ctx context.Context, token string) (auth.Grant, error) {
	var c claims
	_, err := v.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) { return v.key(ctx, t) })
	if err != nil {
		return auth.Grant{}, reason(err)
	}
	if !auth.ValidUserID(c.Subject) {
		return auth.Grant{}, ErrSubject
	}
	g := auth.Grant{User: c.Subject, Perms: auth.PermAPI}
	if c.Scope != nil {
		g.Perms = auth.ParsePerms(*c.Scope)
	}
	if c.Threads != nil {
		g.Threads = auth.ParseThreads(*c.Threads)
	}
	return g, nil
}

// key returns the key for the token's algorithm, from the one source that
// serves it, and checks that the key is of that algorithm's type.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	switch t.Method.Alg() {
	case jwt.SigningMethodHS256.Alg():
		if v.secret == nil {
			return nil, ErrAlgorithm
		}
		return v.secret, nil
	case jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg():
		if v.jwks == nil {
			return nil, ErrAlgorithm
		}
		key, err := v.jwks.KeyfuncCtx(ctx)(t)
		if err != nil {
			return nil, ErrAlgorithm
		}
		return pinned(t.Method.Alg(), key)
	}
	return nil, ErrAlgorithm
}

// pinned returns key if it is of alg's type: an RSA public key for RS256,
// a P-256 public key for ES256. A token without a kid is checked against
// every key of the set (a jwt.VerificationKeySet), each pinned alike.
func pinned(alg string, key any) (any, error) {
	switch k := key.(type) {
	case jwt.VerificationKeySet:
		var out jwt.VerificationKeySet
		for _, one := range k.Keys {
			if p, err := pinned(alg, one); err == nil {
				out.Keys = append(out.Keys, p)
			}
		}
		if len(out.Keys) == 0 {
			return nil, ErrAlgorithm
		}
		return out, nil
	case *rsa.PublicKey:
		if alg == jwt.SigningMethodRS256.Alg() {
			return k, nil
		}
	case *ecdsa.PublicKey:
		if alg == jwt.SigningMethodES256.Alg() && k.Curve == elliptic.P256() {
			return k, nil
		}
	}
	return nil, ErrAlgorithm
}

// reason maps the parser's errors to the fixed ones.
func reason(err error) error {
	for _, m := range []struct{ from, to error }{
		{jwt.ErrTokenExpired, ErrExpired},
		{jwt.ErrTokenNotValidYet, ErrNotYetValid},
		{jwt.ErrTokenInvalidAudience, ErrAudience},
		{jwt.ErrTokenInvalidIssuer, ErrIssuer},
		{jwt.ErrTokenRequiredClaimMissing, ErrMissingClaim},
		{ErrAlgorithm, ErrAlgorithm},
		{jwt.ErrTokenSignatureInvalid, ErrSignature},
		{jwt.ErrTokenUnverifiable, ErrAlgorithm},
		{jwt.ErrTokenMalformed, ErrMalformed},
	} {
		if errors.Is(err, m.from) {
			return m.to
		}
	}
	return ErrInvalid
}
