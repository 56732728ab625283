package check

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/ssestream"
)

const thread = "th"

// epoch is the stamp of the hand-made events; each event is 10 ms later
// than the one before.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// book builds a thread's log the way the writer appends it, and the frames
// a client is sent.
type book struct {
	rows []Row
	ts   int64
}

func (b *book) stamp(ev instanceai.Event) instanceai.Event {
	b.ts += 10
	ev.TS = epoch.UnixMilli() + b.ts
	if ev.UserID == "" {
		ev.UserID = "local"
	}
	return ev
}

// store appends an event to the log and returns its row.
func (b *book) store(ev instanceai.Event) Row {
	ev = b.stamp(ev)
	data, err := json.Marshal(&ev)
	if err != nil {
		panic(err)
	}
	var back instanceai.Event
	if err := json.Unmarshal(data, &back); err != nil {
		panic(err)
	}
	r := Row{Seq: int64(len(b.rows) + 1), Event: back, Data: string(data), At: time.UnixMilli(ev.TS)}
	b.rows = append(b.rows, r)
	return r
}

func (b *book) log() *Log { return &Log{Threads: map[string][]Row{thread: b.rows}} }

func orch(run string) string { return instanceai.OrchestratorAgentID(run) }

func runStart(run string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeRunStart, RunID: run, AgentID: orch(run), Payload: &instanceai.RunStart{MessageID: "m-" + run}}
}

func runFinish(run, status, reason string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeRunFinish, RunID: run, AgentID: orch(run), Payload: &instanceai.RunFinish{Status: status, Reason: reason}}
}

func textOf(typ instanceai.EventType, run, agent, rid, s string) instanceai.Event {
	return instanceai.Event{Type: typ, RunID: run, AgentID: agent, ResponseID: rid, Payload: &instanceai.Text{Text: s}}
}

func toolCall(run, agent, id string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeToolCall, RunID: run, AgentID: agent,
		Payload: &instanceai.ToolCall{ToolCallID: id, ToolName: "workflows", Args: json.RawMessage(`{"a":1}`)}}
}

func toolResult(run, agent, id string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeToolResult, RunID: run, AgentID: agent,
		Payload: &instanceai.ToolResult{ToolCallID: id, Result: json.RawMessage(`{"ok":true}`)}}
}

func spawned(run, agent string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeAgentSpawned, RunID: run, AgentID: agent,
		Payload: &instanceai.AgentSpawned{ParentID: orch(run), Role: "eval-setup", Tools: []string{"workflows"}}}
}

func completed(run, agent, status string) instanceai.Event {
	return instanceai.Event{Type: instanceai.TypeAgentCompleted, RunID: run, AgentID: agent,
		Payload: &instanceai.AgentCompleted{Role: "eval-setup", Result: "done", Status: status}}
}

// withID is the frame of a stored row, as replay or a live structural
// event sends it.
func withID(r Row) ssestream.Frame {
	return ssestream.Frame{ID: strconv.FormatInt(r.Seq, 10), HasID: true, Data: r.Data, HasData: true}
}

// live is the frame of an event sent without an id (a delta).
func (b *book) live(ev instanceai.Event) ssestream.Frame {
	ev = b.stamp(ev)
	data, _ := json.Marshal(&ev)
	return ssestream.Frame{Data: string(data), HasData: true}
}

func feed(c *Client, frames ...ssestream.Frame) {
	for _, f := range frames {
		c.Frame(f)
	}
}

// kinds returns the anomalies' kinds with their counts, e.g.
// "id-gap×1 text-mismatch×2".
func kinds(res Result) string {
	var parts []string
	counts := res.Counts()
	for _, k := range Kinds {
		if n := counts[k]; n > 0 {
			parts = append(parts, string(k)+"×"+strconv.Itoa(n))
		}
	}
	return strings.Join(parts, " ")
}

func expect(t *testing.T, res Result, want string) {
	t.Helper()
	if got := kinds(res); got != want {
		var lines []string
		for _, a := range res.Anomalies {
			lines = append(lines, a.String())
		}
		t.Fatalf("anomalies %q, want %q:\n%s", got, want, strings.Join(lines, "\n"))
	}
}

