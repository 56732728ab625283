package instanceai

import (
	"context"
	"errors"
)

// What the surfaces read through the Core: the thread's log, its messages
// and confirmations, the record of its active run, the thread list, and
// what this instance is. Each read is the store's, through the one door,
// so a surface holds a Core and never the store behind it.

// NextSeq returns one more than the highest seq of the thread's log a
// reader can see: the log's head is NextSeq-1 (0 for an empty log). A
// missing thread is ErrNotFound.
func (c *Core) NextSeq(ctx context.Context, threadID string) (int64, error) {
	return c.store.NextSeq(ctx, threadID)
}

// FirstSeq returns the seq of the oldest event the thread's log keeps (a
// bounded log evicts its oldest), 0 for an empty log.
func (c *Core) FirstSeq(ctx context.Context, threadID string) (int64, error) {
	rows, err := c.store.ReadAfter(ctx, threadID, 0, 1)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return rows[0].Seq, nil
}

// RunEvents returns the stored events of one run, from its run-start, in
// seq order.
func (c *Core) RunEvents(ctx context.Context, threadID, runID string) ([]StoredEvent, error) {
	return c.store.RunEvents(ctx, threadID, runID)
}

// ReadPage reads a page of the thread's log (see PageReader): what a
// reader that holds a bounded window of a long thread reads.
func (c *Core) ReadPage(ctx context.Context, threadID string, q PageQuery) ([]StoredRow, error) {
	return c.store.ReadPage(ctx, threadID, q)
}

// ReadRow reads the bytes of one row of the thread's log again (see
// ReadRow): a stream that sent a light row reads it whole when it writes
// it.
func (c *Core) ReadRow(ctx context.Context, threadID string, seq int64) ([]byte, error) {
	return ReadRow(ctx, c.store, threadID, seq)
}

// errNoParts is ReadRowPart's answer on a store that cannot read a row in
// parts (no PartReader): no feed then leaves a row's bytes out.
var errNoParts = errors.New("the store reads no parts of events")

// ReadRowPart reads n bytes of row seq of the thread's log from byte off
// (see PartReader), for a stream that writes a large row a part at a time.
func (c *Core) ReadRowPart(ctx context.Context, threadID string, seq int64, off, n int) ([]byte, error) {
	pr, ok := c.store.(PartReader)
	if !ok {
		return nil, errNoParts
	}
	return pr.ReadRowPart(ctx, threadID, seq, off, n)
}

// MessageHeads returns the thread's user messages without their contents,
// oldest first (see MessageStore).
func (c *Core) MessageHeads(ctx context.Context, threadID string) ([]Message, error) {
	return c.store.MessageHeads(ctx, threadID)
}

// MessagesByID returns the thread's user messages of the ids, whole,
// oldest first.
func (c *Core) MessagesByID(ctx context.Context, threadID string, ids []string) ([]Message, error) {
	return c.store.MessagesByID(ctx, threadID, ids)
}

// Confirmation returns the stored confirmation requestID, pending or
// answered; an unknown id is ErrNotFound. It checks nobody's right to see
// it: the caller asks about a run it drives.
func (c *Core) Confirmation(ctx context.Context, requestID string) (Confirmation, error) {
	return c.store.GetConfirmation(ctx, requestID)
}

// ClaimedRun returns the store's record of the thread's active run,
// whichever instance runs it: its id, and its Owner, which is Instance
// when this process runs it. A thread without one is ErrNotFound.
func (c *Core) ClaimedRun(ctx context.Context, threadID string) (ActiveRun, error) {
	return c.store.ActiveRun(ctx, threadID)
}

// ListThreads returns a page of q.OwnerID's threads, newest first, those
// the context's thread limit allows alone (see ListAllowedThreads).
func (c *Core) ListThreads(ctx context.Context, q ThreadQuery) ([]Thread, error) {
	return ListAllowedThreads(ctx, c.store, q)
}

// UnansweredCall returns the call toolCallID that the thread's last run
// made and that has no stored result or error, if that run completed: a
// call to a tool the client executes, which the client's next request
// answers (StartRequest.ToolResult; its Content is the caller's to fill).
// It is nil when there is no such call.
func (c *Core) UnansweredCall(ctx context.Context, threadID, toolCallID string) (*ClientToolResult, error) {
	rows, err := c.store.ReadAfter(ctx, threadID, 0, 0)
	if err != nil {
		return nil, err
	}
	var last string
	for _, row := range rows {
		if row.Event.Type == TypeRunStart {
			last = row.Event.RunID
		}
	}
	var call *ClientToolResult
	completed := false
	for _, row := range rows {
		ev := row.Event
		switch p := ev.Payload.(type) {
		case *ToolCall:
			if ev.RunID == last && p.ToolCallID == toolCallID {
				call = &ClientToolResult{RunID: last, AgentID: ev.AgentID, ToolCallID: p.ToolCallID, ToolName: p.ToolName}
			}
		case *ToolResult:
			if p.ToolCallID == toolCallID {
				call = nil
			}
		case *ToolError:
			if p.ToolCallID == toolCallID {
				call = nil
			}
		case *RunFinish:
			if ev.RunID == last && ev.AgentID == OrchestratorAgentID(last) {
				completed = p.Status == RunCompleted
			}
		}
	}
	if !completed {
		return nil, nil
	}
	return call, nil
}

// CheckAgent refuses an agent name the agent does not serve
// (*UnknownAgentError); "" is the default agent.
func (c *Core) CheckAgent(name string) error { return c.runs.CheckAgent(name) }

// Instance returns this process's id among the instances sharing the
// store: the Owner of the runs it works on.
func (c *Core) Instance() string { return c.runs.Instance() }

// Subscribers counts the live streams' subscriptions across all threads.
func (c *Core) Subscribers() int { return c.hub.Subscribers() }

// Clustered reports whether this instance shares its threads with others
// over a bus.
func (c *Core) Clustered() bool { return c.cluster != nil }

// BusHealth reports why the bus between the instances does not work now,
// for a readiness probe (see Cluster.Check); nil on a single instance.
func (c *Core) BusHealth() error {
	if c.cluster == nil {
		return nil
	}
	return c.cluster.Check()
}
