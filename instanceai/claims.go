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
	// Fence is the fencing token of the row's current claim (see
	// RunClaims). 0 is no live holder's: a row claimed before tokens
	// existed has it.
	Fence int64
	// CancelReason is set when a cancel of the run was asked (see
	// RequestCancel): its owner stops it with that reason.
	CancelReason string
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
//
// Fencing. Every claim of a row, ClaimThread and a TakeRun that wins,
// stores a fresh fencing token in it and returns it: an int64 the database
// hands out from one counter, larger than every token it handed out before
// (on either claims table), never 0. The token names that claim. It is
// current while the row holds it, and stale for good once the row is taken
// again or released: a leaseholder cut off from the database past its
// lease holds a stale token, whatever it still believes. The holder passes
// its token with every write for the run (FencedAppender,
// Checkpoint.Fence, Confirmation.Fence), and the store checks it in the
// same transaction as the write: a write with a stale token stores
// nothing. SuspendRun, DisownRun and ReleaseRun act only on the row of the
// caller's run that holds the caller's token; otherwise they change
// nothing and return an error that matches ErrStaleFence, so that a stale
// holder cannot change or delete its successor's row. DisownRun keeps the
// token: a run that waits for a person without an owner is still the
// holder's until another instance takes it.
//
// Atomicity. Each method is one atomic step against every write of the
// thread, from any process on the database: once TakeRun (or ReleaseRun)
// has returned, no write with the old token succeeds, and a write with it
// that succeeded before is visible to every read made after the return.
type RunClaims interface {
	// ClaimThread makes runID the thread's active run, owned by owner for
	// ttl, with a fresh token (the returned row's Fence). A thread that
	// has an active run already gives ErrRunActive and that run's row.
	ClaimThread(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (ActiveRun, error)
	// ActiveRun returns the thread's row, ErrNotFound when it has none.
	ActiveRun(ctx context.Context, threadID string) (ActiveRun, error)
	// TakeRun gives the run's row to owner for ttl, with a fresh token, if
	// it is free (no owner, or a lease that expired): a conditional
	// update, so of several instances that try at once exactly one wins.
	// It reports whether this call won and, if it did, the new token.
	TakeRun(ctx context.Context, threadID, runID, owner string, ttl time.Duration) (fence int64, won bool, err error)
	// SuspendRun sets whether the run waits for a confirmation.
	SuspendRun(ctx context.Context, threadID, runID string, fence int64, suspended bool) error
	// DisownRun clears the owner of the run's row: the run stays active,
	// with its token, waiting for whichever instance takes it.
	DisownRun(ctx context.Context, threadID, runID string, fence int64) error
	// ReleaseRun deletes the run's row.
	ReleaseRun(ctx context.Context, threadID, runID string, fence int64) error
	// RenewRuns extends the leases of owner's rows to now+ttl and returns
	// those rows, with their tokens: a run whose token is not among them
	// is no longer owner's.
	RenewRuns(ctx context.Context, owner string, ttl time.Duration) ([]ActiveRun, error)
	// ExpiredRuns returns the rows no live process keeps: those whose
	// owner's lease ran out; those without an owner that do not wait for a
	// person (an instance let go of a row its run could not release); and
	// those without an owner that wait for a person whose answer is
	// stored, once their lease ran out (the instance that took the answer
	// died before it took the run). The sweep settles or resumes them.
	ExpiredRuns(ctx context.Context) ([]ActiveRun, error)
	// RequestCancel records, in the thread's active-run row and in the
	// rows of its background agents (of any run), that a cancel was
	// asked, with its reason: their owners read it with their next
	// renewal (the rows' CancelReason) and stop the work. It is atomic,
	// and reports whether any row was there to ask.
	RequestCancel(ctx context.Context, threadID, reason string) (bool, error)
	// CancelPending reports whether a row of the thread still carries a
	// cancel request: the work it asked to stop has not let go of its row
	// (a row goes once the run's run-finish, or the agent's
	// agent-completed, is stored).
	CancelPending(ctx context.Context, threadID string) (bool, error)
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
	// Fence is the fencing token of the row's current claim (see
	// AgentClaims).
	Fence int64
	// CancelReason is set when a cancel of the agent's thread was asked.
	CancelReason string
}

// AgentClaims keeps one row per background agent at work. A background
// agent outlives its run's run-finish, which frees the run's own row: this
// row is then the only record of which instance runs it, so that when that
// instance dies the sweep of a live one settles the agent (instead of
// leaving it working forever in the log) and leaves alone the agents whose
// instance renews their lease. A row goes once the agent's agent-completed
// is stored, and with its thread.
//
// Rows are fenced as RunClaims' are, with tokens from the same counter:
// ClaimAgent and a TakeAgent that wins store a fresh token in the row and
// return it, the agent's writes carry it, and ReleaseAgent with a token the
// row no longer holds changes nothing and returns an error that matches
// ErrStaleFence.
type AgentClaims interface {
	// ClaimAgent makes owner the agent's runner for ttl, with a fresh
	// token, which it returns (ErrNotFound for a thread that does not
	// exist). runFence, when not 0, is the token the run's row must hold:
	// an agent is claimed only under a claim of its run that is still
	// the caller's, else nothing changes and the error matches
	// ErrStaleFence. (A settlement lists the run's agent rows once it
	// took the run, so a row made after that take must not be made.)
	ClaimAgent(ctx context.Context, ref AgentRef, owner string, ttl time.Duration, runFence int64) (fence int64, err error)
	// RunAgents returns the rows of the run's agents.
	RunAgents(ctx context.Context, threadID, runID string) ([]AgentClaim, error)
	// ReleaseAgent deletes the agent's row.
	ReleaseAgent(ctx context.Context, ref AgentRef, fence int64) error
	// RenewAgents extends to now+ttl the leases of owner's rows that hold
	// one of fences, the tokens of the agents owner still runs, and
	// returns those rows, with their tokens. A row owner holds under no
	// token of fences is left alone: its agent ended without letting go of
	// it (the release did not reach the database), so its lease runs out
	// and the sweep settles it. No fences renews nothing.
	RenewAgents(ctx context.Context, owner string, ttl time.Duration, fences []int64) ([]AgentClaim, error)
	// ExpiredAgents returns the rows whose lease ran out.
	ExpiredAgents(ctx context.Context) ([]AgentClaim, error)
	// TakeAgent gives an expired row to owner for ttl, with a fresh token:
	// a conditional update, so of several instances that try at once
	// exactly one wins. It reports whether this call won and, if it did,
	// the new token.
	TakeAgent(ctx context.Context, ref AgentRef, owner string, ttl time.Duration) (fence int64, won bool, err error)
}

// LocalClaims is RunClaims and AgentClaims in one process's memory: for
// the memory store, and for a run registry built without a store (tests).
// Its tokens come from a counter of its own.
type LocalClaims struct {
	mu     sync.Mutex
	rows   map[string]ActiveRun // by thread id
	agents map[AgentRef]AgentClaim
	fences int64 // the last token handed out
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

// nextFence hands out a fresh token; l.mu is held.
func (l *LocalClaims) nextFence() int64 {
	l.fences++
	return l.fences
}

// StaleFences returns the tokens among fences that no row of the thread
// holds, each once, in the order given; 0 is never stale (it stands for a
// write no claim covers). The memory store checks its appends with it.
func (l *LocalClaims) StaleFences(threadID string, fences []int64) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var stale []int64
	for _, f := range fences {
		if f == 0 || slices.Contains(stale, f) || l.holdsLocked(threadID, f) {
			continue
		}
		stale = append(stale, f)
	}
	return stale
}

func (l *LocalClaims) holdsLocked(threadID string, fence int64) bool {
	if row, ok := l.rows[threadID]; ok && row.Fence == fence {
		return true
	}
	for ref, row := range l.agents {
		if ref.ThreadID == threadID && row.Fence == fence {
			return true
		}
	}
	return false
}

// ClaimThread implements RunClaims.
func (l *LocalClaims) ClaimThread(_ context.Context, threadID, runID, owner string, ttl time.Duration) (ActiveRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.rows[threadID]; ok {
		return row, ErrRunActive
	}
	row := ActiveRun{ThreadID: threadID, RunID: runID, Owner: owner, LeaseExpires: l.now().Add(ttl), Fence: l.nextFence()}
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
func (l *LocalClaims) TakeRun(_ context.Context, threadID, runID, owner string, ttl time.Duration) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.rows[threadID]
	now := l.now()
	if !ok || row.RunID != runID || !row.Free(now) {
		return 0, false, nil
	}
	row.Owner, row.LeaseExpires, row.Fence = owner, now.Add(ttl), l.nextFence()
	l.rows[threadID] = row
	return row.Fence, true, nil
}

// SuspendRun implements RunClaims.
func (l *LocalClaims) SuspendRun(_ context.Context, threadID, runID string, fence int64, suspended bool) error {
	return l.update(threadID, runID, fence, func(r *ActiveRun) { r.Suspended = suspended })
}

// DisownRun implements RunClaims.
func (l *LocalClaims) DisownRun(_ context.Context, threadID, runID string, fence int64) error {
	return l.update(threadID, runID, fence, func(r *ActiveRun) { r.Owner = "" })
}

// update changes the run's row if it holds fence.
func (l *LocalClaims) update(threadID, runID string, fence int64, f func(*ActiveRun)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.rows[threadID]
	if !ok || row.RunID != runID || row.Fence != fence {
		return &StaleFenceError{Tokens: []int64{fence}}
	}
	f(&row)
	l.rows[threadID] = row
	return nil
}

// ReleaseRun implements RunClaims.
func (l *LocalClaims) ReleaseRun(_ context.Context, threadID, runID string, fence int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.rows[threadID]
	if !ok || row.RunID != runID || row.Fence != fence {
		return &StaleFenceError{Tokens: []int64{fence}}
	}
	delete(l.rows, threadID)
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

// HasWork reports whether the thread holds a row: an active or suspended
// run, or a background agent at work. Retention never deletes such a
// thread.
func (l *LocalClaims) HasWork(threadID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.rows[threadID]; ok {
		return true
	}
	for ref := range l.agents {
		if ref.ThreadID == threadID {
			return true
		}
	}
	return false
}

// HasRunWork reports whether the thread holds a row of the run: the run
// is active or suspended, or a background agent of it is at work.
func (l *LocalClaims) HasRunWork(threadID, runID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.rows[threadID]; ok && row.RunID == runID {
		return true
	}
	for ref := range l.agents {
		if ref.ThreadID == threadID && ref.RunID == runID {
			return true
		}
	}
	return false
}

// ClaimAgent implements AgentClaims.
func (l *LocalClaims) ClaimAgent(_ context.Context, ref AgentRef, owner string, ttl time.Duration, runFence int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if run, ok := l.rows[ref.ThreadID]; runFence != 0 && (!ok || run.RunID != ref.RunID || run.Fence != runFence) {
		return 0, &StaleFenceError{Tokens: []int64{runFence}}
	}
	row := AgentClaim{AgentRef: ref, Owner: owner, LeaseExpires: l.now().Add(ttl), Fence: l.nextFence()}
	l.agents[ref] = row
	return row.Fence, nil
}

// RunAgents implements AgentClaims.
func (l *LocalClaims) RunAgents(_ context.Context, threadID, runID string) ([]AgentClaim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []AgentClaim
	for ref, row := range l.agents {
		if ref.ThreadID == threadID && ref.RunID == runID {
			out = append(out, row)
		}
	}
	return out, nil
}

// ReleaseAgent implements AgentClaims.
func (l *LocalClaims) ReleaseAgent(_ context.Context, ref AgentRef, fence int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.agents[ref]; !ok || row.Fence != fence {
		return &StaleFenceError{Tokens: []int64{fence}}
	}
	delete(l.agents, ref)
	return nil
}

// RenewAgents implements AgentClaims.
func (l *LocalClaims) RenewAgents(_ context.Context, owner string, ttl time.Duration, fences []int64) ([]AgentClaim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []AgentClaim
	until := l.now().Add(ttl)
	for ref, row := range l.agents {
		if row.Owner == owner && slices.Contains(fences, row.Fence) {
			row.LeaseExpires = until
			l.agents[ref] = row
			out = append(out, row)
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
func (l *LocalClaims) TakeAgent(_ context.Context, ref AgentRef, owner string, ttl time.Duration) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	row, ok := l.agents[ref]
	now := l.now()
	if !ok || !now.After(row.LeaseExpires) {
		return 0, false, nil
	}
	row.Owner, row.LeaseExpires, row.Fence = owner, now.Add(ttl), l.nextFence()
	l.agents[ref] = row
	return row.Fence, true, nil
}

// RenewRuns implements RunClaims.
func (l *LocalClaims) RenewRuns(_ context.Context, owner string, ttl time.Duration) ([]ActiveRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ActiveRun
	until := l.now().Add(ttl)
	for id, row := range l.rows {
		if row.Owner == owner {
			row.LeaseExpires = until
			l.rows[id] = row
			out = append(out, row)
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
		// One process keeps no answers here: a waiting row without an
		// owner is its answer's to take.
		if (row.Owner != "" && now.After(row.LeaseExpires)) || (row.Owner == "" && !row.Suspended) {
			out = append(out, row)
		}
	}
	slices.SortFunc(out, func(a, b ActiveRun) int { return a.LeaseExpires.Compare(b.LeaseExpires) })
	return out, nil
}

// RequestCancel implements RunClaims.
func (l *LocalClaims) RequestCancel(_ context.Context, threadID, reason string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	asked := false
	if row, ok := l.rows[threadID]; ok {
		row.CancelReason = reason
		l.rows[threadID] = row
		asked = true
	}
	for ref, row := range l.agents {
		if ref.ThreadID == threadID {
			row.CancelReason = reason
			l.agents[ref] = row
			asked = true
		}
	}
	return asked, nil
}

// CancelPending implements RunClaims.
func (l *LocalClaims) CancelPending(_ context.Context, threadID string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row, ok := l.rows[threadID]; ok && row.CancelReason != "" {
		return true, nil
	}
	for ref, row := range l.agents {
		if ref.ThreadID == threadID && row.CancelReason != "" {
			return true, nil
		}
	}
	return false, nil
}