// simpleRun is the reference agent's simple scenario for run r: reasoning,
// a tool call, a reply, with the deltas a live client gets and the rows
// the log gets.
type simpleRun struct {
	start, reasoningBlock, call, result, textBlock, finish Row
	reasoning, reply                                       []instanceai.Event
}

func (b *book) simple(run string) *simpleRun {
	s := &simpleRun{}
	o := orch(run)
	s.start = b.store(runStart(run))
	for _, w := range []string{"Let ", "me ", "look."} {
		s.reasoning = append(s.reasoning, textOf(instanceai.TypeReasoningDelta, run, o, run+":seg:1", w))
	}
	s.reasoningBlock = b.store(textOf(instanceai.TypeReasoningBlock, run, o, run+":seg:1", "Let me look."))
	s.call = b.store(toolCall(run, o, run+":tc:1"))
	s.result = b.store(toolResult(run, o, run+":tc:1"))
	for _, w := range []string{"You ", "have ", "2 ", "workflows."} {
		s.reply = append(s.reply, textOf(instanceai.TypeTextDelta, run, o, run+":seg:2", w))
	}
	s.textBlock = b.store(textOf(instanceai.TypeTextBlock, run, o, run+":seg:2", "You have 2 workflows."))
	s.finish = b.store(runFinish(run, instanceai.RunCompleted, ""))
	return s
}

// followLive feeds a client everything of the run as a live connection
// gets it: structural events with ids, deltas without, blocks not at all.
func (b *book) followLive(c *Client, s *simpleRun) {
	feed(c, withID(s.start))
	for _, d := range s.reasoning {
		feed(c, b.live(d))
	}
	feed(c, withID(s.call), withID(s.result))
	for _, d := range s.reply {
		feed(c, b.live(d))
	}
	feed(c, withID(s.finish))
}

func TestCleanLiveAndReplay(t *testing.T) {
	var b book
	s := b.simple("r1")
	live := NewClient(thread, "live")
	live.Connect("a", epoch)
	b.followLive(live, s)
	replay := NewClient(thread, "replay")
	replay.Connect("b", epoch)
	for _, r := range b.rows {
		feed(replay, withID(r))
	}
	res := Check(Input{Log: b.log(), Clients: []*Client{live, replay},
		Started: []StartedRun{{Thread: thread, Run: "r1", Instance: "a"}}})
	expect(t, res, "")
	if res.Runs != 1 {
		t.Fatalf("%d runs, want 1", res.Runs)
	}
}

// A client that drops mid-reply and resumes elsewhere with its cursor gets
// the block on replay: REPLACE leaves its text right.
func TestCleanReconnectAfterBlock(t *testing.T) {
	var b book
	s := b.simple("r1")
	c := NewClient(thread, "c")
	c.Connect("a", epoch)
	feed(c, withID(s.start), b.live(s.reasoning[0]), b.live(s.reasoning[1]), b.live(s.reasoning[2]),
		withID(s.call), withID(s.result), b.live(s.reply[0]), b.live(s.reply[1]))
	c.Disconnect("dropped")
	if c.Cursor() != s.result.Seq {
		t.Fatalf("cursor %d, want %d", c.Cursor(), s.result.Seq)
	}
	c.Connect("b", epoch)
	feed(c, withID(s.textBlock), withID(s.finish))
	expect(t, Check(Input{Log: b.log(), Clients: []*Client{c}}), "")
}

// A client that resumes mid-segment on another instance is sent the open
// text whole, as one delta: it replaces what the client held.
func TestCleanReconnectMidSegment(t *testing.T) {
	var b book
	s := b.simple("r1")
	c := NewClient(thread, "c")
	c.Connect("a", epoch)
	feed(c, withID(s.start), withID(s.call), withID(s.result), b.live(s.reply[0]), b.live(s.reply[1]))
	c.Disconnect("dropped")
	c.Connect("b", epoch)
	snapshot := textOf(instanceai.TypeTextDelta, "r1", orch("r1"), "r1:seg:2", "You have 2 ")
	feed(c, b.live(snapshot), b.live(s.reply[3]), withID(s.finish))
	// The reasoning was never sent to this client (ids 2 was a block):
	// the client's text misses it, which the check must see.
	expect(t, Check(Input{Log: b.log(), Clients: []*Client{c}}), "text-mismatch×1")

	c2 := NewClient(thread, "c2")
	c2.Connect("a", epoch)
	feed(c2, withID(s.start), b.live(s.reasoning[0]), b.live(s.reasoning[1]), b.live(s.reasoning[2]),
		withID(s.call), withID(s.result), b.live(s.reply[0]), b.live(s.reply[1]), b.live(s.reply[2]))
	c2.Disconnect("dropped")
	c2.Connect("b", epoch)
	// This instance had heard less of the segment than the client: the
	// snapshot is shorter, and still the segment's whole text so far.
	snapshot = textOf(instanceai.TypeTextDelta, "r1", orch("r1"), "r1:seg:2", "You have ")
	feed(c2, b.live(snapshot), b.live(s.reply[2]), b.live(s.reply[3]), withID(s.finish))
	expect(t, Check(Input{Log: b.log(), Clients: []*Client{c2}}), "")
}

