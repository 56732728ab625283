// Package check judges a fault-testing run against the log: it reads what
// the database holds once the cluster is quiet and what each client was
// sent, and lists every anomaly with the evidence an engineer needs to find
// it (thread, run, client, seqs, lengths, first differing byte).
//
// The rules:
//   - a run has exactly one run-start and one run-finish;
//   - no event of a run follows its run-finish, except its background
//     agents' own events up to their agent-completed (and the thread's
//     title, which may be stored late);
//   - every agent-spawned has exactly one agent-completed;
//   - active_runs and background_agents are empty;
//   - every run a chat was answered with is in the log;
//   - on each connection of a client the ids follow the cursor it
//     connected with, each once, in order; the only seqs a connection may
//     skip are blocks (a live connection gets their deltas instead) and the
//     stored echo of an ending it was sent without an id; a frame's event is
//     the log's row of that seq (a frame of an id alone stands for an
//     extension event, which native streams do not show); a durable store
//     never sends a reset frame;
//   - each client's fold of a run holds, per agent, the log's text and
//     reasoning, segment by segment (error messages, which the reducer
//     adds to the text, are left out: see foldsText); a run whose last
//     stored event is past the client's cursor is not compared;
//   - a cancel answered ok is not followed by the run completing anyway;
//   - every event a producer's append was answered 200 for (stored or a
//     duplicate) is in the log, once;
//   - a run whose producer went past the segment bound ended once, in
//     error with segment_too_large, its text cut at exactly the bound; no
//     stored event is over the bound on one event; and no instance's peak
//     memory went over its bound meanwhile.
//
// A Client's fold and the checker are deterministic: the same frames and
// log give the same anomalies, whatever the timing that produced them.
package check

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// Kind names a kind of anomaly.
type Kind string

