package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
	"github.com/threadline/threadline/ssestream"
)

// Short leases, so that a killed instance's run is settled within the test.
const (
	testLease      = 2 * time.Second
	testLeaseRenew = 300 * time.Millisecond
)

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// clusterBuses are the buses three instances on one PostgreSQL share, each
// on its own channel so that parallel tests do not hear each other.
var clusterBuses = []struct {
	name string
	spec func(t *testing.T) string
}{
	{"redis", func(t *testing.T) string { return testredis.URL(t) + "?channel=test-" + randomName() }},
	{"postgres", func(t *testing.T) string { return "postgres?channel=test_" + randomName() }},
}

// cluster launches n serve processes on one database and bus.
func cluster(t *testing.T, store, bus string, n int, delay time.Duration) []*process {
	var out []*process
	for i := range n {
		out = append(out, launch(t, store, delay, "-bus", bus, "-instance-id", "inst-"+string(rune('a'+i)),
			"-lease", testLease.String(), "-lease-renew", testLeaseRenew.String()))
	}
	return out
}

// stream opens a live connection to the thread with an optional cursor.
func (p *process) stream(thread, cursor string) *conn {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/instance-ai/events/"+thread, nil)
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		p.t.Fatal(err)
	}
	c := &conn{t: p.t, res: res, rd: ssestream.NewReader(res.Body), cancel: cancel, frames: make(chan frameOrErr, 1<<14)}
	go c.pump()
	p.t.Cleanup(c.close)
	return c
}

// deltaText is the text of the frames' text deltas, in order.
func deltaText(frames []frame) string {
	var b strings.Builder
	for _, f := range frames {
		if f.ev.Type == instanceai.TypeTextDelta {
			b.WriteString(f.ev.Payload.(*instanceai.Text).Text)
		}
	}
	return b.String()
}