// run-sync replaces the client's state of the run.
func TestCleanRunSync(t *testing.T) {
	var b book
	s := b.simple("r1")
	c := NewClient(thread, "c")
	c.Connect("a", epoch)
	// A garbled view of the reply…
	feed(c, withID(s.start), b.live(s.reasoning[0]), b.live(s.reasoning[1]), b.live(s.reasoning[2]),
		withID(s.call), withID(s.result), b.live(s.reply[0]), b.live(s.reply[0]))
	c.Disconnect("dropped")
	c.Connect("b", epoch)
	// …is replaced by the run's tree, folded by the server from the log
	// up to the cursor plus the open text.
	sync := NewClient(thread, "server")
	feed(sync, withID(s.start), withID(s.reasoningBlock), withID(s.call), withID(s.result),
		b.live(textOf(instanceai.TypeTextDelta, "r1", orch("r1"), "r1:seg:2", "You have ")))
	tree, _ := json.Marshal(map[string]any{"runId": "r1", "threadId": thread, "status": "active",
		"isSuspended": false, "agentTree": sync.folded.Run("r1").Tree()})
	feed(c, b.live(textOf(instanceai.TypeTextDelta, "r1", orch("r1"), "r1:seg:2", "You have ")),
		ssestream.Frame{Event: "run-sync", Data: string(tree), HasData: true},
		b.live(s.reply[2]), b.live(s.reply[3]), withID(s.finish))
	expect(t, Check(Input{Log: b.log(), Clients: []*Client{c}}), "")
}

// A run-sync folded by the server from a log that holds the run's error
// carries the error's text in its tree; error text is left out of the
// comparison on both sides, so the client's text is still the log's.
func TestCleanRunSyncAfterAnError(t *testing.T) {
	var b book
	start := b.store(runStart("r1"))
	o := orch("r1")
	failure := b.store(instanceai.Event{Type: instanceai.TypeError, RunID: "r1", AgentID: o,
		Payload: &instanceai.ErrorPayload{Content: "The server could not store this run's events; the run was stopped.", Code: "storage_unavailable"}})
	fin := b.store(runFinish("r1", instanceai.RunError, "storage_unavailable"))
	sync := NewClient(thread, "server")
	sync.fold(start.Event)
	sync.folded.Run("r1").Apply(failure.Event) // the server's fold keeps the error's text
	if !strings.Contains(sync.folded.Run("r1").Tree().TextContent, "*Error: ") {
		t.Fatal("the server's tree holds no error text: the case tests nothing")
	}
	tree, _ := json.Marshal(map[string]any{"runId": "r1", "threadId": thread, "status": "error",
		"isSuspended": false, "agentTree": sync.folded.Run("r1").Tree()})
	c := NewClient(thread, "c")
	c.Connect("a", epoch)
	feed(c, withID(start), withID(failure), withID(fin), ssestream.Frame{Event: "run-sync", Data: string(tree), HasData: true})
	expect(t, Check(Input{Log: b.log(), Clients: []*Client{c}}), "")
}

