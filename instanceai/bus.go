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

// RoutedBus is a Bus that also routes by topic, so that an instance
// receives only the frames of the threads it serves (see Cluster): a
// payload published to a topic reaches the listeners that follow it, and
// no other. Payloads published with Publish still reach every listener.
//
// The bus keeps the set of followed topics across reconnections: a
// listener that (re)connects follows the whole set before it reports
// state(true, nil), so that whatever the core reads from the log after
// that report is followed by every later payload.
type RoutedBus interface {
	Bus
	// PublishTo sends payload to the listeners that follow topic.
	PublishTo(ctx context.Context, topic string, payload []byte) error
	// Follow adds topics to the set Listen follows and returns once the
	// server confirmed them on the current connection: a payload
	// published to one of them afterwards is delivered. It returns an
	// error when there is no connection or ctx ends first; the topics
	// stay in the set, followed at the next (re)connection.
	Follow(ctx context.Context, topics ...string) error
	// Unfollow removes topics from the set. Payloads of them may still
	// arrive for a moment after it returns.
	Unfollow(ctx context.Context, topics ...string) error
}

// Envelope is one payload of a batch: for a topic's listeners, or for
// every listener when Topic is "".
type Envelope struct {
	Topic   string
	Payload []byte
}

// BatchBus is a RoutedBus that sends several payloads in one round trip
// to its server (a pipeline, one statement), which is what lets an
// instance that writes many threads at once keep up: routed, their frames
// cannot share a payload.
type BatchBus interface {
	RoutedBus
	// PublishBatch sends each envelope as PublishTo or Publish would, in
	// order. When it returns an error, any of them may have been sent.
	PublishBatch(ctx context.Context, batch []Envelope) error
}
