package instanceai

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// BackgroundRunning is the status the status endpoint reports for a
// background task that is still working.
const BackgroundRunning = "running"

// BackgroundTask is a detached agent spawned by a run: it keeps working
// after the orchestrator's run-finish, on the same runId, until its
// agent-completed. Cancel on the thread stops it.
type BackgroundTask struct {
	TaskID    string
	Role      string
	AgentID   string
	RunID     string
	ThreadID  string
	StartedAt int64 // epoch ms

	cancel context.CancelCauseFunc
	done   chan struct{} // closed once agent-completed is queued
	// claimed is set (under backgroundAgents.mu) once the agent holds its
	// row in the claims: from then on the heartbeat expects to renew it.
	claimed bool
	// refused is set (under backgroundAgents.mu) when its run was taken
	// before it could claim a row: it writes under the run's stale token
	// to the end, never under a holder of its own (see
	// Run.unshareClaimLocked).
	refused bool
	// fence holds the token the agent's events are written under: its
	// row's, or, when it could not claim one, its run's until the run's
	// finish and none from then on (see Run.unshareClaimLocked). Set and
	// changed under backgroundAgents.mu and its run's lock.
	fence *fence
	// unstored is set when the writer could not store the agent's events
	// (see failAgents): its agent-completed may not be in the log.
	unstored atomic.Bool
}

// backgroundAgents are the background agents at work in this process, by
// thread, and those that ended here whose rows it still holds. Its lock
// also guards each task's claimed, refused and fence (fence is set under
// the task's run's lock too).
type backgroundAgents struct {
	mu       sync.Mutex
	byThread map[string][]*BackgroundTask
	// ended are the agents that ended here whose rows are still held (see
	// Runs.releaseAgentRow).
	ended endedAgents
}

func newBackgroundAgents() backgroundAgents {
	return backgroundAgents{byThread: map[string][]*BackgroundTask{}}
}

func (b *backgroundAgents) add(t *BackgroundTask) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.byThread[t.ThreadID] = append(b.byThread[t.ThreadID], t)
}

func (b *backgroundAgents) remove(t *BackgroundTask) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tasks := b.byThread[t.ThreadID]
	if i := slices.Index(tasks, t); i >= 0 {
		tasks = slices.Delete(tasks, i, i+1)
	}
	if len(tasks) == 0 {
		delete(b.byThread, t.ThreadID)
	} else {
		b.byThread[t.ThreadID] = tasks
	}
}

// matching returns the thread's agents that match.
func (b *backgroundAgents) matching(threadID string, match func(*BackgroundTask) bool) []*BackgroundTask {
	b.mu.Lock()
	defer b.mu.Unlock()
	var tasks []*BackgroundTask
	for _, t := range b.byThread[threadID] {
		if match(t) {
			tasks = append(tasks, t)
		}
	}
	return tasks
}

// ofThread returns the thread's agents.
func (b *backgroundAgents) ofThread(threadID string) []*BackgroundTask {
	return b.matching(threadID, func(*BackgroundTask) bool { return true })
}

// any reports whether an agent of the thread matches.
func (b *backgroundAgents) any(threadID string, match func(*BackgroundTask) bool) bool {
	return len(b.matching(threadID, match)) > 0
}

// all returns every agent at work here.
func (b *backgroundAgents) all() []*BackgroundTask {
	b.mu.Lock()
	defer b.mu.Unlock()
	var tasks []*BackgroundTask
	for _, ts := range b.byThread {
		tasks = append(tasks, ts...)
	}
	return tasks
}

// runIDs returns the ids of the runs whose agents work on the thread,
// after those in ids, each once.
func (b *backgroundAgents) runIDs(threadID string, ids []string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.byThread[threadID] {
		if !slices.Contains(ids, t.RunID) {
			ids = append(ids, t.RunID)
		}
	}
	return ids
}

// hold gives t the token holder its events are written under: claimed
// says it is the agent's own row's, refused that its run was taken before
// the agent could claim one.
func (b *backgroundAgents) hold(t *BackgroundTask, f *fence, claimed, refused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.fence, t.claimed, t.refused = f, claimed, refused
}

// rowToken returns the token of t's row, 0 when it holds none.
func (b *backgroundAgents) rowToken(t *BackgroundTask) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !t.claimed {
		return 0
	}
	return t.fence.token()
}

// unclaim records that t's row is let go of: the heartbeat no longer
// renews it.
func (b *backgroundAgents) unclaim(t *BackgroundTask) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.claimed = false
}

