package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Emit stamps an event with the run's ids and the time, checks it and
// hands it to the writer. RunID is always the run's; an empty AgentID
// means the orchestrator, an empty UserID the run's user, a zero TS now,
// and an agent-spawned's empty parentId the orchestrator; a delta without
// a responseId gets its segment's (see segmentNamer).
//
// Emit is the run's one door: every producer's events come through it
// (the built-in agents, an upstream AG-UI agent's stream, the publish
// API), and it checks each against what the log allows before the writer
// sees it: its schema (Validate), its size (Limits) and the rules of a
// run's log (see runRules: an agent belongs to the run, a result answers
// an open call, blocks are the writer's).
//
// Emit does not wait on storage: the event is queued on the thread's
// writer and Emit returns; nil means queued, not stored (should the store
// refuse it for good, the writer ends the run with an error). Sync waits
// until it is stored. It waits only for the run's lock, held briefly, and,
// when the thread's writer holds more than it may (Writer.awaitRoom), for
// the writer to take some of it: a producer faster than the database is
// slowed down rather than allowed to grow memory.
//
// Emit may be called from several goroutines at once (the orchestrator,
// its background agents, parallel tool calls): the calls take the run's
// lock one at a time, so each goroutine's events keep their order and
// those of different goroutines are ordered as their calls took the lock.
// The registry's own events (the run-finish, and what it closes) are
// queued under the same lock, so nothing queued by Emit follows the
// orchestrator's run-finish except the events of live background agents.
//
// It returns, and queues nothing:
//   - the validation error (wrapped) for an invalid event, before anything
//     else is looked at;
//   - *LimitError (CodeEventTooLarge) for an event over MaxEventBytes;
//   - ErrRunFinished once the orchestrator's run-finish is queued, or the
//     run was stopped without one (its store failed, another instance took
//     it over);
//   - the cause of the run's context once it is cancelled but not yet
//     finished (a cancel under way: "run cancelled: <reason>");
//   - *RuleError for an event that breaks a rule of the log;
//   - ErrWriterClosed once the writer is closed.
//
// A delta that takes its segment past MaxSegmentBytes is cut at the bound
// and what fits is queued; the run then ends (an error event naming the
// bound, and run-finish{error}), or, for a background agent, the agent
// does, and Emit returns the *LimitError (CodeSegmentTooLarge).
//
// An event of a background agent that has not completed yet (SubAgent.Emit)
// is not refused for the orchestrator's finish or cancellation: the agent
// outlives both, until its own agent-completed is queued.
func (r *Run) Emit(ev Event) error { return r.emit(ev, emitPlain) }

// emitKind says what else emit does with an event it queues.
type emitKind int

const (
	emitPlain emitKind = iota
	// emitSpawn marks the agent-spawned of an agent that Spawn runs,
	// which completes itself.
	emitSpawn
	// emitQuestion counts the run as asking a person (waiting.asked) in
	// the step that queues its confirmation-request: a shutdown sees the
	// question either not queued (the run is stopped and the question
	// closed) or queued (the run is handed over), never between.
	emitQuestion
)

// Stamp returns ev as the run stores it: the run's id, and where the
// producer left them out, the orchestrator as its agent and as an
// agent-spawned's parent, the run's user and the time. A surface that
// checks an event before handing it to Emit (to answer which one of a
// batch is invalid) checks the stamped event, as Emit will.
func (r *Run) Stamp(ev Event) Event {
	ev.RunID = r.ID
	if ev.AgentID == "" {
		ev.AgentID = r.AgentID
	}
	if ev.UserID == "" {
		ev.UserID = r.UserID
	}
	if ev.TS == 0 {
		ev.TS = r.runs.now().UnixMilli()
	}
	if p, ok := ev.Payload.(*AgentSpawned); ok && p.ParentID == "" {
		spawn := *p
		spawn.ParentID = r.AgentID
		ev.Payload = &spawn
	}
	return ev
}

