package server_test

import (
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
	"github.com/threadline/threadline/server/servertest"
)

// faultPoll is the head check's period in these tests.
const faultPoll = 300 * time.Millisecond

// busLink is how an instance reaches one kind of bus: directly, or
// through a proxy that can cut it.
type busLink struct {
	name string
	// target is the bus server's host:port, for the proxy.
	target func(t *testing.T, store string) string
	// spec is the -bus value reaching the bus at addr ("" for directly).
	spec func(t *testing.T, store, channel, addr string) string
}

var busLinks = []busLink{
	{"redis",
		func(t *testing.T, _ string) string { return hostOf(t, testredis.URL(t)) },
		func(t *testing.T, _, channel, addr string) string {
			u, err := url.Parse(testredis.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			if addr != "" {
				u.Host = addr
			}
			u.RawQuery = "channel=" + channel
			return u.String()
		}},
	{"postgres",
		func(t *testing.T, store string) string { return hostOf(t, store) },
		func(t *testing.T, store, channel, addr string) string {
			if addr == "" {
				return "postgres?channel=" + channel
			}
			u, err := url.Parse(store)
			if err != nil {
				t.Fatal(err)
			}
			u.Host = addr
			q := u.Query()
			q.Set("channel", channel)
			u.RawQuery = q.Encode()
			return u.String()
		}},
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// faultInstance launches an instance on store with its bus reached at addr
// ("" for directly).
func faultInstance(t *testing.T, link busLink, store, channel, addr, id string) *process {
	return launch(t, store, 5*time.Millisecond, "-bus", link.spec(t, store, channel, addr), "-instance-id", id,
		"-lease", testLease.String(), "-lease-renew", testLeaseRenew.String(), "-log-poll", faultPoll.String())
}

// checkTexts folds what a client received as n8n's browser does and
// compares it with the log's fold.
func checkTexts(t *testing.T, who string, frames []servertest.Frame, rows []instanceai.StoredEvent) {
	t.Helper()
	var f servertest.Folder
	for _, fr := range frames {
		if err := f.Frame(fr); err != nil {
			t.Fatalf("%s: %v", who, err)
		}
	}
	if d := servertest.TextDiff(f.Texts(), servertest.LogTexts(rows)); d != "" {
		t.Fatalf("%s's text is not the log's: %s", who, d)
	}
}

// TestClusterLostPublishesReachOtherInstances cuts the bus link of the
// instance that runs a run, mid-run: its publishes fail, and a client on
// another instance still gets the rest of the run, its text equal to the
// log's, within a few head-check periods of its commit; once the link is
// back the next run streams live again.
func TestClusterLostPublishesReachOtherInstances(t *testing.T) {
	for _, link := range busLinks {
		t.Run(link.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			channel := "faults_" + randomName()
			proxy := bustest.NewProxy(t, link.target(t, store))
			a := faultInstance(t, link, store, channel, proxy.Addr(), "inst-a")
			b := faultInstance(t, link, store, channel, "", "inst-b")
			if code := a.post("/instance-ai/threads", `{"id":"lost"}`); code != http.StatusCreated {
				t.Fatalf("create thread: %d", code)
			}
			onB := b.stream("lost", "")
			time.Sleep(200 * time.Millisecond) // B's listener subscribes
			run := a.chat("lost", "long 400")
			seen := onB.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
			proxy.Down()
			rest := onB.Until(wait, servertest.IsRunFinish(run))
			got := time.Now()
			fin := rest[len(rest)-1].Decoded
			if st := fin.Payload.(*instanceai.RunFinish).Status; st != instanceai.RunCompleted {
				t.Fatalf("the run ended %s", st)
			}
			// The run-finish is stamped as it is queued, a moment before
			// its commit: an upper bound of the delay.
			late := got.Sub(time.UnixMilli(fin.TS))
			t.Logf("%s: the run's ending reached the other instance %v after it was queued (head check every %v)", link.name, late, faultPoll)
			if late > 10*faultPoll+2*time.Second {
				t.Fatalf("the run's ending reached the other instance %v after it was queued", late)
			}
			rows := servertest.StoredEvents(t, servertest.OpenStore(t, store), "lost")
			checkTexts(t, "the client on B", append(seen, rest...), rows)
			if !strings.Contains(a.Logs(), "bus publish failed") {
				t.Fatalf("A did not say its publishes failed:\n%s", a.Logs())
			}

			// The link comes back: the next run is live on B again.
			proxy.Heal()
			run = a.chat("lost", "simple after")
			more := onB.Until(wait, servertest.IsRunFinish(run))
			rows = servertest.StoredEvents(t, servertest.OpenStore(t, store), "lost")
			checkTexts(t, "the client on B after the link came back", append(append(seen, rest...), more...), rows)
		})
	}
}

// TestClusterTextAfterAGap follows a run from instances that miss part of
// its deltas: B, whose bus link is cut for a moment mid-run, and C, which
// starts mid-run; and a client that drops its connection to A mid-segment
// and resumes on B with its cursor. Each ends with the log's text.
func TestClusterTextAfterAGap(t *testing.T) {
	link := busLinks[0]
	store := testpg.FreshDSN(t)
	channel := "faults_" + randomName()
	proxy := bustest.NewProxy(t, link.target(t, store))
	a := faultInstance(t, link, store, channel, "", "inst-a")
	b := faultInstance(t, link, store, channel, proxy.Addr(), "inst-b")
	if code := a.post("/instance-ai/threads", `{"id":"gap"}`); code != http.StatusCreated {
		t.Fatalf("create thread: %d", code)
	}
	onB := b.stream("gap", "")
	onA := a.stream("gap", "")
	time.Sleep(200 * time.Millisecond)
	run := a.chat("gap", "long 1500")
	deltas := func(n int) func(servertest.Frame) bool {
		seen := 0
		return func(f servertest.Frame) bool {
			if f.Decoded.Type == instanceai.TypeTextDelta {
				seen++
			}
			return seen >= n
		}
	}
	fromB := onB.Until(wait, deltas(50))
	proxy.Down()
	fromA := onA.Until(wait, deltas(100))
	proxy.Heal()
	// A client that leaves A mid-segment and resumes on B.
	var cursor string
	for _, f := range fromA {
		if f.HasID {
			cursor = f.ID
		}
	}
	onA.Close()
	resumed := b.stream("gap", cursor)
	c := faultInstance(t, link, store, channel, "", "inst-c")
	onC := c.stream("gap", "")
	fromB = append(fromB, onB.Until(wait, servertest.IsRunFinish(run))...)
	fromA = append(fromA, resumed.Until(wait, servertest.IsRunFinish(run))...)
	fromC := onC.Until(wait, servertest.IsRunFinish(run))
	rows := servertest.StoredEvents(t, servertest.OpenStore(t, store), "gap")
	checkTexts(t, "the client on B", fromB, rows)
	checkTexts(t, "the client that moved from A to B", fromA, rows)
	checkTexts(t, "the client on C", fromC, rows)
}

// TestInstancesOnOneStoreShareOneBus: an instance that would neither hear
// the live instances on its database nor be heard refuses to start and
// names both buses: another bus, another channel, or none; one on the same
// bus starts; and once the others stopped, any bus may start.
func TestInstancesOnOneStoreShareOneBus(t *testing.T) {
	store := testpg.FreshDSN(t)
	channel := "share_" + randomName()
	redisBus := busLinks[0].spec(t, store, channel, "")
	a := launch(t, store, 0, "-bus", redisBus, "-instance-id", "inst-a")
	refused := func(bus, want string) {
		t.Helper()
		out, err := exec.Command(servertest.Binary(t), "serve", "-addr", servertest.FreeAddr(t), "-store", store,
			"-bus", bus, "-instance-id", "inst-x").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "refusing to start") || !strings.Contains(string(out), want) ||
			!strings.Contains(string(out), "instance inst-a") {
			t.Fatalf("-bus %s beside inst-a on redis: err %v\n%s", bus, err, out)
		}
	}
	refused("postgres?channel="+channel, "this instance's bus is postgres LISTEN/NOTIFY")
	refused(busLinks[0].spec(t, store, channel+"_other", ""), "channel "+channel+"_other")
	refused("memory", "the memory bus serves one process")
	b := launch(t, store, 0, "-bus", redisBus, "-instance-id", "inst-b")
	if code := b.post("/instance-ai/threads", `{"id":"shared"}`); code != http.StatusCreated {
		t.Fatalf("the instance on the same bus: %d", code)
	}
	a.Stop()
	b.Stop()
	launch(t, store, 0, "-bus", "postgres?channel="+channel, "-instance-id", "inst-c")
}