// A background agent works on after its run's run-finish; a storage
// outage's ending was sent live without ids and its stored echo is
// skipped by the connection that had it.
func TestCleanBackgroundAndOutageEcho(t *testing.T) {
	var b book
	o := orch("r1")
	start := b.store(runStart("r1"))
	spawn := b.store(spawned("r1", "bg-1"))
	fin := b.store(runFinish("r1", instanceai.RunCompleted, ""))
	call := b.store(toolCall("r1", "bg-1", "r1:tc:2"))
	result := b.store(toolResult("r1", "bg-1", "r1:tc:2"))
	done := b.store(completed("r1", "bg-1", "completed"))

	start2 := b.store(runStart("r2"))
	ending := []instanceai.Event{
		{Type: instanceai.TypeError, RunID: "r2", AgentID: orch("r2"), Payload: &instanceai.ErrorPayload{Content: "storage", Code: "storage_unavailable"}},
		runFinish("r2", instanceai.RunError, "storage_unavailable"),
	}
	var idless []ssestream.Frame
	var echo []Row
	for _, ev := range ending {
		f := b.live(ev)
		idless = append(idless, f)
		var back instanceai.Event
		_ = json.Unmarshal([]byte(f.Data), &back)
		r := Row{Seq: int64(len(b.rows) + 1), Event: back, Data: f.Data}
		b.rows = append(b.rows, r)
		echo = append(echo, r)
	}
	_ = o
	c := NewClient(thread, "c")
	c.Connect("a", epoch)
	feed(c, withID(start), withID(spawn), withID(fin), withID(call), withID(result), withID(done), withID(start2))
	feed(c, idless...)
	// Another connection after the outage replays the echo with ids.
	c.Disconnect("dropped")
	c2 := NewClient(thread, "c2")
	c2.Connect("b", epoch)
	for _, r := range b.rows {
		feed(c2, withID(r))
	}
	// One that joined between the live error and the live run-finish:
	// the stream skips the stored echo of both.
	c3 := NewClient(thread, "c3")
	c3.Connect("a", epoch)
	feed(c3, withID(start), withID(spawn), withID(fin), withID(call), withID(result), withID(done), withID(start2), idless[1])
	after := b.store(runStart("r4"))
	afterEnd := b.store(runFinish("r4", instanceai.RunCompleted, ""))
	feed(c3, withID(after), withID(afterEnd))
	res := Check(Input{Log: b.log(), Clients: []*Client{c, c2, c3}})
	expect(t, res, "")

	// A connection that did not have the ending live must be sent it.
	c4 := NewClient(thread, "c4")
	c4.Connect("a", epoch)
	feed(c4, withID(start), withID(spawn), withID(fin), withID(call), withID(result), withID(done), withID(start2), withID(after), withID(afterEnd))
	res = Check(Input{Log: b.log(), Clients: []*Client{c4}})
	expect(t, res, "id-gap×1")
	if a := res.Anomalies[0]; a.Seq != echo[0].Seq || !strings.Contains(a.Detail, "(error)") {
		t.Fatalf("gap evidence: %s", a)
	}
}

// Each kind of anomaly the log alone shows.
func TestLogAnomalies(t *testing.T) {
	var b book
	// r1: two run-finishes (the owner's and a sweep's), and an event of
	// its orchestrator after the first.
	b.store(runStart("r1"))
	b.store(runFinish("r1", instanceai.RunCancelled, "user_cancelled"))
	b.store(textOf(instanceai.TypeTextBlock, "r1", orch("r1"), "r1:seg:1", "late"))
	b.store(runFinish("r1", instanceai.RunInterrupted, instanceai.ReasonCrashed))
	// r2: never finished, and its agent never completed.
	b.store(runStart("r2"))
	b.store(spawned("r2", "bg-2"))
	// r3: a background agent that completes twice, then acts again.
	b.store(runStart("r3"))
	b.store(spawned("r3", "bg-3"))
	b.store(runFinish("r3", instanceai.RunCompleted, ""))
	b.store(completed("r3", "bg-3", "completed"))
	b.store(toolCall("r3", "bg-3", "r3:tc:9"))
	b.store(completed("r3", "bg-3", "error"))
	// r4: started twice; r5: a finish without a start.
	b.store(runStart("r4"))
	b.store(runStart("r4"))
	b.store(runFinish("r4", instanceai.RunCompleted, ""))
	b.store(runFinish("r5", instanceai.RunInterrupted, instanceai.ReasonCrashed))
	log := b.log()
	log.ActiveRuns = []ActiveRun{{Thread: thread, Run: "r2", Owner: "inst-a"}}
	log.BackgroundAgents = []BackgroundAgent{{Thread: thread, Agent: "bg-2", Run: "r2", Owner: "inst-a"}}
	res := Check(Input{Log: log, Started: []StartedRun{{Thread: thread, Run: "r1"}, {Thread: thread, Run: "r9", Instance: "b"}}})
	expect(t, res, "double-finish×1 double-start×1 unfinished-run×1 startless-run×1 event-after-finish×2 unsettled-agent×1 "+
		"double-agent-completed×1 active-run-left×1 background-agent-left×1 lost-run×1")
	for _, a := range res.Anomalies {
		if a.Kind == DoubleFinish && (a.Run != "r1" || a.Seq != 4 || !strings.Contains(a.Detail, "interrupted/crash_interrupted at seq 4 after run-finish cancelled/user_cancelled at seq 2")) {
			t.Fatalf("double finish evidence: %s", a)
		}
	}
	if res.Runs != 4 {
		t.Fatalf("%d runs, want 4 (r5 never started)", res.Runs)
	}
}

