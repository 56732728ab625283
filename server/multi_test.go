package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/internal/testpg"
	"github.com/threadline/threadline/internal/testredis"
	"github.com/threadline/threadline/server/servertest"
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
func cluster(t *testing.T, store, bus string, n int, delay time.Duration, flags ...string) []*process {
	var out []*process
	for i := range n {
		args := append([]string{"-bus", bus, "-instance-id", "inst-" + string(rune('a'+i)),
			"-lease", testLease.String(), "-lease-renew", testLeaseRenew.String()}, flags...)
		out = append(out, launch(t, store, delay, args...))
	}
	return out
}

// stream opens a live connection to the thread with an optional cursor.
func (p *process) stream(thread, cursor string) *servertest.Conn {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/instance-ai/events/"+thread, nil)
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		p.t.Fatal(err)
	}
	return servertest.ReadStream(p.t, res, cancel, 1<<14)
}

// deltaText is the text of the frames' text deltas, in order.
func deltaText(frames []servertest.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		if f.Decoded.Type == instanceai.TypeTextDelta {
			b.WriteString(f.Decoded.Payload.(*instanceai.Text).Text)
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
			bus := bc.spec(t)
			ps := cluster(t, store, bus, 3, 5*time.Millisecond)
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
			frames := onB.Until(wait, servertest.IsRunFinish(run))
			fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
			if fin.Status != instanceai.RunCompleted {
				t.Fatalf("run ended %+v", fin)
			}
			var block string
			for _, f := range a.replayAll("live", run) {
				if f.Decoded.Type == instanceai.TypeTextBlock {
					block += f.Decoded.Payload.(*instanceai.Text).Text
				}
			}
			if got := deltaText(frames); got != block || block == "" {
				t.Fatalf("B saw %d bytes of deltas, the log's blocks hold %d", len(got), len(block))
			}

			// Cancel through C.
			onB2 := b.stream("cancel", "")
			run = a.chat("cancel", "long 100000")
			onB2.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
			if code := c.post("/instance-ai/chat/cancel/cancel", ""); code != http.StatusOK {
				t.Fatalf("cancel on C: %d", code)
			}
			frames = onB2.Until(wait, servertest.IsRunFinish(run))
			if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCancelled {
				t.Fatalf("cancelled through C, the run ended %+v", fin)
			}
			if code := c.post("/instance-ai/chat/cancel", `{"message":"simple"}`); code != http.StatusOK {
				t.Fatalf("chat after the cancel: %d, want 200", code)
			}

			// Confirm through C.
			onB3 := b.stream("confirm", "")
			run = a.chat("confirm", "confirm")
			var requestID string
			onB3.Until(wait, servertest.ConfirmationRequest(&requestID))

			var st instanceai.ThreadStatus
			c.get("/instance-ai/threads/confirm/status", &st)
			if !st.HasActiveRun || !st.IsSuspended || st.RunID != run {
				t.Fatalf("status on C of A's suspended run: %+v", st)
			}
			if code := c.post("/instance-ai/confirm/"+requestID, `{"approved":true}`); code != http.StatusOK {
				t.Fatalf("confirm on C: %d", code)
			}
			frames = onB3.Until(wait, servertest.IsRunFinish(run))
			if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCompleted {
				t.Fatalf("confirmed through C, the run ended %+v", fin)
			}

			// kill -9 of A mid-run.
			onB4 := b.stream("crash", "")
			run = a.chat("crash", "long 100000")
			seen := onB4.Until(wait, servertest.IsType(instanceai.TypeTextDelta))
			killedAt := time.Now()
			a.Kill()
			var cursor string
			for _, f := range seen {
				if f.HasID {
					cursor = f.ID
				}
			}
			onB4.Close()
			// The client resumes on C with its cursor.
			rest := c.stream("crash", cursor).Until(wait+testLease, servertest.IsRunFinish(run))
			if took := time.Since(killedAt); took > 3*testLease {
				t.Fatalf("the dead instance's run was settled after %v, lease %v", took, testLease)
			}
			fin = rest[len(rest)-1].Decoded.Payload.(*instanceai.RunFinish)
			if fin.Status != instanceai.RunInterrupted || fin.Reason != instanceai.ReasonCrashed {
				t.Fatalf("crashed run ended %+v", fin)
			}
			// Every stored event reached the client once, in order, but a
			// block whose text it had live (the settlement wrote it from
			// the text the instances heard), and the client's text is the
			// log's.
			var ids []string
			for _, f := range append(seen, rest...) {
				if f.HasID {
					ids = append(ids, f.ID)
				}
			}
			var logIDs []string
			replay := b.replayAll("crash", run)
			for _, f := range replay {
				if !slices.Contains(ids, f.ID) && (f.Decoded.Type == instanceai.TypeTextBlock || f.Decoded.Type == instanceai.TypeReasoningBlock) {
					continue
				}
				logIDs = append(logIDs, f.ID)
			}
			if strings.Join(ids, ",") != strings.Join(logIDs, ",") {
				t.Fatalf("the client's ids across the two instances\n %v\ndiffer from the log's\n %v", ids, logIDs)
			}
			rows := servertest.StoredEvents(t, servertest.OpenStore(t, store), "crash")
			checkTexts(t, "the client that moved from B to C", append(seen, rest...), rows)
			if code := b.post("/instance-ai/chat/crash", `{"message":"simple"}`); code != http.StatusOK {
				t.Fatalf("chat after the crash was settled: %d", code)
			}

			// kill -9 of a fourth instance while a tool call is open (a
			// slower script, so the kill lands between the call and its
			// result even when the call takes a while to reach B on a
			// busy machine): the instance that settles the run closes the
			// call.
			d := launch(t, store, 1500*time.Millisecond, "-bus", bus, "-instance-id", "inst-d",
				"-lease", testLease.String(), "-lease-renew", testLeaseRenew.String())
			if code := d.post("/instance-ai/threads", `{"id":"crash-tool"}`); code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("create thread crash-tool: %d", code)
			}
			onB5 := b.stream("crash-tool", "")
			run = d.chat("crash-tool", "tools")
			seen = onB5.Until(wait, servertest.IsType(instanceai.TypeToolCall))
			d.Kill()
			onB5.Close()
			cursor = seen[len(seen)-1].ID
			c.stream("crash-tool", cursor).Until(wait+testLease, servertest.IsRunFinish(run))
			var events []instanceai.Event
			interrupted := 0
			for _, f := range b.replayAll("crash-tool", run) {
				events = append(events, f.Decoded)
				if f.Decoded.Type == instanceai.TypeToolInterrupted {
					interrupted++
				}
			}
			if interrupted != 1 {
				t.Fatalf("tool call open at the kill: %d tool-interrupted events in the log, want 1", interrupted)
			}
			if id := loadingToolCall(agenttree.Fold(events)); id != "" {
				t.Fatalf("after the crash the folded tree still shows tool call %s loading", id)
			}
		})
	}
}

