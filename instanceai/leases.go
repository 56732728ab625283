package instanceai

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// leases is this instance's hold on the claims tables: the rows it claims
// and renews for its runs and background agents, the tokens that fence
// their writes, the rows it owns with no live work behind them, and what
// it knows of the other instances when it settles work a dead one left.
type leases struct {
	claims    RunClaims
	agentRows AgentClaims // nil when the claims keep no agent rows
	// instance names this process among those sharing the database.
	instance string
	// ttl is how long a claim lasts without a renewal.
	ttl time.Duration
	// fenced is set when the claims are the store's, so that writes carry
	// their tokens (see RunsConfig.Claims).
	fenced bool
	// liveUntil is when, in Unix nanoseconds, this instance's text stops
	// going out live unless its leases are renewed (0: no limit); see
	// Runs.LiveHeld.
	liveUntil atomic.Int64
	orphans   orphanedClaims
	// peers, when set, lists the live instances (the store's registry):
	// see Runs.leaveToPeer.
	peers func(ctx context.Context) ([]Instance, error)
	// startedAt is when this process's registry began: runs whose owner
	// last renewed their lease before it may have streamed text its hub
	// never received.
	startedAt time.Time
	// heardRun, when set, says whether this instance received the run's
	// live frames from its start (the bus routes by thread): see
	// Runs.leaveToPeer.
	heardRun func(threadID, runID string) bool
	// hubText, when set, gives the text this instance's hub passed on of
	// a run's open segments (see Runs.openText).
	hubText func(threadID, runID string) ([]Event, []int64)
}

// claimThread makes runID the thread's active run, owned here.
func (l *leases) claimThread(ctx context.Context, threadID, runID string) (ActiveRun, error) {
	return l.claims.ClaimThread(ctx, threadID, runID, l.instance, l.ttl)
}

// takeRun takes the run's row if it is free (see RunClaims.TakeRun).
func (l *leases) takeRun(ctx context.Context, threadID, runID string) (fence int64, won bool, err error) {
	return l.claims.TakeRun(ctx, threadID, runID, l.instance, l.ttl)
}

// renewRuns renews the rows this instance owns and returns them.
func (l *leases) renewRuns(ctx context.Context) ([]ActiveRun, error) {
	return l.claims.RenewRuns(ctx, l.instance, l.ttl)
}

// claimAgentRow claims the agent's row here, under the run's claim
// runFence when it is not 0 (see AgentClaims.ClaimAgent).
func (l *leases) claimAgentRow(ctx context.Context, ref AgentRef, runFence int64) (int64, error) {
	return l.agentRows.ClaimAgent(ctx, ref, l.instance, l.ttl, runFence)
}

// takeAgentRow takes an expired agent row (see AgentClaims.TakeAgent).
func (l *leases) takeAgentRow(ctx context.Context, ref AgentRef) (fence int64, won bool, err error) {
	return l.agentRows.TakeAgent(ctx, ref, l.instance, l.ttl)
}

// renewAgentRows renews the agent rows this instance owns under one of
// fences (see AgentClaims.RenewAgents).
func (l *leases) renewAgentRows(ctx context.Context, fences []int64) ([]AgentClaim, error) {
	return l.agentRows.RenewAgents(ctx, l.instance, l.ttl, fences)
}

// liveMargin is the part of a lease before its end from which an instance
// that could not renew it publishes no more text live: what it published
// before has that long to reach the other instances' hubs, whose live text
// a settlement after the lease's end writes as blocks.
func (l *leases) liveMargin() time.Duration { return l.ttl / 5 }

// renewedFrom records a renewal of every lease of this instance begun at
// start: until start+lease-margin, whatever another instance's settlement
// writes comes after the leases ran out, so text may go out live.
func (l *leases) renewedFrom(start time.Time) {
	if l.fenced {
		l.liveUntil.Store(start.Add(l.ttl - l.liveMargin()).UnixNano())
	}
}

// mayHaveRunOut reports whether this instance's leases may have run out
// (see Runs.LiveHeld).
func (l *leases) mayHaveRunOut() bool {
	until := l.liveUntil.Load()
	return until != 0 && time.Now().UnixNano() > until
}

// heldClaim is a run's row as one claim of it: its run and its token.
type heldClaim struct {
	RunRef
	fence int64
}

// orphanBeats is how many heartbeats in a row a row this instance owns may
// have no live run behind it before it is disowned for the sweep: one beat
// can fall between a run-finish being queued and its commit.
const orphanBeats = 2

// orphanedClaims are the rows this instance owns with no live run behind
// them, by how many heartbeats in a row they were seen so.
type orphanedClaims struct {
	mu    sync.Mutex
	beats map[heldClaim]int
}

// count updates the tally with one heartbeat's renewed rows, held, whose
// run is live here when live says so, and returns the rows that were
// orphaned for orphanBeats beats: those are no longer counted.
func (o *orphanedClaims) count(held map[heldClaim]bool, live func(heldClaim) bool) []heldClaim {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.beats == nil {
		o.beats = map[heldClaim]int{}
	}
	for row := range o.beats {
		if !held[row] {
			delete(o.beats, row)
		}
	}
	var orphaned []heldClaim
	for row := range held {
		if live(row) {
			delete(o.beats, row)
			continue
		}
		o.beats[row]++
		if o.beats[row] >= orphanBeats {
			delete(o.beats, row)
			orphaned = append(orphaned, row)
		}
	}
	return orphaned
}
