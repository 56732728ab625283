package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/threadline/threadline/server/auth/jwtauth"
)

// jwtConfig is the JWT flags' values.
type jwtConfig struct {
	secret     string
	secretFile string
	jwks       string
	audience   string
	issuer     string
	leeway     time.Duration
	refresh    time.Duration
}

// minSecretBytes is the HS256 secret length under which the start-up log
// warns: HMAC-SHA256 wants a key of at least 256 bits.
const minSecretBytes = 32

func jwtFlags(f *envFlags, c *jwtConfig) {
	f.Secret(&c.secret, "jwt-secret", "THREADLINE_JWT_SECRET",
		"accept JWTs signed with HS256 and this shared secret (prefer the variable or --jwt-secret-file: a command line is visible to other local users)")
	f.String(&c.secretFile, "jwt-secret-file", "THREADLINE_JWT_SECRET_FILE", "",
		"file holding the HS256 shared secret (surrounding whitespace is ignored)")
	f.String(&c.jwks, "jwt-jwks", "THREADLINE_JWT_JWKS", "",
		"accept JWTs signed with RS256 or ES256 by a key of this JWK Set: a file (read at start) or an http(s) URL (fetched at start, then every --jwt-jwks-refresh and on an unknown kid, at most once a minute)")
	f.Duration(&c.refresh, "jwt-jwks-refresh", "THREADLINE_JWT_JWKS_REFRESH", jwtauth.DefaultRefreshInterval,
		"how often a --jwt-jwks URL is fetched again; a failed fetch keeps the keys of the last good one")
	f.String(&c.audience, "jwt-audience", "THREADLINE_JWT_AUDIENCE", "",
		"when set, a JWT's aud must hold this value")
	f.String(&c.issuer, "jwt-issuer", "THREADLINE_JWT_ISSUER", "",
		"when set, a JWT's iss must be this value")
	f.Duration(&c.leeway, "jwt-leeway", "THREADLINE_JWT_LEEWAY", jwtauth.DefaultLeeway,
		"clock skew allowed on a JWT's exp and nbf")
}

// newJWTVerifier builds the JWT verifier the flags ask for; nil when they
// configure no key.
func newJWTVerifier(ctx context.Context, c jwtConfig, logger *slog.Logger) (*jwtauth.Verifier, error) {
	secret := c.secret
	if c.secretFile != "" {
		if secret != "" {
			return nil, usageError{"--jwt-secret and --jwt-secret-file: configure one of them"}
		}
		data, err := os.ReadFile(c.secretFile)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--jwt-secret-file: %v", err)}
		}
		secret = strings.TrimSpace(string(data))
		if secret == "" {
			return nil, usageError{fmt.Sprintf("--jwt-secret-file %s is empty", c.secretFile)}
		}
	}
	if secret == "" && c.jwks == "" {
		if c.audience != "" || c.issuer != "" {
			return nil, usageError{"--jwt-audience and --jwt-issuer take a key: --jwt-secret, --jwt-secret-file or --jwt-jwks"}
		}
		return nil, nil
	}
	if c.leeway < 0 || c.refresh <= 0 {
		return nil, usageError{"--jwt-leeway must be 0 or more, --jwt-jwks-refresh positive"}
	}
	if secret != "" && len(secret) < minSecretBytes {
		logger.Warn(fmt.Sprintf("the JWT secret is shorter than %d bytes; use a long random one", minSecretBytes))
	}
	v, err := jwtauth.New(ctx, jwtauth.Config{Secret: []byte(secret), JWKS: c.jwks, Audience: c.audience, Issuer: c.issuer,
		Leeway: c.leeway, RefreshInterval: c.refresh, Logger: logger})
	if err != nil {
		return nil, usageError{fmt.Sprintf("--jwt-jwks: %v", err)}
	}
	if c.jwks != "" {
		logger.Info("JWT: JWKS loaded", "from", c.jwks, "keys", v.Keys)
		if v.Keys == 0 {
			logger.Warn("JWT: the JWKS holds no usable key yet; RS256 and ES256 tokens are refused until a fetch brings one")
		}
	}
	return v, nil
}
