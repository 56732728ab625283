package auth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	got, err := ParseList(" tok-a=alice, tok+b/c==bob ,x=alice", "-tokens")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Token: "tok-a", User: "alice", Source: "-tokens entry 1"},
		{Token: "tok+b/c=", User: "bob", Source: "-tokens entry 2"},
		{Token: "x", User: "alice", Source: "-tokens entry 3"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseList = %+v, want %+v", got, want)
	}
	if got, err := ParseList("  ", "-tokens"); err != nil || got != nil {
		t.Fatalf("empty list = %v, %v", got, err)
	}
	for list, wantErr := range map[string]string{
		"a=alice,":            "-tokens entry 2: empty entry",
		"secret-one":          "-tokens entry 1: no user",
		"=alice":              "-tokens entry 1: empty token",
		"a=alice,secret-two=": "-tokens entry 2: empty user",
		"sec ret=alice":       "-tokens entry 1: the token must be printable ASCII",
		"sécret=alice":        "-tokens entry 1: the token must be printable ASCII",
		"secret=al ice":       "-tokens entry 1: the user id must not contain",
	} {
		_, err := ParseList(list, "-tokens")
		if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Errorf("ParseList(%q) = %v, want %q…", list, err, wantErr)
			continue
		}
		for _, secret := range []string{"secret", "sec ret", "sécret"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("ParseList(%q): the error shows the token: %v", list, err)
			}
		}
	}
}

func TestParseFile(t *testing.T) {
	file := "\ufeff# team tokens\n\n" +
		"tok-alice alice\n" +
		"   tok-bob=bob   \r\n" +
		"\t# an indented comment\n" +
		"tok-pad== carol\n" +
		"tok-eq==dave\n" +
		"tok-utf8 zoë\n"
	got, err := ParseFile(strings.NewReader(file), "tokens.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Token: "tok-alice", User: "alice", Source: "tokens.txt:3"},
		{Token: "tok-bob", User: "bob", Source: "tokens.txt:4"},
		{Token: "tok-pad==", User: "carol", Source: "tokens.txt:6"},
		{Token: "tok-eq=", User: "dave", Source: "tokens.txt:7"},
		{Token: "tok-utf8", User: "zoë", Source: "tokens.txt:8"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseFile = %+v\nwant %+v", got, want)
	}
	if got, err := ParseFile(strings.NewReader("# nothing\n\n"), "empty"); err != nil || len(got) != 0 {
		t.Fatalf("a file of comments = %v, %v", got, err)
	}

	for file, wantErr := range map[string]string{
		"ok alice\nsecret-1\n":           "f:2: no user",
		"ok alice\n\nsecret-2 bob extra": "f:3: too many fields",
		"secret-3=\n":                    "f:1: empty user",
		"=bob\n":                         "f:1: empty token",
		"sécret-4 bob\n":                 "f:1: the token must be printable ASCII",
		"secret-5 b\x00b\n":              "f:1: the user id must not contain",
		"secret-6 b\xffb\n":              "f:1: the user id must not contain",
		"secret-7=b,b\n":                 "f:1: the user id must not contain",
	} {
		_, err := ParseFile(strings.NewReader(file), "f")
		if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Errorf("ParseFile(%q) = %v, want %q…", file, err, wantErr)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "sécret") {
			t.Errorf("ParseFile(%q): the error shows the token: %v", file, err)
		}
	}
}

func TestNewRejectsDuplicateTokens(t *testing.T) {
	list, _ := ParseList("secret-shared=alice", "-tokens")
	file, _ := ParseFile(strings.NewReader("other bob\nsecret-shared carol\n"), "tokens.txt")
	_, err := New(append(list, file...))
	if err == nil || err.Error() != "tokens.txt:2: duplicate token (already configured at -tokens entry 1)" {
		t.Fatalf("New with a duplicate token: %v", err)
	}
	// One user may have several tokens (rotation).
	a, err := New([]Entry{{Token: "t1", User: "alice"}, {Token: "t2", User: "alice"}, {Token: "t3", User: "bob"}})
	if err != nil || a.Users() != 2 || !a.Enabled() {
		t.Fatalf("New = %v, %v", a, err)
	}
	if _, err := New([]Entry{{Token: "", User: "x", Source: "s"}}); err == nil {
		t.Fatal("New accepted an empty token")
	}
	var none *Authenticator
	if none.Enabled() || none.Users() != 0 {
		t.Fatal("a nil authenticator is enabled")
	}
	if empty, err := New(nil); err != nil || empty.Enabled() {
		t.Fatalf("New(nil) = %v, %v; want single-user mode", empty, err)
	}
}

