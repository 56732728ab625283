package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
	"github.com/threadline/threadline/server/servertest"
)

// TestClusterFencesAnInstanceCutOffPastItsLease runs two instances on one
// PostgreSQL, A's link to it through a proxy, and cuts that link in the
// middle of a run on A for longer than A's lease: frozen (nothing moves and
// nothing is lost, so A's writes wait in the proxy) or reset (every
// connection ends with a TCP RST, so A's writer gives up on the run and
// keeps its ending). B takes the run once the lease ran out and settles it
// crash_interrupted. Then the link comes back, and whatever A still had to
// write lands at the database under A's claim's token, which B's take
// made stale: the log has exactly one run-finish for the run, B's, and
// nothing of the run after it.
func TestClusterFencesAnInstanceCutOffPastItsLease(t *testing.T) {
	for _, cut := range []string{"freeze", "reset"} {
		t.Run(cut, func(t *testing.T) {
			dsn := testpg.FreshDSN(t)
			u, err := url.Parse(dsn)
			if err != nil || u.Host == "" {
				t.Skipf("TEST_DATABASE_URL must be a postgres:// URL to put a proxy in the way (%q)", dsn)
			}
			proxy := bustest.NewProxy(t, u.Host)
			viaProxy := *u
			viaProxy.Host = proxy.Addr()
			bus := testredis.URL(t) + "?channel=test-" + randomName()
			flags := func(instance string) []string {
				return []string{"-bus", bus, "-instance-id", instance,
					"-lease", testLease.String(), "-lease-renew", testLeaseRenew.String()}
			}
			a := launch(t, viaProxy.String(), time.Millisecond, flags("inst-a")...)
			b := launch(t, dsn, time.Millisecond, flags("inst-b")...)
			const thread = "cut"
			if code := b.post("/instance-ai/threads", `{"id":"`+thread+`"}`); code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("create thread: %d", code)
			}
			onA := a.stream(thread, "")
			runID := a.chat(thread, "long 3000")
			onA.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
			onA.Close()

			switch cut {
			case "freeze":
				proxy.Freeze()
			case "reset":
				proxy.Cut()
			}
			cutAt := time.Now()
			// B settles the run once A's lease has run out.
			onB := b.stream(thread, "")
			frames := onB.Until(wait, servertest.IsRunFinish(runID))
			onB.Close()
			settled := frames[len(frames)-1]
			if p := settled.Decoded.Payload.(*instanceai.RunFinish); settled.ID == "" || p.Status != instanceai.RunInterrupted || p.Reason != instanceai.ReasonCrashed {
				t.Fatalf("B ended the run with %+v (id %q), want its stored interrupted/crash_interrupted", p, settled.ID)
			}
			// A ends the run too, unaware: its run-finish waits in the
			// frozen link, or, reset, its writer gives up and keeps the
			// ending for when the database is back.
			switch cut {
			case "freeze":
				waitLogged(t, a, "run finished", runID)
				proxy.Heal()
				waitLogged(t, a, "dropping events the log refused", "")
			case "reset":
				waitLogged(t, a, "giving up on storing events", "")
				proxy.Heal()
				waitLogged(t, a, "another instance settled this run while the storage outage kept its ending here", runID)
			}
			t.Logf("A was cut off for %v", time.Since(cutAt).Round(time.Millisecond))

			store := servertest.OpenStore(t, dsn)
			rows := servertest.StoredEvents(t, store, thread)
			var finishes []instanceai.StoredEvent
			last := int64(0)
			for _, r := range rows {
				if r.Event.RunID != runID {
					continue
				}
				last = r.Seq
				if r.Event.Type == instanceai.TypeRunFinish {
					finishes = append(finishes, r)
				}
			}
			var described []string
			for _, f := range finishes {
				p := f.Event.Payload.(*instanceai.RunFinish)
				described = append(described, fmt.Sprintf("seq %d %s/%s", f.Seq, p.Status, p.Reason))
			}
			if len(finishes) != 1 || finishes[0].Event.Payload.(*instanceai.RunFinish).Reason != instanceai.ReasonCrashed {
				t.Fatalf("the run's run-finishes: %v; want B's settlement only", described)
			}
			if finishes[0].Seq != last {
				t.Fatalf("the run has events after its run-finish (%v): its last is at seq %d", described, last)
			}
		})
	}
}

// waitLogged waits until the process has logged a line with every one of
// the words (an empty one matches any line).
func waitLogged(t *testing.T, p *process, what, and string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		for line := range strings.Lines(p.Logs()) {
			if strings.Contains(line, what) && strings.Contains(line, and) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process never logged %q (with %q):\n%s", what, and, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