// The kinds of anomaly. Every one of them is a failure: the goal is 0 of
// each.
const (
	DoubleFinish     Kind = "double-finish"          // a run with more than one run-finish
	DoubleStart      Kind = "double-start"           // a run with more than one run-start
	UnfinishedRun    Kind = "unfinished-run"         // a run-start without a run-finish once the cluster is quiet
	StartlessRun     Kind = "startless-run"          // a run-finish of a run whose run-start is not in the log
	EventAfterFinish Kind = "event-after-finish"     // a run's event after its run-finish that is not a background agent's own
	UnsettledAgent   Kind = "unsettled-agent"        // an agent-spawned without agent-completed
	DoubleAgentEnd   Kind = "double-agent-completed" // an agent with more than one agent-completed
	ActiveRunLeft    Kind = "active-run-left"        // an active_runs row once quiet
	BackgroundLeft   Kind = "background-agent-left"  // a background_agents row once quiet
	LostRun          Kind = "lost-run"               // a chat answered with a run id the log never started
	IDGap            Kind = "id-gap"                 // a connection skipped a stored event
	IDDuplicate      Kind = "id-duplicate"           // a connection was sent an id again, or out of order
	IDMismatch       Kind = "id-mismatch"            // the frame of an id is not the log's row of that seq
	ResetFrame       Kind = "reset-frame"            // a reset frame, though the store never evicts and every cursor is the cluster's
	BadFrame         Kind = "bad-frame"              // a frame that is not the protocol's
	TextMismatch     Kind = "text-mismatch"          // a client's text of a segment differs from the log's
	TextLost         Kind = "text-lost"              // a client was shown text of a run that ended in a crash or outage and the log lacks it
	CancelIgnored    Kind = "cancel-ignored"         // a cancel answered ok, then the run completed anyway
	Stranded         Kind = "stranded"               // a live connection did not deliver what the log holds
	ClientBehind     Kind = "client-behind"          // a client could not reach the log's head even by reconnecting
	UnexpectedStatus Kind = "unexpected-status"      // an answer the API does not document for the situation (a 500)
	InstanceExit     Kind = "instance-exit"          // an instance exited without being asked to
	AckLost          Kind = "ack-lost"               // an event a producer was answered 200 for is not in the log
	StoredTwice      Kind = "stored-twice"           // an event a producer sent (and retried) is in the log more than once
	BoundNotKept     Kind = "bound-not-kept"         // an oversized producer's run did not end once with segment_too_large, its text cut at the bound
	EventTooLarge    Kind = "event-too-large"        // a stored event over --max-event-bytes
	MemoryOverBound  Kind = "memory-over-bound"      // an instance's peak resident memory over the bound while it took an oversized producer
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{
	DoubleFinish, DoubleStart, UnfinishedRun, StartlessRun, EventAfterFinish, UnsettledAgent, DoubleAgentEnd,
	ActiveRunLeft, BackgroundLeft, LostRun, IDGap, IDDuplicate, IDMismatch, ResetFrame, BadFrame,
	TextMismatch, TextLost, CancelIgnored, Stranded, ClientBehind, UnexpectedStatus, InstanceExit,
	AckLost, StoredTwice, BoundNotKept, EventTooLarge, MemoryOverBound,
}

// Anomaly is one violation with its evidence.
type Anomaly struct {
	Kind   Kind   `json:"kind"`
	Thread string `json:"thread,omitempty"`
	Run    string `json:"run,omitempty"`
	Client string `json:"client,omitempty"`
	// Seq is the log position it is about, when there is one.
	Seq    int64  `json:"seq,omitempty"`
	Detail string `json:"detail"`
	// lostAt and lostVia are, for a text-lost, when and through which
	// instance the client was first shown the text the log lacks.
	lostAt  time.Time
	lostVia string
}

func (a Anomaly) String() string {
	var b strings.Builder
	b.WriteString(string(a.Kind))
	for _, kv := range [][2]string{{"thread", a.Thread}, {"run", a.Run}, {"client", a.Client}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if a.Seq > 0 {
		fmt.Fprintf(&b, " seq=%d", a.Seq)
	}
	b.WriteString(": ")
	b.WriteString(a.Detail)
	return b.String()
}

// StartedRun is a run a chat request was answered with.
type StartedRun struct {
	Thread, Run, Instance string
	At                    time.Time
}

// Cancel is a cancel request and its answer.
type Cancel struct {
	Thread, Run, Instance string
	Sent, Answered        time.Time
	// Applied is set when the answer said the work stopped: 200
	// {"ok": true, "status": "applied"}. A 202 "accepted" promises only
	// that the owner stops it at its next lease renewal: the run may
	// complete first.
	Applied bool
}

// Victim is what a fault hit: a run (Agent "") or a background agent that
// was working on the faulted instance when the fault began.
type Victim struct {
	Thread, Run, Agent string
}

// Fault is one fault the harness injected.
type Fault struct {
	Kind string
	// StopsBus is set when the fault stops the instances it hits from
	// sending on the bus: a kill or a pause, a fault of their bus link,
	// or a database fault when the bus is PostgreSQL's (it shares the
	// link).
	StopsBus bool
	// Instances are the instance ids it hit.
	Instances  []string
	Start, End time.Time
	Victims    []Victim
}

// Input is everything the checker judges.
type Input struct {
	Log     *Log
	Clients []*Client
	Started []StartedRun
	Cancels []Cancel
	Faults  []Fault
	// Observed are anomalies the harness saw while it ran (a stranded
	// client, an instance that exited, an undocumented status).
	Observed []Anomaly
	// Acked are the events producers were answered 200 for.
	Acked []Acked
	// Oversized are the runs whose producers went past the segment bound
	// on purpose; Bounds the instances' size bounds (zero: no event's
	// size is judged).
	Oversized []Oversized
	Bounds    Bounds
	// Memory holds the instances' peaks while they took oversized
	// producers, judged against MaxRSS (0: not judged).
	Memory []Memory
	MaxRSS int64
}

// Result is the checker's verdict.
type Result struct {
	// Runs is how many runs the log holds, Faults how many faults were
	// injected.
	Runs, Faults int
	Anomalies    []Anomaly
	// Documented are the losses the guides document, which are no
	// anomaly: text a killed or paused instance's own clients were shown
	// in the moment before the fault, which its bus had not carried to
	// the instance that settled the run (see judgeText).
	Documented []Anomaly
	// Settle holds, for each victim of a fault that ended, the time from
	// the fault's start to its run-finish (or agent-completed).
	Settle []time.Duration
}

// Counts returns the anomalies per kind.
func (r *Result) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, a := range r.Anomalies {
		out[a.Kind]++
	}
	return out
}

// runFacts are the log's facts about one run.
type runFacts struct {
	id        string
	starts    []int64
	finishes  []Row
	spawned   map[string]int64   // agent → seq of its agent-spawned
	completed map[string][]int64 // agent → seqs of its agent-completed
	// completedTS is the stamp of each agent's first agent-completed.
	completedTS map[string]int64
	crashed     string // the reason of an ending that documents lost text
}

// finish records one of the run's run-finishes.
func (f *runFacts) finish(r Row) {
	f.finishes = append(f.finishes, r)
	if p := r.Event.Payload.(*instanceai.RunFinish); p.Reason == instanceai.ReasonCrashed || p.Reason == reasonStorageUnavailable {
		f.crashed = p.Reason
	}
}

// reasonStorageUnavailable ends a run whose events could not be stored
// (docs/native-protocol.md, "Storage outages").
const reasonStorageUnavailable = "storage_unavailable"

// Check judges the input.
func Check(in Input) Result {
	res := Result{Faults: len(in.Faults)}
	res.Anomalies = append(res.Anomalies, in.Observed...)
	threads := make([]string, 0, len(in.Log.Threads))
	for th := range in.Log.Threads {
		threads = append(threads, th)
	}
	slices.Sort(threads)
	facts := map[string]map[string]*runFacts{} // thread → run → facts
	for _, th := range threads {
		f, anomalies := judgeLog(th, in.Log.Threads[th])
		facts[th] = f
		for _, rf := range f {
			if len(rf.starts) > 0 {
				res.Runs++
			}
		}
		res.Anomalies = append(res.Anomalies, anomalies...)
	}
	for _, a := range in.Log.ActiveRuns {
		res.Anomalies = append(res.Anomalies, Anomaly{Kind: ActiveRunLeft, Thread: a.Thread, Run: a.Run,
			Detail: fmt.Sprintf("active_runs still holds the thread once quiet (owner %q, suspended %v)", a.Owner, a.Suspended)})
	}
	for _, b := range in.Log.BackgroundAgents {
		res.Anomalies = append(res.Anomalies, Anomaly{Kind: BackgroundLeft, Thread: b.Thread, Run: b.Run,
			Detail: fmt.Sprintf("background_agents still holds agent %s once quiet (owner %q)", b.Agent, b.Owner)})
	}
	for _, s := range in.Started {
		if f := facts[s.Thread][s.Run]; f == nil || len(f.starts) == 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: LostRun, Thread: s.Thread, Run: s.Run,
				Detail: fmt.Sprintf("a chat through %s was answered with this run at %s; the log has no run-start of it",
					s.Instance, s.At.Format(timeFormat))})
		}
	}
	for _, c := range in.Cancels {
		if a, ok := judgeCancel(c, facts[c.Thread][c.Run]); ok {
			res.Anomalies = append(res.Anomalies, a)
		}
	}
	for _, c := range in.Clients {
		rows := in.Log.Threads[c.Thread]
		res.Anomalies = append(res.Anomalies, judgeIDs(c, rows)...)
		for _, a := range judgeText(c, rows, facts[c.Thread]) {
			if a.Kind == TextLost && lostAtFault(c, a, in.Faults) {
				res.Documented = append(res.Documented, a)
				continue
			}
			res.Anomalies = append(res.Anomalies, a)
		}
	}
	res.Anomalies = append(res.Anomalies, judgeAcked(in.Acked, in.Log, facts)...)
	res.Anomalies = append(res.Anomalies, judgeOversized(in.Oversized, in.Log, facts, in.Bounds)...)
	res.Anomalies = append(res.Anomalies, judgeSizes(in.Log, in.Bounds)...)
	res.Anomalies = append(res.Anomalies, judgeMemory(in.Memory, in.MaxRSS)...)
	for _, f := range in.Faults {
		res.Settle = append(res.Settle, settleTimes(f, facts)...)
	}
	slices.Sort(res.Settle)
	return res
}

