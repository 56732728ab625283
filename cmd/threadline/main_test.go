package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHelpDocumentsEveryFlagAndItsEnv(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"serve", "-h"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v", err)
	}
	for _, want := range []string{"-addr", "THREADLINE_ADDR", "-store", "THREADLINE_STORE", "-agent", "THREADLINE_AGENT",
		"-script-delay", "THREADLINE_SCRIPT_DELAY", "-max-body", "-subscriber-queue", "-heartbeat", "-shutdown-timeout", "-log-level",
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
	for _, args := range [][]string{nil, {"bogus"}, {"serve", "-agent", "nope", "-store", "memory"}, {"serve", "extra"}} {
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
