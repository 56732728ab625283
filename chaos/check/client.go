package check

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/ssestream"
)

// Client is one follower of a thread's event stream, as a browser that
// keeps its state across reconnects follows it: it folds what it is sent
// with the protocol's client fold (agenttree.Client) and records, per
// connection, every id it was sent and when each segment's text grew.
// Feed it with Connect, Frame and Disconnect; the checker compares what it
// holds with the log.
//
// A Client is safe for concurrent use: the follower feeds it while the
// harness asks how far it is.
type Client struct {
	// Thread is the thread it follows, Name the client's name in reports.
	Thread, Name string
	// Trace, when set before the first frame, keeps every frame the client
	// is sent (WriteTrace writes them): the evidence behind a text or id
	// anomaly, at the cost of memory.
	Trace bool

	mu     sync.Mutex
	conns  []*Conn
	cur    *Conn
	cursor int64
	folded agenttree.Client
	// shown records, for each segment, how its text grew on the client:
	// when and through which instance (see Client.shownAt).
	shown map[agenttree.Segment][]shownMark
	// dropped counts the reset frames after which the client dropped
	// its state.
	dropped int
	trace   []traced
}

// traced is one traced frame or connection event.
type traced struct {
	at    time.Time
	conn  int
	frame ssestream.Frame
	note  string
}

// shownMark is a point in the growth of a segment's text on a client: its
// first upTo bytes were shown by then, the last of them sent by instance.
type shownMark struct {
	upTo     int
	at       time.Time
	instance string
}

// shownAt returns when and through which instance the client was first
// shown more than n bytes of the segment; ok is false when it never was.
func (c *Client) shownAt(k agenttree.Segment, n int) (at time.Time, instance string, ok bool) {
	for _, m := range c.shown[k] {
		if m.upTo > n {
			return m.at, m.instance, true
		}
	}
	return time.Time{}, "", false
}

// Conn is what one connection of a client was sent.
type Conn struct {
	// Instance is the instance it connected to, At when.
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
	// Cursor is the Last-Event-ID it connected with.
	Cursor int64 `json:"cursor"`
	// Frames are the frames it was sent with an id, in order.
	Frames []IDFrame `json:"frames,omitempty"`
	// EndedLive holds the runs whose run-finish it was sent without an id
	// (a run that could not be stored ended live): the stored echo of
	// their ending is not sent again on this connection.
	EndedLive []string `json:"endedLive,omitempty"`
	// Bad holds frames that could not be read as the protocol's.
	Bad []string `json:"bad,omitempty"`
	// End says why the connection ended ("" while open).
	End string `json:"end,omitempty"`
}

// IDFrame is a frame sent with an id: the id, and a hash of its event
// (0 for a reset frame) to compare with the log's row. Type is the event's
// type, or a reset frame's reason.
type IDFrame struct {
	ID    int64 `json:"id"`
	Reset bool  `json:"reset,omitempty"`
	// Alone is set for a frame of an id and no data: a stored event the
	// native stream does not show (an upstream's ag-ui event), whose id
	// still moves the client's cursor (docs/PROTOCOLS.md, §1).
	Alone bool   `json:"alone,omitempty"`
	Hash  uint64 `json:"hash,omitempty"`
	Type  string `json:"type,omitempty"`
}

// NewClient returns a client of a thread that holds nothing yet.
func NewClient(thread, name string) *Client {
	return &Client{Thread: thread, Name: name, shown: map[agenttree.Segment][]shownMark{}}
}

// Cursor is the id to reconnect with: the last id the client was sent.
func (c *Client) Cursor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursor
}

// Connect records a new connection to instance, made with the client's
// cursor.
func (c *Client) Connect(instance string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connect(instance, at)
}

func (c *Client) connect(instance string, at time.Time) {
	if c.cur != nil && c.cur.End == "" {
		c.cur.End = "replaced"
	}
	c.cur = &Conn{Instance: instance, At: at, Cursor: c.cursor}
	c.conns = append(c.conns, c.cur)
	c.folded.Connect()
	if c.Trace {
		c.trace = append(c.trace, traced{at: time.Now(), conn: len(c.conns),
			note: fmt.Sprintf("connected to %s with cursor %d", instance, c.cursor)})
	}
}

// Disconnect records the end of the current connection.
func (c *Client) Disconnect(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.End == "" {
		if reason == "" {
			reason = "closed"
		}
		c.cur.End = reason
		if c.Trace {
			c.trace = append(c.trace, traced{at: time.Now(), conn: len(c.conns), note: "ended: " + reason})
		}
	}
	c.cur = nil
}

// Conns returns a copy of the connections' records so far.
func (c *Client) Conns() []Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Conn, len(c.conns))
	for i, cn := range c.conns {
		out[i] = *cn
		out[i].Frames = append([]IDFrame(nil), cn.Frames...)
	}
	return out
}

