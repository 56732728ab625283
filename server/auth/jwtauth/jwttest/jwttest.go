// Package jwttest makes keys, JWK Sets and tokens for the tests of JWT
// authentication: an RS256 or ES256 key with its kid, a JWKS served by an
// httptest server whose keys a test can rotate, and signed tokens.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Key is a signing key with its kid and algorithm.
type Key struct {
	KID     string
	Method  jwt.SigningMethod
	Private crypto.Signer
}

// RSAKey generates an RS256 key.
func RSAKey(t testing.TB, kid string) Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return Key{KID: kid, Method: jwt.SigningMethodRS256, Private: k}
}

// ECKey generates an ES256 key.
func ECKey(t testing.TB, kid string) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{KID: kid, Method: jwt.SigningMethodES256, Private: k}
}

// Sign signs claims with the key, its kid in the header.
func (k Key) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(k.Method, claims)
	if k.KID != "" {
		tok.Header["kid"] = k.KID
	}
	s, err := tok.SignedString(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// HS256 signs claims with a shared secret.
func HS256(t testing.TB, secret []byte, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Claims are the claims of a token valid for a minute, for user, with
// extra claims added (or, set to nil, removed).
func Claims(user string, extra map[string]any) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"sub": user, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// JWKS is the public JWK Set of keys.
func JWKS(keys ...Key) []byte {
	b64 := base64.RawURLEncoding.EncodeToString
	set := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: []map[string]string{}}
	for _, k := range keys {
		jwk := map[string]string{"kid": k.KID, "alg": k.Method.Alg(), "use": "sig"}
		switch p := k.Private.Public().(type) {
		case *rsa.PublicKey:
			jwk["kty"], jwk["n"], jwk["e"] = "RSA", b64(p.N.Bytes()), b64(big.NewInt(int64(p.E)).Bytes())
		case *ecdsa.PublicKey:
			point, err := p.Bytes() // 0x04 || X || Y
			if err != nil {
				panic(err)
			}
			jwk["kty"], jwk["crv"], jwk["x"], jwk["y"] = "EC", "P-256", b64(point[1:33]), b64(point[33:])
		}
		set.Keys = append(set.Keys, jwk)
	}
	data, err := json.Marshal(set)
	if err != nil {
		panic(err)
	}
	return data
}

// Server serves a JWKS whose keys the test sets, and counts its fetches.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []Key
	down    bool
	Fetches atomic.Int64
}

// Serve starts a JWKS server with keys until the test ends.
func Serve(t testing.TB, keys ...Key) *Server {
	s := &Server{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.Fetches.Add(1)
		s.mu.Lock()
		keys, down := s.keys, s.down
		s.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(JWKS(keys...))
	}))
	t.Cleanup(s.Close)
	return s
}

// SetKeys replaces the served keys (a rotation).
func (s *Server) SetKeys(keys ...Key) {
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
}

// SetDown makes the server answer 503 (down) or the keys again.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}