const timeFormat = "15:04:05.000"

// judgeLog checks one thread's log and returns its runs' facts.
func judgeLog(thread string, rows []Row) (map[string]*runFacts, []Anomaly) {
	runs := map[string]*runFacts{}
	var order []*runFacts
	get := func(id string) *runFacts {
		f := runs[id]
		if f == nil {
			f = &runFacts{id: id, spawned: map[string]int64{}, completed: map[string][]int64{}, completedTS: map[string]int64{}}
			runs[id] = f
			order = append(order, f)
		}
		return f
	}
	var out []Anomaly
	for _, r := range rows {
		ev := &r.Event
		if ev.RunID == "" {
			continue
		}
		switch ev.Type {
		case instanceai.TypeRunStart:
			get(ev.RunID).starts = append(get(ev.RunID).starts, r.Seq)
			continue
		case instanceai.TypeAgentSpawned:
			get(ev.RunID).spawned[ev.AgentID] = r.Seq
		case instanceai.TypeAgentCompleted:
			f := get(ev.RunID)
			if len(f.completed[ev.AgentID]) == 0 {
				f.completedTS[ev.AgentID] = ev.TS
			}
			f.completed[ev.AgentID] = append(f.completed[ev.AgentID], r.Seq)
		}
		f := runs[ev.RunID]
		if f == nil || len(f.finishes) == 0 {
			if ev.Type == instanceai.TypeRunFinish {
				f = get(ev.RunID)
				f.finish(r)
			}
			continue
		}
		// After the run's first run-finish.
		switch {
		case ev.Type == instanceai.TypeRunFinish:
			f.finish(r)
			first := f.finishes[0]
			out = append(out, Anomaly{Kind: DoubleFinish, Thread: thread, Run: ev.RunID, Seq: r.Seq,
				Detail: fmt.Sprintf("run-finish %s at seq %d after run-finish %s at seq %d",
					finishWords(ev), r.Seq, finishWords(&first.Event), first.Seq)})
		case ev.Type == instanceai.TypeThreadTitleUpdated:
			// The derived title is announced in the run its message
			// started, and may be stored after the run ended.
		default:
			spawnedAt, spawned := f.spawned[ev.AgentID]
			done := f.completed[ev.AgentID]
			finishedAt := f.finishes[0].Seq
			switch {
			case !spawned || spawnedAt > finishedAt && ev.Type != instanceai.TypeAgentSpawned:
				out = append(out, Anomaly{Kind: EventAfterFinish, Thread: thread, Run: ev.RunID, Seq: r.Seq,
					Detail: fmt.Sprintf("%s of agent %s at seq %d, after the run's run-finish at seq %d; the agent is no background agent of the run",
						ev.Type, ev.AgentID, r.Seq, finishedAt)})
			case ev.Type == instanceai.TypeAgentSpawned:
				out = append(out, Anomaly{Kind: EventAfterFinish, Thread: thread, Run: ev.RunID, Seq: r.Seq,
					Detail: fmt.Sprintf("agent %s spawned at seq %d, after the run's run-finish at seq %d", ev.AgentID, r.Seq, finishedAt)})
			case len(done) > 0 && done[0] < r.Seq && ev.Type != instanceai.TypeAgentCompleted:
				out = append(out, Anomaly{Kind: EventAfterFinish, Thread: thread, Run: ev.RunID, Seq: r.Seq,
					Detail: fmt.Sprintf("%s of background agent %s at seq %d, after its agent-completed at seq %d",
						ev.Type, ev.AgentID, r.Seq, done[0])})
			}
		}
	}
	for _, f := range order {
		switch {
		case len(f.starts) == 0:
			// Events of a run whose start is not in the log: a settlement of
			// a claim that never wrote its start, or a stray append.
			if len(f.finishes) > 0 {
				out = append(out, Anomaly{Kind: StartlessRun, Thread: thread, Run: f.id, Seq: f.finishes[0].Seq,
					Detail: fmt.Sprintf("run-finish %s at seq %d of a run with no run-start in the log", finishWords(&f.finishes[0].Event), f.finishes[0].Seq)})
			}
			continue
		case len(f.starts) > 1:
			out = append(out, Anomaly{Kind: DoubleStart, Thread: thread, Run: f.id, Seq: f.starts[1],
				Detail: fmt.Sprintf("run-start at seqs %v", f.starts)})
		}
		if len(f.finishes) == 0 {
			out = append(out, Anomaly{Kind: UnfinishedRun, Thread: thread, Run: f.id, Seq: f.starts[0],
				Detail: fmt.Sprintf("run-start at seq %d, no run-finish once the cluster was quiet (log head %d)", f.starts[0], head(rows))})
		}
		agents := make([]string, 0, len(f.spawned))
		for a := range f.spawned {
			agents = append(agents, a)
		}
		slices.Sort(agents)
		for _, a := range agents {
			switch done := f.completed[a]; {
			case len(done) == 0:
				out = append(out, Anomaly{Kind: UnsettledAgent, Thread: thread, Run: f.id, Seq: f.spawned[a],
					Detail: fmt.Sprintf("agent %s spawned at seq %d never completed", a, f.spawned[a])})
			case len(done) > 1:
				out = append(out, Anomaly{Kind: DoubleAgentEnd, Thread: thread, Run: f.id, Seq: done[1],
					Detail: fmt.Sprintf("agent %s has agent-completed at seqs %v", a, done)})
			}
		}
	}
	return runs, out
}