// emit is Emit, doing what kind says besides.
func (r *Run) emit(ev Event, kind emitKind) error {
	ev = r.Stamp(ev)
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("invalid %s event: %w", ev.Type, err)
	}
	limits := r.runs.limits
	delta := isDelta(ev.Type)
	var data []byte
	if !delta {
		// Encoded once here, for the check and for the log.
		b, err := json.Marshal(&ev)
		if err != nil {
			return fmt.Errorf("encode %s event: %w", ev.Type, err)
		}
		if len(b) > limits.MaxEventBytes {
			return r.refused(&LimitError{Code: CodeEventTooLarge, Type: ev.Type, Size: len(b), Limit: limits.MaxEventBytes})
		}
		data = b
	}
	r.mu.Lock()
	holder := r.liveAgents[ev.AgentID]
	if holder == nil {
		if r.finished {
			r.mu.Unlock()
			return ErrRunFinished
		}
		if err := context.Cause(r.ctx); err != nil {
			r.mu.Unlock()
			return err
		}
		holder = r.fence
	}
	if err := r.rules.check(&ev); err != nil {
		r.mu.Unlock()
		return r.refused(err)
	}
	var over error
	if delta {
		if ev.ResponseID == "" { // the clock is read only for a delta to name
			r.names.name(&ev, r.runs.now())
		}
		text := ev.Payload.(*Text).Text
		fits, err := r.meter.admit(&ev, text, limits.MaxSegmentBytes)
		var rule *RuleError
		if errors.As(err, &rule) {
			r.mu.Unlock()
			return r.refused(err)
		}
		over = err
		if len(fits) < len(text) {
			ev.Payload = &Text{Text: fits}
		}
		if fits == "" {
			r.mu.Unlock()
			r.overflow(ev.AgentID, over)
			return r.refused(over)
		}
	}
	if ev.Type == TypeAgentCompleted {
		// Its agents and its open calls go first: a parent does not
		// complete over working children, nor an agent over its calls.
		r.completeAgentsLocked(r.rules.descendants(ev.AgentID), RunError,
			"its parent agent completed before it did", ev.TS, holder)
		r.settleToolsLocked(func(c liveCall) bool { return c.agentID == ev.AgentID }, RunError, ev.TS, holder)
	}
	if err := r.runs.writer.enqueueEncoded(r.ThreadID, ev, data, holder); err != nil {
		r.mu.Unlock()
		return err
	}
	r.recordLocked(&ev, kind == emitSpawn)
	r.names.counted()
	if kind == emitQuestion {
		r.waiting.asked++
	}
	if ev.Type == TypeRunStart {
		r.begun = true
	}
	r.mu.Unlock()
	if over != nil {
		r.overflow(ev.AgentID, over)
		return r.refused(over)
	}
	r.runs.writer.awaitRoom(r.ctx, r.ThreadID)
	return nil
}

// emitStart queues the run's run-start, the one a producer may not send:
// it passes every check of Emit but the rules.
func (r *Run) emitStart() error {
	start := Event{Type: TypeRunStart, RunID: r.ID, AgentID: r.AgentID, UserID: r.UserID,
		TS: r.runs.now().UnixMilli(), Payload: &RunStart{MessageID: NewID("msg_")}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return ErrRunFinished
	}
	if err := context.Cause(r.ctx); err != nil {
		return err
	}
	if err := r.runs.writer.enqueue(r.ThreadID, start, r.fence); err != nil {
		return err
	}
	r.begun = true
	return nil
}

// refused counts an event the door turned away, and returns err.
func (r *Run) refused(err error) error {
	ro, ok := r.runs.obs.(RefusalObserver)
	if !ok {
		return err
	}
	var rule *RuleError
	var limit *LimitError
	switch {
	case errors.As(err, &rule):
		ro.EventRefused(rule.Rule)
	case errors.As(err, &limit):
		ro.EventRefused(limit.Code)
	}
	return err
}

func isDelta(t EventType) bool { return t == TypeTextDelta || t == TypeReasoningDelta }

// recordLocked keeps what a queued event changes of the run's state: its
// agents and calls, its open segments, and the measures of tool calls and
// first text. r.mu is held.
func (r *Run) recordLocked(ev *Event, background bool) {
	if closed, ok := r.rules.apply(ev, background); ok {
		outcome := "result"
		if ev.Type != TypeToolResult {
			outcome = "error"
		}
		r.observeTool(closed, outcome)
	}
	switch {
	case ev.Type == TypeRunFinish:
		r.meter.closeAll()
		r.names.closeAll()
	case DurabilityOf(ev.Type) == Structural:
		r.meter.closeAgent(ev.AgentID)
		r.names.closeAgent(ev.AgentID)
	case ev.Type == TypeTextDelta && !r.sawText && !r.started.IsZero():
		r.sawText = true
		r.runs.obs.FirstText(time.Since(r.started))
	}
}

func (r *Run) observeTool(c liveCall, outcome string) {
	if !c.since.IsZero() {
		r.runs.obs.ToolCallFinished(c.name, outcome, time.Since(c.since))
	}
}