// claimedFences returns the agents that hold a row and the tokens of those
// rows, the ones the heartbeat renews.
func (b *backgroundAgents) claimedFences() ([]*BackgroundTask, []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var tasks []*BackgroundTask
	var fences []int64
	for _, ts := range b.byThread {
		for _, t := range ts {
			if t.claimed {
				tasks = append(tasks, t)
				fences = append(fences, t.fence.token())
			}
		}
	}
	return tasks, fences
}

// judgeRenewal sorts out a renewal's answer, held, for the agents that
// held a row before it, before: those still claimed whose row it did not
// renew under their token (another instance took it), and those whose row
// carries a cancel request, with its reason.
func (b *backgroundAgents) judgeRenewal(before []*BackgroundTask, held []AgentClaim) (lost, asked []*BackgroundTask, reasons []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range before {
		// An agent released meanwhile holds no row on purpose.
		if t.claimed && !slices.ContainsFunc(held, func(c AgentClaim) bool { return c.AgentRef == t.ref() && c.Fence == t.fence.token() }) {
			lost = append(lost, t)
		}
	}
	for _, c := range held {
		if c.CancelReason == "" {
			continue
		}
		for _, t := range b.byThread[c.ThreadID] {
			if t.AgentID == c.AgentID && t.fence.token() == c.Fence {
				asked, reasons = append(asked, t), append(reasons, c.CancelReason)
			}
		}
	}
	return lost, asked, reasons
}

// unshareClaim gives r's live background agents that write under r's
// claim a holder of their own with no token (see Run.unshareClaimLocked);
// r.mu is held.
func (b *backgroundAgents) unshareClaim(r *Run) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.byThread[r.ThreadID] {
		if t.RunID == r.ID && t.fence == r.fence && !t.refused {
			t.fence = newFence(r.ID, t.AgentID, 0)
			if r.liveAgents[t.AgentID] != nil {
				r.liveAgents[t.AgentID] = t.fence
			}
		}
	}
}

// endedAgents are the background agents that ended in this process and
// whose rows it has not let go of yet.
type endedAgents struct {
	mu     sync.Mutex
	agents []endedAgent
}

// endedAgent is an agent that ended here, with the token of its row (0:
// it holds none; it wrote under its run's claim or under none).
type endedAgent struct {
	task *BackgroundTask
	row  int64
}

func (e *endedAgents) add(a endedAgent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.agents = append(e.agents, a)
}

// take removes and returns every ended agent: the caller adds back those
// it is not done with.
func (e *endedAgents) take() []endedAgent {
	e.mu.Lock()
	defer e.mu.Unlock()
	agents := e.agents
	e.agents = nil
	return agents
}

func (t *BackgroundTask) ref() AgentRef {
	return AgentRef{ThreadID: t.ThreadID, RunID: t.RunID, AgentID: t.AgentID}
}

// SubAgent is what a background agent's work emits through.
type SubAgent struct {
	ID   string
	run  *Run
	task *BackgroundTask
}

// Emit sends an event as this agent.
func (a *SubAgent) Emit(ev Event) error {
	ev.AgentID = a.ID
	return a.run.Emit(ev)
}

// BackgroundWork is the body of a background agent. Its result string goes
// into agent-completed; an error ends the agent with status error.
type BackgroundWork func(ctx context.Context, agent *SubAgent) (result string, err error)

// Spawn starts a background agent under the orchestrator: it emits
// agent-spawned (spec's ParentID defaults to the orchestrator, TaskID to a
// new id) and runs work on its own goroutine with a context that outlives
// the orchestrator's. When work returns, agent-completed follows with the
// result and a status of completed, error or cancelled.
func (r *Run) Spawn(spec AgentSpawned, work BackgroundWork) (*BackgroundTask, error) {
	if spec.ParentID == "" {
		spec.ParentID = r.AgentID
	}
	if spec.TaskID == "" {
		spec.TaskID = NewID("task_")
	}
	if spec.Tools == nil {
		spec.Tools = []string{}
	}
	agentID := NewID("agent_")
	ctx, cancel := context.WithCancelCause(context.Background())
	task := &BackgroundTask{TaskID: spec.TaskID, Role: spec.Role, AgentID: agentID, RunID: r.ID,
		ThreadID: r.ThreadID, StartedAt: r.runs.now().UnixMilli(), cancel: cancel, done: make(chan struct{})}

	// agent-spawned goes out as the orchestrator's event (it must not
	// follow a finish), and only then does the new agent become live,
	// with the token of the row it claims.
	if err := r.emit(Event{Type: TypeAgentSpawned, AgentID: agentID, Payload: &spec}, emitSpawn); err != nil {
		cancel(err)
		return nil, err
	}
	m := r.runs
	m.running.Add(1)
	m.background.add(task)
	m.claimAgent(task, r)
	r.mu.Lock()
	if r.liveAgents == nil {
		r.liveAgents = map[string]*fence{}
	}
	r.liveAgents[agentID] = task.fence
	r.mu.Unlock()

	agent := &SubAgent{ID: agentID, run: r, task: task}
	go m.executeBackground(ctx, r, agent, spec.Role, work)
	return task, nil
}