func head(rows []Row) int64 {
	if len(rows) == 0 {
		return 0
	}
	return rows[len(rows)-1].Seq
}

// finishWords is a run-finish's status and reason, e.g.
// interrupted/crash_interrupted.
func finishWords(ev *instanceai.Event) string {
	p, ok := ev.Payload.(*instanceai.RunFinish)
	if !ok {
		return string(ev.Type)
	}
	if p.Reason == "" {
		return p.Status
	}
	return p.Status + "/" + p.Reason
}

// cancelMargin is how much later than the cancel's answer a completed
// run-finish must be stamped to count as ignoring it: the answer's time
// is taken when the harness read it, after the server wrote it.
const cancelMargin = 20 * time.Millisecond

// judgeCancel finds a cancel that was answered ok while the run went on
// to complete: its run-finish was handed to the writer after the answer
// came back. (A run whose completion raced the cancel was stamped
// before the answer.)
func judgeCancel(c Cancel, f *runFacts) (Anomaly, bool) {
	if !c.Applied || f == nil || len(f.finishes) == 0 {
		return Anomaly{}, false
	}
	fin := f.finishes[0]
	p := fin.Event.Payload.(*instanceai.RunFinish)
	stamped := time.UnixMilli(fin.Event.TS)
	if p.Status != instanceai.RunCompleted || !stamped.After(c.Answered.Add(cancelMargin)) {
		return Anomaly{}, false
	}
	return Anomaly{Kind: CancelIgnored, Thread: c.Thread, Run: c.Run, Seq: fin.Seq,
		Detail: fmt.Sprintf("cancel through %s sent %s, answered applied %s; the run then completed: run-finish %s stamped %s (seq %d)",
			c.Instance, c.Sent.Format(timeFormat), c.Answered.Format(timeFormat), finishWords(&fin.Event),
			stamped.Format(timeFormat), fin.Seq)}, true
}

