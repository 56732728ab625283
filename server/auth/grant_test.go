package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestReload: a reload swaps the tokens whole; a bad list, or one that
// would leave no way in, keeps the current ones.
func TestReload(t *testing.T) {
	a, err := New([]Entry{{Token: "old-token", User: "alice", Source: "a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload([]Entry{{Token: "new-token", User: "alice", Source: "a:1"}, {Token: "pub-token", User: "alice", Scope: ScopePublish, Source: "a:2"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Match("old-token"); ok {
		t.Error("a removed token still matches")
	}
	if u, s, ok := a.MatchScope("pub-token"); !ok || u != "alice" || s != ScopePublish {
		t.Errorf("the new publish token: %q %v %v", u, s, ok)
	}
	for name, entries := range map[string][]Entry{
		"duplicate": {{Token: "x-token", User: "a", Source: "f:1"}, {Token: "x-token", User: "b", Source: "f:2"}},
		"empty":     nil,
	} {
		if err := a.Reload(entries); err == nil {
			t.Errorf("%s: reloaded", name)
		}
		if _, ok := a.Match("new-token"); !ok {
			t.Errorf("%s: the current token was dropped", name)
		}
	}
	if err := a.Reload(nil); err != ErrReloadDisables {
		t.Errorf("an empty list: %v", err)
	}
	// With JWT, no static token is a valid state.
	a.UseJWT(verifierFunc(func(context.Context, string) (Grant, error) { return Grant{}, ErrReloadDisables }))
	if err := a.Reload(nil); err != nil || !a.Enabled() {
		t.Errorf("an empty list beside JWT: %v, enabled %v", err, a.Enabled())
	}
	// Reloads race with requests without tearing.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if i%2 == 0 {
					_ = a.Reload([]Entry{{Token: "new-token", User: "alice"}})
				} else if u, ok := a.Match("new-token"); ok && u != "alice" {
					t.Error("torn table")
				}
			}
		}()
	}
	wg.Wait()
}

type verifierFunc func(context.Context, string) (Grant, error)

func (f verifierFunc) Verify(ctx context.Context, token string) (Grant, error) { return f(ctx, token) }

// TestRequire: the refusals of each kind of missing permission.
func TestRequire(t *testing.T) {
	req := func(g *Grant) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/instance-ai/chat/t", nil)
		if g != nil {
			r = r.WithContext(withGrant(r.Context(), *g))
		}
		return r
	}
	for _, c := range []struct {
		name  string
		g     *Grant
		need  Perm
		code  string
		scope string
	}{
		{"single-user mode", nil, PermWrite, "", ""},
		{"decided elsewhere", &Grant{Perms: 0}, 0, "", ""},
		{"has it", &Grant{Perms: PermAPI}, PermWrite, "", ""},
		{"read only", &Grant{Perms: PermRead}, PermWrite, "insufficient_scope", "write"},
		{"API token publishing", &Grant{Perms: PermAPI}, PermPublish, "publish_scope_required", "publish"},
		{"publish token reading", &Grant{Perms: PermPublish}, PermRead, "publish_token", "read"},
	} {
		e := Require(req(c.g), c.need)
		switch {
		case c.code == "" && e != nil:
			t.Errorf("%s: %v", c.name, e)
		case c.code != "" && (e == nil || e.Status != http.StatusForbidden || e.Detail.Code != c.code ||
			e.Detail.Details["scope"] != c.scope || e.Detail.Details["field"] != "Authorization"):
			t.Errorf("%s: %+v", c.name, e)
		}
	}
	rec := httptest.NewRecorder()
	Deny(rec, Require(req(&Grant{Perms: PermRead}), PermWrite))
	if rec.Code != 403 || !strings.Contains(rec.Header().Get("WWW-Authenticate"), `error="insufficient_scope", scope="write"`) {
		t.Errorf("deny: %d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

func TestPermsAndThreads(t *testing.T) {
	if p := ParsePerms([]string{"openid", "read", "publish", "read"}); p != PermRead|PermPublish || p.String() != "read publish" {
		t.Errorf("perms %v", p)
	}
	if Perm(0).String() != "none" {
		t.Error("no perms")
	}
	var all *Threads
	if !all.Allows("anything") {
		t.Error("a nil limit refuses")
	}
	every := ParseThreads([]string{"*"})
	if !every.Allows("x") {
		t.Error(`"*" refuses`)
	}
}