// TestClusterLiveControlAndCrash runs three instances on one PostgreSQL
// and each bus: a client on B follows a run started on A with every delta;
// a chat on C meanwhile is refused; cancel and confirm through C act on A's
// runs; and after kill -9 of A mid-run, B or C settles the run within the
// lease, and a client that resumes on another instance with its cursor
// ends with exactly the log.
func TestClusterLiveControlAndCrash(t *testing.T) {
	for _, bc := range clusterBuses {
		t.Run(bc.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			ps := cluster(t, store, bc.spec(t), 3, 5*time.Millisecond)
			a, b, c := ps[0], ps[1], ps[2]

			for _, th := range []string{"live", "cancel", "confirm", "crash"} {
				if code := a.post("/instance-ai/threads", `{"id":"`+th+`"}`); code != http.StatusOK && code != http.StatusCreated {
					t.Fatalf("create thread %s: %d", th, code)
				}
			}
			// Live across instances, every delta.
			onB := b.stream("live", "")
			time.Sleep(200 * time.Millisecond) // let B's bus listener subscribe before the run begins
			run := a.chat("live", "long 200")
			if code := c.post("/instance-ai/chat/live", `{"message":"simple"}`); code != http.StatusConflict {
				t.Fatalf("chat on C during A's run: %d, want 409", code)
			}
			frames := onB.until(wait, isRunFinish(run))
			fin := frames[len(frames)-1].ev.Payload.(*instanceai.RunFinish)
			if fin.Status != instanceai.RunCompleted {
				t.Fatalf("run ended %+v", fin)
			}
			var block string
			for _, f := range a.replayAll("live", run) {
				if f.ev.Type == instanceai.TypeTextBlock {
					block += f.ev.Payload.(*instanceai.Text).Text
				}
			}
			if got := deltaText(frames); got != block || block == "" {
				t.Fatalf("B saw %d bytes of deltas, the log's blocks hold %d", len(got), len(block))
			}

			// Cancel through C.
			onB2 := b.stream("cancel", "")
			run = a.chat("cancel", "long 100000")
			onB2.until(wait, func(f frame) bool { return f.ev.Type == instanceai.TypeTextDelta })
			if code := c.post("/instance-ai/chat/cancel/cancel", ""); code != http.StatusOK {
				t.Fatalf("cancel on C: %d", code)
			}
			frames = onB2.until(wait, isRunFinish(run))
			if fin := frames[len(frames)-1].ev.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCancelled {
				t.Fatalf("cancelled through C, the run ended %+v", fin)
			}
			if code := c.post("/instance-ai/chat/cancel", `{"message":"simple"}`); code != http.StatusOK {
				t.Fatalf("chat after the cancel: %d, want 200", code)
			}

			// Confirm through C.
			onB3 := b.stream("confirm", "")
			run = a.chat("confirm", "confirm")
			var requestID string
			onB3.until(wait, func(f frame) bool {
				if p, ok := f.ev.Payload.(*instanceai.ConfirmationRequest); ok {
					requestID = p.RequestID
					return true
				}
				return false
			})
			var st instanceai.ThreadStatus
			c.get("/instance-ai/threads/confirm/status", &st)
			if !st.HasActiveRun || !st.IsSuspended || st.RunID != run {
				t.Fatalf("status on C of A's suspended run: %+v", st)
			}
			if code := c.post("/instance-ai/confirm/"+requestID, `{"approved":true}`); code != http.StatusOK {
				t.Fatalf("confirm on C: %d", code)
			}
			frames = onB3.until(wait, isRunFinish(run))
			if fin := frames[len(frames)-1].ev.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCompleted {
				t.Fatalf("confirmed through C, the run ended %+v", fin)
			}

			// kill -9 of A mid-run.
			onB4 := b.stream("crash", "")
			run = a.chat("crash", "long 100000")
			seen := onB4.until(wait, func(f frame) bool { return f.ev.Type == instanceai.TypeTextDelta })
			killedAt := time.Now()
			a.kill()
			var cursor string
			for _, f := range seen {
				if f.HasID {
					cursor = f.ID
				}
			}
			onB4.close()
			// The client resumes on C with its cursor.
			rest := c.stream("crash", cursor).until(wait+testLease, isRunFinish(run))
			if took := time.Since(killedAt); took > 3*testLease {
				t.Fatalf("the dead instance's run was settled after %v, lease %v", took, testLease)
			}
			fin = rest[len(rest)-1].ev.Payload.(*instanceai.RunFinish)
			if fin.Status != instanceai.RunInterrupted || fin.Reason != instanceai.ReasonCrashed {
				t.Fatalf("crashed run ended %+v", fin)
			}
			var ids []string
			for _, f := range append(seen, rest...) {
				if f.HasID {
					ids = append(ids, f.ID)
				}
			}
			var logIDs []string
			for _, f := range b.replayAll("crash", run) {
				logIDs = append(logIDs, f.ID)
			}
			if strings.Join(ids, ",") != strings.Join(logIDs, ",") {
				t.Fatalf("the client's ids across the two instances\n %v\ndiffer from the log's\n %v", ids, logIDs)
			}
			if code := b.post("/instance-ai/chat/crash", `{"message":"simple"}`); code != http.StatusOK {
				t.Fatalf("chat after the crash was settled: %d", code)
			}
		})
	}
}

// TestSecondProcessChangesNothing: a second serve on a taken port, or on
// the same SQLite file, leaves the first one's live run alone: one
// run-finish, completed.
func TestSecondProcessChangesNothing(t *testing.T) {
	spec := "sqlite:" + filepath.Join(t.TempDir(), "busy.db")
	first := launch(t, spec, 20*time.Millisecond)
	run := first.chat("th", "long 150")

	// The same port: it must fail to bind, before touching any run.
	addr := strings.TrimPrefix(first.url, "http://")
	out, err := exec.Command(threadlineBinary(t), "serve", "-addr", addr, "-store", spec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listen on") {
		t.Fatalf("a second serve on a taken port: err %v\n%s", err, out)
	}
	// Another port on the same file: it runs beside the first.
	second := launch(t, spec, 0)
	if code := second.post("/instance-ai/chat/th", `{"message":"simple"}`); code != http.StatusConflict {
		t.Fatalf("chat on the second process during the first's run: %d, want 409", code)
	}
	frames := first.replayAll("th", run)
	finishes := 0
	for _, f := range frames {
		if p, ok := f.ev.Payload.(*instanceai.RunFinish); ok {
			finishes++
			if p.Status != instanceai.RunCompleted {
				t.Fatalf("the first process's run ended %+v", p)
			}
		}
	}
	if finishes != 1 {
		t.Fatalf("%d run-finishes in the first process's run, want 1", finishes)
	}
}