// echoes reports whether a row may be the stored copy of an ending the
// connection was sent without an id: the stream does not send again the
// error and run-finish it stores for a run whose run-finish went out live
// on that connection (docs/native-protocol.md, "Storage outages").
func echoes(r *Row, endedLive []string) bool {
	return (r.Event.Type == instanceai.TypeRunFinish || r.Event.Type == instanceai.TypeError) &&
		slices.Contains(endedLive, r.Event.RunID)
}

// judgeIDs checks each connection's ids against its cursor and the log.
func judgeIDs(c *Client, rows []Row) []Anomaly {
	bySeq := make(map[int64]*Row, len(rows))
	for i := range rows {
		bySeq[rows[i].Seq] = &rows[i]
	}
	var out []Anomaly
	add := func(k Kind, seq int64, format string, args ...any) {
		out = append(out, Anomaly{Kind: k, Thread: c.Thread, Client: c.Name, Seq: seq, Detail: fmt.Sprintf(format, args...)})
	}
	for ci, conn := range c.Conns() {
		where := fmt.Sprintf("connection %d (to %s at %s, cursor %d)", ci+1, conn.Instance, conn.At.Format(timeFormat), conn.Cursor)
		prev := conn.Cursor
		for _, fr := range conn.Frames {
			if fr.Reset {
				add(ResetFrame, fr.ID, "%s: reset frame (reason %q) with id %d after id %d; the log is PostgreSQL's, which never evicts, and every cursor is one the cluster gave",
					where, fr.Type, fr.ID, prev)
				prev = fr.ID
				continue
			}
			if fr.ID <= prev {
				add(IDDuplicate, fr.ID, "%s: id %d after id %d", where, fr.ID, prev)
				continue
			}
			var missed []string
			first := int64(0)
			for s := prev + 1; s < fr.ID; s++ {
				r := bySeq[s]
				if r != nil && (instanceai.DurabilityOf(r.Event.Type) == instanceai.Coalesced || echoes(r, conn.EndedLive)) {
					continue
				}
				if first == 0 {
					first = s
				}
				if len(missed) < 8 {
					typ := "not in the log"
					if r != nil {
						typ = string(r.Event.Type)
					}
					missed = append(missed, fmt.Sprintf("%d (%s)", s, typ))
				}
			}
			if first > 0 {
				add(IDGap, first, "%s: id %d after id %d; skipped %s", where, fr.ID, prev, strings.Join(missed, ", "))
			}
			prev = fr.ID
			r := bySeq[fr.ID]
			switch {
			case r == nil:
				add(IDMismatch, fr.ID, "%s: sent id %d (%s), which the log does not hold (head %d)", where, fr.ID, fr.Type, head(rows))
			case fr.Alone:
				if !r.Event.Type.Extension() {
					add(IDMismatch, fr.ID, "%s: sent id %d alone, which a native stream does for an extension event only; the log's row %d is %s", where, fr.ID, fr.ID, clip(r.Data, 300))
				}
			case EventHash(&r.Event) != fr.Hash:
				add(IDMismatch, fr.ID, "%s: id %d was a %s, the log's row %d is %s", where, fr.ID, fr.Type, fr.ID, clip(r.Data, 300))
			}
		}
		for _, b := range conn.Bad {
			add(BadFrame, 0, "%s: %s", where, b)
		}
	}
	return out
}

