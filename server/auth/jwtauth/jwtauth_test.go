package jwtauth_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/auth/jwtauth"
	"github.com/threadline/threadline/server/auth/jwtauth/jwttest"
)

var secret = []byte("a-shared-secret-of-thirty-two-bytes!")

func newVerifier(t *testing.T, cfg jwtauth.Config) *jwtauth.Verifier {
	t.Helper()
	if cfg.Leeway == 0 {
		cfg.Leeway = jwtauth.DefaultLeeway
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := jwtauth.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVerify: a valid token of each key source gives its sub as the user;
// every kind of bad token is refused with the reason that says why, and
// no reason holds anything of the token.
func TestVerify(t *testing.T) {
	rsaKey, ecKey := jwttest.RSAKey(t, "rsa-1"), jwttest.ECKey(t, "ec-1")
	jwks := jwttest.Serve(t, rsaKey, ecKey)
	v := newVerifier(t, jwtauth.Config{Secret: secret, JWKS: jwks.URL, Audience: "threadline", Issuer: "https://app.example"})
	ok := map[string]any{"aud": "threadline", "iss": "https://app.example"}
	for name, token := range map[string]string{
		"HS256": jwttest.HS256(t, secret, jwttest.Claims("alice", ok)),
		"RS256": rsaKey.Sign(t, jwttest.Claims("alice", ok)),
		"ES256": ecKey.Sign(t, jwttest.Claims("alice", ok)),
		"aud among several": jwttest.HS256(t, secret, jwttest.Claims("alice",
			map[string]any{"aud": []string{"other", "threadline"}, "iss": "https://app.example"})),
		"exp within the leeway": jwttest.HS256(t, secret, jwttest.Claims("alice",
			map[string]any{"aud": "threadline", "iss": "https://app.example", "exp": time.Now().Add(-10 * time.Second).Unix()})),
	} {
		g, err := v.Verify(context.Background(), token)
		if err != nil || g.User != "alice" || g.Perms != auth.PermAPI || g.Threads != nil {
			t.Errorf("%s: %+v %v", name, g, err)
		}
	}

	with := func(extra map[string]any) jwt.MapClaims {
		c := jwttest.Claims("alice", ok)
		for k, val := range extra {
			if val == nil {
				delete(c, k)
			} else {
				c[k] = val
			}
		}
		return c
	}
	other := jwttest.RSAKey(t, "rsa-1") // same kid, another key
	pub, err := x509.MarshalPKIXPublicKey(rsaKey.Private.Public())
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	confusion := jwttest.HS256(t, pubPEM, with(nil))
	confusionKID := jwt.NewWithClaims(jwt.SigningMethodHS256, with(nil))
	confusionKID.Header["kid"] = "rsa-1"
	confusionWithKID, _ := confusionKID.SignedString(pubPEM)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, with(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hs := jwttest.HS256(t, secret, with(nil))
	tampered := retouch(t, hs, map[string]any{"sub": "mallory"})
	for _, c := range []struct {
		name  string
		token string
		want  error
	}{
		{"expired", jwttest.HS256(t, secret, with(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})), jwtauth.ErrExpired},
		{"not yet valid", jwttest.HS256(t, secret, with(map[string]any{"nbf": time.Now().Add(time.Minute).Unix()})), jwtauth.ErrNotYetValid},
		{"no exp", jwttest.HS256(t, secret, with(map[string]any{"exp": nil})), jwtauth.ErrMissingClaim},
		{"wrong audience", jwttest.HS256(t, secret, with(map[string]any{"aud": "another-service"})), jwtauth.ErrAudience},
		{"no audience", jwttest.HS256(t, secret, with(map[string]any{"aud": nil})), jwtauth.ErrMissingClaim},
		{"wrong issuer", jwttest.HS256(t, secret, with(map[string]any{"iss": "https://evil.example"})), jwtauth.ErrIssuer},
		{"no sub", jwttest.HS256(t, secret, with(map[string]any{"sub": nil})), jwtauth.ErrSubject},
		{"a sub with a space", jwttest.HS256(t, secret, with(map[string]any{"sub": "alice bob"})), jwtauth.ErrSubject},
		{"HS256 with another secret", jwttest.HS256(t, []byte("another-secret-of-thirty-two-bytes!!"), with(nil)), jwtauth.ErrSignature},
		{"a changed payload", tampered, jwtauth.ErrSignature},
		{"RS256 by a key not in the set", other.Sign(t, with(nil)), jwtauth.ErrSignature},
		{"alg none", none, jwtauth.ErrSignature},
		{"HS256 keyed with the RSA public key", confusion, jwtauth.ErrSignature},
		{"HS256 keyed with the RSA public key, its kid", confusionWithKID, jwtauth.ErrSignature},
		{"RS256 with an unknown kid", jwttest.RSAKey(t, "rsa-9").Sign(t, with(nil)), jwtauth.ErrAlgorithm},
		{"a scope claim of the wrong type", jwttest.HS256(t, secret, with(map[string]any{"scope": 7})), jwtauth.ErrMalformed},
		{"not a JWT", "not.a.jwt", jwtauth.ErrMalformed},
		{"empty", "", jwtauth.ErrMalformed},
	} {
		g, err := v.Verify(context.Background(), c.token)
		if !errors.Is(err, c.want) || g.User != "" {
			t.Errorf("%s: %+v %v, want %v", c.name, g, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "rsa-")) {
			t.Errorf("%s: the reason tells of the token: %v", c.name, err)
		}
	}
}

// retouch changes claims of a signed token and keeps its signature.
func retouch(t *testing.T, token string, claims map[string]any) string {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	for k, v := range claims {
		c[k] = v
	}
	raw, _ = json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(raw)
	return strings.Join(parts, ".")
}

// TestAlgorithmsPinnedPerSource: a verifier with only a secret takes no
// RS256 token, one with only a JWKS no HS256 token, whatever they carry.
func TestAlgorithmsPinnedPerSource(t *testing.T) {
	rsaKey := jwttest.RSAKey(t, "k1")
	jwks := jwttest.Serve(t, rsaKey)
	onlySecret := newVerifier(t, jwtauth.Config{Secret: secret})
	onlyJWKS := newVerifier(t, jwtauth.Config{JWKS: jwks.URL})
	rs := rsaKey.Sign(t, jwttest.Claims("alice", nil))
	hs := jwttest.HS256(t, secret, jwttest.Claims("alice", nil))
	if _, err := onlySecret.Verify(context.Background(), rs); err == nil {
		t.Error("a secret-only verifier took an RS256 token")
	}
	if _, err := onlyJWKS.Verify(context.Background(), hs); err == nil {
		t.Error("a JWKS-only verifier took an HS256 token")
	}
	// The classic confusion: an HS256 token whose "secret" is the RSA
	// public key, which anyone can fetch from the JWKS.
	pub, err := x509.MarshalPKIXPublicKey(rsaKey.Private.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range [][]byte{pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), pub} {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwttest.Claims("alice", nil))
		tok.Header["kid"] = "k1"
		forged, _ := tok.SignedString(secret)
		if _, err := onlyJWKS.Verify(context.Background(), forged); err == nil {
			t.Error("an HS256 token keyed with the RSA public key was taken")
		}
	}
	if g, err := onlyJWKS.Verify(context.Background(), rs); err != nil || g.User != "alice" {
		t.Errorf("RS256 on the JWKS verifier: %+v %v", g, err)
	}
	// An ES256 header on an RSA key's signature is no ES256 token.
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwttest.Claims("alice", nil))
	tok.Header["kid"] = "k1"
	if _, err := tok.SignedString(rsaKey.Private); err == nil {
		t.Fatal("signed ES256 with an RSA key")
	}
	if _, err := jwtauth.New(context.Background(), jwtauth.Config{}); err == nil {
		t.Error("a verifier without keys")
	}
}