// overflow ends what a segment over its bound belongs to: the run, with an
// error event that names the bound, or the background agent that streamed
// it (its agent-completed carries the error). What fitted was queued.
func (r *Run) overflow(agentID string, err error) {
	m := r.runs
	var le *LimitError
	errors.As(err, &le)
	r.mu.Lock()
	live := r.liveAgents[agentID] != nil
	r.mu.Unlock()
	le.Agent = live
	m.log.Warn("a streamed message went past its bound; stopping it", "thread", r.ThreadID, "run", r.ID, "agent", agentID, "err", err)
	if live {
		for _, t := range m.background.matching(r.ThreadID, func(t *BackgroundTask) bool { return t.RunID == r.ID && t.AgentID == agentID }) {
			t.cancel(err)
		}
		return
	}
	// The error and the finish are queued in one hold of the lock, so
	// that two of the agent's goroutines crossing the bound at once end
	// the run once.
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.enqueueLocked(Event{Type: TypeError, AgentID: r.AgentID, TS: m.now().UnixMilli(),
		Payload: &ErrorPayload{Content: err.Error(), Code: le.Code}}, r.fence)
	r.finishLocked(RunError, le.Code)
	r.mu.Unlock()
	r.afterFinish(RunError, le.Code)
	// The agent learns it from its context, and from the error its next
	// Emit returns.
	r.cancel(err)
}

// closeOpenLocked closes, for the run's finish with status, what its
// producer left open, so that every fold of the log and every AG-UI
// stream sees the run end whole: the tool calls of agents that finish
// with it get an outcome (a cancelled result when the run is cancelled,
// else an error; a call of a client tool stays open, for the client to
// answer in the next run), then its spawned agents that are still working
// complete, children first. Background agents, and what they spawned,
// complete themselves. r.mu is held.
func (r *Run) closeOpenLocked(status string, now int64) {
	background := func(agentID string) bool {
		for id := agentID; id != ""; {
			if r.liveAgents[id] != nil {
				return true
			}
			a := r.rules.agents[id]
			if a == nil {
				return false
			}
			if a.background {
				return true
			}
			id = a.parent
		}
		return false
	}
	clientTool := func(name string) bool {
		return status != RunCancelled && slices.ContainsFunc(r.Tools, func(t ToolSpec) bool { return t.Name == name })
	}
	r.settleToolsLocked(func(c liveCall) bool { return !background(c.agentID) && !clientTool(c.name) }, status, now, nil)
	var agents []string
	for _, id := range r.rules.unfinished() {
		if !background(id) {
			agents = append(agents, id)
		}
	}
	agentStatus, why := RunError, "the run finished before this agent completed"
	if status == RunCancelled {
		agentStatus, why = RunCancelled, "the run was cancelled before this agent completed"
	}
	r.completeAgentsLocked(agents, agentStatus, why, now, r.fence)
}

// completeAgentsLocked queues agent-completed for each agent, in order,
// with status and why as its error, under holder's token: the claim of
// whoever completes them (the run, or the agent they worked under). r.mu
// is held.
func (r *Run) completeAgentsLocked(ids []string, status, why string, now int64, holder *fence) {
	for _, id := range ids {
		a := r.rules.agents[id]
		if a == nil || a.completed {
			continue
		}
		r.settleToolsLocked(func(c liveCall) bool { return c.agentID == id }, status, now, holder)
		r.enqueueLocked(Event{Type: TypeAgentCompleted, AgentID: id, TS: now,
			Payload: &AgentCompleted{Role: a.role, Status: status, Error: why}}, holder)
	}
}

// settleToolsLocked ends the matching open tool calls: with a cancelled
// result when status is cancelled, else with an error, so no call is left
// loading. They are written under holder's token (nil: each call's
// agent's holder). r.mu is held.
func (r *Run) settleToolsLocked(match func(c liveCall) bool, status string, now int64, holder *fence) {
	for _, c := range slices.Clone(r.rules.calls) {
		if !match(c) {
			continue
		}
		h := holder
		if h == nil {
			h = r.holderLocked(c.agentID)
		}
		if status == RunCancelled {
			r.enqueueLocked(Event{Type: TypeToolResult, AgentID: c.agentID, TS: now,
				Payload: &ToolResult{ToolCallID: c.id, Result: cancelledResult}}, h)
			continue
		}
		r.enqueueLocked(Event{Type: TypeToolError, AgentID: c.agentID, TS: now,
			Payload: &ToolError{ToolCallID: c.id, Error: noOutcome}}, h)
	}
}

// noOutcome is the error of a call that had no outcome when its agent or
// its run ended.
const noOutcome = "The tool call had no result when its agent or its run ended."

// holderLocked is the token holder of an agent's events: a live
// background agent's own, else the run's. r.mu is held.
func (r *Run) holderLocked(agentID string) *fence {
	if f := r.liveAgents[agentID]; f != nil {
		return f
	}
	return r.fence
}

// enqueueLocked queues one of the registry's own events of the run,
// written under f's token, and keeps what it changes of the run's state.
// r.mu is held.
func (r *Run) enqueueLocked(ev Event, f *fence) {
	ev.RunID, ev.UserID = r.ID, r.UserID
	if err := r.runs.writer.enqueue(r.ThreadID, ev, f); err != nil {
		r.runs.log.Error("could not queue event", "thread", r.ThreadID, "run", r.ID, "type", ev.Type, "err", err)
		return
	}
	r.recordLocked(&ev, false)
}
