// Package chaos is the fault harness: it runs several real `threadline
// serve` processes on one fresh PostgreSQL database, each reaching
// PostgreSQL and its bus (Redis or LISTEN/NOTIFY) through its own
// faultproxy, drives them with a chat load and with clients that follow
// every thread and reconnect to random instances with their cursor,
// injects one kind of fault per scenario (kill -9, SIGSTOP, a frozen or
// reset PostgreSQL link, cut or frozen bus links, a rolling restart), and
// once the cluster is quiet judges the log and what every client was sent
// with chaos/check.
//
// It is a library so that a test (the short version, in `make test`) and
// a command (cmd/chaos, the long version behind `make chaos`) share it.
package chaos

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/threadline/threadline/chaos/check"
	"github.com/threadline/threadline/instanceai"
)

// Config is one fault-testing run.
type Config struct {
	// Binary is the threadline binary to run; Build makes one.
	Binary string
	// DatabaseURL is an admin DSN of the PostgreSQL server: each scenario
	// creates a fresh database there and drops it afterwards.
	DatabaseURL string
	// RedisURL is the Redis server the redis bus uses (redis://HOST:PORT/DB);
	// each scenario uses a channel of its own.
	RedisURL string

	// Scenarios and Buses to run, every scenario on every bus.
	Scenarios []string
	Buses     []string

	// Instances is how many serve processes a cluster has.
	Instances int
	// Threads is how many threads the load chats on; each has one or two
	// clients following it.
	Threads int
	// Producers is how many publish API producers the load has in the
	// scenarios that take them, each on a thread of its own (followed as
	// the chat threads are); ProducerTimeout is their client timeout, after
	// which a request is sent again.
	Producers       int
	ProducerTimeout time.Duration
	// Duration is how long the load runs after the warm-up; the scenario's
	// fault is injected again and again within it (at least once).
	Duration time.Duration
	// Warmup is the load's time before the first fault.
	Warmup time.Duration
	// Recovery is the pause after a fault is healed, before the next one.
	Recovery time.Duration

	// Lease and LeaseRenew are the instances' --lease and --lease-renew.
	Lease, LeaseRenew time.Duration
	// ScriptDelay is the reference agent's --script-delay.
	ScriptDelay time.Duration
	// DrainTimeout and ShutdownTimeout are the instances' --drain-timeout
	// and --shutdown-timeout (0 leaves the server's defaults).
	DrainTimeout, ShutdownTimeout time.Duration

	// PastLease is how long past the lease a frozen or cut PostgreSQL link
	// and a stopped process stay so.
	PastLease time.Duration
	// BusHold is how long one instance's bus link stays cut or frozen,
	// BusAllHold how long every instance's stays cut.
	BusHold, BusAllHold time.Duration
	// RestartAfter is how long a killed instance stays dead.
	RestartAfter time.Duration
	// LongDeltas bounds N of the `long N` chats: N is drawn from
	// [LongDeltas/4, LongDeltas].
	LongDeltas int
	// ClientLife bounds how long a client keeps a connection before it
	// drops it and reconnects elsewhere: drawn from [ClientLife/10,
	// ClientLife].
	ClientLife time.Duration
	// RequestTimeout bounds each request of the load.
	RequestTimeout time.Duration
	// PublishLease is the instances' --publish-lease (0: twice the lease,
	// at least 5 s): a run whose producer gave up waits that long before it
	// ends, which must fit in the wait for a quiet cluster.
	PublishLease time.Duration

	// The oversized scenario: a publish producer appends OversizedDeltas
	// text-deltas of OversizedDeltaBytes each to one segment, and an
	// upstream AG-UI agent streams one message of UpstreamFrames
	// TEXT_MESSAGE_CONTENT events of UpstreamFrameBytes each.
	OversizedDeltas, OversizedDeltaBytes int
	UpstreamFrames, UpstreamFrameBytes   int
	// MaxRSS bounds each instance's peak resident memory while it takes
	// them (0: not judged).
	MaxRSS int64
	// MaxEventBytes and MaxSegmentBytes are the instances'
	// --max-event-bytes and --max-segment-bytes (0: the server's
	// defaults, and the flags are not passed, so that a build from before
	// them can be tested).
	MaxEventBytes, MaxSegmentBytes int
	// CatchUp bounds how long a client may take to be sent what the log
	// holds once the cluster is quiet, before it counts as stranded.
	CatchUp time.Duration

	// Parallel is how many scenarios run at once (each is its own
	// cluster).
	Parallel int
	// Seed makes the harness's choices (scenarios of the load, victims,
	// delays) repeatable; the timing of real processes is not.
	Seed uint64
	// Dir is where each scenario's instance logs and anomalies are kept
	// when it found anomalies ("" = not kept).
	Dir string
	// Trace keeps every frame each client is sent, and writes those of the
	// clients with anomalies into the scenario's kept directory.
	Trace bool
	// Progress, if set, receives a line per step.
	Progress io.Writer

	// serveArgs are flags every instance of a scenario's cluster gets
	// beyond the harness's own (its agent).
	serveArgs []string
}

