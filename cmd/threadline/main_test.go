package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/server/servertest"
)

func TestHelpDocumentsEveryFlagAndItsEnv(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"serve", "-h"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v", err)
	}
	for _, want := range []string{"-addr", "THREADLINE_ADDR", "-store", "THREADLINE_STORE", "-agent", "THREADLINE_AGENT",
		"-script-delay", "THREADLINE_SCRIPT_DELAY", "-max-body", "-allowed-hosts", "THREADLINE_ALLOWED_HOSTS", "-body-timeout", "THREADLINE_BODY_TIMEOUT", "-idle-timeout", "-read-header-timeout", "-max-connections", "THREADLINE_MAX_CONNECTIONS", "-max-connections-per-ip", "-subscriber-queue", "-heartbeat", "-shutdown-timeout", "-log-level",
		"127.0.0.1:8080", defaultStore} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve help lacks %q", want)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"--help"}, &out, &out); err != nil || !strings.Contains(out.String(), "migrate") {
		t.Fatalf("--help: %v %q", err, out.String())
	}
}

// TestVersionAndHelp: version in its three spellings; help for a command
// prints its flags and succeeds; help for an unknown one is a usage error.
func TestVersionAndHelp(t *testing.T) {
	for _, arg := range []string{"version", "-version", "--version"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{arg}, &out, &out); err != nil || out.String() != "threadline dev\n" {
			t.Errorf("%s: %q, %v", arg, out.String(), err)
		}
	}
	for cmd, want := range map[string]string{"serve": "THREADLINE_ADDR", "migrate": "-store", "conformance": "-target"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"help", cmd}, &out, &bytes.Buffer{}); err != nil || !strings.Contains(out.String(), want) {
			t.Errorf("help %s: %v, output lacks %q:\n%s", cmd, err, want, out.String())
		}
	}
	err := run(context.Background(), []string{"help", "nope"}, &bytes.Buffer{}, &bytes.Buffer{})
	if exitCode(err) != 2 || !strings.Contains(err.Error(), `unknown command "nope"`) {
		t.Errorf("help nope: %v (exit %d)", err, exitCode(err))
	}
}

// TestBadFlagsExitTwo: an unknown flag, a bad value or a stray argument
// is a usage error, exit status 2, on every command.
func TestBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "-nope"}, {"serve", "-heartbeat", "abc"}, {"serve", "extra"},
		{"migrate", "-nope"}, {"conformance", "-nope"}, {"conformance", "-timeout", "x"}, {"nope"},
	} {
		err := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if exitCode(err) != 2 {
			t.Errorf("%v: %v, exit %d, want 2", args, err, exitCode(err))
		}
	}
}

