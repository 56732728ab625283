package instanceai

import (
	"context"
	"fmt"
	"time"
)

// Instance is a serving process as the shared database records it: what
// lets a process that starts check that it joins the others by the same
// bus.
type Instance struct {
	ID string
	// Bus names the bus the instance joined the others by (see
	// bus.Identity): "memory", or a transport with its server and channel,
	// never a password.
	Bus  string
	Host string
	PID  int
	// StartedAt and LeaseExpires: the instance counts as live until its
	// lease runs out unless its heartbeat renews it.
	StartedAt    time.Time
	LeaseExpires time.Time
}

// InstanceRegistry is implemented by a store that several processes can
// share (SQLite, PostgreSQL): it records the serving processes.
type InstanceRegistry interface {
	// RegisterInstance records inst, live for ttl, and returns the other
	// instances whose lease has not run out, oldest first.
	RegisterInstance(ctx context.Context, inst Instance, ttl time.Duration) ([]Instance, error)
	// LiveInstances returns the instances whose lease has not run out,
	// oldest first.
	LiveInstances(ctx context.Context) ([]Instance, error)
	// RenewInstance extends the instance's lease to now+ttl.
	RenewInstance(ctx context.Context, id string, ttl time.Duration) error
	// RemoveInstance deletes the instance's record.
	RemoveInstance(ctx context.Context, id string) error
}

// BusConflictError is why an instance may not start beside the live ones:
// it would neither hear them nor be heard, so its clients would miss their
// live events and its control requests would reach no one but through the
// database.
type BusConflictError struct {
	Self, Other Instance
}

func (e *BusConflictError) Error() string {
	other := fmt.Sprintf("instance %s (host %s, pid %d, started %s)", e.Other.ID, e.Other.Host, e.Other.PID,
		e.Other.StartedAt.Format(time.RFC3339))
	if e.Self.Bus == MemoryBus {
		return fmt.Sprintf("the memory bus serves one process, but %s uses this database, on bus %s; "+
			"start every instance with one shared bus (--bus redis://… or --bus postgres), or stop the other", other, e.Other.Bus)
	}
	return fmt.Sprintf("this instance's bus is %s, but %s uses this database on bus %s; every instance on one database must use the same bus",
		e.Self.Bus, other, e.Other.Bus)
}

// MemoryBus is the Bus name of an instance without a bus.
const MemoryBus = "memory"

// CheckBus returns a *BusConflictError when self may not start beside the
// live instances others: one of them is on another bus, or self has no bus
// (the memory bus) and any of them is live.
func CheckBus(self Instance, others []Instance) error {
	for _, o := range others {
		if o.Bus != self.Bus || self.Bus == MemoryBus {
			return &BusConflictError{Self: self, Other: o}
		}
	}
	return nil
}