// TestSecondProcessChangesNothing: a second serve on a taken port, or on
// the same SQLite file, leaves the first one's live run alone: one
// run-finish, completed. On another port it refuses to start: two
// processes on one store need a bus between them.
func TestSecondProcessChangesNothing(t *testing.T) {
	spec := "sqlite:" + filepath.Join(t.TempDir(), "busy.db")
	first := launch(t, spec, 20*time.Millisecond)
	run := first.chat("th", "long 150")

	// The same port: it must fail to bind, before touching any run.
	addr := strings.TrimPrefix(first.URL, "http://")
	out, err := exec.Command(servertest.Binary(t), "serve", "-addr", addr, "-store", spec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listen on") {
		t.Fatalf("a second serve on a taken port: err %v\n%s", err, out)
	}
	// Another port on the same file: with no bus between them the second
	// would not see the first's live events, so it refuses to start, and
	// says why.
	out, err = exec.Command(servertest.Binary(t), "serve", "-addr", servertest.FreeAddr(t), "-store", spec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to start: the memory bus serves one process") {
		t.Fatalf("a second serve on the same file with the memory bus: err %v\n%s", err, out)
	}
	frames := first.replayAll("th", run)
	finishes := 0
	for _, f := range frames {
		if p, ok := f.Decoded.Payload.(*instanceai.RunFinish); ok {
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

// balancer sends a request to the first instance that takes it, starting
// at a rotating offset, as a load balancer that retries refused
// connections and 503s on the next backend does.
type balancer struct {
	ps   []*process
	next atomic.Int64
}

func (lb *balancer) post(path, body string) (int, map[string]any) {
	for range 200 {
		start := int(lb.next.Add(1))
		for i := range lb.ps {
			p := lb.ps[(start+i)%len(lb.ps)]
			res, err := http.Post(p.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				continue // down: the next one
			}
			var out map[string]any
			_ = json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			if res.StatusCode == http.StatusServiceUnavailable {
				continue // draining
			}
			return res.StatusCode, out
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, nil
}

// follower reads a thread's stream and reconnects to another instance with
// its cursor whenever its instance goes away. It keeps every frame with an
// id, in order, and counts the text deltas.
type follower struct {
	lb     *balancer
	thread string
	mu     sync.Mutex
	ids    []string
	data   map[string]string
	deltas int
	err    error
}

func (f *follower) run(ctx context.Context) {
	last := ""
	for ctx.Err() == nil {
		p := f.lb.ps[int(f.lb.next.Add(1))%len(f.lb.ps)]
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/instance-ai/events/"+f.thread, nil)
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			if res != nil {
				res.Body.Close()
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		rd := ssestream.NewReader(res.Body)
		for {
			fr, err := rd.Next()
			if err != nil {
				break // the instance stopped (or ctx ended): reconnect
			}
			var ev instanceai.Event
			if fr.Event == "" && fr.Data != "" && json.Unmarshal([]byte(fr.Data), &ev) == nil && ev.Type == instanceai.TypeTextDelta {
				f.mu.Lock()
				f.deltas++
				f.mu.Unlock()
			}
			if !fr.HasID {
				continue
			}
			f.mu.Lock()
			if fr.Event == instanceai.ResetFrameType && f.err == nil {
				f.err = fmt.Errorf("reset frame %s from a durable store", fr.Data)
			}
			f.ids = append(f.ids, fr.ID)
			f.data[fr.ID] = fr.Data
			f.mu.Unlock()
			last = fr.ID
		}
		res.Body.Close()
	}
}

func (f *follower) lastID() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ids) == 0 {
		return ""
	}
	return f.ids[len(f.ids)-1]
}

// TestClusterRollingRestart restarts the three instances one after the
// other (SIGTERM, start again on the same port) under a steady chat load
// through a balancer: every chat accepted ends completed with exactly one
// run-finish (the drain lets runs finish), and clients that follow each
// thread across the restarts end with exactly the log: no gap, no
// duplicate, the same events.
func TestClusterRollingRestart(t *testing.T) {
	for _, bc := range clusterBuses {
		t.Run(bc.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			// Nothing here dies without handing over, so no lease needs to
			// expire: long leases keep an instance that a busy machine
			// holds back from renewing for two seconds from being taken
			// for dead.
			ps := cluster(t, store, bc.spec(t), 3, 2*time.Millisecond, "-drain-timeout", "10s", "-shutdown-timeout", "5s",
				"-lease", "30s", "-lease-renew", "2s")
			lb := &balancer{ps: ps}
			t.Cleanup(func() {
				if t.Failed() {
					for _, p := range ps {
						t.Logf("log of %s:\n%s", p.URL, p.Logs())
					}
				}
			})
			threads := []string{"roll-a", "roll-b", "roll-c", "roll-d"}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			followers := map[string]*follower{}
			var wg sync.WaitGroup
			for _, th := range threads {
				if code, out := lb.post("/instance-ai/threads", `{"id":"`+th+`"}`); code != http.StatusOK && code != http.StatusCreated {
					t.Fatalf("create %s: %d %v", th, code, out)
				}
				f := &follower{lb: lb, thread: th, data: map[string]string{}}
				followers[th] = f
				wg.Go(func() { f.run(ctx) })
			}

			// The load: each thread chats again as soon as its last run
			// is over, until the restarts are done.
			var mu sync.Mutex
			accepted := map[string][]string{} // thread → run ids
			var refused []string
			load, stopLoad := context.WithCancel(context.Background())
			var users sync.WaitGroup
			for i, th := range threads {
				msg := []string{"long 150", "tools", "long 80", "tasks"}[i]
				users.Go(func() {
					for load.Err() == nil {
						code, out := lb.post("/instance-ai/chat/"+th, `{"message":"`+msg+`"}`)
						switch code {
						case http.StatusOK:
							mu.Lock()
							accepted[th] = append(accepted[th], out["runId"].(string))
							mu.Unlock()
						case http.StatusConflict:
							time.Sleep(20 * time.Millisecond)
						default:
							mu.Lock()
							refused = append(refused, fmt.Sprintf("%s: %d %v", th, code, out))
							mu.Unlock()
							return
						}
					}
				})
			}
			time.Sleep(time.Second)
			for _, p := range ps {
				p.Stop()
				p.Start()
				time.Sleep(time.Second)
			}
			stopLoad()
			users.Wait()
			if len(refused) > 0 {
				t.Fatalf("chats refused during the restarts: %v", refused)
			}
			db := servertest.OpenStore(t, store)

			// Every accepted run completes once; the followers catch up.
			for _, th := range threads {
				runs := accepted[th]
				if len(runs) < 3 {
					t.Fatalf("thread %s: only %d runs accepted under load", th, len(runs))
				}
				ps[0].replayAll(th, runs[len(runs)-1]) // waits for the last run-finish
				rows := servertest.StoredEvents(t, db, th)
				finishes := map[string]int{}
				var logIDs []string
				logData := map[string]string{}
				blocks := map[string]bool{}
				for _, r := range rows {
					id := strconv.FormatInt(r.Seq, 10)
					logIDs = append(logIDs, id)
					logData[id] = string(r.Data)
					blocks[id] = instanceai.DurabilityOf(r.Event.Type) == instanceai.Coalesced
					if fin, ok := r.Event.Payload.(*instanceai.RunFinish); ok {
						finishes[r.Event.RunID]++
						if fin.Status != instanceai.RunCompleted {
							t.Errorf("thread %s: run %s ended %+v", th, r.Event.RunID, fin)
						}
					}
				}
				for _, run := range runs {
					if finishes[run] != 1 {
						t.Errorf("thread %s: run %s has %d run-finishes, want 1", th, run, finishes[run])
					}
				}
				if len(finishes) != len(runs) {
					t.Errorf("thread %s: %d runs in the log, %d accepted", th, len(finishes), len(runs))
				}
				f := followers[th]
				want := logIDs[len(logIDs)-1]
				deadline := time.Now().Add(wait)
				for f.lastID() != want && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				// A live connection gets a block's deltas instead of the
				// block (which only moves its cursor); a reconnection
				// replays the blocks after its cursor. So the follower has
				// every other event of the log, in order, once, and
				// exactly as stored.
				f.mu.Lock()
				got, err, deltas := f.ids, f.err, f.deltas
				for id, d := range f.data {
					if !sameJSONText(logData[id], d) {
						t.Errorf("thread %s: id %s was %s, the log has %s", th, id, d, logData[id])
					}
				}
				f.mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				i := 0
				for _, id := range logIDs {
					switch {
					case i < len(got) && got[i] == id:
						i++
					case !blocks[id]:
						t.Errorf("thread %s: the follower missed id %s (%s)", th, id, logData[id])
					}
				}
				if i != len(got) {
					t.Errorf("thread %s: the follower's ids %v are not the log's, in order, once", th, got)
				}
				if strings.HasPrefix(th, "roll-a") && deltas == 0 {
					t.Errorf("thread %s: the follower saw no live delta", th)
				}
				var st instanceai.ThreadStatus
				ps[1].get("/instance-ai/threads/"+th+"/status", &st)
				if st.HasActiveRun {
					t.Errorf("thread %s: still active after the load: %+v", th, st)
				}
				t.Logf("thread %s: %d runs, %d events, %d live deltas", th, len(runs), len(logIDs), deltas)
			}
			cancel()
			wg.Wait()
		})
	}
}

// sameJSONText compares two JSON texts as values.
func sameJSONText(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return a == b
	}
	return reflect.DeepEqual(va, vb)
}

// TestClusterSettlesATakenOverRunFromWhatItsClientsHeard: a run started on
// A, where no client follows its thread, asks for an approval; the answer
// reaches B, which takes the run over and streams its reply (A is paused
// meanwhile, so that its own wait for the answer does not take the run
// back first); B dies mid-reply. A heard the run's start but, routing by
// thread, none of B's reply: the run is settled from what C heard, where
// the client follows it, and the client's text is the log's.
func TestClusterSettlesATakenOverRunFromWhatItsClientsHeard(t *testing.T) {
	for _, bc := range clusterBuses {
		t.Run(bc.name, func(t *testing.T) {
			store := testpg.FreshDSN(t)
			ps := cluster(t, store, bc.spec(t), 3, 40*time.Millisecond)
			a, b, c := ps[0], ps[1], ps[2]
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("A's log:\n%s\nB's log:\n%s\nC's log:\n%s", a.Logs(), b.Logs(), c.Logs())
				}
			})
			if code := a.post("/instance-ai/threads", `{"id":"taken"}`); code != http.StatusCreated {
				t.Fatalf("create thread: %d", code)
			}
			onC := c.stream("taken", "")
			defer onC.Close()
			// C may begin to follow the thread after the run starts (its
			// stream waits at most 2 s for the bus): it then did not hear
			// the run from its start, but holds B's reply, and settles
			// before A, which holds none of it.
			run := a.chat("taken", "confirm")
			var requestID string
			seen := onC.Until(wait, servertest.ConfirmationRequest(&requestID))
			claims := servertest.OpenStore(t, store).(instanceai.RunClaims)
			deadline := time.Now().Add(wait)
			for {
				row, err := claims.ActiveRun(context.Background(), "taken")
				if err != nil {
					t.Fatal(err)
				}
				if row.Owner == "" {
					break // A handed the waiting run to whichever instance gets the answer
				}
				if time.Now().After(deadline) {
					t.Fatalf("the waiting run is still owned by %s", row.Owner)
				}
				time.Sleep(10 * time.Millisecond)
			}
			signal(t, a, syscall.SIGSTOP)
			// The reply repeats the answer's input: 300 words, seconds of
			// deltas, so that B dies mid-reply however slow the machine.
			input := strings.Repeat("word ", 300)
			if code := b.post("/instance-ai/confirm/"+requestID, `{"approved":false,"userInput":"`+input+`"}`); code != http.StatusOK {
				t.Fatalf("deny on B: %d", code)
			}
			seen = append(seen, onC.Until(wait, servertest.IsType(instanceai.TypeToolResult))...)
			seen = append(seen, onC.Until(wait, servertest.IsType(instanceai.TypeTextDelta))...)
			b.Kill()
			signal(t, a, syscall.SIGCONT)
			rest := onC.Until(wait+2*testLease, servertest.IsRunFinish(run))
			fin := rest[len(rest)-1].Decoded.Payload.(*instanceai.RunFinish)
			if fin.Status != instanceai.RunInterrupted || fin.Reason != instanceai.ReasonCrashed {
				t.Fatalf("the run whose instance died ended %+v", fin)
			}
			rows := servertest.StoredEvents(t, servertest.OpenStore(t, store), "taken")
			checkTexts(t, "the client on C", append(seen, rest...), rows)
			if !strings.Contains(c.Logs(), "settled a run whose process is gone") {
				t.Fatalf("C, the one instance that heard B's reply, did not settle the run; A's log:\n%s", a.Logs())
			}
		})
	}
}

func signal(t *testing.T, p *process, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}
