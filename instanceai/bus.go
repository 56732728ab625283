package instanceai

import "context"

// Bus carries messages between the instances that share one database: the
// live frames each instance's writer publishes (ephemeral deltas are in no
// log, so the bus carries frames, not only wake-ups) and the control
// messages that steer a run from an instance that does not own it (cancel,
// answer, delete).
//
// A Bus is a transport of opaque payloads; what they mean is the core's
// business (see Cluster). Every listening instance receives every payload,
// its publisher's own included. Payloads from one publisher arrive in the
// order they were published, but delivery is at most once: a listener that
// loses its connection misses what was published meanwhile, and says so
// through Listen's state callback, after which the core re-reads the log.
type Bus interface {
	// Publish sends payload to every listening instance.
	Publish(ctx context.Context, payload []byte) error
	// MaxPayload is the largest payload Publish accepts, 0 for no limit
	// (PostgreSQL's NOTIFY takes under 8,000 bytes).
	MaxPayload() int
	// Listen delivers every payload to deliver, in arrival order, until ctx
	// ends. It reconnects by itself after a lost connection: state(false,
	// err) reports the loss, state(true, nil) each (re)connection, the
	// first one included. It returns when ctx ends, or early with an error
	// it cannot recover from.
	Listen(ctx context.Context, deliver func(payload []byte), state func(up bool, err error)) error
	// Close releases the bus's connections.
	Close() error
}

// BusIdentifier is implemented by a Bus that can name what it joins: the
// same string on every instance that hears the others, whatever address
// each reached the server by (a server's own identity, and the channel).
// Instances record it at start (see CheckBus).
type BusIdentifier interface {
	Identity(ctx context.Context) (string, error)
}