// Short is the quick version that `make test` runs: short leases, one
// fault per scenario, a few seconds of load.
func Short() Config {
	return Config{
		Scenarios: ScenarioNames(), Buses: []string{"redis", "postgres"},
		Instances: 3, Threads: 8, Duration: 2 * time.Second, Warmup: 1500 * time.Millisecond, Recovery: time.Second,
		Lease: 2 * time.Second, LeaseRenew: 300 * time.Millisecond, ScriptDelay: 5 * time.Millisecond,
		DrainTimeout: 5 * time.Second, ShutdownTimeout: 3 * time.Second,
		PastLease: 2 * time.Second, BusHold: 4 * time.Second, BusAllHold: 5 * time.Second, RestartAfter: 3 * time.Second,
		LongDeltas: 300, ClientLife: 3 * time.Second, RequestTimeout: 10 * time.Second, CatchUp: 10 * time.Second,
		Producers: 3, ProducerTimeout: time.Second,
		// A producer's deltas past the bound are refused alike, and each
		// costs a megabyte on the wire: a few show it, and keep the short
		// version short.
		OversizedDeltas: 20, OversizedDeltaBytes: 1_000_000, UpstreamFrames: 1024, UpstreamFrameBytes: 1 << 20, MaxRSS: 300_000_000,
		Parallel: 2, Seed: 1, Trace: true,
	}
}

// Long is the version `make chaos` runs: the server's default leases and
// drain, faults repeated for minutes per scenario.
func Long() Config {
	return Config{
		Scenarios: ScenarioNames(), Buses: []string{"redis", "postgres"},
		Instances: 3, Threads: 18, Duration: 60 * time.Second, Warmup: 3 * time.Second, Recovery: 3 * time.Second,
		Lease: 10 * time.Second, LeaseRenew: 2 * time.Second, ScriptDelay: 5 * time.Millisecond,
		PastLease: 5 * time.Second, BusHold: 8 * time.Second, BusAllHold: 10 * time.Second, RestartAfter: 5 * time.Second,
		LongDeltas: 600, ClientLife: 10 * time.Second, RequestTimeout: 30 * time.Second, CatchUp: 15 * time.Second,
		Producers: 6, ProducerTimeout: 2 * time.Second,
		OversizedDeltas: 1000, OversizedDeltaBytes: 1_000_000, UpstreamFrames: 1024, UpstreamFrameBytes: 1 << 20, MaxRSS: 300_000_000,
		Parallel: 1, Seed: 1, Trace: true,
	}
}

// validate checks the configuration before anything starts.
func (c *Config) validate() error {
	switch {
	case c.Binary == "":
		return fmt.Errorf("chaos: no threadline binary (Build makes one)")
	case c.DatabaseURL == "":
		return fmt.Errorf("chaos: no PostgreSQL admin DSN")
	case c.Instances < 2:
		return fmt.Errorf("chaos: %d instances; a cluster needs at least 2", c.Instances)
	case c.Threads < 1:
		return fmt.Errorf("chaos: %d threads", c.Threads)
	case c.Lease < 2*c.LeaseRenew || c.LeaseRenew <= 0:
		return fmt.Errorf("chaos: lease %v must be at least twice the renew period %v", c.Lease, c.LeaseRenew)
	case c.Parallel < 1:
		return fmt.Errorf("chaos: parallel %d", c.Parallel)
	case c.Producers < 0:
		return fmt.Errorf("chaos: %d producers", c.Producers)
	case c.Producers > 0 && c.ProducerTimeout <= 0:
		return fmt.Errorf("chaos: producers need a client timeout")
	}
	for _, b := range c.Buses {
		if b != "redis" && b != "postgres" {
			return fmt.Errorf("chaos: unknown bus %q (redis, postgres)", b)
		}
		if b == "redis" && c.RedisURL == "" {
			return fmt.Errorf("chaos: the redis bus needs a Redis URL")
		}
	}
	for _, s := range c.Scenarios {
		if scenarioByName(s) == nil {
			return fmt.Errorf("chaos: unknown scenario %q (%v)", s, ScenarioNames())
		}
	}
	return nil
}

// publishLease is the instances' --publish-lease.
func (c *Config) publishLease() time.Duration {
	if c.PublishLease > 0 {
		return c.PublishLease
	}
	return max(5*time.Second, 2*c.Lease)
}

// bounds are the instances' size bounds, the server's defaults where the
// configuration leaves them.
func (c *Config) bounds() check.Bounds {
	b := check.Bounds{MaxEventBytes: c.MaxEventBytes, MaxSegmentBytes: c.MaxSegmentBytes}
	if b.MaxEventBytes == 0 {
		b.MaxEventBytes = instanceai.DefaultMaxEventBytes
	}
	if b.MaxSegmentBytes == 0 {
		b.MaxSegmentBytes = instanceai.DefaultMaxSegmentBytes
	}
	return b
}

// instanceArgs are the flags every instance of a scenario gets beyond
// the cluster's own: the publish lease, the size bounds when set, and the
// scenario's agent.
func (c *Config) instanceArgs(sc *Scenario, upstream string) []string {
	args := []string{"-publish-lease", c.publishLease().String()}
	if c.MaxEventBytes > 0 {
		args = append(args, "-max-event-bytes", strconv.Itoa(c.MaxEventBytes))
	}
	if c.MaxSegmentBytes > 0 {
		args = append(args, "-max-segment-bytes", strconv.Itoa(c.MaxSegmentBytes))
	}
	if sc.agent == "agui" {
		args = append(args, "-agent", "agui", "-agui-agents", "chaos="+upstream)
	}
	return args
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
}