// Each kind of anomaly a client's ids show.
func TestIDAnomalies(t *testing.T) {
	var b book
	s := b.simple("r1")
	s2 := b.simple("r2")

	gap := NewClient(thread, "gap")
	gap.Connect("a", epoch)
	feed(gap, withID(s.start), withID(s.result)) // skipped the tool-call (3): a gap; the block (2) may be skipped
	dup := NewClient(thread, "dup")
	dup.Connect("a", epoch)
	feed(dup, withID(s.start), withID(s.reasoningBlock), withID(s.reasoningBlock))
	dup.Disconnect("dropped")
	dup.Connect("b", epoch)
	feed(dup, withID(s.call)) // resumes at the cursor 2: fine
	mismatch := NewClient(thread, "mismatch")
	mismatch.Connect("a", epoch)
	wrong := s.start
	wrong.Data = strings.Replace(wrong.Data, "m-r1", "m-other", 1)
	feed(mismatch, withID(wrong))
	reset := NewClient(thread, "reset")
	reset.Connect("a", epoch)
	feed(reset, ssestream.Frame{ID: "6", HasID: true, Event: "reset", HasData: true,
		Data: `{"reason":"events_evicted","threadId":"th","lastEventId":0,"nextEventId":7}`}, withID(s2.start))
	ahead := NewClient(thread, "ahead")
	ahead.Connect("a", epoch)
	feed(ahead, withID(s.start), ssestream.Frame{ID: "0", HasID: true, Event: "reset", HasData: true,
		Data: `{"reason":"cursor_ahead","threadId":"th","lastEventId":1,"nextEventId":1}`}, withID(s.start))
	bad := NewClient(thread, "bad")
	bad.Connect("a", epoch)
	feed(bad, ssestream.Frame{Data: "{not json", HasData: true}, ssestream.Frame{Event: "surprise", Data: "{}", HasData: true})

	res := Check(Input{Log: b.log(), Clients: []*Client{gap, dup, mismatch, reset, ahead, bad}})
	expect(t, res, "id-gap×1 id-duplicate×1 id-mismatch×1 reset-frame×2 bad-frame×2")
	for _, a := range res.Anomalies {
		if a.Kind == IDGap && (a.Client != "gap" || a.Seq != 3 || !strings.Contains(a.Detail, "skipped 3 (tool-call)")) {
			t.Fatalf("gap evidence: %s", a)
		}
	}
}

