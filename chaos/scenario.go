package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/threadline/threadline/chaos/check"
)

// Scenario is one kind of fault, injected again and again while the load
// runs.
type Scenario struct {
	Name string
	// Doc says what one injection does.
	Doc string
	// inject injects the fault once, holds it, heals it and returns what
	// it did.
	inject func(e *env) ([]check.Fault, error)
	// nominal is about how long one injection takes.
	nominal func(c *Config) time.Duration
	// producers adds the publish API's producers to the load.
	producers bool
	// agent is the instances' agent: "" for the reference agent, "agui"
	// for the harness's upstream AG-UI agent (see upstream).
	agent string
	// threads are threads of the scenario's own beside the load's, named
	// after the scenario and bus, followed by clients as the load's are.
	threads []string
	// lease, when longer than the configuration's, is the instances'
	// --lease (renewed five times within it): a scenario that injects no
	// fault judges runs that a busy machine's stall past a short lease
	// would hand to another instance.
	lease time.Duration
}

func pastLease(c *Config) time.Duration    { return c.Lease + c.PastLease }
func restartAfter(c *Config) time.Duration { return c.RestartAfter }
func busHold(c *Config) time.Duration      { return c.BusHold }
func busAllHold(c *Config) time.Duration   { return c.BusAllHold }
func rollTime(c *Config) time.Duration     { return time.Duration(c.Instances) * 3 * time.Second }

func oversizedTime(*Config) time.Duration { return 30 * time.Second }

var scenarios = []*Scenario{
	{Name: "kill9", Doc: "kill -9 the instance that owns the most active runs; start it again (a new instance id) after RestartAfter", inject: kill9, nominal: restartAfter, producers: true},
	{Name: "sigstop", Doc: "SIGSTOP the instance that owns the most active runs for the lease plus PastLease, then SIGCONT", inject: sigstop, nominal: pastLease, producers: true},
	{Name: "pg-freeze", Doc: "freeze an owner's PostgreSQL link (nothing forwarded, nothing closed) for the lease plus PastLease, then heal", inject: pgFreeze, nominal: pastLease, producers: true},
	{Name: "pg-reset", Doc: "cut an owner's PostgreSQL link (every connection reset, new ones refused) for the lease plus PastLease, then heal", inject: pgReset, nominal: pastLease, producers: true},
	{Name: "bus-cut-one", Doc: "cut an owner's bus link for BusHold, then heal", inject: busCutOne, nominal: busHold, producers: true},
	{Name: "bus-cut-all", Doc: "cut every instance's bus link for BusAllHold, then heal", inject: busCutAll, nominal: busAllHold, producers: true},
	{Name: "owner-bus-freeze", Doc: "freeze the bus link of an instance that owns an active run, mid-run, for BusHold, then heal", inject: ownerBusFreeze, nominal: busHold, producers: true},
	{Name: "owner-bus-reset", Doc: "reset the bus connections of an instance that owns active runs (an RST, reconnecting at once) every 200 to 800 ms for BusHold", inject: ownerBusReset, nominal: busHold, producers: true},
	{Name: "rolling", Doc: "SIGTERM each instance in turn, wait for its exit, start it again, under load", inject: rolling, nominal: rollTime, producers: true},
	{Name: "oversized", Doc: "on a cluster in front of an upstream AG-UI agent (--agent agui), the upstream streams one message of UpstreamFrames × UpstreamFrameBytes, then a publish producer appends OversizedDeltas × OversizedDeltaBytes to one segment; each instance's peak memory is read over each",
		inject: oversized, nominal: oversizedTime, producers: true, agent: "agui", threads: []string{bigUpstreamThread, bigPublishThread},
		lease: 10 * time.Second},
}

// Scenarios lists the scenarios.
func Scenarios() []*Scenario { return scenarios }

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.Name
	}
	return out
}

func scenarioByName(name string) *Scenario {
	for _, s := range scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// env is what an injection works with.
type env struct {
	ctx context.Context
	cfg *Config
	cl  *Cluster
	rng *rand.Rand
	j   *journal
	// final is set for the scenario's last injection: halfway through it
	// halt is called, which stops new chats, so that the runs under way
	// end while the fault holds and nothing later repairs what their
	// clients missed, as when a user reads the last reply of a
	// conversation.
	final bool
	halt  func()
	// up is the upstream AG-UI agent of an agui cluster; big the
	// scenario's own threads; over what the oversized injections did.
	up   *upstream
	big  []string
	over *oversizedRecord
}

// owner returns the instance that owns the most active runs, waiting a
// little for one to own any; with none, a random instance.
func (e *env) owner() *Instance {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var id string
		err := e.cl.DB.QueryRowContext(e.ctx, `SELECT owner_id FROM active_runs WHERE owner_id <> ''
			GROUP BY owner_id ORDER BY count(*) DESC, owner_id LIMIT 1`).Scan(&id)
		if err == nil {
			if in := e.cl.ByID(id); in != nil && in.Running() {
				return in
			}
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			return e.cl.Instances[e.rng.IntN(len(e.cl.Instances))]
		}
		sleep(e.ctx, 50*time.Millisecond)
	}
}

// stopsBus reports whether a fault of kind stops the instances it hits
// from sending on a bus of that kind (see check.Fault.StopsBus).
func stopsBus(kind, bus string) bool {
	switch kind {
	case "kill9", "sigstop", "bus-cut-one", "bus-cut-all", "owner-bus-freeze", "owner-bus-reset":
		return true
	case "pg-freeze", "pg-reset":
		return bus == "postgres"
	}
	return false
}

