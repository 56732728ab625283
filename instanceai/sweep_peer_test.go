package instanceai

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A process that started after a run's owner last renewed its claim may
// not have heard the run's live text: it leaves the settlement to a live
// instance that was up then, for one lease past the expiry at most, and
// settles at once when there is none (or the registry cannot tell). On a
// bus that routes by thread, an instance that did not hear the run from
// its start leaves it to any other live instance, within the same bound.
func TestSettlementIsLeftToAnInstanceThatHeardTheRun(t *testing.T) {
	const lease = 10 * time.Second
	now := time.Now()
	lastRenewal := now.Add(-12 * time.Second) // expired 2 s ago
	expires := lastRenewal.Add(lease)
	old := Instance{ID: "old", StartedAt: lastRenewal.Add(-time.Minute)}
	fresh := Instance{ID: "fresh", StartedAt: lastRenewal.Add(time.Second)}
	up := lastRenewal.Add(-time.Second)
	cases := []struct {
		name  string
		born  time.Time
		owner string
		peers []Instance
		err   error
		now   time.Time
		leave bool
		// routed: the bus routes by thread, and this instance heard the
		// run from its start ("heard") or did not ("unheard"); "": the
		// bus sends every thread everywhere.
		routed string
		// holds: this instance's hub holds text of the run in no block.
		holds bool
	}{
		{"restarted, an old instance is live", lastRenewal.Add(5 * time.Second), "dead", []Instance{old}, nil, now, true, "", false},
		{"restarted, only newer instances are live", lastRenewal.Add(5 * time.Second), "dead", []Instance{fresh}, nil, now, false, "", false},
		{"restarted, the old instance is the owner", lastRenewal.Add(5 * time.Second), "old", []Instance{old}, nil, now, false, "", false},
		{"restarted, a lease past the expiry", lastRenewal.Add(5 * time.Second), "dead", []Instance{old}, nil, expires.Add(lease + time.Second), false, "", false},
		{"restarted, the registry fails", lastRenewal.Add(5 * time.Second), "dead", nil, errors.New("down"), now, false, "", false},
		{"up while the run streamed", up, "dead", []Instance{old}, nil, now, false, "", false},
		{"up, not hearing, a newer instance is live", up, "dead", []Instance{fresh}, nil, now, true, "unheard", false},
		{"up, not hearing, only the owner is live", up, "old", []Instance{old}, nil, now, false, "unheard", false},
		{"up, not hearing but holding text, a lease past the expiry", up, "dead", []Instance{old}, nil, expires.Add(lease + time.Second), false, "unheard", true},
		{"up, not hearing and holding no text, a lease past the expiry", up, "dead", []Instance{old}, nil, expires.Add(lease + time.Second), true, "unheard", false},
		{"up, not hearing and holding no text, two leases past the expiry", up, "dead", []Instance{old}, nil, expires.Add(2*lease + time.Second), false, "unheard", false},
		{"up, heard the run", up, "dead", []Instance{fresh}, nil, now, false, "heard", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at := c.now
			m := &Runs{now: func() time.Time { return at }}
			m.leases.instance, m.leases.ttl, m.leases.startedAt = "self", lease, c.born
			m.leases.peers = func(context.Context) ([]Instance, error) {
				return append(c.peers, Instance{ID: "self", StartedAt: c.born}), c.err
			}
			if c.routed != "" {
				m.leases.heardRun = func(thread, run string) bool { return thread == "t" && run == "r" && c.routed == "heard" }
			}
			if c.holds {
				m.leases.hubText = func(thread, run string) ([]Event, []int64) {
					return []Event{{Type: TypeTextDelta, RunID: run, Payload: &Text{Text: "heard"}}}, []int64{0}
				}
			}
			if got := m.leaveToPeer(context.Background(), RunRef{ThreadID: "t", RunID: "r"}, c.owner, expires); got != c.leave {
				t.Fatalf("leaveToPeer = %v, want %v", got, c.leave)
			}
		})
	}
	alone := &Runs{now: time.Now}
	alone.leases.ttl, alone.leases.startedAt = lease, now
	if alone.leaveToPeer(context.Background(), RunRef{ThreadID: "t", RunID: "r"}, "dead", expires) {
		t.Fatal("a store without a registry left the settlement to nobody")
	}
}
