package instanceai

import (
	"context"
	"slices"
	"sync"
	"time"
)

// ActiveRun is a thread's active-run row: the database's record of which
// run holds the thread and which instance runs it. One row per thread is
// what makes "one active run per thread" hold across every process that
// shares the database.
type ActiveRun struct {
	ThreadID string
	RunID    string
	// Owner is the id of the instance that runs it, "" when no process does
	// (a run suspended on a confirmation whose process shut down).
	Owner string
	// Suspended is set while the run waits for a confirmation: such a run
	// is never swept as dead when the agent can resume it, since it is
	// waiting for a person, not orphaned.
	Suspended bool
	// LeaseExpires is when the owner's claim ends unless its heartbeat
	// renews it; after that any instance may take the run and settle it.
	LeaseExpires time.Time
}

// Free reports whether an instance other than its owner may take the run
// at now: it has no owner, or the owner's lease ran out.
func (a ActiveRun) Free(now time.Time) bool {
	return a.Owner == "" || now.After(a.LeaseExpires)
}

// RunClaims keeps each thread's active-run row. The writer releases a run's
// row once the run's run-finish is in the log; until then the row stands,
// also across a crash, so that the sweep of a live instance finds and
// settles it when its lease runs out.
type RunClaims interface {
	// ClaimThread makes runID the thread's active run, owned by owner for
	// ttl. A thread that has an active run already gives ErrRunActive and
	// that run's row.
	ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (ActiveRun, error)
	// ActiveRun returns the thread's row, ErrNotFound when it has none.
	ActiveRun(ctx context.Context, threadID string) (ActiveRun, error)
	// TakeRun gives the run's row to owner for ttl if it is free (no owner,
	// or a lease that expired): a conditional update, so of several
	// instances that try at once exactly one wins. It reports whether this
	// call won.
	TakeRun(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (bool, error)
	// SuspendRun sets whether the run waits for a confirmation.
	SuspendRun(ctx context.Context, threadID, runID string, suspended bool) error
	// DisownRun clears the owner of the run's row if it is owner: the run
	// stays active, waiting for whichever instance takes it.
	DisownRun(ctx context.Context, threadID, runID, owner string) error
	// ReleaseRun deletes the run's row, if it is the thread's.
	ReleaseRun(ctx context.Context, threadID, runID string) error
	// RenewRuns extends the leases of owner's rows to now+ttl and returns
	// the runs owner still holds.
	RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]RunRef, error)
	// ExpiredRuns returns the rows that have an owner whose lease ran out.
	ExpiredRuns(ctx context.Context) ([]ActiveRun, error)
}

// AgentRef names a background agent: its thread, its run and its own id.
type AgentRef struct {
	ThreadID, RunID, AgentID string
}

// AgentClaim is a background agent's row: which instance runs it, and
// until when its lease holds.
type AgentClaim struct {
	AgentRef
	Owner        string
	LeaseExpires time.Time
}

// AgentClaims keeps one row per background agent at work. A background
// agent outlives its run's run-finish, which frees the run's own row: this
// row is then the only record of which instance runs it, so that when that
// instance dies the sweep of a live one settles the agent (instead of
// leaving it working forever in the log) and leaves alone the agents whose
// instance renews their lease. A row goes once the agent's agent-completed
// is stored, and with its thread.
type AgentClaims interface {
	// ClaimAgent makes owner the agent's runner for ttl (ErrNotFound for a
	// thread that does not exist).
	ClaimAgent(ctx context.Context, ref AgentRef, owner string, ttl time.Duration) error
	// ReleaseAgent deletes the agent's row.
	ReleaseAgent(ctx context.Context, ref AgentRef) error
	// RenewAgents extends the leases of owner's rows to now+ttl and returns
	// the agents owner still holds.
	RenewAgents(ctx context.Context, owner string, ttl time.Duration) ([]AgentRef, error)
	// ExpiredAgents returns the rows whose lease ran out.
	ExpiredAgents(ctx context.Context) ([]AgentClaim, error)
	// TakeAgent gives an expired row to owner for ttl: a conditional
	// update, so of several instances that try at once exactly one wins.
	// It reports whether this call won.
	TakeAgent(ctx context.Context, ref AgentRef, owner string, ttl time.Duration) (bool, error)
}

// LocalClaims is RunClaims and AgentClaims in one process's memory: for
// the memory store, and for a run registry built without a store (tests).
type LocalClaims struct {
	mu     sync.Mutex
	rows   map[string]ActiveRun // by thread id
	agents map[AgentRef]AgentClaim
	now    func() time.Time
}

var (
	_ RunClaims   = (*LocalClaims)(nil)
	_ AgentClaims = (*LocalClaims)(nil)
)

// NewLocalClaims returns an empty in-memory claims table.
func NewLocalClaims() *LocalClaims {
	return &LocalClaims{rows: map[string]ActiveRun{}, agents: map[AgentRef]AgentClaim{}, now: time.Now}
}

