package instanceai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// FuzzFeedModel drives the writer → hub → feed handoff with a random
// sequence of operations on two threads over an unbounded memory store
// (so no eviction reset is ever due): deltas that coalesce into blocks,
// structural and ephemeral events, feeds opened at random cursors (0, a
// past seq, the current seq, beyond it), feeds read a little, disconnected
// or left to fall behind, and flushes. The writer drains concurrently with
// the feeds' reads, so the handoff meets commits at every point.
//
// A second hub stands for another instance: it gets the writer's batches
// over a model bus that delivers them in order, drops them, or holds them
// back and delivers them late, after later ones; its head check publishes
// what the log holds beyond what it got, as Cluster does. Feeds open on
// either hub.
//
// At the end every feed is checked against the stored log: the frames
// with ids are strictly increasing and byte-for-byte the stored rows; from
// the cursor up to where the feed stopped no row is missing, except
// blocks whose deltas the feed got live instead; no delta is received
// twice, none belongs to a block the feed also got or its cursor covers
// and each block's deltas arrive as a prefix
// of the block (whole when the feed passed it).
// The log itself is checked against the operations: every delta lands in
// exactly one block of its segment, in order, and every structural event
// once, in order.
func FuzzFeedModel(f *testing.F) {
	for _, seed := range feedModelSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newFeedModel(t, data)
		m.play()
		m.check()
	})
}