// TestScopeAndThreadsClaims: scope as a string or an array, unknown values
// left out, and the threads claim's ids and prefixes.
func TestScopeAndThreadsClaims(t *testing.T) {
	v := newVerifier(t, jwtauth.Config{Secret: secret})
	for _, c := range []struct {
		name  string
		extra map[string]any
		perms auth.Perm
	}{
		{"no scope", nil, auth.PermRead | auth.PermWrite},
		{"string", map[string]any{"scope": "read publish"}, auth.PermRead | auth.PermPublish},
		{"array", map[string]any{"scope": []string{"write"}}, auth.PermWrite},
		{"other services' scopes", map[string]any{"scope": "openid profile read"}, auth.PermRead},
		{"none of ours", map[string]any{"scope": "openid"}, 0},
		{"empty", map[string]any{"scope": ""}, 0},
	} {
		g, err := v.Verify(context.Background(), jwttest.HS256(t, secret, jwttest.Claims("alice", c.extra)))
		if err != nil || g.Perms != c.perms {
			t.Errorf("%s: %v %v, want %v", c.name, g.Perms, err, c.perms)
		}
	}
	g, err := v.Verify(context.Background(), jwttest.HS256(t, secret, jwttest.Claims("alice",
		map[string]any{"threads": []string{"t-123", "proj-7:*"}})))
	if err != nil || g.Threads == nil {
		t.Fatalf("threads: %+v %v", g, err)
	}
	for id, want := range map[string]bool{"t-123": true, "t-1234": false, "proj-7:a": true, "proj-7:": true, "proj-8:a": false, "t-12": false} {
		if g.Threads.Allows(id) != want {
			t.Errorf("threads allow %q: %v, want %v", id, !want, want)
		}
	}
	g, err = v.Verify(context.Background(), jwttest.HS256(t, secret, jwttest.Claims("alice", map[string]any{"threads": []string{}})))
	if err != nil || g.Threads == nil || g.Threads.Allows("t-123") {
		t.Errorf("an empty threads claim allows a thread: %+v %v", g, err)
	}
}