func (m *Runs) executeBackground(ctx context.Context, r *Run, agent *SubAgent, role string, work BackgroundWork) {
	defer m.running.Done()
	result, err := func() (result string, err error) {
		defer func() {
			if p := recover(); p != nil {
				m.log.Error("background agent panicked", "thread", r.ThreadID, "run", r.ID, "agent", agent.ID, "panic", p)
				err = fmt.Errorf("background agent failed unexpectedly: %v", p)
			}
		}()
		return work(ctx, agent)
	}()
	completed := &AgentCompleted{Role: role, Result: result, Status: RunCompleted}
	var c cancelled
	var over *LimitError
	switch {
	case errors.As(context.Cause(ctx), &over):
		// Stopped at its door for streaming past a bound: that is its
		// error, whatever work made of its cancelled context.
		completed.Status, completed.Error = RunError, over.Error()
	case errors.As(context.Cause(ctx), &c):
		// What work returns once cancelled is not a result, even when it
		// did not notice and reports success.
		completed.Status, completed.Error, completed.Result = RunCancelled, "cancelled: "+c.reason, ""
	case err != nil:
		completed.Status, completed.Error = RunError, err.Error()
	}

	// An agent whose row another instance took (this one seemed dead to
	// it) was settled there: nothing more of it is written here.
	lost := errors.Is(context.Cause(ctx), errLeaseLost)
	now := m.now().UnixMilli()
	r.mu.Lock()
	if !lost {
		// What the agent left open ends with it: its calls (a cancelled
		// result when it was cancelled, else an error), then the agents it
		// spawned.
		r.settleToolsLocked(func(c liveCall) bool { return c.agentID == agent.ID }, completed.Status, now, agent.task.fence)
		r.completeAgentsLocked(r.rules.descendants(agent.ID), RunError, "its parent agent completed before it did", now, agent.task.fence)
	}
	delete(r.liveAgents, agent.ID)
	if !lost {
		r.enqueueLocked(Event{Type: TypeAgentCompleted, AgentID: agent.ID, TS: now, Payload: completed}, agent.task.fence)
	}
	r.mu.Unlock()
	agent.task.cancel(nil)
	defer close(agent.task.done)
	// The row goes once the agent-completed is stored. A first try is made
	// while the agent still counts as working here (a deletion of the
	// thread waits for it); if the database does not let it happen now,
	// the heartbeat tries again (see releaseAgentRow).
	released := lost
	var row int64
	if !lost {
		row = m.background.rowToken(agent.task)
		lctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		released = m.releaseAgentRow(lctx, agent.task, row)
		cancel()
	}

	m.background.remove(agent.task)
	if !released {
		m.background.ended.add(endedAgent{task: agent.task, row: row})
		m.log.Warn("a background agent's row stays until the database lets it go; trying again at every heartbeat",
			"thread", r.ThreadID, "run", r.ID, "agent", agent.ID, "unstored", agent.task.unstored.Load())
	}
}

