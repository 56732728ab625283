package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/auth/jwtauth"
	"github.com/threadline/threadline/server/auth/jwtauth/jwttest"
	"github.com/threadline/threadline/server/openapi"
	"github.com/threadline/threadline/server/servertest"
)

var jwtSecret = []byte("the-apps-shared-secret-0123456789abcdef")

// jwtServer is a server that takes alice's static token and JWTs: HS256
// with jwtSecret, RS256 and ES256 with the keys of a JWKS served by the
// test, aud "threadline" and iss "https://app.example" required.
type jwtServer struct {
	*harness
	store instanceai.Store
	jwks  *jwttest.Server
	rsa   jwttest.Key
	logs  *servertest.LogBuffer
}

func startJWT(t *testing.T, queryToken bool) *jwtServer {
	t.Helper()
	s := &jwtServer{rsa: jwttest.RSAKey(t, "rsa-1"), logs: &servertest.LogBuffer{}, store: servertest.OpenStore(t, "memory")}
	s.jwks = jwttest.Serve(t, s.rsa)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := jwtauth.New(ctx, jwtauth.Config{Secret: jwtSecret, JWKS: s.jwks.URL, Audience: "threadline",
		Issuer: "https://app.example", Leeway: jwtauth.DefaultLeeway})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New([]auth.Entry{{Token: aliceToken, User: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	a.UseJWT(v)
	if queryToken {
		a.AllowQueryToken()
	}
	s.harness = start(t, s.store, servertest.Options{Config: server.Config{Auth: a}, Logs: s.logs})
	return s
}

// token mints an HS256 token for user that the server takes, with extra
// claims added (or, set to nil, removed).
func (s *jwtServer) token(t *testing.T, user string, extra map[string]any) string {
	c := map[string]any{"aud": "threadline", "iss": "https://app.example"}
	for k, v := range extra {
		c[k] = v
	}
	return jwttest.HS256(t, jwtSecret, jwttest.Claims(user, c))
}

// answer is a request's status, error code and WWW-Authenticate header.
type answer struct {
	status      int
	code        string
	challenge   string
	body        string
	scopeDetail string
}

func (s *jwtServer) call(t *testing.T, token, method, path, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		return answer{} // a handler that holds its answer (a stream): it was let through
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, challenge: res.Header.Get("WWW-Authenticate")}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		raw, _ := io.ReadAll(res.Body)
		a.body = string(raw)
		var out struct {
			Error struct {
				Code    string         `json:"code"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &out) == nil {
			a.code = out.Error.Code
			a.scopeDetail, _ = out.Error.Details["scope"].(string)
		}
	}
	return a
}

// TestJWTAuthentication: a valid JWT of each key source acts for its sub,
// threads are per user across static and JWT callers, and every refused
// token gets the very answer an unknown static token gets; nothing of a
// token or of its claims reaches the log.
func TestJWTAuthentication(t *testing.T) {
	s := startJWT(t, false)
	ec := jwttest.ECKey(t, "ec-2")

	carol := s.token(t, "carol", nil)
	if a := s.call(t, carol, "POST", "/instance-ai/threads", `{"id":"carols"}`); a.status != http.StatusCreated {
		t.Fatalf("carol creates a thread: %+v", a)
	}
	rs := s.rsa.Sign(t, jwttest.Claims("carol", map[string]any{"aud": "threadline", "iss": "https://app.example"}))
	var page servertest.ThreadPage
	if status := s.As(rs).DoInto("GET", "/instance-ai/threads", "", &page); status != 200 || len(page.Threads) != 1 || page.Threads[0].ID != "carols" {
		t.Fatalf("carol's RS256 token lists %d %+v", status, page)
	}
	// Another user, static or JWT, does not see it: 404, as ever.
	if a := s.call(t, aliceToken, "GET", "/instance-ai/threads/carols/status", ""); a.status != 404 || a.code != "thread_not_found" {
		t.Fatalf("alice reads carol's thread: %+v", a)
	}
	if a := s.call(t, s.token(t, "dave", nil), "GET", "/instance-ai/threads/carols/messages", ""); a.status != 404 {
		t.Fatalf("dave reads carol's thread: %+v", a)
	}
	// A key rotated in after the start: its kid is fetched on first use.
	s.jwks.SetKeys(s.rsa, ec)
	es := ec.Sign(t, jwttest.Claims("carol", map[string]any{"aud": "threadline", "iss": "https://app.example"}))
	if a := s.call(t, es, "GET", "/instance-ai/threads/carols/status", ""); a.status != 200 {
		t.Fatalf("a token of the rotated-in key: %+v", a)
	}

	unknown := s.call(t, "static-token-nobody-has-0000", "GET", "/instance-ai/threads", "")
	if unknown.status != 401 || unknown.code != "invalid_token" || !strings.Contains(unknown.challenge, `error="invalid_token"`) {
		t.Fatalf("an unknown static token: %+v", unknown)
	}
	pubOnly := jwttest.RSAKey(t, "rsa-1") // the kid of the set, another key
	refused := map[string]string{
		"expired":                  s.token(t, "carol", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}),
		"not yet valid":            s.token(t, "carol", map[string]any{"nbf": time.Now().Add(time.Hour).Unix()}),
		"no exp":                   s.token(t, "carol", map[string]any{"exp": nil}),
		"wrong audience":           s.token(t, "carol", map[string]any{"aud": "another-service"}),
		"wrong issuer":             s.token(t, "carol", map[string]any{"iss": "https://evil.example"}),
		"another secret":           jwttest.HS256(t, []byte("guessed-secret-guessed-secret-000"), jwttest.Claims("carol", map[string]any{"aud": "threadline", "iss": "https://app.example"})),
		"another key, same kid":    pubOnly.Sign(t, jwttest.Claims("carol", map[string]any{"aud": "threadline", "iss": "https://app.example"})),
		"alg none":                 "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + strings.Split(carol, ".")[1] + ".",
		"signature cut":            carol[:strings.LastIndexByte(carol, '.')+1],
		"payload of another token": strings.Split(carol, ".")[0] + "." + strings.Split(s.token(t, "mallory", nil), ".")[1] + "." + strings.Split(carol, ".")[2],
	}
	for name, token := range refused {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/instance-ai/threads", ""}, {"POST", "/instance-ai/chat/carols", `{"message":"hi"}`},
			{"GET", "/agui/threads/carols/events", ""}, {"POST", "/publish/threads/carols/runs", `{}`},
		} {
			a := s.call(t, token, c.method, c.path, c.body)
			if a.status != 401 || a.code != "invalid_token" || a.challenge != unknown.challenge || a.body != unknown.body {
				t.Errorf("%s on %s %s: %+v, want the answer of an unknown token %+v", name, c.method, c.path, a, unknown)
			}
		}
	}
	logs := s.logs.String()
	if !strings.Contains(logs, "bearer token refused") {
		t.Fatalf("no refusal logged at debug level:\n%s", logs)
	}
	for name, token := range refused {
		for _, part := range strings.Split(token, ".") {
			if len(part) > 8 && strings.Contains(logs, part) {
				t.Errorf("the log holds a part of the %s token", name)
			}
		}
	}
	for _, claim := range []string{"mallory", "another-service", "evil.example", "rsa-1", "ec-2", string(jwtSecret)} {
		if strings.Contains(logs, claim) {
			t.Errorf("the log holds %q", claim)
		}
	}
}

// TestJWTScopes: the scope claim limits a token to read, write and/or
// publish; a token without it reads and writes but does not publish, as
// a static API token; a refusal is 403 naming the missing scope.
func TestJWTScopes(t *testing.T) {
	s := startJWT(t, false)
	full := s.token(t, "carol", nil)
	read := s.token(t, "carol", map[string]any{"scope": "read"})
	write := s.token(t, "carol", map[string]any{"scope": []string{"write"}})
	publish := s.token(t, "carol", map[string]any{"scope": "publish"})
	nothing := s.token(t, "carol", map[string]any{"scope": "openid profile"})
	s.As(full).Chat("carols", "simple hi")
	waitRunFinish(t, s.store, "carols", 10*time.Second)

	for _, c := range []struct {
		name, token, method, path, body string
		status                          int
		code, scope                     string
	}{
		{"read lists", read, "GET", "/instance-ai/threads", "", 200, "", ""},
		{"read reads messages", read, "GET", "/instance-ai/threads/carols/messages", "", 200, "", ""},
		{"read chats", read, "POST", "/instance-ai/chat/carols", `{"message":"simple"}`, 403, "insufficient_scope", "write"},
		{"read cancels", read, "POST", "/instance-ai/chat/carols/cancel", "", 403, "insufficient_scope", "write"},
		{"read confirms", read, "POST", "/instance-ai/confirm/req-1", `{"approved":true}`, 403, "insufficient_scope", "write"},
		{"read renames", read, "PATCH", "/instance-ai/threads/carols", `{"title":"x"}`, 403, "insufficient_scope", "write"},
		{"read runs", read, "POST", "/run-agent", `{}`, 403, "insufficient_scope", "write"},
		{"read publishes", read, "POST", "/publish/threads/carols/runs", `{}`, 403, "publish_scope_required", "publish"},
		{"write lists", write, "GET", "/instance-ai/threads", "", 403, "insufficient_scope", "read"},
		{"write follows a stream", write, "GET", "/agui/threads/carols/events", "", 403, "insufficient_scope", "read"},
		{"write renames", write, "PATCH", "/instance-ai/threads/carols", `{"title":"renamed"}`, 200, "", ""},
		{"publish reads", publish, "GET", "/instance-ai/threads", "", 403, "publish_token", "read"},
		{"publish publishes", publish, "POST", "/publish/threads/carols/runs", `{}`, 201, "", ""},
		{"no scope publishes", full, "POST", "/publish/threads/carols/runs", `{}`, 403, "publish_scope_required", "publish"},
		{"none of ours reads", nothing, "GET", "/instance-ai/threads", "", 403, "insufficient_scope", "read"},
		// The CopilotKit single endpoint: the method in the body decides.
		{"read asks info", read, "POST", "/copilotkit", `{"method":"info"}`, 200, "", ""},
		{"read stops", read, "POST", "/copilotkit", `{"method":"agent/stop","params":{"agentId":"default","threadId":"carols"}}`, 403, "insufficient_scope", "write"},
		{"write asks info", write, "POST", "/copilotkit", `{"method":"info"}`, 403, "insufficient_scope", "read"},
	} {
		a := s.call(t, c.token, c.method, c.path, c.body)
		if a.status != c.status || a.code != c.code || a.scopeDetail != c.scope {
			t.Errorf("%s: %+v, want %d %s %s", c.name, a, c.status, c.code, c.scope)
		}
		if a.code == "insufficient_scope" && !strings.Contains(a.challenge, `error="insufficient_scope"`) {
			t.Errorf("%s: challenge %q", c.name, a.challenge)
		}
	}
	// Static tokens keep their scopes.
	if a := s.call(t, aliceToken, "POST", "/publish/threads/alices/runs", `{}`); a.status != 403 || a.code != "publish_scope_required" {
		t.Errorf("a static API token publishes: %+v", a)
	}
}

// TestJWTRouteScopes: every authenticated route needs exactly the scope
// this table names; a new route fails here until it is classified.
func TestJWTRouteScopes(t *testing.T) {
	s := startJWT(t, false)
	want := map[string]string{
		"POST /instance-ai/chat/{threadId}":                     "write",
		"POST /instance-ai/chat/{threadId}/cancel":              "write",
		"GET /instance-ai/events/{threadId}":                    "read",
		"POST /instance-ai/confirm/{requestId}":                 "write",
		"GET /instance-ai/threads/{threadId}/status":            "read",
		"GET /instance-ai/threads/{threadId}/messages":          "read",
		"GET /instance-ai/threads":                              "read",
		"POST /instance-ai/threads":                             "write",
		"PATCH /instance-ai/threads/{threadId}":                 "write",
		"DELETE /instance-ai/threads/{threadId}":                "write",
		"POST /publish/threads/{threadId}/runs":                 "publish",
		"POST /publish/threads/{threadId}/runs/{runId}/attach":  "publish",
		"POST /publish/threads/{threadId}/runs/{runId}/events":  "publish",
		"POST /publish/threads/{threadId}/runs/{runId}/confirm": "publish",
		"POST /publish/threads/{threadId}/runs/{runId}/finish":  "publish",
		"GET /metrics":                                       "read",
		"POST /generate":                                     "write",
		"POST /modify":                                       "write",
		"POST /iterate":                                      "write",
		"POST /validate":                                     "read",
		"GET /iterations/{workflowId}":                       "read",
		"GET /feedback/{workflowId}":                         "read",
		"GET /projects":                                      "read",
		"GET /projects/stats":                                "read",
		"POST /projects/{name}":                              "write",
		"GET /projects/{name}":                               "read",
		"DELETE /projects/{name}":                            "write",
		"PUT /projects/{name}/settings":                      "write",
		"GET /projects/{name}/workflows":                     "read",
		"GET /projects/{name}/workflows/{filename}":          "read",
		"PUT /projects/{name}/workflows/{filename}":          "write",
		"DELETE /projects/{name}/workflows/{filename}":       "write",
		"GET /projects/{name}/workflows/{filename}/versions": "read",
		"GET /projects/{name}/workflows/{filename}/versions/{version_filename}":          "read",
		"DELETE /projects/{name}/workflows/{filename}/versions/{version_filename}":       "write",
		"GET /projects/{name}/workflows/{filename}/versions/{version_filename}/content":  "read",
		"POST /projects/{name}/workflows/{filename}/versions/{version_filename}/restore": "write",
		"POST /projects/{name}/workflows/{filename}/cleanup-versions":                    "write",
		"GET /projects/{name}/workflows/{filename}/compare/{version1}/{version2}":        "read",
		"POST /run-agent":                                  "write",
		"GET /agui/threads/{threadId}/events":              "read",
		"GET /copilotkit/info":                             "read",
		"POST /copilotkit/agent/{agentId}/run":             "write",
		"POST /copilotkit/agent/{agentId}/connect":         "read",
		"POST /copilotkit/agent/{agentId}/stop/{threadId}": "write",
		"POST /copilotkit/transcribe":                      "write",
		"POST /copilotkit":                                 "per method",
		"GET /copilotkit/threads":                          "read",
		"POST /copilotkit/threads/subscribe":               "read",
		"PATCH /copilotkit/threads/{threadId}":             "write",
		"POST /copilotkit/threads/{threadId}/archive":      "write",
		"DELETE /copilotkit/threads/{threadId}":            "write",
	}
	tokens := map[string]string{
		"read":    s.token(t, "carol", map[string]any{"scope": "read"}),
		"write":   s.token(t, "carol", map[string]any{"scope": "write"}),
		"publish": s.token(t, "carol", map[string]any{"scope": "publish"}),
	}
	variable := regexp.MustCompile(`\{[^}]+\}`)
	seen := map[string]bool{}
	for _, rt := range s.App.Routes() {
		if rt.Method == http.MethodHead || rt.Method == http.MethodOptions {
			continue
		}
		key := rt.Method + " " + rt.Path
		path := variable.ReplaceAllString(rt.Path, "x")
		if a := s.call(t, "", rt.Method, path, `{}`); a.status != http.StatusUnauthorized {
			continue // a public route (/health, the console, the API's description)
		}
		seen[key] = true
		class, ok := want[key]
		if !ok {
			t.Errorf("%s: an authenticated route this table does not classify (see routeNeed)", key)
			continue
		}
		if class == "per method" {
			continue // TestJWTScopes
		}
		for scope, token := range tokens {
			a := s.call(t, token, rt.Method, path, `{}`)
			forbidden := a.status == http.StatusForbidden &&
				slices.Contains([]string{"insufficient_scope", "publish_scope_required", "publish_token"}, a.code)
			if forbidden == (scope == class) {
				t.Errorf("%s with a %s token: %+v (the route needs %s)", key, scope, a, class)
			}
			if forbidden && a.scopeDetail != class {
				t.Errorf("%s with a %s token: names %q missing, want %q", key, scope, a.scopeDetail, class)
			}
			if forbidden && !strings.Contains(documented403(t, rt.Method, rt.Path), "`"+a.code+"`") {
				t.Errorf("%s answers a %s token %s, which its OpenAPI 403 does not list", key, scope, a.code)
			}
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("%s: in the table, but no such authenticated route", key)
		}
	}
}

// openAPIOperation is an OpenAPI operation's answers, by status.
type openAPIOperation struct {
	Responses map[string]struct {
		Description string `json:"description"`
	} `json:"responses"`
}

// openAPIPaths is the OpenAPI document's operations by path and method,
// read once.
var openAPIPaths = sync.OnceValues(func() (map[string]map[string]openAPIOperation, error) {
	body, err := openapi.Document("dev")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Paths map[string]map[string]openAPIOperation `json:"paths"`
	}
	err = json.Unmarshal(body, &doc)
	return doc.Paths, err
})

// documented403 is the description of the 403 answer the OpenAPI document
// gives the route ("" when it has none).
func documented403(t *testing.T, method, path string) string {
	t.Helper()
	paths, err := openAPIPaths()
	if err != nil {
		t.Fatal(err)
	}
	return paths[path][strings.ToLower(method)].Responses["403"].Description
}

// TestJWTThreads: the threads claim limits a token to thread ids and
// prefixes; another thread is answered as another user's: 404, not
// created, not listed, whatever the surface.
func TestJWTThreads(t *testing.T) {
	s := startJWT(t, false)
	full := s.token(t, "carol", nil)
	for _, id := range []string{"t-123", "proj-7:a", "other"} {
		s.As(full).Chat(id, "simple hi")
		waitRunFinish(t, s.store, id, 10*time.Second)
	}
	limited := s.token(t, "carol", map[string]any{"threads": []string{"t-123", "proj-7:*"}})
	var page servertest.ThreadPage
	if status := s.As(limited).DoInto("GET", "/instance-ai/threads", "", &page); status != 200 {
		t.Fatalf("list: %d", status)
	}
	var ids []string
	for _, th := range page.Threads {
		ids = append(ids, th.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"proj-7:a", "t-123"}) {
		t.Fatalf("the limited token lists %v", ids)
	}
	// Its pages are pages of its threads: one each, the first saying more
	// follow, whatever other threads of the user lie between.
	var listed []string
	for p := 1; p <= 2; p++ {
		var one servertest.ThreadPage
		if status := s.As(limited).DoInto("GET", fmt.Sprintf("/instance-ai/threads?limit=1&page=%d", p), "", &one); status != 200 ||
			len(one.Threads) != 1 || one.HasMore != (p == 1) {
			t.Fatalf("page %d of one: %d %+v", p, status, one)
		}
		listed = append(listed, one.Threads[0].ID)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, ids) {
		t.Fatalf("paged one by one, the limited token lists %v", listed)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/instance-ai/threads/t-123/status", "", 200},
		{"GET", "/instance-ai/threads/proj-7:a/messages", "", 200},
		{"GET", "/instance-ai/threads/other/status", "", 404},
		{"GET", "/instance-ai/threads/other/messages", "", 404},
		{"GET", "/instance-ai/events/other", "", 404},
		{"GET", "/agui/threads/other/events", "", 404},
		{"POST", "/instance-ai/chat/other", `{"message":"simple"}`, 404},
		{"POST", "/instance-ai/chat/other/cancel", "", 404},
		{"PATCH", "/instance-ai/threads/other", `{"title":"x"}`, 404},
		{"DELETE", "/instance-ai/threads/other", "", 404},
		{"POST", "/instance-ai/chat/brand-new", `{"message":"simple"}`, 404},
		{"POST", "/instance-ai/threads", `{"id":"brand-new-2"}`, 404},
		{"POST", "/instance-ai/threads", `{}`, 404},
		{"POST", "/run-agent", servertest.RunAgentInput("brand-new-3", "r1", "simple", nil), 404},
		{"PATCH", "/copilotkit/threads/other", `{"agentId":"default","name":"x"}`, 404},
		{"POST", "/instance-ai/threads", `{"id":"proj-7:b"}`, 201},
	} {
		a := s.call(t, limited, c.method, c.path, c.body)
		if a.status != c.status || (c.status == 404 && a.code != "thread_not_found") {
			t.Errorf("%s %s: %+v, want %d", c.method, c.path, a, c.status)
		}
	}
	for _, id := range []string{"brand-new", "brand-new-2", "brand-new-3"} {
		if _, err := s.store.GetThread(context.Background(), id); err == nil {
			t.Errorf("a limited token created thread %s", id)
		}
	}
	if _, err := s.store.GetThread(context.Background(), "other"); err != nil {
		t.Errorf("the thread outside the limit is gone: %v", err)
	}

	// A confirmation of a thread outside the limit cannot be answered.
	owner := s.As(full)
	runID := owner.Chat("asks", "confirm")
	frames := owner.Connect("asks", "", false).Until(10*time.Second, isType(instanceai.TypeConfirmRequest))
	req := frames[len(frames)-1].Decoded.Payload.(*instanceai.ConfirmationRequest)
	if a := s.call(t, limited, "POST", "/instance-ai/confirm/"+req.RequestID, `{"approved":true}`); a.status != 404 {
		t.Errorf("the limited token answers a confirmation of another thread: %+v", a)
	}
	if out := owner.Confirm(req.RequestID, `{"approved":true}`); out["ok"] != true || out["runId"] != runID {
		t.Errorf("the owner's answer after the refusal: %v", out)
	}
}

// TestJWTQueryToken: with --query-token an EventSource passes a JWT as
// ?access_token=, refused like a header token when bad.
func TestJWTQueryToken(t *testing.T) {
	s := startJWT(t, true)
	full := s.token(t, "carol", nil)
	s.As(full).Chat("carols", "simple hi")
	waitRunFinish(t, s.store, "carols", 10*time.Second)
	conn := s.Server.ConnectQuery("carols", "access_token="+full, "", true)
	if _, err := conn.Next(5 * time.Second); err != nil {
		t.Fatalf("a stream on a query JWT: %v", err)
	}
	conn.Close()
	expired := s.token(t, "carol", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	if a := s.call(t, "", "GET", "/instance-ai/events/carols?access_token="+expired, ""); a.status != 401 || a.code != "invalid_token" {
		t.Fatalf("an expired query JWT: %+v", a)
	}
	if strings.Contains(s.logs.String(), strings.Split(full, ".")[1]) {
		t.Fatal("the query token reached the log")
	}
}