// Text a client holds that the log does not, and text the log holds that
// a client never got right.
func TestTextAnomalies(t *testing.T) {
	var b book
	s := b.simple("r1")

	// A delta lost on the way (a bus that dropped it): the block is hidden
	// on a live connection, so the client's text stays short.
	lost := NewClient(thread, "lost")
	lost.Connect("a", epoch)
	feed(lost, withID(s.start), b.live(s.reasoning[0]), b.live(s.reasoning[1]), b.live(s.reasoning[2]),
		withID(s.call), withID(s.result), b.live(s.reply[0]), b.live(s.reply[2]), b.live(s.reply[3]), withID(s.finish))

	// A snapshot from an instance that joined mid-segment: it holds only
	// the end of the segment, and the client takes it as the whole.
	joined := NewClient(thread, "joined")
	joined.Connect("a", epoch)
	feed(joined, withID(s.start), b.live(s.reasoning[0]), b.live(s.reasoning[1]), b.live(s.reasoning[2]),
		withID(s.call), withID(s.result), b.live(s.reply[0]))
	joined.Disconnect("dropped")
	joined.Connect("b", epoch)
	feed(joined, b.live(textOf(instanceai.TypeTextDelta, "r1", orch("r1"), "r1:seg:2", "2 ")), b.live(s.reply[3]), withID(s.finish))

	res := Check(Input{Log: b.log(), Clients: []*Client{lost, joined}})
	expect(t, res, "text-mismatch×2")
	for _, a := range res.Anomalies {
		if a.Client == "lost" && !strings.Contains(a.Detail, `segment 2 (text "r1:seg:2"): the log holds 21 bytes, the client 16; first difference at byte 4: log "have 2 workflows.", client "2 workflows."`) {
			t.Fatalf("lost delta evidence: %s", a)
		}
	}

	// A crash: the settlement wrote the block from a checkpoint that
	// missed the last words the client was shown.
	var c book
	start := c.store(runStart("r2"))
	o := orch("r2")
	deltas := []instanceai.Event{
		textOf(instanceai.TypeTextDelta, "r2", o, "r2:seg:1", "chunk 0. "),
		textOf(instanceai.TypeTextDelta, "r2", o, "r2:seg:1", "chunk 1. "),
	}
	c.store(textOf(instanceai.TypeTextBlock, "r2", o, "r2:seg:1", "chunk 0. "))
	fin := c.store(runFinish("r2", instanceai.RunInterrupted, instanceai.ReasonCrashed))
	crash := NewClient(thread, "crash")
	crash.Connect("a", epoch)
	feed(crash, withID(start), c.live(deltas[0]), c.live(deltas[1]), withID(fin))
	res = Check(Input{Log: c.log(), Clients: []*Client{crash}})
	expect(t, res, "text-lost×1")
	if a := res.Anomalies[0]; !strings.Contains(a.Detail, "its first lost byte was shown at") || !strings.HasSuffix(a.Detail, "through a") {
		t.Fatalf("text-lost evidence: %s", a)
	}

	// The same loss when a kill or a pause hit the instance the client
	// was shown the lost text through, at that moment, is the one the
	// docs/native-protocol.md documents: what the instance's bus had not carried yet. A
	// fault long after, or of another kind or instance, leaves it an
	// anomaly.
	shown := time.Now()
	for _, tc := range []struct {
		name  string
		fault Fault
		want  string
	}{
		{"kill at that moment", Fault{Kind: "kill9", StopsBus: true, Instances: []string{"a"}, Start: shown.Add(10 * time.Millisecond)}, ""},
		{"pause at that moment", Fault{Kind: "sigstop", StopsBus: true, Instances: []string{"a"}, Start: shown.Add(-10 * time.Millisecond)}, ""},
		{"database reset on the database's bus", Fault{Kind: "pg-reset", StopsBus: true, Instances: []string{"a"}, Start: shown}, ""},
		{"kill much later", Fault{Kind: "kill9", StopsBus: true, Instances: []string{"a"}, Start: shown.Add(time.Minute)}, "text-lost×1"},
		{"kill of another instance", Fault{Kind: "kill9", StopsBus: true, Instances: []string{"b"}, Start: shown}, "text-lost×1"},
		{"database freeze on another bus", Fault{Kind: "pg-freeze", Instances: []string{"a"}, Start: shown}, "text-lost×1"},
	} {
		crash := NewClient(thread, "crash")
		crash.Connect("a", epoch)
		feed(crash, withID(start), c.live(deltas[0]), c.live(deltas[1]), withID(fin))
		res = Check(Input{Log: c.log(), Clients: []*Client{crash}, Faults: []Fault{tc.fault}})
		expect(t, res, tc.want)
		if documented := len(res.Documented); (tc.want == "") != (documented == 1) {
			t.Fatalf("%s: %d documented losses", tc.name, documented)
		}
	}

	// An outage: the client was shown the reply and the ending live; the
	// log got a sweep's ending first, then the stored echo of the error,
	// and no text (a double finish as well).
	var d book
	start = d.store(runStart("r3"))
	o = orch("r3")
	swept := d.store(runFinish("r3", instanceai.RunInterrupted, instanceai.ReasonCrashed))
	failure := instanceai.Event{Type: instanceai.TypeError, RunID: "r3", AgentID: o, Payload: &instanceai.ErrorPayload{Content: "The database is unavailable.", Code: "storage_unavailable"}}
	errRow := d.store(failure)
	ending := d.store(runFinish("r3", instanceai.RunError, "storage_unavailable"))
	outage := NewClient(thread, "outage")
	outage.Connect("a", epoch)
	feed(outage, withID(start), d.live(textOf(instanceai.TypeTextDelta, "r3", o, "r3:seg:1", "Half a reply")),
		ssestream.Frame{Data: errRow.Data, HasData: true}, ssestream.Frame{Data: ending.Data, HasData: true})
	outage.Disconnect("dropped")
	outage.Connect("b", epoch)
	feed(outage, withID(swept), withID(errRow), withID(ending))
	res = Check(Input{Log: d.log(), Clients: []*Client{outage}})
	expect(t, res, "double-finish×1 event-after-finish×1 text-lost×1")
}