// ClaimThread implements RunClaims.
func (l *LocalClaims) ClaimThread(_ context.Context, threadID, runID, owner string, ttl time.Duration) (ActiveRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.rows[threadID]; ok {
		return row, ErrRunActive
	}
	row := ActiveRun{ThreadID: threadID, RunID: runID, Owner: owner, LeaseExpires: l.now().Add(ttl)}
	l.rows[threadID] = row
	return row, nil
}

// ActiveRun implements RunClaims.
func (l *LocalClaims) ActiveRun(_ context.Context, threadID string) (ActiveRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.rows[threadID]
	if !ok {
		return ActiveRun{}, ErrNotFound
	}
	return row, nil
}

// TakeRun implements RunClaims.
func (l *LocalClaims) TakeRun(_ context.Context, threadID, runID, owner string, ttl time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.rows[threadID]
	now := l.now()
	if !ok || row.RunID != runID || !row.Free(now) {
		return false, nil
	}
	row.Owner, row.LeaseExpires = owner, now.Add(ttl)
	l.rows[threadID] = row
	return true, nil
}

// SuspendRun implements RunClaims.
func (l *LocalClaims) SuspendRun(_ context.Context, threadID, runID string, suspended bool) error {
	l.update(threadID, runID, func(r *ActiveRun) { r.Suspended = suspended })
	return nil
}

// DisownRun implements RunClaims.
func (l *LocalClaims) DisownRun(_ context.Context, threadID, runID, owner string) error {
	l.update(threadID, runID, func(r *ActiveRun) {
		if r.Owner == owner {
			r.Owner = ""
		}
	})
	return nil
}

func (l *LocalClaims) update(threadID, runID string, f func(*ActiveRun)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.rows[threadID]; ok && row.RunID == runID {
		f(&row)
		l.rows[threadID] = row
	}
}

// ReleaseRun implements RunClaims.
func (l *LocalClaims) ReleaseRun(_ context.Context, threadID, runID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.rows[threadID]; ok && row.RunID == runID {
		delete(l.rows, threadID)
	}
	return nil
}

// ForgetThread drops the rows of a deleted thread (a database does it by
// cascade).
func (l *LocalClaims) ForgetThread(threadID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.rows, threadID)
	for ref := range l.agents {
		if ref.ThreadID == threadID {
			delete(l.agents, ref)
		}
	}
}

// ClaimAgent implements AgentClaims.
func (l *LocalClaims) ClaimAgent(_ context.Context, ref AgentRef, owner string, ttl time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.agents[ref] = AgentClaim{AgentRef: ref, Owner: owner, LeaseExpires: l.now().Add(ttl)}
	return nil
}

// ReleaseAgent implements AgentClaims.
func (l *LocalClaims) ReleaseAgent(_ context.Context, ref AgentRef) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.agents, ref)
	return nil
}

// RenewAgents implements AgentClaims.
func (l *LocalClaims) RenewAgents(_ context.Context, owner string, ttl time.Duration) ([]AgentRef, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []AgentRef
	until := l.now().Add(ttl)
	for ref, row := range l.agents {
		if row.Owner == owner {
			row.LeaseExpires = until
			l.agents[ref] = row
			out = append(out, ref)
		}
	}
	return out, nil
}

// ExpiredAgents implements AgentClaims.
func (l *LocalClaims) ExpiredAgents(context.Context) ([]AgentClaim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []AgentClaim
	for _, row := range l.agents {
		if now.After(row.LeaseExpires) {
			out = append(out, row)
		}
	}
	slices.SortFunc(out, func(a, b AgentClaim) int { return a.LeaseExpires.Compare(b.LeaseExpires) })
	return out, nil
}

// TakeAgent implements AgentClaims.
func (l *LocalClaims) TakeAgent(_ context.Context, ref AgentRef, owner string, ttl time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.agents[ref]
	now := l.now()
	if !ok || !now.After(row.LeaseExpires) {
		return false, nil
	}
	row.Owner, row.LeaseExpires = owner, now.Add(ttl)
	l.agents[ref] = row
	return true, nil
}

// RenewRuns implements RunClaims.
func (l *LocalClaims) RenewRuns(_ context.Context, owner string, ttl time.Duration) ([]RunRef, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []RunRef
	until := l.now().Add(ttl)
	for id, row := range l.rows {
		if row.Owner == owner {
			row.LeaseExpires = until
			l.rows[id] = row
			out = append(out, RunRef{ThreadID: row.ThreadID, RunID: row.RunID})
		}
	}
	return out, nil
}

// ExpiredRuns implements RunClaims.
func (l *LocalClaims) ExpiredRuns(context.Context) ([]ActiveRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []ActiveRun
	for _, row := range l.rows {
		if row.Owner != "" && now.After(row.LeaseExpires) {
			out = append(out, row)
		}
	}
	slices.SortFunc(out, func(a, b ActiveRun) int { return a.LeaseExpires.Compare(b.LeaseExpires) })
	return out, nil
}
