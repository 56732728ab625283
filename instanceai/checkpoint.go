package instanceai

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"
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

// pieceTimeout bounds one checkpoint statement, so that a database that
// hangs holds up the thread's drain (and its live deltas, which need no
// database) no longer than this; after a failure, pieces wait
// pieceBackoff, doubling up to maxPieceBackoff, so an outage costs the
// stream one such stall per pause, and the log one line.
const (
	pieceTimeout    = time.Second
	maxPieceBackoff = 10 * time.Second
)

// checkpointState is a drain's bookkeeping of its segments' pieces. The
// drain goroutine owns it.
type checkpointState struct {
	// closing are the segments with pieces that this pass closed: their
	// pieces go once their block is stored.
	closing []*segment
	// backoff is the pause after the last failed piece (0: the last one
	// was stored), and no piece is tried before retry.
	backoff time.Duration
	retry   time.Time
}

// closed notes a segment the pass closed, whose pieces go once its block
// is stored.
func (c *checkpointState) closed(s *segment) {
	if s.pieces > 0 {
		c.closing = append(c.closing, s)
	}
}

// forgetClosing forgets the matching closed segments: their pieces stay.
func (c *checkpointState) forgetClosing(match func(*segment) bool) {
	c.closing = slices.DeleteFunc(c.closing, match)
}

// checkpoint stores, as a piece, the text of each open segment that the
// checkpoint rules say has waited enough. A piece that cannot be stored is
// tried again at the next pass: until then a crash loses that text, as it
// always did before pieces. A piece is written under its segment's claim:
// refused for a stale token, it stops the claim as a refused append does.
func (d *threadDrain) checkpoint(now time.Time) {
	if d.w.pieces == nil || now.Before(d.checkpoints.retry) {
		return
	}
	cfg := &d.w.cfg
	for _, s := range d.coalescer.open {
		pending := len(s.text) - s.stored
		if pending == 0 {
			continue
		}
		if s.waiting.IsZero() {
			s.waiting = now
		}
		if (cfg.CheckpointBytes <= 0 || pending < cfg.CheckpointBytes) &&
			(cfg.CheckpointInterval <= 0 || now.Sub(s.waiting) < cfg.CheckpointInterval) {
			continue
		}
		if s.pieces == 0 {
			if d.head.committed == 0 {
				ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
				next, err := d.w.log.NextSeq(ctx, d.threadID)
				cancel()
				if err != nil {
					d.pieceFailed(now, err)
					return
				}
				d.head.committed = next - 1
			}
			s.since = d.head.committed
		}
		var token int64
		if d.w.fences() {
			token = s.fence.token()
		}
		ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
		err := d.w.pieces.AddCheckpoint(ctx, d.threadID, Checkpoint{
			RunID: s.key.runID, AgentID: s.key.agentID, Kind: s.key.kind, ResponseID: s.responseID,
			UserID: s.userID, TS: s.firstTS, Since: s.since, Piece: s.pieces, Text: string(s.text[s.stored:]),
			Fence: token,
		})
		cancel()
		if errors.Is(err, ErrStaleFence) {
			// Unless a retake moved the token on meanwhile (the piece then
			// goes at the next pass), the claim is another instance's.
			if s.fence.settled() == token {
				d.w.cfg.Logger.Info("dropping events the log refused: another instance took their claim",
					"thread", d.threadID, "run", s.key.runID, "tokens", []int64{token})
				d.stopStale(s.fence)
			}
			continue
		}
		if err != nil {
			d.pieceFailed(now, err)
			return
		}
		if d.checkpoints.backoff > 0 {
			d.w.cfg.Logger.Info("checkpoints of open text are stored again", "thread", d.threadID)
			d.checkpoints.backoff = 0
		}
		s.stored, s.pieces, s.waiting = len(s.text), s.pieces+1, time.Time{}
	}
}

// pieceFailed pauses the thread's checkpoints after one could not be
// stored, and logs the first failure of a series; a thread that was
// deleted (its runs are stopped through their appends) is no news.
func (d *threadDrain) pieceFailed(now time.Time, err error) {
	if errors.Is(err, ErrNotFound) {
		return
	}
	if d.checkpoints.backoff == 0 {
		d.checkpoints.backoff = d.w.cfg.MaxBackoff
		d.w.cfg.Logger.Warn("storing a checkpoint of open text failed; until one is stored, a crash loses the text since the last",
			"thread", d.threadID, "retry_in", d.checkpoints.backoff, "err", err)
	} else {
		d.checkpoints.backoff = min(2*d.checkpoints.backoff, maxPieceBackoff)
	}
	d.checkpoints.retry = now.Add(d.checkpoints.backoff)
}

// dropPieces deletes the pieces of the segments this pass closed, now that
// their blocks are stored. The segments of runs whose batch failed keep
// theirs until the runs' endings are stored (see storeEndings).
func (d *threadDrain) dropPieces() {
	for _, s := range d.checkpoints.closing {
		if d.refusals.runFailed(s.key.runID) != nil {
			continue
		}
		d.deletePieces(func(ctx context.Context) error {
			return d.w.pieces.DeleteCheckpoints(ctx, d.threadID, s.key.runID, s.key.agentID, s.key.kind, s.since)
		})
	}
	clear(d.checkpoints.closing)
	d.checkpoints.closing = d.checkpoints.closing[:0]
}

// deletePieces runs one deletion of pieces. One that fails leaves pieces
// of a segment whose block is stored, which a settlement recognises (see
// Checkpoint.Since) and deletes with its run's.
func (d *threadDrain) deletePieces(del func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), pieceTimeout)
	defer cancel()
	if err := del(ctx); err != nil && !errors.Is(err, ErrNotFound) {
		d.w.cfg.Logger.Warn("deleting the checkpoints of closed text failed", "thread", d.threadID, "err", err)
	}
}
