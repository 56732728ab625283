package instanceai

import "slices"

// Fencing in the drain: what it drops rather than stores, and what it does
// when the log refuses a claim's token.

// refusals are what a drain drops rather than stores.
type refusals struct {
	// runs are the runs whose events are dropped, with why: a storage
	// failure (see fail), or their thread gone.
	runs map[string]error
	// claims are the claims whose events are dropped: the log refused
	// their token, the registry found them taken (dropFence), or their
	// background agent's events could not be stored (failAgentsOnly).
	claims map[*fence]bool
}

// refusal is why an event of the run, written under f's claim, is
// dropped rather than stored (nil: it is not): its run failed, or its
// claim was taken. A settlement's events are not dropped for their run's
// failure: they are made from the log once the run's writers stopped.
func (r *refusals) refusal(runID string, f *fence) error {
	if err := r.runs[runID]; err != nil && !f.settlement() {
		return err
	}
	if r.claims[f] {
		return ErrRunTakenOver
	}
	return nil
}

// runFailed is why the run's events are dropped (nil: they are not).
func (r *refusals) runFailed(runID string) error { return r.runs[runID] }

// failRun drops the run's later events for why. It reports whether the
// run was not dropped already.
func (r *refusals) failRun(runID string, why error) bool {
	if r.runs[runID] != nil {
		return false
	}
	r.runs[runID] = why
	return true
}

// stale reports whether f's claim is dropped.
func (r *refusals) stale(f *fence) bool { return r.claims[f] }

// markStale drops f's claim's later events. It reports whether the claim
// was not dropped already.
func (r *refusals) markStale(f *fence) bool {
	if r.claims[f] {
		return false
	}
	if r.claims == nil {
		r.claims = map[*fence]bool{}
	}
	r.claims[f] = true
	return true
}

// refused handles an append the log refused for the stale tokens stale.
// The claims behind them were taken by another instance, which settles
// their runs: every event queued under them, in this batch or later, is
// dropped, published to nobody, with their open segments, and each claim
// is reported once (OnRunFenced). A holder whose token moved on since the
// try (a suspended run took its claim again) is not stopped: its events
// go again with the new token. It returns the rest of the batch, to be
// committed at once; ok is false when no holder of the batch had a stale
// token, which no log refuses.
func (d *threadDrain) refused(items []batchItem, holders []*fence, tokens, stale []int64) (rest []batchItem, ok bool) {
	judged := map[*fence]bool{}
	for i, h := range holders {
		if h == nil || judged[h] || !slices.Contains(stale, tokens[i]) {
			continue
		}
		judged[h] = true
		ok = true
		if h.settled() == tokens[i] {
			d.stopStale(h)
		}
	}
	if !ok {
		return nil, false
	}
	dropped := 0
	for _, it := range items {
		if d.refusals.stale(it.fence) {
			it.fence.lose(ErrRunTakenOver)
			dropped++
			continue
		}
		rest = append(rest, it)
	}
	d.w.cfg.Logger.Info("dropping events the log refused: another instance took their claim", "thread", d.threadID,
		"events", dropped, "tokens", stale)
	return rest, true
}

// stopStale drops f's claim, refused by the log, and reports it once.
func (d *threadDrain) stopStale(f *fence) {
	if !d.dropStale(f) {
		return
	}
	f.lost.Store(true)
	if cb := d.w.cfg.OnRunFenced; cb != nil {
		cb(d.threadID, f.runID, f.agentID)
	}
}

// dropStale discards f's claim's open segments, with their checkpoint
// state, and every later event of it. The pieces of its segments stay in
// the store: they are the taker's, which reads them to settle the run. It
// reports whether the claim was not dropped already.
func (d *threadDrain) dropStale(f *fence) bool {
	if !d.refusals.markStale(f) {
		return false
	}
	f.lose(ErrRunTakenOver)
	d.coalescer.dropWhere(func(s *segment) bool { return s.fence == f })
	d.checkpoints.forgetClosing(func(s *segment) bool { return s.fence == f })
	return true
}