// A cancel answered ok while the run went on to complete, and one that
// merely raced the run's own end.
func TestCancelIgnored(t *testing.T) {
	var b book
	b.simple("r1")
	b.simple("r2")
	finishAt := func(run string) time.Time {
		for _, r := range b.rows {
			if r.Event.RunID == run && r.Event.Type == instanceai.TypeRunFinish {
				return time.UnixMilli(r.Event.TS)
			}
		}
		t.Fatalf("no finish of %s", run)
		return time.Time{}
	}
	ignored := Cancel{Thread: thread, Run: "r1", Instance: "c", Applied: true,
		Sent: finishAt("r1").Add(-time.Second), Answered: finishAt("r1").Add(-500 * time.Millisecond)}
	raced := Cancel{Thread: thread, Run: "r2", Instance: "c", Applied: true,
		Sent: finishAt("r2").Add(-50 * time.Millisecond), Answered: finishAt("r2").Add(30 * time.Millisecond)}
	// Accepted only: the owner stops it at its next renewal, which may
	// come after the run completed.
	accepted := Cancel{Thread: thread, Run: "r1", Instance: "c",
		Sent: finishAt("r1").Add(-time.Second), Answered: finishAt("r1").Add(-500 * time.Millisecond)}
	res := Check(Input{Log: b.log(), Cancels: []Cancel{ignored, raced, accepted}})
	expect(t, res, "cancel-ignored×1")
	if a := res.Anomalies[0]; a.Run != "r1" {
		t.Fatalf("flagged %s", a)
	}
}

// Settle times run from a fault's start to its victims' endings.
func TestSettleTimes(t *testing.T) {
	var b book
	b.store(runStart("r1"))
	b.store(spawned("r1", "bg-1"))
	fin := b.store(runFinish("r1", instanceai.RunInterrupted, instanceai.ReasonCrashed))
	done := b.store(completed("r1", "bg-1", "error"))
	start := time.UnixMilli(fin.Event.TS).Add(-2 * time.Second)
	res := Check(Input{Log: b.log(), Faults: []Fault{{Kind: "kill9", Start: start,
		Victims: []Victim{{Thread: thread, Run: "r1"}, {Thread: thread, Run: "r1", Agent: "bg-1"}, {Thread: thread, Run: "gone"}}}}})
	expect(t, res, "")
	want := []time.Duration{2 * time.Second, 2*time.Second + time.UnixMilli(done.Event.TS).Sub(time.UnixMilli(fin.Event.TS))}
	if len(res.Settle) != 2 || res.Settle[0] != want[0] || res.Settle[1] != want[1] || res.Faults != 1 {
		t.Fatalf("settle %v, faults %d; want %v, 1", res.Settle, res.Faults, want)
	}
}

// Anomalies the harness observed are reported as they are.
func TestObserved(t *testing.T) {
	var b book
	res := Check(Input{Log: b.log(), Observed: []Anomaly{{Kind: Stranded, Thread: thread, Client: "c", Detail: "x"}}})
	expect(t, res, "stranded×1")
}