// TestClusterControlWithoutTheBus cuts the bus link of the instance that
// runs the work: a cancel and an answer sent to another instance still
// reach it, through the database at its next lease renewal, and each
// answer says so truthfully ("applied" once it took effect).
func TestClusterControlWithoutTheBus(t *testing.T) {
	for _, link := range busLinks {
		t.Run(link.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			channel := "control_" + randomName()
			proxy := bustest.NewProxy(t, link.target(t, store))
			a := faultInstance(t, link, store, channel, proxy.Addr(), "inst-a")
			b := faultInstance(t, link, store, channel, "", "inst-b")
			for _, th := range []string{"cancel", "confirm"} {
				if code := a.post("/instance-ai/threads", `{"id":"`+th+`"}`); code != http.StatusCreated {
					t.Fatalf("create thread %s: %d", th, code)
				}
			}
			onA := a.stream("cancel", "")
			run := a.chat("cancel", "long 100000")
			onA.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
			proxy.Down()
			var answer struct {
				OK     bool   `json:"ok"`
				Status string `json:"status"`
			}
			code := b.API.DoInto(http.MethodPost, "/instance-ai/chat/cancel/cancel", "", &answer)
			if code != http.StatusOK || !answer.OK || answer.Status != "applied" {
				t.Fatalf("cancel through B with A's bus cut: %d %+v, want 200 applied", code, answer)
			}
			frames := onA.Until(wait, servertest.IsRunFinish(run))
			if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCancelled {
				t.Fatalf("the run ended %+v, want cancelled", fin)
			}
			if code := b.post("/instance-ai/chat/cancel", `{"message":"simple"}`); code != http.StatusOK {
				t.Fatalf("chat after the cancel: %d, want 200", code)
			}

			onB := b.stream("confirm", "")
			run = a.chat("confirm", "confirm")
			var requestID string
			onB.Until(wait, servertest.ConfirmationRequest(&requestID))
			var confirmed struct {
				OK     bool   `json:"ok"`
				RunID  string `json:"runId"`
				Status string `json:"status"`
			}
			code = b.API.DoInto(http.MethodPost, "/instance-ai/confirm/"+requestID, `{"approved":true}`, &confirmed)
			if code != http.StatusOK || confirmed.Status != "applied" || confirmed.RunID != run {
				t.Fatalf("answer through B with A's bus cut: %d %+v, want 200 applied", code, confirmed)
			}
			frames = onB.Until(wait, servertest.IsRunFinish(run))
			if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCompleted {
				t.Fatalf("the answered run ended %+v, want completed", fin)
			}
		})
	}
}
