package instanceai

import (
	"cmp"
	"context"
	"slices"
	"strings"
)

// Checkpoint is a piece of the text of a coalescing segment that is still
// open: the writer stores the text of a long or slow segment in pieces as
// it streams, beside the log, so that a crash before the segment's block
// loses at most the text since the last piece. The log itself is not
// touched: its block is still written once, whole, when the segment
// closes, and clients never see a checkpoint. When a run or background
// agent is settled after a crash, its segments' pieces become the blocks
// the crash kept the writer from writing (see openSegmentBlocks).
type Checkpoint struct {
	RunID, AgentID string
	// Kind is TypeTextDelta or TypeReasoningDelta.
	Kind       EventType
	ResponseID string
	UserID     string
	// TS is the segment's first delta's.
	TS int64
	// Since is the thread's highest committed seq when the segment's first
	// piece was stored. The segment's block, once written, has a later
	// seq; every block of an earlier segment of the same agent, kind and
	// response has this seq or an earlier one. So a piece whose segment has
	// a block after Since was closed: the writer only died before it could
	// delete the piece.
	Since int64
	// Piece numbers the pieces of one segment from 0, in text order.
	Piece int
	Text  string
	// Fence, when not 0, is the fencing token of the claim the segment's
	// text is written under (see RunClaims): AddCheckpoint stores nothing
	// and returns a *StaleFenceError unless a claim row of the thread
	// holds it. It is checked, not stored: read back, it is 0.
	Fence int64
}

// CheckpointStore keeps the pieces of open segments. It is optional: a
// store without it (storage/memory, which a crash loses whole anyway)
// keeps a segment's text only in its block.
type CheckpointStore interface {
	// AddCheckpoint stores a piece. The thread must exist and, when the
	// piece carries a user, be that user's (ErrNotFound otherwise), and a
	// piece with a stale Fence is refused, as for appends; storing a piece
	// again is not an error.
	AddCheckpoint(ctx context.Context, threadID string, c Checkpoint) error
	// DeleteCheckpoints removes the pieces of one segment: the run's,
	// agent's and kind's whose first piece has since. A missing thread or
	// segment is not an error.
	DeleteCheckpoints(ctx context.Context, threadID, runID, agentID string, kind EventType, since int64) error
	// RunCheckpoints returns a run's pieces, by segment (Since, agent,
	// kind) and piece.
	RunCheckpoints(ctx context.Context, threadID, runID string) ([]Checkpoint, error)
	// DeleteRunCheckpoints removes a run's pieces, or only one agent's
	// when agentID is set. A missing thread is not an error.
	DeleteRunCheckpoints(ctx context.Context, threadID, runID, agentID string) error
}

// openSegmentBlocks returns the blocks of the segments whose pieces are
// stored and whose block is not in the run's rows, for agent only when it
// is set: what a settlement writes before it ends the run or the agent.
// Blocks come in the order their segments were first checkpointed (by
// agent id where that is the same) and, for one agent, reasoning before
// text, as the writer closes them.
func openSegmentBlocks(rows []StoredEvent, pieces []Checkpoint, agent string) []Event {
	type segment struct {
		first Checkpoint
		text  strings.Builder
	}
	type key struct {
		agent string
		kind  EventType
		since int64
	}
	var order []key
	segs := map[key]*segment{}
	for _, c := range pieces {
		if agent != "" && c.AgentID != agent {
			continue
		}
		k := key{c.AgentID, c.Kind, c.Since}
		s := segs[k]
		if s == nil {
			s = &segment{first: c}
			segs[k] = s
			order = append(order, k)
		}
		s.text.WriteString(c.Text)
	}
	closed := func(c *Checkpoint) bool {
		want := TypeTextBlock
		if c.Kind == TypeReasoningDelta {
			want = TypeReasoningBlock
		}
		return slices.ContainsFunc(rows, func(r StoredEvent) bool {
			return r.Seq > c.Since && r.Event.Type == want && r.Event.AgentID == c.AgentID && r.Event.ResponseID == c.ResponseID
		})
	}
	slices.SortFunc(order, func(a, b key) int {
		if a.since != b.since {
			return cmp.Compare(a.since, b.since)
		}
		if a.agent != b.agent {
			return strings.Compare(a.agent, b.agent)
		}
		return kindRank(a.kind) - kindRank(b.kind)
	})
	var out []Event
	for _, k := range order {
		s := segs[k]
		if closed(&s.first) || s.text.Len() == 0 {
			continue
		}
		typ := TypeTextBlock
		if k.kind == TypeReasoningDelta {
			typ = TypeReasoningBlock
		}
		out = append(out, Event{Type: typ, RunID: s.first.RunID, AgentID: s.first.AgentID, UserID: s.first.UserID,
			ResponseID: s.first.ResponseID, TS: s.first.TS, Payload: &Text{Text: s.text.String()}})
	}
	return out
}

// kindRank orders reasoning before text.
func kindRank(kind EventType) int {
	if kind == TypeReasoningDelta {
		return 0
	}
	return 1
}