// fault starts the record of a fault on the instances: its start, and the
// runs and background agents they own now.
func (e *env) fault(kind string, ins ...*Instance) check.Fault {
	f := check.Fault{Kind: kind, Start: time.Now(), StopsBus: stopsBus(kind, e.cl.bus)}
	for _, in := range ins {
		id := in.ID()
		f.Instances = append(f.Instances, id)
		rows, err := e.cl.DB.QueryContext(e.ctx, `SELECT thread_id, run_id, '' FROM active_runs WHERE owner_id = $1
			UNION ALL SELECT thread_id, run_id, agent_id FROM background_agents WHERE owner_id = $1`, id)
		if err != nil {
			continue
		}
		for rows.Next() {
			var v check.Victim
			if rows.Scan(&v.Thread, &v.Run, &v.Agent) == nil {
				f.Victims = append(f.Victims, v)
			}
		}
		rows.Close()
	}
	e.cfg.progress("  %s on %v: %d runs and agents at work there", kind, f.Instances, len(f.Victims))
	e.j.printf("fault %s on %v begins; at work there: %v", kind, f.Instances, f.Victims)
	return f
}

func (e *env) hold(d time.Duration) { sleep(e.ctx, d) }

// holdFault holds a fault for d; in the final injection the load is
// halted halfway.
func (e *env) holdFault(d time.Duration) {
	if !e.final {
		e.hold(d)
		return
	}
	e.hold(d / 2)
	e.halt()
	e.hold(d - d/2)
}

// healed ends the record of a fault.
func (e *env) healed(f *check.Fault) {
	f.End = time.Now()
	e.j.printf("fault %s on %v healed after %v", f.Kind, f.Instances, f.End.Sub(f.Start).Round(time.Millisecond))
}

func kill9(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("kill9", in)
	if err := in.Kill9(); err != nil {
		return nil, err
	}
	e.holdFault(e.cfg.RestartAfter)
	if err := in.Start(e.ctx); err != nil {
		return nil, err
	}
	e.healed(&f)
	return []check.Fault{f}, nil
}

func sigstop(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("sigstop", in)
	if err := in.Stop(); err != nil {
		return nil, err
	}
	e.holdFault(pastLease(e.cfg))
	in.Continue()
	e.healed(&f)
	return []check.Fault{f}, nil
}

func pgFreeze(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("pg-freeze", in)
	in.PG.Freeze()
	e.holdFault(pastLease(e.cfg))
	in.PG.Heal()
	e.healed(&f)
	return []check.Fault{f}, nil
}

func pgReset(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("pg-reset", in)
	in.PG.Cut()
	e.holdFault(pastLease(e.cfg))
	in.PG.Heal()
	e.healed(&f)
	return []check.Fault{f}, nil
}

func busCutOne(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("bus-cut-one", in)
	in.Bus.Cut()
	e.holdFault(e.cfg.BusHold)
	in.Bus.Heal()
	e.healed(&f)
	return []check.Fault{f}, nil
}

func busCutAll(e *env) ([]check.Fault, error) {
	f := e.fault("bus-cut-all", e.cl.Instances...)
	for _, in := range e.cl.Instances {
		in.Bus.Cut()
	}
	e.holdFault(e.cfg.BusAllHold)
	for _, in := range e.cl.Instances {
		in.Bus.Heal()
	}
	e.healed(&f)
	return []check.Fault{f}, nil
}

func ownerBusFreeze(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("owner-bus-freeze", in)
	in.Bus.Freeze()
	e.holdFault(e.cfg.BusHold)
	in.Bus.Heal()
	e.healed(&f)
	return []check.Fault{f}, nil
}

// ownerBusReset resets the owner's bus link again and again: each reset
// loses what was in flight on it, and the link comes back at once, so the
// owner is never seen to be cut off for long.
func ownerBusReset(e *env) ([]check.Fault, error) {
	in := e.owner()
	f := e.fault("owner-bus-reset", in)
	end := time.Now().Add(e.cfg.BusHold)
	halted := !e.final
	for time.Now().Before(end) && e.ctx.Err() == nil {
		in.Bus.Reset()
		e.hold(jitter(e.rng, 200*time.Millisecond, 800*time.Millisecond))
		if !halted && time.Until(end) < e.cfg.BusHold/2 {
			e.halt()
			halted = true
		}
	}
	e.healed(&f)
	return []check.Fault{f}, nil
}

func rolling(e *env) ([]check.Fault, error) {
	var out []check.Fault
	drain, shutdown := e.cfg.DrainTimeout, e.cfg.ShutdownTimeout
	if drain == 0 {
		drain = 20 * time.Second
	}
	if shutdown == 0 {
		shutdown = 10 * time.Second
	}
	for i, in := range e.cl.Instances {
		if e.final && i == len(e.cl.Instances)-1 {
			e.halt()
		}
		f := e.fault("rolling", in)
		if err := in.Terminate(drain + shutdown + 10*time.Second); err != nil {
			return nil, fmt.Errorf("SIGTERM instance %d: %w", in.Index, err)
		}
		if err := in.Start(e.ctx); err != nil {
			return nil, err
		}
		e.healed(&f)
		out = append(out, f)
		e.hold(time.Second)
	}
	return out, nil
}