func feedModelSeeds() [][]byte {
	// Each operation is three bytes (see play); the first byte of an
	// input sizes the subscriber queues.
	const (
		t0, t1        = 0, 1
		agent1        = 2
		reasoning     = 4
		secondResp    = 8
		fromZero      = 0 << 1
		fromPast      = 1 << 1
		fromCurrent   = 2 << 1
		fromBeyond    = 3 << 1
		disconnect    = 0
		flush         = 1
		largeQueue    = 7 // 512 frames
		tinyQueue     = 0 // 4 frames
		readFirstFeed = 0
	)
	ops := func(queue byte, list ...[3]byte) []byte {
		out := []byte{queue}
		for _, op := range list {
			out = append(out, op[:]...)
		}
		return out
	}
	return [][]byte{
		{},
		// A feed from 0 sees a whole run live.
		ops(largeQueue, [3]byte{opSubscribe, t0 | fromZero}, [3]byte{opDelta, t0, 1}, [3]byte{opDelta, t0, 2},
			[3]byte{opCall, t0}, [3]byte{opFinish, t0}, [3]byte{opRead, readFirstFeed}),
		// Feeds open at every kind of cursor while text is in flight.
		ops(largeQueue, [3]byte{opDelta, t0, 1}, [3]byte{opCall, t0}, [3]byte{opDelta, t0, 2},
			[3]byte{opSubscribe, t0 | fromCurrent}, [3]byte{opDelta, t0, 3}, [3]byte{opDisconnectOrFlush, flush},
			[3]byte{opSubscribe, t0 | fromPast, 128}, [3]byte{opDelta, t0 | reasoning, 4},
			[3]byte{opSubscribe, t0 | fromBeyond, 2}, [3]byte{opDelta, t0, 5}, [3]byte{opStatus, t0},
			[3]byte{opSubscribe, t0 | fromZero}, [3]byte{opCall, t0}, [3]byte{opFinish, t0}, [3]byte{opRead, 1}),
		// Two agents, both kinds, two responses, two threads.
		ops(largeQueue, [3]byte{opSubscribe, t1 | fromZero}, [3]byte{opDelta, t0, 1}, [3]byte{opDelta, t0 | agent1, 2},
			[3]byte{opDelta, t0 | reasoning, 3}, [3]byte{opDelta, t0 | secondResp, 4}, [3]byte{opDelta, t1, 5},
			[3]byte{opSubscribe, t0 | fromZero}, [3]byte{opCall, t0 | agent1}, [3]byte{opStatus, t1},
			[3]byte{opSubscribe, t1 | fromCurrent}, [3]byte{opFinish, t0}, [3]byte{opDelta, t0, 6},
			[3]byte{opCall, t1}, [3]byte{opRead, 2}, [3]byte{opFinish, t1}),
		// A tiny queue and an unread feed: it is dropped and stops.
		ops(tinyQueue, [3]byte{opSubscribe, t0 | fromZero}, [3]byte{opSubscribe, t0 | fromZero},
			[3]byte{opDelta, t0, 1}, [3]byte{opDelta, t0, 2}, [3]byte{opStatus, t0}, [3]byte{opCall, t0},
			[3]byte{opRead, 1}, [3]byte{opStatus, t0}, [3]byte{opStatus, t0}, [3]byte{opCall, t0}, [3]byte{opCall, t0},
			[3]byte{opRead, 1}, [3]byte{opFinish, t0}),
		// Disconnects and flushes between writes.
		ops(3, [3]byte{opSubscribe, t0 | fromZero}, [3]byte{opDelta, t0, 1}, [3]byte{opDisconnectOrFlush, t0 | flush},
			[3]byte{opSubscribe, t0 | fromPast, 255}, [3]byte{opDelta, t0, 2}, [3]byte{opDisconnectOrFlush, disconnect, 0},
			[3]byte{opCall, t0}, [3]byte{opSubscribe, t0 | fromBeyond, 0}, [3]byte{opDelta, t0, 3},
			[3]byte{opDisconnectOrFlush, disconnect, 2}, [3]byte{opFinish, t0}),
		// A remote feed while the bus loses a batch, holds one back and
		// delivers it after the block, and the head check fills the rest.
		ops(largeQueue, [3]byte{opSubscribe, t0 | fromZero | 16}, [3]byte{opDelta, t0, 1}, [3]byte{opDelta, t0, 2},
			[3]byte{opDisconnectOrFlush, flush}, [3]byte{opBus, busDeliver, 0}, [3]byte{opDelta, t0, 3},
			[3]byte{opDisconnectOrFlush, flush}, [3]byte{opBus, busDrop}, [3]byte{opDelta, t0, 4},
			[3]byte{opDisconnectOrFlush, flush}, [3]byte{opBus, busHold}, [3]byte{opDelta, t0, 5},
			[3]byte{opCall, t0}, [3]byte{opDisconnectOrFlush, flush}, [3]byte{opBus, busDeliver, 3},
			[3]byte{opRead, 0}, [3]byte{opBus, busRelease}, [3]byte{opRead, 0}, [3]byte{opDelta, t0 | reasoning, 6},
			[3]byte{opFinish, t0}, [3]byte{opDisconnectOrFlush, flush}, [3]byte{opBus, busDrop},
			[3]byte{opBus, busHeadCheck}, [3]byte{opRead, 0}, [3]byte{opSubscribe, t0 | fromPast | 16, 100}),
		// A remote feed that joins mid-segment, and one the bus reaches
		// only through the head check.
		ops(largeQueue, [3]byte{opDelta, t1, 1}, [3]byte{opDisconnectOrFlush, flush | 1}, [3]byte{opBus, busDrop},
			[3]byte{opSubscribe, t1 | fromCurrent | 16}, [3]byte{opDelta, t1, 2}, [3]byte{opDisconnectOrFlush, flush | 1},
			[3]byte{opBus, busDeliver, 3}, [3]byte{opRead, 0}, [3]byte{opCall, t1}, [3]byte{opDisconnectOrFlush, flush | 1},
			[3]byte{opBus, busHold}, [3]byte{opBus, busHeadCheck}, [3]byte{opRead, 0}, [3]byte{opBus, busRelease},
			[3]byte{opRead, 0}, [3]byte{opFinish, t1}),
		// A longer one mixing everything.
		func() []byte {
			long := make([]byte, 0, 900)
			for i := range 300 {
				long = append(long, byte(i*7+3), byte(i*13+5), byte(i*29+11))
			}
			return long
		}(),
	}
}

// The fuzz input is read as operations: an opcode byte, then argument
// bytes; a missing byte reads as 0.
const (
	opDelta = iota
	opDelta2
	opCall
	opStatus
	opFinish
	opSubscribe
	opRead
	opDisconnectOrFlush
	opBus
	opCount
)

