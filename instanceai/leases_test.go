package instanceai

import (
	"testing"
	"time"
)

// Text stops going out live once the leases were last renewed longer ago
// than the lease less its margin, and only where claims are the store's.
func TestLiveHeldFollowsTheLastRenewal(t *testing.T) {
	m := &Runs{}
	m.leases.fenced, m.leases.ttl = true, 10*time.Second
	if m.LiveHeld() {
		t.Fatal("held before the heartbeat ran")
	}
	m.leases.renewedFrom(time.Now().Add(-9 * time.Second))
	if !m.LiveHeld() {
		t.Fatal("not held 9 s into a 10 s lease that was not renewed")
	}
	m.leases.renewedFrom(time.Now())
	if m.LiveHeld() {
		t.Fatal("held just after a renewal")
	}
	local := &Runs{}
	local.leases.ttl = 10 * time.Second
	local.leases.renewedFrom(time.Now().Add(-time.Hour))
	if local.LiveHeld() {
		t.Fatal("held with claims that are not the store's")
	}
}
