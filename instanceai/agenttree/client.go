package agenttree

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/threadline/threadline/instanceai"
)

// RunSyncFrameType is the SSE event name of a run-sync frame.
const RunSyncFrameType = "run-sync"

// RunSync is the payload of an `event: run-sync` frame: a live run's agent
// tree, folded from everything the connection has been sent so far, so a
// client can replace its state for that run instead of trusting what it
// pieced together before a reconnect.
type RunSync struct {
	RunID       string     `json:"runId"`
	ThreadID    string     `json:"threadId"`
	Status      string     `json:"status"`
	IsSuspended bool       `json:"isSuspended"`
	AgentTree   *AgentNode `json:"agentTree"`
}

// DecodeRunSync reads a run-sync frame's data; a payload without a runId
// or an agentTree is not one.
func DecodeRunSync(data []byte) (RunSync, error) {
	var rs RunSync
	if err := json.Unmarshal(data, &rs); err != nil {
		return RunSync{}, fmt.Errorf("run-sync: %w", err)
	}
	if rs.RunID == "" || rs.AgentTree == nil {
		return RunSync{}, errors.New("run-sync: no runId or agentTree")
	}
	return rs, nil
}

// Segment names a coalescing segment of a run: an agent's text or
// reasoning (Kind EntryText or EntryReasoning) of one response.
type Segment struct {
	RunID, AgentID, ResponseID, Kind string
}

// SegmentOf is the segment a delta or block event belongs to.
func SegmentOf(ev instanceai.Event) Segment {
	kind := EntryText
	if ev.Type == instanceai.TypeReasoningDelta || ev.Type == instanceai.TypeReasoningBlock {
		kind = EntryReasoning
	}
	return Segment{RunID: ev.RunID, AgentID: ev.AgentID, ResponseID: ev.ResponseID, Kind: kind}
}

// Client folds a thread's native event stream as n8n's browser does, across
// reconnections, following the protocol's client rules
// (docs/native-protocol.md, "Event stream and replay", "Session restore"):
//   - events fold into their run's state (one state per run, as a chat
//     message shows it), which begins at the run's run-start;
//   - a run-sync frame replaces the state of its run;
//   - a reset frame drops everything held of the thread;
//   - on a new connection, the first delta of a segment whose open text is
//     held is that segment's full text so far: it replaces the open text
//     instead of extending it.
//
// The zero value holds nothing and is ready for use. A Client is not safe
// for concurrent use.
type Client struct {
	runs map[string]*State
	// held is the length of the open text of each segment as the client
	// holds it: what a snapshot delta replaces.
	held map[Segment]int
	// seen marks the segments that had a delta on the current connection.
	seen map[Segment]bool
}

// Grown is what a text or reasoning delta did to its segment.
type Grown struct {
	Segment Segment
	// Held is the length of the segment's open text now.
	Held int
	// Replaced: the delta was the segment's full text, sent on a new
	// connection, and replaced what was held.
	Replaced bool
}

// Run returns the state of a run, nil when none is held.
func (c *Client) Run(runID string) *State { return c.runs[runID] }

// Runs returns the states held, by run.
func (c *Client) Runs() map[string]*State { return c.runs }

// Connect starts a new connection: the first delta of each held segment on
// it is the segment's text so far.
func (c *Client) Connect() { c.seen = nil }

// Reset drops what the client holds of the thread (a reset frame): what
// follows is the thread.
func (c *Client) Reset() { *c = Client{} }

// RunSync replaces the state of a run with its tree. The tree holds the
// open text the connection was just sent (the snapshot deltas come before
// it): that stays held; any other segment of the run is closed as far as
// the server knows.
func (c *Client) RunSync(rs RunSync) error {
	st := StateFromAgentTree(rs.AgentTree)
	if st == nil {
		return fmt.Errorf("run-sync of %s: no usable tree", rs.RunID)
	}
	st.Status = rs.Status
	c.set(rs.RunID, st)
	for k := range c.held {
		if k.RunID == rs.RunID && !c.seen[k] {
			delete(c.held, k)
		}
	}
	return nil
}

// Event folds one event. For a text or reasoning delta folded it returns
// what the delta did to its segment, and true.
func (c *Client) Event(ev instanceai.Event) (Grown, bool) {
	st := c.runs[ev.RunID]
	if st == nil {
		if ev.Type != instanceai.TypeRunStart {
			return Grown{}, false // a run whose start this client never saw, or no run
		}
		st = New()
		c.set(ev.RunID, st)
	}
	switch ev.Type {
	case instanceai.TypeTextDelta, instanceai.TypeReasoningDelta:
		k := SegmentOf(ev)
		text := ev.Payload.(*instanceai.Text).Text
		first := !c.seen[k]
		c.mark(k)
		if first && c.held[k] > 0 && replaceOpen(st, k, c.held[k], text) {
			c.held[k] = len(text)
			return Grown{Segment: k, Held: len(text), Replaced: true}, true
		}
		st.Apply(ev)
		c.hold(k, len(text))
		return Grown{Segment: k, Held: c.held[k]}, true
	case instanceai.TypeTextBlock, instanceai.TypeReasoningBlock:
		st.Apply(ev)
		delete(c.held, SegmentOf(ev))
	case instanceai.TypeRunFinish:
		st.Apply(ev)
		for k := range c.held {
			if k.RunID == ev.RunID {
				delete(c.held, k)
			}
		}
	default:
		st.Apply(ev)
		if instanceai.DurabilityOf(ev.Type) != instanceai.Ephemeral {
			// A structural event of an agent closes its segments: the
			// writer stored their blocks before it.
			for k := range c.held {
				if k.RunID == ev.RunID && k.AgentID == ev.AgentID {
					delete(c.held, k)
				}
			}
		}
	}
	return Grown{}, false
}

func (c *Client) set(runID string, st *State) {
	if c.runs == nil {
		c.runs = map[string]*State{}
	}
	c.runs[runID] = st
}

func (c *Client) mark(k Segment) {
	if c.seen == nil {
		c.seen = map[Segment]bool{}
	}
	c.seen[k] = true
}

func (c *Client) hold(k Segment, n int) {
	if c.held == nil {
		c.held = map[Segment]int{}
	}
	c.held[k] += n
}

// replaceOpen replaces the last held bytes of a segment's text (the open
// part, at the end of the agent's text of that kind and of its last
// timeline entry of that kind) with text. It reports false when the state
// does not hold the segment where it should, and changes nothing then.
func replaceOpen(st *State, k Segment, held int, text string) bool {
	n := st.FindAgent(k.AgentID)
	if n == nil {
		return false
	}
	content := &n.TextContent
	if k.Kind == EntryReasoning {
		content = &n.Reasoning
	}
	for i := len(n.Timeline) - 1; i >= 0; i-- {
		e := &n.Timeline[i]
		if e.Type != k.Kind {
			continue
		}
		if e.ResponseID != k.ResponseID || len(e.Content) < held || len(*content) < held ||
			(*content)[len(*content)-held:] != e.Content[len(e.Content)-held:] {
			return false
		}
		e.Content = e.Content[:len(e.Content)-held] + text
		*content = (*content)[:len(*content)-held] + text
		return true
	}
	return false
}
