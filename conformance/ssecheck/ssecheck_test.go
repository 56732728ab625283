package ssecheck_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/conformancetest"
	"github.com/threadline/threadline/conformance/ssecheck"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
	"github.com/threadline/threadline/ssestream"
)

const goodBody = ": connected\n\nid: 1\ndata: {\"type\":\"run-start\"}\n\n"

// badFiles loads testdata/bad/<rule>.sse with <rule>.headers when present
// (the good headers otherwise).
func badFiles(t *testing.T) map[string]*conformance.Recording {
	paths, err := filepath.Glob("testdata/bad/*.sse")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*conformance.Recording{}
	for _, p := range paths {
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		header := conformancetest.GoodHeader()
		if raw, err := os.ReadFile(strings.TrimSuffix(p, ".sse") + ".headers"); err == nil {
			mh, err := textproto.NewReader(bufio.NewReader(strings.NewReader(string(raw) + "\n"))).ReadMIMEHeader()
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			header = http.Header(mh)
		}
		rec, err := conformance.ParseRecording(header, body)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".sse")] = rec
	}
	return out
}

// timed builds a recording with arrival times: frames at the given times,
// read for elapsed.
func timed(elapsed time.Duration, at ...time.Duration) *conformance.Recording {
	rec := &conformance.Recording{Status: http.StatusOK, Header: conformancetest.GoodHeader(), Elapsed: elapsed}
	for _, a := range at {
		rec.Body = append(rec.Body, ": ping\n\n"...)
		rec.Frames = append(rec.Frames, conformance.TimedFrame{Frame: ssestream.Frame{Comments: []string{"ping"}}, At: a})
	}
	return rec
}

// goBad are the failing cases that need what a fixture file cannot hold: a
// status, or arrival times.
var goBad = map[string]func() (*conformance.Recording, ssecheck.Options){
	ssecheck.RuleStatus: func() (*conformance.Recording, ssecheck.Options) {
		rec := timed(0)
		rec.Status = http.StatusInternalServerError
		return rec, ssecheck.Options{}
	},
	ssecheck.RuleFirstFrame: func() (*conformance.Recording, ssecheck.Options) {
		return timed(3*time.Second, 2*time.Second), ssecheck.Options{}
	},
	ssecheck.RuleHeartbeat: func() (*conformance.Recording, ssecheck.Options) {
		return timed(2*time.Second, 0, 200*time.Millisecond, 1500*time.Millisecond), ssecheck.Options{Heartbeat: 200 * time.Millisecond}
	},
}

func TestBadCases(t *testing.T) {
	for rule, rec := range badFiles(t) {
		t.Run(rule, func(t *testing.T) { conformancetest.AssertOnlyFails(t, rule, ssecheck.Check(rec, ssecheck.Options{})) })
	}
	for rule, build := range goBad {
		t.Run(rule, func(t *testing.T) {
			rec, opts := build()
			conformancetest.AssertOnlyFails(t, rule, ssecheck.Check(rec, opts))
		})
	}
}

func TestEveryRuleHasAFailingCase(t *testing.T) {
	files := badFiles(t)
	for _, r := range ssecheck.Rules {
		_, inFile := files[r.ID]
		_, inGo := goBad[r.ID]
		if !inFile && !inGo {
			t.Errorf("rule %s has no failing case", r.ID)
		}
		if !strings.HasPrefix(r.ID, "sse.") || r.Title == "" || r.Source == "" {
			t.Errorf("rule %+v: want an sse.* id, a title and a source", r)
		}
	}
	if _, err := conformance.NewCatalog(ssecheck.Rules); err != nil {
		t.Error(err)
	}
}

func TestGoodFixture(t *testing.T) {
	rec, err := conformance.ParseRecording(conformancetest.GoodHeader(), []byte(goodBody))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ssecheck.Check(rec, ssecheck.Options{Heartbeat: time.Second}) {
		if f.Status == conformance.Fail {
			t.Errorf("%s: %s", f.Rule, f.Detail)
		}
	}
}

// A frame the client stopped reading in the middle is not judged.
func TestCutTailIsNotAFault(t *testing.T) {
	rec, _ := conformance.ParseRecording(conformancetest.GoodHeader(), []byte(goodBody+"id: 2\ndata: {\"ty"))
	for _, f := range ssecheck.Check(rec, ssecheck.Options{}) {
		if f.Status == conformance.Fail {
			t.Errorf("%s: %s", f.Rule, f.Detail)
		}
	}
}

// TestServerStream: an idle thread of the real server, with a short
// heartbeat, passes every rule, each judged.
func TestServerStream(t *testing.T) {
	ctx := context.Background()
	const heartbeat = 200 * time.Millisecond
	srv := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Config: server.Config{Heartbeat: heartbeat}})
	srv.EnsureThread("idle")

	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL+"/instance-ai/events/idle", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rec, err := conformance.Record(rctx, res, nil)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	for _, f := range ssecheck.Check(rec, ssecheck.Options{Heartbeat: heartbeat}) {
		if f.Status != conformance.Pass {
			t.Errorf("%s: %s %s", f.Rule, f.Status, f.Detail)
		}
	}
}