// TestJWKSRotation: a token signed by a key added to the set after the
// start (a new kid) is taken once the set is fetched again for its kid;
// a removed key stops working at the next fetch, and fetches for unknown
// kids are rate limited.
func TestJWKSRotation(t *testing.T) {
	old, next := jwttest.RSAKey(t, "2026-01"), jwttest.ECKey(t, "2026-02")
	jwks := jwttest.Serve(t, old)
	v := newVerifier(t, jwtauth.Config{JWKS: jwks.URL, UnknownKIDInterval: time.Hour})
	if v.Keys != 1 {
		t.Fatalf("keys at start: %d", v.Keys)
	}
	fetches := jwks.Fetches.Load()
	if _, err := v.Verify(context.Background(), old.Sign(t, jwttest.Claims("alice", nil))); err != nil {
		t.Fatal(err)
	}
	jwks.SetKeys(next)
	g, err := v.Verify(context.Background(), next.Sign(t, jwttest.Claims("bob", nil)))
	if err != nil || g.User != "bob" {
		t.Fatalf("a token of the new kid: %+v %v", g, err)
	}
	if jwks.Fetches.Load() != fetches+1 {
		t.Fatalf("fetches: %d, want %d", jwks.Fetches.Load(), fetches+1)
	}
	// The fetch replaced the set: the old key is gone.
	if _, err := v.Verify(context.Background(), old.Sign(t, jwttest.Claims("alice", nil))); err == nil {
		t.Fatal("a token of a removed key was taken")
	}
	// Another unknown kid within the interval is refused at once, with
	// no fetch.
	start := time.Now()
	if _, err := v.Verify(context.Background(), jwttest.RSAKey(t, "made-up").Sign(t, jwttest.Claims("eve", nil))); err == nil {
		t.Fatal("a token of an unknown kid was taken")
	}
	if jwks.Fetches.Load() != fetches+1 || time.Since(start) > 5*time.Second {
		t.Fatalf("fetches: %d (want %d) after %v", jwks.Fetches.Load(), fetches+1, time.Since(start))
	}
}