// TestMatchComparesEveryTokenInConstantTime: Match makes exactly one
// constant-time comparison per configured token, always between two
// SHA-256 digests, whichever token matches and whether one does, and
// resolves each token to its own user.
func TestMatchComparesEveryTokenInConstantTime(t *testing.T) {
	entries := []Entry{{Token: "first-token", User: "alice"}, {Token: "middle", User: "bob"},
		{Token: "last-token-which-is-much-longer-than-the-others", User: "carol"}, {Token: "alice-second", User: "alice"}}
	a, err := New(entries)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	orig := compare
	t.Cleanup(func() { compare = orig })
	compare = func(x, y []byte) int {
		calls++
		if len(x) != sha256.Size || len(y) != sha256.Size {
			t.Fatalf("compared %d and %d bytes, want two digests", len(x), len(y))
		}
		return orig(x, y)
	}
	cases := map[string]string{"first-token": "alice", "middle": "bob", entries[2].Token: "carol", "alice-second": "alice",
		"": "", "first": "", "first-token ": "", "First-token": "", "middlemiddle": "", entries[2].Token[1:]: ""}
	for token, want := range cases {
		calls = 0
		user, ok := a.Match(token)
		if user != want || ok != (want != "") {
			t.Errorf("Match(%q) = %q, %v; want %q", token, user, ok, want)
		}
		if calls != len(entries) {
			t.Errorf("Match(%q) made %d comparisons, want one per token (%d)", token, calls, len(entries))
		}
	}
	var none *Authenticator
	if user, ok := none.Match("first-token"); ok || user != "" {
		t.Fatal("a nil authenticator matched")
	}
}

func TestMiddleware(t *testing.T) {
	a, err := New([]Entry{{Token: "tok-alice", User: "alice"}, {Token: "tok-bob", User: "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(UserFrom(r.Context())))
	})
	serve := func(a *Authenticator, header string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/instance-ai/threads", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		rec := httptest.NewRecorder()
		a.Middleware(echo).ServeHTTP(rec, req)
		return rec
	}
	for header, user := range map[string]string{"Bearer tok-alice": "alice", "bearer tok-bob": "bob", "BEARER  tok-bob ": "bob"} {
		if rec := serve(a, header); rec.Code != http.StatusOK || rec.Body.String() != user {
			t.Errorf("%q: %d %q, want user %s", header, rec.Code, rec.Body.String(), user)
		}
	}
	for header, code := range map[string]string{"": "unauthorized", "Bearer": "unauthorized", "Bearer   ": "unauthorized",
		"Basic tok-alice": "unauthorized", "tok-alice": "unauthorized", "Bearer tok-carol": "invalid_token", "Bearer tok-alic": "invalid_token"} {
		rec := serve(a, header)
		if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") ||
			!strings.Contains(rec.Body.String(), `"code":"`+code+`"`) || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("%q: %d %q %s", header, rec.Code, rec.Header().Get("WWW-Authenticate"), rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), "tok-") {
			t.Errorf("%q: the answer repeats the token: %s", header, rec.Body.String())
		}
	}
	// Single-user mode: everyone is the local user, whatever they send.
	for _, single := range []*Authenticator{nil, {}} {
		for _, header := range []string{"", "Bearer tok-alice"} {
			if rec := serve(single, header); rec.Code != http.StatusOK || rec.Body.String() != LocalUser {
				t.Errorf("single-user mode, %q: %d %q", header, rec.Code, rec.Body.String())
			}
		}
	}
}

