package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/upstream/upstreamtest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/server/servertest"
	"github.com/threadline/threadline/ssestream"
)

// launchUpstream starts a server process whose agent is the hand-written
// AG-UI agent fake.
func launchUpstream(t *testing.T, store string, fake *upstreamtest.Server, flags ...string) *process {
	t.Helper()
	return launch(t, store, 0, append([]string{"-agent", "agui", "-agui-agents", "fake=" + fake.URL,
		"-lease", "2s", "-lease-renew", "300ms"}, flags...)...)
}

// An upstream's interrupt waits across a restart of Threadline (stopped or
// killed): answered afterwards, the answer goes upstream and the upstream's
// answer ends the same run. A run under way when Threadline is killed ends
// interrupted through the sweep.
func TestUpstreamAgentAcrossRestart(t *testing.T) {
	for _, st := range crashStores {
		t.Run(st.name, func(t *testing.T) {
			spec := st.spec(t)
			fake := upstreamtest.Start(t)
			for i, stop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				thread := fmt.Sprintf("interrupted%d", i)
				p := launchUpstream(t, spec, fake)
				runID := p.chat(thread, upstreamtest.Interrupt)
				requestID := p.awaitConfirmation(thread)
				p.stop(stop)

				p = launchUpstream(t, spec, fake)
				var status instanceai.ThreadStatus
				p.get("/instance-ai/threads/"+thread+"/status", &status)
				if !status.HasActiveRun || !status.IsSuspended || status.RunID != runID {
					t.Fatalf("%v: status after restart = %+v", stop, status)
				}
				code := p.post("/instance-ai/confirm/"+requestID, `{"approved":true}`)
				if code != http.StatusOK && (stop != syscall.SIGKILL || code != http.StatusAccepted) {
					t.Fatalf("%v: confirm after restart: %d\n%s", stop, code, p.Logs())
				}
				frames := p.replayAll(thread, runID)
				fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
				want := `I need your approval first.Resumed with resolved: {"approved":true}`
				if fin.Status != instanceai.RunCompleted || texts(frames) != want {
					t.Fatalf("%v: resumed run ended %+v with text %q, want %q\n%s", stop, fin, texts(frames), want, p.Logs())
				}
				reqs := fake.Requests()
				if last := reqs[len(reqs)-1]; last.ThreadID != thread || len(last.Resume) != 1 || last.Resume[0].InterruptID != "int-1" {
					t.Fatalf("%v: the upstream's last request %+v", stop, last)
				}
				p.Kill()
			}

			// Killed mid-run: the next process's sweep ends the run.
			p := launchUpstream(t, spec, fake)
			runID := p.chat("crashed", upstreamtest.Slow)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			p.acked(ctx, "crashed", func(ev instanceai.Event, deltas int) bool { return deltas >= 2 })
			cancel()
			p.Kill()
			p = launchUpstream(t, spec, fake)
			frames := p.replayAll("crashed", runID)
			if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunInterrupted {
				t.Fatalf("crashed run ended %+v", fin)
			}
			p.Kill()
		})
	}
}

// Across instances: a run of an upstream agent started on A is followed
// live on B, over AG-UI on B (rejoin), and cancelled through B, which cuts
// the upstream's request on A.
func TestUpstreamAgentAcrossInstances(t *testing.T) {
	bc := clusterBuses[0]
	store := testpg.FreshDSN(t)
	fake := upstreamtest.Start(t)
	ps := cluster(t, store, bc.spec(t), 2, 0, "-agent", "agui", "-agui-agents", "fake="+fake.URL)
	a, b := ps[0], ps[1]
	if code := a.post("/instance-ai/threads", `{"id":"x"}`); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("create thread: %d", code)
	}
	onB := b.stream("x", "")
	time.Sleep(200 * time.Millisecond) // let B's bus listener subscribe before the run begins
	run := a.chat("x", upstreamtest.Slow)
	onB.Until(wait, servertest.IsType(instanceai.TypeTextDelta))

	// AG-UI on B rejoins A's run.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/agui/threads/x/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("rejoin on B: %v %v", err, res)
	}
	defer res.Body.Close()
	rejoin := ssestream.NewReader(res.Body)
	first, err := rejoin.NextData()
	if err != nil || !strings.Contains(first, `"RUN_STARTED"`) {
		t.Fatalf("rejoin on B began %q, %v", first, err)
	}

	if code := b.post("/instance-ai/chat/x/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel on B: %d", code)
	}
	frames := onB.Until(wait, servertest.IsRunFinish(run))
	if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCancelled {
		t.Fatalf("cancelled through B, the run ended %+v", fin)
	}
	// The AG-UI client on B follows A's run to its end.
	var last string
	for !strings.Contains(last, `"RUN_FINISHED"`) && !strings.Contains(last, `"RUN_ERROR"`) {
		if last, err = rejoin.NextData(); err != nil {
			t.Fatalf("rejoin on B ended before the run: %v", err)
		}
	}
	if !strings.Contains(last, `"cancelled"`) {
		t.Fatalf("rejoin on B ended with %s", last)
	}
	deadline := time.Now().Add(wait)
	for fake.Gone() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the upstream's request on A was not cut by the cancel through B")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