// TestJWKSDownAtStart: a JWKS URL that is down at start does not stop
// the server; its tokens are refused until a fetch succeeds, and a fetch
// that fails later keeps the last good keys.
func TestJWKSDownAtStart(t *testing.T) {
	key := jwttest.RSAKey(t, "k1")
	jwks := jwttest.Serve(t, key)
	jwks.SetDown(true)
	v := newVerifier(t, jwtauth.Config{JWKS: jwks.URL, UnknownKIDInterval: 50 * time.Millisecond, RefreshInterval: 50 * time.Millisecond})
	if v.Keys != 0 {
		t.Fatalf("keys while down: %d", v.Keys)
	}
	token := key.Sign(t, jwttest.Claims("alice", nil))
	if _, err := v.Verify(context.Background(), token); err == nil {
		t.Fatal("a token taken with no keys")
	}
	jwks.SetDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := v.Verify(context.Background(), token); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("still refused once the JWKS is up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	jwks.SetDown(true)
	n := jwks.Fetches.Load()
	for jwks.Fetches.Load() < n+2 {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := v.Verify(context.Background(), token); err != nil {
		t.Fatalf("a failed refresh dropped the keys: %v", err)
	}
}

// TestJWKSFile: a JWKS file is read at start; a missing or broken one is
// an error.
func TestJWKSFile(t *testing.T) {
	key := jwttest.ECKey(t, "file-1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(key), 0o600); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, jwtauth.Config{JWKS: path})
	if g, err := v.Verify(context.Background(), key.Sign(t, jwttest.Claims("alice", nil))); err != nil || g.User != "alice" {
		t.Fatalf("%+v %v", g, err)
	}
	if _, err := jwtauth.New(context.Background(), jwtauth.Config{JWKS: filepath.Join(t.TempDir(), "missing.json")}); err == nil {
		t.Error("a missing JWKS file")
	}
	_ = os.WriteFile(path, []byte("{"), 0o600)
	if _, err := jwtauth.New(context.Background(), jwtauth.Config{JWKS: path}); err == nil {
		t.Error("a broken JWKS file")
	}
}

// FuzzAuthorization: whatever an Authorization header holds, the
// middleware of an authenticator with static tokens and JWT answers 401
// in the API's JSON error shape, and does not panic.
func FuzzAuthorization(f *testing.F) {
	key := jwttest.RSAKey(f, "k1")
	jwks := jwttest.Serve(f, key)
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	v, err := jwtauth.New(ctx, jwtauth.Config{Secret: secret, JWKS: jwks.URL, Leeway: jwtauth.DefaultLeeway, UnknownKIDInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	a, err := auth.New([]auth.Entry{{Token: "static-token-0123456789", User: "alice"}})
	if err != nil {
		f.Fatal(err)
	}
	a.UseJWT(v)
	expired := jwttest.HS256(f, secret, jwttest.Claims("alice", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}))
	for _, seed := range []string{"", "Bearer ", "Bearer x.y.z", "Bearer " + expired, "Bearer " + expired + "x",
		"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.", "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6MX0.e30.AA",
		"Bearer ....", "bearer \x00", "Bearer " + strings.Repeat("A", 5000)} {
		f.Add(seed)
	}
	handler := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	f.Fuzz(func(t *testing.T, header string) {
		req := httptest.NewRequest(http.MethodGet, "/instance-ai/threads", nil)
		req.Header["Authorization"] = []string{header}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if rec.Code != http.StatusUnauthorized || json.Unmarshal(rec.Body.Bytes(), &body) != nil ||
			(body.Error.Code != "unauthorized" && body.Error.Code != "invalid_token") || body.Error.Message == "" {
			t.Fatalf("%q: %d %s", header, rec.Code, rec.Body.String())
		}
	})
}
