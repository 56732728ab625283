package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth/jwtauth/jwttest"
	"github.com/threadline/threadline/server/servertest"
)

// waitLog waits until the log holds want.
func waitLog(t *testing.T, logs *servertest.LogBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeReloadsTokensOnSIGHUP: SIGHUP re-reads the tokens file: a new
// token works at once and a removed one is refused, while a stream opened
// with the removed token keeps flowing; a file that does not parse keeps
// the current tokens and says why in the log, without any token.
func TestServeReloadsTokensOnSIGHUP(t *testing.T) {
	const first, second = "first-token-0123456789abcdef", "second-token-0123456789abcdef"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(first+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, logs := startServe(t, "-tokens-file", file)
	chat := func(token string) int {
		req, _ := http.NewRequest("POST", url+"/instance-ai/chat/t1", strings.NewReader(`{"message":"simple hi"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := chat(first); got != http.StatusAccepted && got != http.StatusOK {
		t.Fatalf("chat with the first token: %d", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/instance-ai/events/t1", nil)
	req.Header.Set("Authorization", "Bearer "+first)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", res, err)
	}
	stream := servertest.ReadStream(t, res, cancel, servertest.DefaultBacklog)
	stream.Until(10*time.Second, servertest.IsType(instanceai.TypeRunFinish))

	if err := os.WriteFile(file, []byte(second+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "SIGHUP: tokens reloaded")
	for token, want := range map[string]int{first: 401, second: 200} {
		if got := get(t, url+"/instance-ai/threads", token); got != want {
			t.Errorf("after the reload, token %q: %d, want %d", token[:6], got, want)
		}
	}
	// The stream opened with the removed token still follows the thread:
	// it gets the run the new token starts.
	if got := chat(second); got != http.StatusAccepted && got != http.StatusOK {
		t.Fatalf("chat with the second token: %d", got)
	}
	frames := stream.Until(10*time.Second, servertest.IsType(instanceai.TypeRunFinish))
	if len(frames) == 0 || frames[len(frames)-1].Decoded.Type != instanceai.TypeRunFinish {
		t.Fatalf("the open stream did not carry the new run: %d frames", len(frames))
	}

	// A broken file keeps the current tokens.
	if err := os.WriteFile(file, []byte(second+" alice\nthird-token-without-a-user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "SIGHUP: tokens not reloaded")
	if got := get(t, url+"/instance-ai/threads", second); got != 200 {
		t.Errorf("after a failed reload, the current token: %d", got)
	}
	log := logs.String()
	if !strings.Contains(log, file+":2") {
		t.Errorf("the failed reload does not name the line:\n%s", log)
	}
	for _, token := range []string{first, second, "third-token"} {
		if strings.Contains(log, token) {
			t.Errorf("the log shows a token:\n%s", log)
		}
	}
}

// TestServeWithJWT: the JWT flags take tokens end to end, beside static
// ones, and refuse configurations that cannot work.
func TestServeWithJWT(t *testing.T) {
	secret := []byte("a-secret-of-at-least-thirty-two-bytes")
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	key := jwttest.ECKey(t, "k1")
	jwks := jwttest.Serve(t, key)
	url, logs := startServe(t, "-tokens", "static-token-0123456789=alice", "-jwt-secret-file", file, "-jwt-jwks", jwks.URL,
		"-jwt-audience", "threadline")
	claims := jwttest.Claims("carol", map[string]any{"aud": "threadline"})
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"static":         {"static-token-0123456789", 200},
		"HS256":          {jwttest.HS256(t, secret, claims), 200},
		"ES256":          {key.Sign(t, claims), 200},
		"wrong audience": {jwttest.HS256(t, secret, jwttest.Claims("carol", map[string]any{"aud": "other"})), 401},
	} {
		if got := get(t, url+"/instance-ai/threads", c.token); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
	if log := logs.String(); !strings.Contains(log, "jwt=true") || !strings.Contains(log, "keys=1") || strings.Contains(log, string(secret)) {
		t.Errorf("start-up log:\n%s", log)
	}
	for _, args := range [][]string{
		{"-jwt-audience", "threadline"},
		{"-jwt-secret", string(secret), "-jwt-secret-file", file},
		{"-jwt-jwks", filepath.Join(t.TempDir(), "missing.json")},
	} {
		err := run(context.Background(), append([]string{"serve", "-store", "memory"}, args...), &bytes.Buffer{}, &bytes.Buffer{})
		if exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

// TestConfigurationReferenceMatchesFlags keeps the configuration
// reference's flag table (docs/configuration.md) equal to `threadline help
// serve`: every flag in both, each with its variable.
func TestConfigurationReferenceMatchesFlags(t *testing.T) {
	var help bytes.Buffer
	if err := run(context.Background(), []string{"serve", "-h"}, &help, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	flags := map[string]string{} // flag -> variable
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	envOf := regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	text := help.String()
	locs := flagLine.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := text[loc[2]:loc[3]]
		if m := envOf.FindStringSubmatch(text[loc[0]:end]); m != nil {
			flags[name] = m[1]
		} else {
			flags[name] = ""
		}
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table is the guide's opening section, before its first "## ".
	section, ok := strings.CutPrefix(string(doc), "# Configuration\n")
	if !ok {
		t.Fatal("docs/configuration.md does not open with its # Configuration title")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| ([^|]*) \\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		name, env := m[1], m[2]
		documented[name] = true
		want, ok := flags[name]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md documents --%s, which serve does not have", name)
		case want != "" && !strings.Contains(env, "`"+want+"`"):
			t.Errorf("docs/configuration.md gives --%s the variable %s, serve says %s", name, strings.TrimSpace(env), want)
		}
	}
	if len(flags) < 40 || len(documented) < 40 {
		t.Fatalf("read %d flags from the help and %d rows from docs/configuration.md: the parsing is off", len(flags), len(documented))
	}
	var missing []string
	for name := range flags {
		if !documented[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md's flag table lacks --%s", strings.Join(missing, ", --"))
	}
}