func TestLoopbackRule(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.10.20.30:80": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		"[::ffff:127.0.0.1]:9": true, "127.0.0.1": true, "::1": true, "localhost": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.10:8080": false, "10.0.0.1:80": false,
		"example.com:8080": false, "localhost.example.com:80": false, "128.0.0.1:80": false, "[fe80::1]:80": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}

	tokens, err := New([]Entry{{Token: "tok", User: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr     string
		auth     *Authenticator
		insecure bool
		refused  bool
	}{
		{"127.0.0.1:8080", nil, false, false},
		{"localhost:8080", nil, false, false},
		{"0.0.0.0:8080", nil, false, true},
		{":8080", &Authenticator{}, false, true},
		{"0.0.0.0:8080", nil, true, false},
		{"0.0.0.0:8080", tokens, false, false},
		{"192.168.1.10:8080", tokens, true, false},
	} {
		err := CheckListen(c.addr, c.auth, c.insecure)
		if (err != nil) != c.refused {
			t.Errorf("CheckListen(%q, tokens %v, insecure %v) = %v", c.addr, c.auth.Enabled(), c.insecure, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrNoAuthOnNetwork) || !strings.Contains(err.Error(), c.addr) ||
				!strings.Contains(err.Error(), "--insecure-no-auth") || !strings.Contains(err.Error(), "THREADLINE_INSECURE_NO_AUTH=true") {
				t.Errorf("refusal does not say how to proceed: %v", err)
			}
		}
	}
}

// errorShape is every error ParseFile may return: the file name, a line
// number and a fixed reason; nothing of the line's content can appear.
var errorShape = regexp.MustCompile(`^f(:[0-9]+: [a-z][A-Za-z ,;:'"=\x60-]*|: bufio.Scanner: token too long)$`)

// FuzzParseFile: any file either parses into entries that survive a
// round trip through the file format, with each token's line recorded, or
// fails with an error that names a line and shows none of its content.
func FuzzParseFile(f *testing.F) {
	for _, s := range []string{
		"tok alice\n", "tok=alice\n", "# c\n\ntok  alice \r\nb64tok== bob\nx==y\n", "\ufefftok alice", "a b c\n", "=x\n",
		"x=\n", "x\n", "tök a\n", "t a\x00\n", "t a\xff\n", "#only\n", "a=b=c\n", "a =b\n", "t\ta\n", "\n\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseFile(bytes.NewReader(data), "f")
		if err != nil {
			if !errorShape.MatchString(err.Error()) {
				t.Fatalf("error %q is not of the form f:LINE: reason", err)
			}
			return
		}
		var again bytes.Buffer
		for _, e := range entries {
			if e.Token == "" || e.User == "" || !visibleASCII(e.Token) || !ValidUserID(e.User) {
				t.Fatalf("accepted entry %+v", e)
			}
			if !regexp.MustCompile(`^f:[0-9]+$`).MatchString(e.Source) {
				t.Fatalf("source %q", e.Source)
			}
			if strings.HasPrefix(e.Token, "#") {
				// A line starting with # is a comment: this entry came
				// from a later field, which cannot be.
				t.Fatalf("token %q starts a comment", e.Token)
			}
			again.WriteString(e.Token + " " + e.User + "\n")
		}
		reparsed, err := ParseFile(&again, "f")
		if err != nil || len(reparsed) != len(entries) {
			t.Fatalf("round trip of %+v: %+v, %v", entries, reparsed, err)
		}
		for i := range entries {
			if reparsed[i].Token != entries[i].Token || reparsed[i].User != entries[i].User {
				t.Fatalf("round trip changed %+v into %+v", entries[i], reparsed[i])
			}
		}
		if _, err := New(entries); err != nil && !strings.Contains(err.Error(), "duplicate token") {
			t.Fatalf("New: %v", err)
		}
	})
}

func TestQueryToken(t *testing.T) {
	a, err := New([]Entry{{Token: "tok-alice", User: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.URL.RawQuery + " " + r.RequestURI
		_, _ = w.Write([]byte(UserFrom(r.Context())))
	})
	serve := func(method, target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		a.Middleware(echo).ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		return rec
	}
	// Off by default, and the refusal names the flag that turns it on.
	if rec := serve(http.MethodGet, "/instance-ai/events/t?access_token=tok-alice"); rec.Code != http.StatusUnauthorized ||
		!strings.Contains(rec.Body.String(), "--query-token") || strings.Contains(rec.Body.String(), "tok-alice") {
		t.Fatalf("query token while off: %d %s", rec.Code, rec.Body.String())
	}
	a.AllowQueryToken()
	rec := serve(http.MethodGet, "/instance-ai/events/t?lastEventId=4&access_token=tok-alice")
	if rec.Code != http.StatusOK || rec.Body.String() != "alice" {
		t.Fatalf("GET with a query token: %d %q", rec.Code, rec.Body.String())
	}
	if strings.Contains(seen, "tok-alice") || !strings.Contains(seen, "lastEventId=4") {
		t.Fatalf("the handler saw %q", seen)
	}
	if rec := serve(http.MethodGet, "/instance-ai/events/t?access_token=tok-carol"); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "invalid_token") {
		t.Fatalf("a wrong query token: %d %s", rec.Code, rec.Body.String())
	}
	if rec := serve(http.MethodPost, "/instance-ai/chat/t?access_token=tok-alice"); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "access_token") {
		t.Fatalf("POST with a query token: %d %s", rec.Code, rec.Body.String())
	}
}