// claimAgent records in the claims that this instance runs the agent, so
// that should it die, a live instance settles the agent, and gives the
// agent the token holder its events are written under: its row's, or else
// its run's (which the agent stops sharing at the run's finish).
func (m *Runs) claimAgent(t *BackgroundTask, r *Run) {
	runFence := r.fence
	if m.leases.agentRows == nil {
		m.background.hold(t, runFence, false, false)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	// Claimed only while the run is still this process's: a settlement
	// that took the run meanwhile did not see this agent (its
	// agent-spawned may not be stored), so the agent must not get a token
	// the settlement does not hold.
	var under int64
	if m.leases.fenced {
		under = runFence.token()
	}
	token, err := m.leases.claimAgentRow(ctx, t.ref(), under)
	if errors.Is(err, ErrStaleFence) && m.finishedHere(ctx, r) {
		// The run finished meanwhile (a cancel does not wait for its
		// orchestrator) and its row went with its run-finish: nobody
		// took it, nobody settles the agent. It works on without a
		// token, as the run's finish left the agents that shared its
		// claim (see Run.unshareClaimLocked).
		m.background.hold(t, newFence(t.RunID, t.AgentID, 0), false, false)
		return
	}
	if errors.Is(err, ErrStaleFence) {
		// Its run was taken: another instance settles it. The agent stops
		// at once, and what it writes before it notices goes under the
		// run's stale token, which the log refuses.
		m.background.hold(t, runFence, false, true)
		t.cancel(errLeaseLost)
		return
	}
	if err != nil {
		// A thread deleted meanwhile has the agent stopped by its delete;
		// otherwise the agent works on, unrecorded, under its run's token.
		if !errors.Is(err, ErrNotFound) {
			m.log.Error("could not record a background agent; a crash would leave it open", "thread", t.ThreadID,
				"run", t.RunID, "agent", t.AgentID, "err", err)
		}
		m.background.hold(t, runFence, false, false)
		return
	}
	m.background.hold(t, newFence(t.RunID, t.AgentID, token), true, false)
}

// finishedHere reports whether r's run-finish, queued here, is in the log
// under r's claim: the writer has tried it, and did not find the claim
// taken.
func (m *Runs) finishedHere(ctx context.Context, r *Run) bool {
	r.mu.Lock()
	finished := r.finished
	r.mu.Unlock()
	if !finished || m.writer.Sync(ctx, r.ThreadID) != nil {
		return false
	}
	return !r.fence.lost.Load()
}

// ThreadStatus is what GET /threads/:id/status reports.
type ThreadStatus struct {
	HasActiveRun    bool             `json:"hasActiveRun"`
	IsSuspended     bool             `json:"isSuspended"`
	RunID           string           `json:"runId,omitempty"`
	BackgroundTasks []BackgroundInfo `json:"backgroundTasks"`
}

// BackgroundInfo is one entry of ThreadStatus.BackgroundTasks.
type BackgroundInfo struct {
	TaskID    string `json:"taskId"`
	Role      string `json:"role"`
	AgentID   string `json:"agentId"`
	Status    string `json:"status"`
	StartedAt int64  `json:"startedAt"`
	RunID     string `json:"runId,omitempty"`
}

// Status reports the thread's activity: the live run and background agents
// of this process, or else the thread's active run as the claims table
// knows it (run by another instance, or suspended with no process).
func (m *Runs) Status(ctx context.Context, threadID string) ThreadStatus {
	r, tasks := m.workOf(threadID, func(*BackgroundTask) bool { return true })
	st := ThreadStatus{BackgroundTasks: []BackgroundInfo{}}
	if r != nil {
		st.HasActiveRun, st.RunID = true, r.ID
		r.mu.Lock()
		st.IsSuspended = r.waiting.suspended > 0
		r.mu.Unlock()
	}
	if r == nil {
		// A row can outlive its run-finish by a moment (the writer frees it
		// right after the commit), so a finished run is not reported.
		if row, err := m.leases.claims.ActiveRun(ctx, threadID); err == nil && !m.runEnded(ctx, threadID, row.RunID) {
			st.HasActiveRun, st.IsSuspended, st.RunID = true, row.Suspended, row.RunID
		}
	}
	for _, t := range tasks {
		st.BackgroundTasks = append(st.BackgroundTasks, BackgroundInfo{TaskID: t.TaskID, Role: t.Role, AgentID: t.AgentID,
			Status: BackgroundRunning, StartedAt: t.StartedAt, RunID: t.RunID})
	}
	return st
}

// LiveRuns returns the ids of the thread's runs that are live in this
// process: the active run and the runs whose background agents still work.
func (m *Runs) LiveRuns(threadID string) []string {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	var ids []string
	if r := m.table.byThread[threadID]; r != nil {
		ids = append(ids, r.ID)
	}
	return m.background.runIDs(threadID, ids)
}

// Wait blocks until nothing of the thread runs in this process: no active
// run's agent and no background agent is still working. A cancelled agent
// needs a moment to notice and settle; Wait lets callers (thread deletion)
// wait for exactly that instead of polling.
func (m *Runs) Wait(ctx context.Context, threadID string) error {
	for {
		r, tasks := m.workOf(threadID, func(*BackgroundTask) bool { return true })
		var pending []<-chan struct{}
		if r != nil {
			pending = append(pending, r.done)
		}
		for _, t := range tasks {
			pending = append(pending, t.done)
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pending[0]:
		}
	}
}

// runEnded reports whether the run's run-finish is in the log.
func (m *Runs) runEnded(ctx context.Context, threadID, runID string) bool {
	if m.index == nil {
		return false
	}
	rows, err := m.index.RunEvents(ctx, threadID, runID)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(rows, func(ev StoredEvent) bool { return ev.Event.Type == TypeRunFinish })
}