// What opBus does, by its first argument.
const (
	busDeliver   = iota // the next batches, in order
	busDrop             // the next batch is lost
	busHold             // the next batch is held back: later ones overtake it
	busRelease          // the held batches arrive, late
	busHeadCheck        // the remote hub reads the log's head
	busOps
)

// maxOps bounds one input's work.
const maxOps = 400

type feedModel struct {
	t       *testing.T
	data    []byte
	store   *memory.Store
	hub     *instanceai.Hub
	writer  *instanceai.Writer
	threads [2]*modelThread
	feeds   []*modelFeed
	// remote is the other instance's hub; bus the batches on their way to
	// it, held those held back.
	remote *instanceai.Hub
	busMu  sync.Mutex
	bus    []busBatch
	held   []busBatch
}

// busBatch is one publish of the writer on its way over the model bus.
type busBatch struct {
	thread string
	frames []instanceai.Frame
}

// teePublisher publishes to the local hub and onto the model bus.
type teePublisher struct{ m *feedModel }

func (p teePublisher) Publish(thread string, frames []instanceai.Frame) {
	p.m.hub.Publish(thread, frames)
	p.m.busMu.Lock()
	p.m.bus = append(p.m.bus, busBatch{thread: thread, frames: slices.Clone(frames)})
	p.m.busMu.Unlock()
}

// modelThread is what the operations sent to one thread.
type modelThread struct {
	id  string
	run int // the current run's number
	// deltas are every delta sent, by marker number.
	deltas map[int]sentDelta
	// structural are the stored events sent, in order, as "type:id".
	structural []string
	nextMarker int
	nextCall   int
	nextStatus int
}

type sentDelta struct {
	key  segmentKey
	text string // the whole delta text: the marker and its content
}

// segmentKey is what a delta's text coalesces under: one agent of one
// run, one kind, one response.
type segmentKey struct {
	runID, agentID, responseID string
	kind                       instanceai.EventType // text-delta or reasoning-delta
}

func (m *modelThread) runID() string { return fmt.Sprintf("%s-run%d", m.id, m.run) }

// modelFeed is one connection.
type modelFeed struct {
	thread *modelThread
	feed   *instanceai.Feed
	cursor int64
	// beyond is set when the cursor was past the stored log when the feed
	// opened: a client error, in which the feed cannot tell which open
	// deltas the client has.
	beyond bool
	// remote is set on a feed of the remote hub.
	remote bool
	got    []instanceai.Delivery
	// stopped is set once the feed was closed or ended with an error.
	stopped bool
	err     error
}

func newFeedModel(t *testing.T, data []byte) *feedModel {
	m := &feedModel{t: t, data: data, store: memory.New(memory.WithMaxEvents(1<<30), memory.WithMaxBytes(1<<40))}
	queue := 1 << (2 + m.byte(0)%8) // 4 … 512 frames
	m.data = m.data[min(1, len(m.data)):]
	m.hub = instanceai.NewHub(queue)
	m.remote = instanceai.NewHub(queue)
	m.writer = instanceai.NewWriter(m.store, teePublisher{m}, instanceai.WriterConfig{IdleFlush: time.Hour})
	for i := range m.threads {
		id := "t" + strconv.Itoa(i)
		if _, _, err := m.store.EnsureThread(context.Background(), instanceai.Thread{ID: id, OwnerID: "u"}); err != nil {
			t.Fatal(err)
		}
		m.threads[i] = &modelThread{id: id, run: 1, deltas: map[int]sentDelta{}}
	}
	t.Cleanup(func() {
		_ = m.writer.Close(context.Background())
		for _, f := range m.feeds {
			f.feed.Close()
		}
	})
	return m
}

func (m *feedModel) byte(i int) byte {
	if i < len(m.data) {
		return m.data[i]
	}
	return 0
}