// TestServeLogFormatJSON: with -log-format json every log line is a JSON
// object, among them a request line per request and a line per run start
// and finish.
func TestServeLogFormatJSON(t *testing.T) {
	url, logs := startServe(t, "-log-format", "json")
	if got := get(t, url+"/instance-ai/threads", ""); got != 200 {
		t.Fatalf("threads: %d", got)
	}
	res, err := http.Post(url+"/instance-ai/chat/logs", "application/json", strings.NewReader(`{"message":"simple"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d", res.StatusCode)
	}
	seen := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); !seen["run finished"]; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no run finished record in:\n%s", logs.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec struct {
				Level, Msg, Path string
				Thread           string
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Level == "" || rec.Msg == "" {
				t.Fatalf("log line is not a JSON record (%v): %s", err, line)
			}
			switch {
			case rec.Msg == "request" && rec.Path == "/instance-ai/chat/logs":
				seen["request"] = true
			case (rec.Msg == "run started" || rec.Msg == "run finished") && rec.Thread == "logs":
				seen[rec.Msg] = true
			case rec.Msg == "threadline listening":
				seen[rec.Msg] = true
			}
		}
	}
	for _, msg := range []string{"threadline listening", "request", "run started"} {
		if !seen[msg] {
			t.Errorf("no %q record in:\n%s", msg, logs.String())
		}
	}
	if strings.Contains(logs.String(), `"status":"completed"`) == false {
		t.Errorf("the run finished record lacks its status:\n%s", logs.String())
	}
}

func TestEnvironmentAndFlags(t *testing.T) {
	t.Setenv("THREADLINE_ADDR", "127.0.0.1:9999")
	t.Setenv("THREADLINE_SCRIPT_DELAY", "0")
	f, c := serveFlags(&bytes.Buffer{})
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.addr != "127.0.0.1:9999" || c.scriptDelay != 0 {
		t.Fatalf("env not applied: %+v", c)
	}
	f, c = serveFlags(&bytes.Buffer{})
	if err := f.Parse([]string{"-addr", "127.0.0.1:7"}); err != nil || c.addr != "127.0.0.1:7" {
		t.Fatalf("flag does not win over env: %v %+v", err, c)
	}

	t.Setenv("THREADLINE_SCRIPT_DELAY", "soon")
	f, _ = serveFlags(&bytes.Buffer{})
	err := f.Parse(nil)
	var u usageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "THREADLINE_SCRIPT_DELAY") {
		t.Fatalf("bad env value: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"serve", "-agent", "nope", "-store", "memory"}, {"serve", "extra"},
		{"serve", "-store", "memory", "-idle-timeout", "0"}, {"serve", "-store", "memory", "-max-connections", "-1"}} {
		err := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if exitCode(err) != 2 {
			t.Errorf("%v: err %v, exit %d, want 2", args, err, exitCode(err))
		}
	}
}

func TestMigrateThenServe(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"migrate", "-store", db}, &out, &out); err != nil {
		t.Fatalf("migrate: %v (%s)", err, out.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", addr, "-store", db, "-script-delay", "0"}, &out, &bytes.Buffer{})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Post("http://"+addr+"/instance-ai/chat/t1", "application/json", strings.NewReader(`{"message":"simple"}`))
		if err == nil {
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("chat: %d", res.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

// startServe runs `serve args…` until the test ends and waits until it
// answers; it returns the base URL and the server's log.
func startServe(t *testing.T, args ...string) (string, *servertest.LogBuffer) {
	t.Helper()
	addr := servertest.FreeAddr(t)
	logs := &servertest.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "-addr", addr, "-store", "memory", "-script-delay", "0"}, args...), logs, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return "http://" + addr, logs
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url, token string) int {
	t.Helper()
	return hostStatus(t, url, "", token)
}

// TestServeWithTokens: tokens from the variable and from a file both
// authenticate; the log says how callers are authenticated, warns about a
// short token by where it was configured, and never shows a token.
func TestServeWithTokens(t *testing.T) {
	const fromEnv, fromFile, short = "env-token-0123456789abcdef", "file-token-0123456789abcdef", "shorty"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# users\n"+fromFile+" bob\n"+short+"=carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("THREADLINE_TOKENS", fromEnv+"=alice")
	url, logs := startServe(t, "-tokens-file", file)
	threads := url + "/instance-ai/threads"
	for token, want := range map[string]int{"": 401, "nope": 401, fromEnv: 200, fromFile: 200, short: 200} {
		if got := get(t, threads, token); got != want {
			t.Errorf("token %q: %d, want %d", token, got, want)
		}
	}
	log := logs.String()
	for _, want := range []string{"authentication: bearer tokens", "tokens=3", "users=3", "at=" + file + ":3"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	for _, token := range []string{fromEnv, fromFile, short} {
		if strings.Contains(log, token) {
			t.Fatalf("the log shows a token:\n%s", log)
		}
	}
	// The help shows where tokens come from, not the tokens.
	var help bytes.Buffer
	if err := run(context.Background(), []string{"serve", "-h"}, &help, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	if !strings.Contains(help.String(), "THREADLINE_TOKENS") || strings.Contains(help.String(), fromEnv) {
		t.Fatalf("serve -h with THREADLINE_TOKENS set:\n%s", help.String())
	}
}

func TestServeWithoutTokens(t *testing.T) {
	url, logs := startServe(t)
	if got := get(t, url+"/instance-ai/threads", ""); got != 200 {
		t.Fatalf("single-user mode: %d", got)
	}
	if !strings.Contains(logs.String(), "running without authentication") {
		t.Fatalf("the log does not say it runs without authentication:\n%s", logs.String())
	}
}

// TestServePprof: -pprof-addr serves the profiler on its own loopback
// listener; the API's address does not serve it.
func TestServePprof(t *testing.T) {
	addr := servertest.FreeAddr(t)
	url, _ := startServe(t, "-pprof-addr", addr)
	if got := get(t, "http://"+addr+"/debug/pprof/cmdline", ""); got != 200 {
		t.Fatalf("profiler: %d", got)
	}
	if got := get(t, url+"/debug/pprof/cmdline", ""); got != 404 {
		t.Fatalf("the API's address serves the profiler: %d", got)
	}
}

func TestTokenFlagsAndEnvironment(t *testing.T) {
	t.Setenv("THREADLINE_TOKENS", "from-env=alice")
	t.Setenv("THREADLINE_INSECURE_NO_AUTH", "true")
	f, c := serveFlags(&bytes.Buffer{})
	if err := f.Parse(nil); err != nil || c.tokens != "from-env=alice" || !c.insecureNoAuth {
		t.Fatalf("environment not applied: %v %+v", err, c)
	}
	f, c = serveFlags(&bytes.Buffer{})
	if err := f.Parse([]string{"-tokens", "from-flag=bob", "-insecure-no-auth=false"}); err != nil ||
		c.tokens != "from-flag=bob" || c.insecureNoAuth {
		t.Fatalf("flags do not win over the environment: %v %+v", err, c)
	}
	t.Setenv("THREADLINE_INSECURE_NO_AUTH", "maybe")
	f, _ = serveFlags(&bytes.Buffer{})
	if err := f.Parse(nil); err == nil || !strings.Contains(err.Error(), "THREADLINE_INSECURE_NO_AUTH") {
		t.Fatalf("a bad boolean: %v", err)
	}
}

// TestServeRefusals: configuration errors stop serve before it opens the
// store, with exit code 2 and a message that names what to fix (and shows
// no token).
func TestServeRefusals(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad-tokens")
	if err := os.WriteFile(bad, []byte("good-one alice\nsecret-without-user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(t.TempDir(), "dup-tokens")
	if err := os.WriteFile(dup, []byte("secret-twice alice\n\nsecret-twice bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The store would be created if serve got that far.
	store := filepath.Join(t.TempDir(), "never.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-addr", "0.0.0.0:0"}, "--insecure-no-auth"},
		{[]string{"-addr", ":0"}, "THREADLINE_INSECURE_NO_AUTH=true"},
		{[]string{"-tokens-file", bad}, bad + ":2: no user"},
		{[]string{"-tokens-file", dup}, dup + ":3: duplicate token (already configured at " + dup + ":1)"},
		{[]string{"-tokens-file", filepath.Join(t.TempDir(), "missing")}, "--tokens-file"},
		{[]string{"-tokens", "secret-a=alice,=bob"}, "--tokens (THREADLINE_TOKENS) entry 2: empty token"},
		{[]string{"-pprof-addr", "0.0.0.0:6060"}, "--pprof-addr 0.0.0.0:6060: the profiler has no authentication"},
		{[]string{"-log-format", "xml"}, `--log-format "xml": use text or json`},
	} {
		err := run(context.Background(), append([]string{"serve", "-store", "sqlite:" + store}, c.args...), &bytes.Buffer{}, &bytes.Buffer{})
		if exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v (exit %d), want %q", c.args, err, exitCode(err), c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("serve %v: the error shows a token: %v", c.args, err)
		}
	}
	if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused serve opened the store: %v", err)
	}
}

// hostStatus is the status of GET url with the request's Host set to host
// (the URL's when empty).
func hostStatus(t *testing.T, url, host, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestServeHostCheck: in single-user mode on loopback a foreign Host is
// refused, -allowed-hosts (or its variable) admits more names; with
// tokens, a caller must prove itself anyway and the Host is not checked.
func TestServeHostCheck(t *testing.T) {
	url, _ := startServe(t)
	threads := url + "/instance-ai/threads"
	if got := hostStatus(t, threads, "attacker.example", ""); got != http.StatusForbidden {
		t.Fatalf("single-user mode, Host attacker.example: %d", got)
	}
	if got := hostStatus(t, threads, "localhost:8080", ""); got != http.StatusOK {
		t.Fatalf("single-user mode, Host localhost: %d", got)
	}
	t.Setenv("THREADLINE_ALLOWED_HOSTS", "box.lan")
	url, _ = startServe(t, "-allowed-hosts", "threads.internal")
	threads = url + "/instance-ai/threads"
	for host, want := range map[string]int{"threads.internal": 200, "box.lan": 403, "attacker.example": 403, "127.0.0.1": 200} {
		if got := hostStatus(t, threads, host, ""); got != want {
			t.Errorf("-allowed-hosts threads.internal, Host %s: %d, want %d", host, got, want)
		}
	}
	url, _ = startServe(t)
	if got := hostStatus(t, url+"/instance-ai/threads", "box.lan", ""); got != http.StatusOK {
		t.Fatalf("THREADLINE_ALLOWED_HOSTS=box.lan, Host box.lan: %d", got)
	}
	t.Setenv("THREADLINE_ALLOWED_HOSTS", "")
	const token = "host-check-token-0123456789"
	url, _ = startServe(t, "-tokens", token+"=alice")
	if got := hostStatus(t, url+"/instance-ai/threads", "attacker.example", token); got != http.StatusOK {
		t.Fatalf("with tokens, Host attacker.example: %d", got)
	}
}

// TestServeConnectionFlags: -idle-timeout and -max-connections reach the
// server: an idle keep-alive connection is closed after the timeout, and
// with one connection held the next is refused with 503.
func TestServeConnectionFlags(t *testing.T) {
	url, _ := startServe(t, "-idle-timeout", "200ms", "-max-connections", "1")
	held, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// startServe's probe connection may still be counted for a moment.
	var answer []byte
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := held.Write([]byte("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = held.SetReadDeadline(time.Now().Add(5 * time.Second))
		answer = make([]byte, 4096)
		n, _ := held.Read(answer)
		answer = answer[:n]
		if !bytes.HasPrefix(answer, []byte("HTTP/1.1 503")) || time.Now().After(deadline) {
			break
		}
		held.Close()
		time.Sleep(20 * time.Millisecond)
		if held, err = net.Dial("tcp", strings.TrimPrefix(url, "http://")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.HasPrefix(answer, []byte("HTTP/1.1 200")) {
		t.Fatalf("the first connection: %q", answer)
	}
	res, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second connection: %d, want 503", res.StatusCode)
	}
	start := time.Now()
	_ = held.SetReadDeadline(start.Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("the idle connection: %v after %v, want it closed after 200ms", err, time.Since(start))
	}
}