// text is one segment of an agent's timeline: a run of text or reasoning.
type text struct {
	kind, responseID, content string
}

func texts(st *agenttree.State, agentID string) []text {
	n := st.FindAgent(agentID)
	if n == nil {
		return nil
	}
	var out []text
	for _, e := range n.Timeline {
		if e.Type == agenttree.EntryText || e.Type == agenttree.EntryReasoning {
			if isErrorText(e) {
				continue
			}
			out = append(out, text{kind: e.Type, responseID: e.ResponseID, content: e.Content})
		}
	}
	return out
}

// isErrorText reports whether a timeline entry is an error event's text as
// the reducer renders it. Error text is left out of the comparison (see
// foldsText); a run-sync's tree, folded by the server from a log that has
// the error, carries it as an entry of its own.
func isErrorText(e agenttree.TimelineEntry) bool {
	return e.Type == agenttree.EntryText && e.ResponseID == "" &&
		strings.HasPrefix(e.Content, "\n\n*Error: ") && strings.HasSuffix(e.Content, "*")
}

// judgeText compares the client's fold of every run it got to the end of
// with the log's fold of that run, agent by agent and segment by segment.
// A run whose last stored event is beyond the client's cursor is left out:
// the client is behind, which is reported as such, and its text of the
// run is not final.
func judgeText(c *Client, rows []Row, facts map[string]*runFacts) []Anomaly {
	var logRuns agenttree.Runs
	last := map[string]int64{} // run → seq of its last structural row
	for _, r := range rows {
		if foldsText(&r.Event) {
			logRuns.Apply(r.Event)
		}
		if instanceai.DurabilityOf(r.Event.Type) == instanceai.Structural {
			last[r.Event.RunID] = r.Seq
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Anomaly
	for _, run := range logRuns.All() {
		if last[run.ID] > c.cursor {
			continue
		}
		mine := c.folded.Run(run.ID)
		if mine == nil {
			if c.dropped > 0 || !hasText(run.State) {
				continue // a reset dropped it (reported as such), or nothing to compare
			}
			out = append(out, Anomaly{Kind: TextMismatch, Thread: c.Thread, Run: run.ID, Client: c.Name,
				Detail: "the client holds nothing of the run; the log's run has text"})
			continue
		}
		ids := map[string]bool{}
		for id := range run.State.AgentsByID {
			ids[id] = true
		}
		for id := range mine.AgentsByID {
			ids[id] = true
		}
		agents := make([]string, 0, len(ids))
		for id := range ids {
			agents = append(agents, id)
		}
		slices.Sort(agents)
		for _, agent := range agents {
			want, got := texts(run.State, agent), texts(mine, agent)
			if slices.Equal(want, got) {
				continue
			}
			kind, detail := TextMismatch, diffTexts(want, got)
			f := facts[run.ID]
			a := Anomaly{Thread: c.Thread, Run: run.ID, Client: c.Name}
			if f != nil && f.crashed != "" && lostTail(want, got) {
				kind = TextLost
				detail += fmt.Sprintf("; the run ended %s", f.crashed)
				if k, n, ok := firstLost(want, got); ok {
					lost := agenttree.Segment{RunID: run.ID, AgentID: agent, ResponseID: k.responseID, Kind: k.kind}
					if at, inst, ok := c.shownAt(lost, n); ok {
						a.lostAt, a.lostVia = at, inst
						detail += fmt.Sprintf("; its first lost byte was shown at %s through %s", at.Format(timeFormat), inst)
					}
				}
			}
			a.Kind, a.Detail = kind, fmt.Sprintf("agent %s: %s", agent, detail)
			out = append(out, a)
			break // one per run and client: the first agent that differs
		}
	}
	return out
}

func hasText(st *agenttree.State) bool {
	for id := range st.AgentsByID {
		if len(texts(st, id)) > 0 {
			return true
		}
	}
	return false
}

// lostTail reports whether the log's text is the client's with text
// missing: each of the log's segments, in order, is the start of one of
// the client's, and the client's other segments are missing from the log
// whole. That is what a crash or an outage loses, as opposed to text that
// differs.
func lostTail(want, got []text) bool {
	j := 0
	for _, w := range want {
		for j < len(got) && (got[j].kind != w.kind || got[j].responseID != w.responseID || !strings.HasPrefix(got[j].content, w.content)) {
			j++
		}
		if j == len(got) {
			return false
		}
		j++
	}
	return true
}

// firstLost returns the first of the client's segments that holds text
// the log lacks, and how many of its bytes the log holds (0 for a segment
// missing from the log), for texts where lostTail holds.
func firstLost(want, got []text) (text, int, bool) {
	j := 0
	for _, w := range want {
		if j < len(got) && (got[j].kind != w.kind || got[j].responseID != w.responseID || !strings.HasPrefix(got[j].content, w.content)) {
			return got[j], 0, true // missing from the log whole
		}
		if j == len(got) {
			return text{}, 0, false
		}
		if len(got[j].content) > len(w.content) {
			return got[j], len(w.content), true
		}
		j++
	}
	if j < len(got) {
		return got[j], 0, true
	}
	return text{}, 0, false
}

// faultMoment is how close to a fault's start the first lost byte of a
// text-lost must have been shown for the loss to be the documented one:
// what the faulted instance's bus sender had queued and not sent when its
// bus stopped. The sender sends within a millisecond or so of the
// writer's publish on an idle machine; the margin covers a busy one.
const faultMoment = 500 * time.Millisecond

// lostAtFault reports whether a text-lost is the loss docs/native-protocol.md
// documents ("Crash recovery"): the client was first shown the lost text through an
// instance whose bus a fault stopped within faultMoment of it.
func lostAtFault(c *Client, a Anomaly, faults []Fault) bool {
	if a.lostVia == "" {
		return false
	}
	for _, f := range faults {
		if !f.StopsBus || !slices.Contains(f.Instances, a.lostVia) {
			continue
		}
		if d := a.lostAt.Sub(f.Start); d > -faultMoment && d < faultMoment {
			return true
		}
	}
	return false
}

// diffTexts describes the first difference between the log's segments and
// the client's.
func diffTexts(want, got []text) string {
	for i := 0; i < max(len(want), len(got)); i++ {
		switch {
		case i >= len(want):
			return fmt.Sprintf("segment %d: the client holds %s %q (%d bytes) that the log does not", i+1, got[i].kind, got[i].responseID, len(got[i].content))
		case i >= len(got):
			return fmt.Sprintf("segment %d: the log holds %s %q (%d bytes) that the client does not", i+1, want[i].kind, want[i].responseID, len(want[i].content))
		case want[i] != got[i]:
			w, g := want[i], got[i]
			if w.kind != g.kind || w.responseID != g.responseID {
				return fmt.Sprintf("segment %d: the log's is %s %q, the client's %s %q", i+1, w.kind, w.responseID, g.kind, g.responseID)
			}
			at := firstDiff(w.content, g.content)
			return fmt.Sprintf("segment %d (%s %q): the log holds %d bytes, the client %d; first difference at byte %d: log %q, client %q",
				i+1, w.kind, w.responseID, len(w.content), len(g.content), at, around(w.content, at), around(g.content, at))
		}
	}
	return "no difference"
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// around is up to 24 bytes of s from at.
func around(s string, at int) string {
	if at >= len(s) {
		return ""
	}
	return s[at:min(len(s), at+24)]
}

// settleTimes measures, for each victim of a fault, the time from the
// fault's start to its run's first run-finish (or the agent's
// agent-completed), by the event's stamp.
func settleTimes(f Fault, facts map[string]map[string]*runFacts) []time.Duration {
	var out []time.Duration
	for _, v := range f.Victims {
		rf := facts[v.Thread][v.Run]
		if rf == nil {
			continue
		}
		var at int64
		if v.Agent == "" {
			if len(rf.finishes) == 0 {
				continue
			}
			at = rf.finishes[0].Event.TS
		} else {
			if len(rf.completed[v.Agent]) == 0 {
				continue
			}
			at = rf.completedTS[v.Agent]
		}
		out = append(out, max(0, time.UnixMilli(at).Sub(f.Start)))
	}
	return out
}