// deltaAlphabet mixes plain, multi-byte and JSON-escaped characters; it
// holds none of the marker's delimiters.
var deltaAlphabet = []string{"a", "é", `"`, `\`, "<", "\n", "😀", " ", "\u2028"}

var markerPattern = regexp.MustCompile(`\[(\d+)\|([^\]|]*)\]`)

func (m *feedModel) play() {
	ctx := context.Background()
	pos := 0
	for op := 0; op < maxOps && pos < len(m.data); op++ {
		code, a, b := m.byte(pos)%opCount, m.byte(pos+1), m.byte(pos+2)
		pos += 3
		th := m.threads[a&1]
		agent := "a" + strconv.Itoa(int(a>>1)&1)
		switch code {
		case opDelta, opDelta2:
			kind := instanceai.TypeTextDelta
			if a&4 != 0 {
				kind = instanceai.TypeReasoningDelta
			}
			key := segmentKey{runID: th.runID(), agentID: agent, responseID: "resp" + strconv.Itoa(int(a>>3)&1), kind: kind}
			var content strings.Builder
			for i := range int(b%3) + 1 {
				content.WriteString(deltaAlphabet[(int(b)+i*5)%len(deltaAlphabet)])
			}
			th.nextMarker++
			text := fmt.Sprintf("[%d|%s]", th.nextMarker, content.String())
			th.deltas[th.nextMarker] = sentDelta{key: key, text: text}
			m.enqueue(th, instanceai.Event{Type: kind, RunID: key.runID, AgentID: agent, ResponseID: key.responseID,
				Payload: &instanceai.Text{Text: text}})
		case opCall:
			th.nextCall++
			id := "c" + strconv.Itoa(th.nextCall)
			th.structural = append(th.structural, "tool-call:"+id)
			m.enqueue(th, instanceai.Event{Type: instanceai.TypeToolCall, RunID: th.runID(), AgentID: agent,
				Payload: &instanceai.ToolCall{ToolCallID: id, ToolName: "tool", Args: []byte(`{}`)}})
		case opStatus:
			th.nextStatus++
			m.enqueue(th, instanceai.Event{Type: instanceai.TypeStatus, RunID: th.runID(), AgentID: agent,
				Payload: &instanceai.Status{Message: "s" + strconv.Itoa(th.nextStatus)}})
		case opFinish:
			th.structural = append(th.structural, "run-finish:"+th.runID())
			m.enqueue(th, instanceai.Event{Type: instanceai.TypeRunFinish, RunID: th.runID(), AgentID: agent,
				Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}})
			th.run++
		case opSubscribe:
			next, err := m.store.NextSeq(ctx, th.id)
			if err != nil {
				m.t.Fatal(err)
			}
			stored := next - 1
			var cursor int64
			switch (a >> 1) % 4 {
			case 1: // a past seq
				cursor = stored * int64(b) / 255
			case 2: // the current seq
				cursor = stored
			case 3: // beyond
				cursor = stored + 1 + int64(b%5)
			}
			hub, remote := m.hub, a&16 != 0
			if remote {
				hub = m.remote
			}
			f := &modelFeed{thread: th, feed: instanceai.OpenFeed(m.store, hub, th.id, cursor), cursor: cursor,
				beyond: cursor > stored, remote: remote}
			// Every other feed reads the log undecoded, as the native
			// stream does: the rules must hold the same.
			f.feed.SkipDecode = len(m.feeds)%2 == 1
			m.feeds = append(m.feeds, f)
			m.read(f)
		case opRead:
			if len(m.feeds) > 0 {
				m.read(m.feeds[int(a)%len(m.feeds)])
			}
		case opDisconnectOrFlush:
			if a&1 == 0 && len(m.feeds) > 0 {
				f := m.feeds[int(b)%len(m.feeds)]
				if !f.stopped {
					f.feed.Close()
					f.stopped = true
				}
				continue
			}
			m.sync(th.id)
		case opBus:
			m.busOp(int(a)%busOps, int(b%4)+1)
		}
	}
	// The end: every open segment closes, everything is stored and
	// published, the bus delivers what it still carries, the held batches
	// last, the remote hub's head check finds what the bus lost, and the
	// feeds still connected read all of it.
	closing, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if err := m.writer.Close(closing); err != nil {
		m.t.Fatal(err)
	}
	m.busOp(busDeliver, 1<<30)
	m.busOp(busHeadCheck, 0)
	m.busOp(busRelease, 0)
	for _, f := range m.feeds {
		m.read(f)
	}
}

// busOp acts on the model bus: n is how many batches busDeliver delivers.
func (m *feedModel) busOp(op, n int) {
	m.busMu.Lock()
	var deliver []busBatch
	switch op {
	case busDeliver:
		n = min(n, len(m.bus))
		deliver, m.bus = m.bus[:n], m.bus[n:]
	case busDrop:
		if len(m.bus) > 0 {
			m.bus = m.bus[1:]
		}
	case busHold:
		if len(m.bus) > 0 {
			m.held, m.bus = append(m.held, m.bus[0]), m.bus[1:]
		}
	case busRelease:
		deliver, m.held = m.held, nil
	}
	m.busMu.Unlock()
	for _, b := range deliver {
		m.remote.Publish(b.thread, b.frames)
	}
	if op == busHeadCheck {
		for _, th := range m.threads {
			m.headCheck(th.id)
		}
	}
}

// headCheck publishes into the remote hub what the log holds beyond what
// it published, as Cluster's head check does.
func (m *feedModel) headCheck(thread string) {
	rows, err := m.store.ReadAfter(context.Background(), thread, m.remote.Contiguous(thread), 0)
	if err != nil || len(rows) == 0 {
		if err != nil {
			m.t.Fatal(err)
		}
		return
	}
	frames := make([]instanceai.Frame, len(rows))
	for i := range rows {
		frames[i] = instanceai.EncodedFrame(rows[i].Seq, &rows[i].Event, rows[i].Data)
	}
	m.remote.CaughtUp(thread, frames, rows[len(rows)-1].Seq)
}

func (m *feedModel) enqueue(th *modelThread, ev instanceai.Event) {
	ev.UserID, ev.TS = "u", 1
	if err := ev.Validate(); err != nil {
		m.t.Fatal(err)
	}
	if err := m.writer.Enqueue(th.id, ev); err != nil {
		m.t.Fatal(err)
	}
}

func (m *feedModel) sync(thread string) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := m.writer.Sync(ctx, thread); err != nil {
		m.t.Fatal(err)
	}
}

// closedTick makes a live feed's Next return (nil, nil) instead of
// waiting when nothing is queued.
var closedTick = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// read takes what the feed has without waiting for more.
func (m *feedModel) read(f *modelFeed) {
	if f.stopped {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for range 100000 {
		out, err := f.feed.Next(ctx, closedTick)
		if err != nil {
			if !errors.Is(err, instanceai.ErrSubscriberDropped) {
				m.t.Fatalf("feed of %s after %d: %v", f.thread.id, f.cursor, err)
			}
			f.stopped, f.err = true, err
			return
		}
		if out == nil {
			return
		}
		f.got = append(f.got, out...)
	}
	m.t.Fatal("a feed kept returning deliveries")
}

func (m *feedModel) check() {
	logs := map[string][]instanceai.StoredEvent{}
	for _, th := range m.threads {
		rows, err := m.store.ReadAfter(context.Background(), th.id, 0, 0)
		if err != nil {
			m.t.Fatal(err)
		}
		logs[th.id] = rows
		m.checkLog(th, rows)
	}
	for i, f := range m.feeds {
		m.checkFeed(i, f, logs[f.thread.id])
	}
}

// markers parses a delta or block text into its marker numbers, checking
// that the markers make up the whole text.
func (m *feedModel) markers(text string) []int {
	var out []int
	var rebuilt strings.Builder
	for _, match := range markerPattern.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(match[1])
		out = append(out, n)
		rebuilt.WriteString(match[0])
	}
	if rebuilt.String() != text {
		m.t.Fatalf("text %q is not a run of markers", text)
	}
	return out
}

func isBlock(t instanceai.EventType) bool {
	return t == instanceai.TypeTextBlock || t == instanceai.TypeReasoningBlock
}

func blockKind(t instanceai.EventType) instanceai.EventType {
	if t == instanceai.TypeReasoningBlock {
		return instanceai.TypeReasoningDelta
	}
	return instanceai.TypeTextDelta
}

// checkLog compares the stored log with what was sent.
func (m *feedModel) checkLog(th *modelThread, rows []instanceai.StoredEvent) {
	t := m.t
	seen := map[int]bool{}
	var structural []string
	for i, r := range rows {
		if r.Seq != int64(i+1) {
			t.Fatalf("%s: seq %d at position %d", th.id, r.Seq, i)
		}
		ev := r.Event
		switch {
		case isBlock(ev.Type):
			text := ev.Payload.(*instanceai.Text).Text
			key := segmentKey{runID: ev.RunID, agentID: ev.AgentID, responseID: ev.ResponseID, kind: blockKind(ev.Type)}
			ms := m.markers(text)
			if len(ms) == 0 || !slices.IsSorted(ms) {
				t.Fatalf("%s seq %d: block %q holds no deltas or holds them out of order", th.id, r.Seq, text)
			}
			for _, n := range ms {
				d, ok := th.deltas[n]
				if !ok || seen[n] || d.key != key {
					t.Fatalf("%s seq %d: delta %d in block %+v: sent %v (key %+v), already stored %v", th.id, r.Seq, n, key, ok, d.key, seen[n])
				}
				seen[n] = true
			}
		case ev.Type == instanceai.TypeToolCall:
			structural = append(structural, "tool-call:"+ev.Payload.(*instanceai.ToolCall).ToolCallID)
		case ev.Type == instanceai.TypeRunFinish:
			structural = append(structural, "run-finish:"+ev.RunID)
		default:
			t.Fatalf("%s seq %d: stored a %s", th.id, r.Seq, ev.Type)
		}
	}
	if len(seen) != len(th.deltas) {
		t.Fatalf("%s: %d of %d deltas are stored in blocks", th.id, len(seen), len(th.deltas))
	}
	if !slices.Equal(structural, th.structural) {
		t.Fatalf("%s: stored structural events %v, sent %v", th.id, structural, th.structural)
	}
}

// checkFeed checks one connection's deliveries against the log.
func (m *feedModel) checkFeed(i int, f *modelFeed, rows []instanceai.StoredEvent) {
	t := m.t
	name := fmt.Sprintf("feed %d of %s after %d", i, f.thread.id, f.cursor)
	if f.remote {
		name = "remote " + name
	}
	got := f.got
	if len(got) > 0 && got[0].Reset != nil && got[0].Reset.Reason == instanceai.ReasonCursorAhead {
		// The cursor was still past the log when the feed first read it:
		// the client is sent the thread from its start instead.
		if r := got[0].Reset; !f.beyond || r.LastEventID != f.cursor || r.NextEventID != 1 || got[0].ID != 0 {
			t.Fatalf("%s: reset %s (id %d) for a cursor the log had reached: %v", name, got[0].Data, got[0].ID, !f.beyond)
		}
		f.cursor, f.beyond, got = 0, false, got[1:]
	}
	last := f.feed.Last()
	stored := int64(len(rows))
	if !f.stopped && last != max(f.cursor, stored) {
		t.Fatalf("%s: read to the end, cursor %d; want %d", name, last, max(f.cursor, stored))
	}
	received := map[int64]bool{}
	var prev int64
	var deltas []int // marker numbers of the id-less deltas, in delivery order
	gotDelta := map[int]bool{}
	// closedBy are the markers of the blocks delivered so far: a delta of
	// one of them after it is late, its text in the block already.
	closedBy := map[int]int64{}
	status := 0
	for _, d := range got {
		if d.Reset != nil {
			t.Fatalf("%s: reset frame %s from an unbounded log", name, d.Data)
		}
		ev := d.Event
		if ev == nil {
			// An undecoded row: only a SkipDecode feed sends one, with
			// its id; its bytes are checked against the log below.
			if !f.feed.SkipDecode || d.ID == 0 {
				t.Fatalf("%s: delivery %d (%s) without its event", name, d.ID, d.Data)
			}
			ev = new(instanceai.Event)
			if err := json.Unmarshal(d.Data, ev); err != nil {
				t.Fatalf("%s: id %d: %v", name, d.ID, err)
			}
		}
		if d.Kind != ev.Type {
			t.Fatalf("%s: id %d has kind %q, event type %q", name, d.ID, d.Kind, ev.Type)
		}
		if !strings.HasPrefix(ev.RunID, f.thread.id+"-") {
			t.Fatalf("%s: got an event of run %s", name, ev.RunID)
		}
		if d.ID > 0 {
			if d.ID <= prev || d.ID <= f.cursor || d.ID > last || d.ID > stored {
				t.Fatalf("%s: id %d after %d (cursor %d, last %d, stored %d)", name, d.ID, prev, f.cursor, last, stored)
			}
			prev = d.ID
			received[d.ID] = true
			if row := rows[d.ID-1]; !bytes.Equal(d.Data, row.Data) || ev.Type != row.Event.Type {
				t.Fatalf("%s: id %d is %s, stored %s", name, d.ID, d.Data, row.Data)
			}
			if isBlock(ev.Type) {
				for _, n := range m.markers(ev.Payload.(*instanceai.Text).Text) {
					closedBy[n] = d.ID
				}
			}
			continue
		}
		switch ev.Type {
		case instanceai.TypeTextDelta, instanceai.TypeReasoningDelta:
			key := segmentKey{runID: ev.RunID, agentID: ev.AgentID, responseID: ev.ResponseID, kind: ev.Type}
			for _, n := range m.markers(ev.Payload.(*instanceai.Text).Text) {
				if gotDelta[n] {
					t.Fatalf("%s: delta %d received twice", name, n)
				}
				if seq, ok := closedBy[n]; ok {
					t.Fatalf("%s: delta %d received after block %d, which holds it", name, n, seq)
				}
				if sent := f.thread.deltas[n]; sent.key != key {
					t.Fatalf("%s: delta %d came as %+v, sent as %+v", name, n, key, sent.key)
				}
				gotDelta[n] = true
				deltas = append(deltas, n)
			}
		case instanceai.TypeStatus:
			n, _ := strconv.Atoi(strings.TrimPrefix(ev.Payload.(*instanceai.Status).Message, "s"))
			// A batch the model bus held back brings its statuses late:
			// nothing orders a notice that is in no log.
			if n <= status && !f.remote {
				t.Fatalf("%s: status %d after %d", name, n, status)
			}
			status = n
		default:
			t.Fatalf("%s: a %s without an id", name, ev.Type)
		}
	}
	for _, r := range rows {
		isB := isBlock(r.Event.Type)
		if r.Seq > f.cursor && r.Seq <= last && !received[r.Seq] && !isB {
			t.Fatalf("%s: missed seq %d (%s)", name, r.Seq, r.Event.Type)
		}
		if !isB {
			continue
		}
		ms := m.markers(r.Event.Payload.(*instanceai.Text).Text)
		var got []int
		for _, n := range deltas {
			if slices.Contains(ms, n) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, ms[:len(got)]) {
			t.Fatalf("%s: got deltas %v of block %d, which holds %v: not a prefix", name, got, r.Seq, ms)
		}
		switch {
		case received[r.Seq] && len(got) > 0 && !f.remote:
			// On its own instance a connection gets every delta, so never
			// a block as well. Another instance sends the block of deltas
			// the bus lost (they are a prefix, which the block REPLACEs),
			// or of a catch-up from the log (harmless when they are all).
			t.Fatalf("%s: got block %d and its deltas %v", name, r.Seq, got)
		case r.Seq > f.cursor && r.Seq <= last && !received[r.Seq] && len(got) != len(ms):
			t.Fatalf("%s: passed block %d (deltas %v) live but got deltas %v", name, r.Seq, ms, got)
		case r.Seq <= f.cursor && !f.beyond && len(got) > 0:
			t.Fatalf("%s: got deltas %v of block %d, which the cursor already covers", name, got, r.Seq)
		}
	}
}
