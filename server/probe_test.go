package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/bus"
	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/probe"
	"github.com/threadline/threadline/server/servertest"
)

// probeAnswer is a probe's status and JSON body.
type probeAnswer struct {
	code int
	body probe.ReadyResponse
	took time.Duration
}

// probe sends GET path without a token and decodes the answer.
func (h *harness) probe(path string) probeAnswer {
	h.t.Helper()
	began := time.Now()
	res, err := http.Get(h.URL + path)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out probeAnswer
	out.code, out.took = res.StatusCode, time.Since(began)
	if err := json.Unmarshal(raw, &out.body); err != nil {
		h.t.Fatalf("GET %s: %d %q: %v", path, res.StatusCode, raw, err)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		h.t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	return out
}

// awaitReady polls /readyz until cond holds for its answer, failing the
// test after wait: an outage is noticed by the bus listener on its own
// schedule, which the probe reports, so the test waits for the state, not
// for a guessed delay.
func (h *harness) awaitReady(what string, cond func(probeAnswer) bool) probeAnswer {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		a := h.probe(probe.ReadyPath)
		if cond(a) {
			return a
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("/readyz never %s; last %d %+v", what, a.code, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isReady(a probeAnswer) bool { return a.code == http.StatusOK && a.body.Status == "ready" }

// checkFails is true of an answer 503 "unready" whose check name is an
// error and whose other checks, named in ok, pass.
func checkFails(name string, ok ...string) func(probeAnswer) bool {
	return func(a probeAnswer) bool {
		if a.code != http.StatusServiceUnavailable || a.body.Status != "unready" || !strings.HasPrefix(a.body.Checks[name], "error: ") {
			return false
		}
		for _, n := range ok {
			if a.body.Checks[n] != probe.OK {
				return false
			}
		}
		return true
	}
}

// The probes answer on every store, without a token when tokens are on:
// /livez 200 alive, /readyz 200 with every check ok (no bus check without
// a bus).
func TestProbesOnEveryStore(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{Tokens: "tok-probe=alice"})
		if a := h.probe(probe.LivePath); a.code != http.StatusOK || a.body.Status != "alive" {
			t.Fatalf("/livez: %d %+v", a.code, a.body)
		}
		a := h.probe(probe.ReadyPath)
		want := map[string]string{"storage": "ok", "migrations": "ok", "draining": "ok"}
		if !isReady(a) || len(a.body.Checks) != len(want) {
			t.Fatalf("/readyz: %d %+v", a.code, a.body)
		}
		for k, v := range want {
			if a.body.Checks[k] != v {
				t.Fatalf("/readyz check %s = %q, want %q", k, a.body.Checks[k], v)
			}
		}
	})
}

// While draining, /readyz says so (503) so that the balancer stops sending
// work, and /livez stays 200 so that the orchestrator does not kill the
// instance in the middle of its drain.
func TestProbesWhileDraining(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.App.Drain(ctx)
	a := h.probe(probe.ReadyPath)
	if !checkFails("draining", "storage", "migrations")(a) {
		t.Fatalf("/readyz while draining: %d %+v", a.code, a.body)
	}
	if a := h.probe(probe.LivePath); a.code != http.StatusOK {
		t.Fatalf("/livez while draining: %d %+v", a.code, a.body)
	}
}

// A PostgreSQL that stops answering makes /readyz 503 within its timeout,
// whether the link is cut (connections refused) or frozen (nothing comes
// back: the query would hang), and ready again once it is back. /livez
// stays 200 throughout: a restart would not bring the database back.
func TestProbesWhenTheDatabaseIsUnreachable(t *testing.T) {
	for _, fault := range []string{"cut", "frozen"} {
		t.Run(fault, func(t *testing.T) {
			dsn := testpg.FreshDSN(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			proxy := bustest.NewProxy(t, u.Host)
			u.Host = proxy.Addr()
			h := start(t, servertest.OpenStore(t, u.String()), servertest.Options{})
			// Before the server's own cleanup, which needs the database.
			t.Cleanup(proxy.Heal)
			if a := h.probe(probe.ReadyPath); !isReady(a) {
				t.Fatalf("/readyz before the outage: %d %+v", a.code, a.body)
			}
			if fault == "cut" {
				proxy.Down()
			} else {
				proxy.Freeze()
			}
			// Each answer is bounded by the probe's timeout, frozen or not;
			// twice it leaves room for a loaded machine, and a hang (the
			// fault this guards against) would last until the test's end.
			for range 3 {
				a := h.probe(probe.ReadyPath)
				if !checkFails("storage", "draining")(a) || !strings.HasPrefix(a.body.Checks["migrations"], "error: ") {
					t.Fatalf("/readyz with the database %s: %d %+v", fault, a.code, a.body)
				}
				if a.took > 2*probe.DefaultTimeout+time.Second {
					t.Fatalf("/readyz with the database %s took %v", fault, a.took)
				}
				if l := h.probe(probe.LivePath); l.code != http.StatusOK {
					t.Fatalf("/livez with the database %s: %d", fault, l.code)
				}
			}
			proxy.Heal()
			h.awaitReady("ready again", isReady)
		})
	}
}

// An instance whose bus is cut off is not ready (its clients would miss
// what other instances publish until the head check reads it), and is
// ready again once its listener reconnects: Redis, and PostgreSQL's
// LISTEN/NOTIFY on a database of its own link.
func TestProbesWhenTheBusIsDown(t *testing.T) {
	for _, link := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return testredis.URL(t) + "?channel=test-" + randomName() }},
		{"postgres", func(t *testing.T) string {
			return testpg.WithParams(t, testpg.FreshDSN(t), map[string]string{"channel": "test_" + randomName()})
		}},
	} {
		t.Run(link.name, func(t *testing.T) {
			u, err := url.Parse(link.url(t))
			if err != nil {
				t.Fatal(err)
			}
			proxy := bustest.NewProxy(t, u.Host)
			u.Host = proxy.Addr()
			b, err := bus.Open(context.Background(), u.String(), "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{Bus: b, Instance: "probe-" + randomName()}})
			h.App.Start()
			a := h.awaitReady("ready with the bus connected", isReady)
			if a.body.Checks["bus"] != probe.OK {
				t.Fatalf("/readyz with a bus: %+v", a.body)
			}
			proxy.Down()
			a = h.awaitReady("unready with the bus cut off", checkFails("bus", "storage", "migrations", "draining"))
			t.Logf("bus check while cut off: %s", a.body.Checks["bus"])
			if l := h.probe(probe.LivePath); l.code != http.StatusOK {
				t.Fatalf("/livez with the bus down: %d", l.code)
			}
			proxy.Heal()
			h.awaitReady("ready again", isReady)
		})
	}
}

// A database that lacks a migration this build embeds (an older schema
// that a failed or skipped migration left) is not ready.
func TestProbesWhenAMigrationIsMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "threadline.db")
	h := start(t, servertest.OpenStore(t, "sqlite:"+path), servertest.Options{})
	if a := h.probe(probe.ReadyPath); !isReady(a) {
		t.Fatalf("/readyz migrated: %d %+v", a.code, a.body)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var last int64
	if err := db.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE version = ?`, last); err != nil {
		t.Fatal(err)
	}
	a := h.probe(probe.ReadyPath)
	if !checkFails("migrations", "storage", "draining")(a) || !strings.Contains(a.body.Checks["migrations"], fmt.Sprintf("%03d", last)) {
		t.Fatalf("/readyz without migration %03d: %d %+v", last, a.code, a.body)
	}
}