// Frame folds one frame of the current connection. Comments are ignored.
func (c *Client) Frame(f ssestream.Frame) {
	if f.IsComment() || (!f.HasData && !f.HasID && f.Event == "") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		c.connect("", time.Time{}) // frames without Connect: a test's shortcut
	}
	if c.Trace {
		c.trace = append(c.trace, traced{at: time.Now(), conn: len(c.conns), frame: f})
	}
	var id int64
	if f.HasID {
		// A reset frame's id may be 0: it moves the cursor back to the
		// start of the log.
		v, err := strconv.ParseInt(f.ID, 10, 64)
		if err != nil || v < 0 || (v == 0 && f.Event != instanceai.ResetFrameType) {
			c.bad("id %q is not a positive integer", f.ID)
			return
		}
		id = v
	}
	switch f.Event {
	case instanceai.ResetFrameType:
		var r instanceai.Reset
		if err := json.Unmarshal([]byte(f.Data), &r); err != nil || !f.HasID {
			c.bad("reset frame without an id or with data %q", f.Data)
			return
		}
		c.cur.Frames = append(c.cur.Frames, IDFrame{ID: id, Reset: true, Type: r.Reason})
		c.cursor = id
		// The client drops what it holds of the thread and takes what
		// follows as the thread.
		c.folded.Reset()
		c.shown = map[agenttree.Segment][]shownMark{}
		c.dropped++
		return
	case agenttree.RunSyncFrameType:
		rs, err := agenttree.DecodeRunSync([]byte(f.Data))
		if err != nil {
			c.bad("run-sync frame %q", f.Data)
			return
		}
		if err := c.folded.RunSync(rs); err != nil {
			c.bad("run-sync frame with an unusable tree %q", f.Data)
		}
		return
	case "":
		if f.HasID && !f.HasData {
			c.cur.Frames = append(c.cur.Frames, IDFrame{ID: id, Alone: true})
			c.cursor = id
			return
		}
	default:
		c.bad("unknown event type %q", f.Event)
		return
	}
	var ev instanceai.Event
	if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
		c.bad("undecodable event %q: %v", clip(f.Data, 200), err)
		return
	}
	if f.HasID {
		c.cur.Frames = append(c.cur.Frames, IDFrame{ID: id, Hash: EventHash(&ev), Type: string(ev.Type)})
		c.cursor = id
	} else if ev.Type == instanceai.TypeRunFinish {
		c.cur.EndedLive = append(c.cur.EndedLive, ev.RunID)
	}
	c.fold(ev)
}

func (c *Client) bad(format string, args ...any) {
	c.cur.Bad = append(c.cur.Bad, fmt.Sprintf(format, args...))
}

// fold applies one event with the client rules, and records how a
// segment's text grew.
func (c *Client) fold(ev instanceai.Event) {
	if !foldsText(&ev) {
		return
	}
	grown, ok := c.folded.Event(ev)
	if !ok {
		return
	}
	if grown.Replaced {
		c.shown[grown.Segment] = []shownMark{c.mark(grown.Held)}
		return
	}
	c.shown[grown.Segment] = append(c.shown[grown.Segment], c.mark(grown.Held))
}

func (c *Client) mark(upTo int) shownMark {
	m := shownMark{upTo: upTo, at: time.Now()}
	if c.cur != nil {
		m.instance = c.cur.Instance
	}
	return m
}

// foldsText reports whether an event takes part in the text comparison.
// An error event adds its message to the agent's text in the reducer, and
// a client that was sent a failed run's ending live and replays it from an
// earlier cursor reads it twice (docs/native-protocol.md, "Storage outages"): error text is
// left out of the comparison on both sides, and the error events
// themselves are checked by the id rules.
func foldsText(ev *instanceai.Event) bool { return ev.Type != instanceai.TypeError }

// EventHash is a hash of an event's JSON encoding, to tell whether a frame
// carries the same event as a log row without keeping either.
func EventHash(ev *instanceai.Event) uint64 {
	data, err := json.Marshal(ev)
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Pending returns the first row of the log (rows in seq order) that the
// client still has to be sent, nil when it has everything: every row after
// its cursor that is not a block (a live connection gets a block's deltas
// instead) or the stored echo of an ending its connection was sent
// without an id.
func (c *Client) Pending(rows []Row) *Row {
	c.mu.Lock()
	defer c.mu.Unlock()
	var endedLive []string
	if c.cur != nil {
		endedLive = c.cur.EndedLive
	}
	for i := range rows {
		r := &rows[i]
		if r.Seq <= c.cursor || instanceai.DurabilityOf(r.Event.Type) == instanceai.Coalesced || echoes(r, endedLive) {
			continue
		}
		return r
	}
	return nil
}

// Where describes the client's current connection, for evidence.
func (c *Client) Where() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return fmt.Sprintf("between connections, cursor %d", c.cursor)
	}
	return fmt.Sprintf("connection %d to %s since %s (connected with cursor %d, now at %d)",
		len(c.conns), c.cur.Instance, c.cur.At.Format(timeFormat), c.cur.Cursor, c.cursor)
}

// WriteTrace writes the traced frames, one line each: the time, the
// connection, the id, the event type and the data.
func (c *Client) WriteTrace(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	bw := bufio.NewWriter(w)
	for _, t := range c.trace {
		fmt.Fprintf(bw, "%s conn %d ", t.at.Format(timeFormat), t.conn)
		if t.note != "" {
			fmt.Fprintf(bw, "-- %s\n", t.note)
			continue
		}
		id := "-"
		if t.frame.HasID {
			id = t.frame.ID
		}
		event := t.frame.Event
		if event == "" {
			event = "message"
		}
		fmt.Fprintf(bw, "id %s %s %s\n", id, event, t.frame.Data)
	}
	return bw.Flush()
}
