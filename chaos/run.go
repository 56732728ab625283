package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/threadline/threadline/chaos/check"
)

// Run runs every scenario of the configuration on every bus, cfg.Parallel
// at a time, and returns the report. An error means the harness could not
// do its work (no database, a binary that does not start); anomalies are
// in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	type job struct {
		sc  *Scenario
		bus string
		i   int
	}
	var jobs []job
	for _, name := range cfg.Scenarios {
		for _, bus := range cfg.Buses {
			jobs = append(jobs, job{scenarioByName(name), bus, len(jobs)})
		}
	}
	rep := &Report{Config: summary(&cfg), Rows: make([]Row, len(jobs))}
	start := time.Now()
	work := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range cfg.Parallel {
		wg.Go(func() {
			for j := range work {
				row, err := runScenario(ctx, &cfg, j.sc, j.bus)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s on %s: %w", j.sc.Name, j.bus, err))
					mu.Unlock()
				}
				rep.Rows[j.i] = row
			}
		})
	}
	for _, j := range jobs {
		select {
		case work <- j:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	rep.Took = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	return rep, ctx.Err()
}

// seedFor derives a scenario's seed from the run's, so that each
// scenario's choices are repeatable alone.
func seedFor(seed uint64, parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return seed ^ h.Sum64()
}

// runScenario runs one scenario on one bus on a cluster of its own.
func runScenario(ctx context.Context, cfg *Config, sc *Scenario, bus string) (row Row, err error) {
	row = Row{Scenario: sc.Name, Bus: bus}
	began := time.Now()
	defer func() { row.Took = time.Since(began) }()
	seed := seedFor(cfg.Seed, sc.Name, bus)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir, err := os.MkdirTemp("", "chaos-"+sc.Name+"-"+bus+"-")
	if err != nil {
		return row, err
	}
	defer func() {
		if cfg.Dir != "" && (len(row.Anomalies) > 0 || err != nil) {
			keep := filepath.Join(cfg.Dir, sc.Name+"-"+bus)
			_ = os.RemoveAll(keep)
			if os.MkdirAll(cfg.Dir, 0o755) == nil && os.Rename(dir, keep) == nil {
				row.LogDir = keep
				writeJSON(filepath.Join(keep, "anomalies.json"), row.Anomalies)
				return
			}
		}
		os.RemoveAll(dir)
	}()

	cfg.progress("%s on %s: starting %d instances", sc.Name, bus, cfg.Instances)
	j := openJournal(dir)
	defer j.close()
	// The scenario's own copy: its instances' flags are its own.
	scfg := *cfg
	cfg = &scfg
	if sc.lease > cfg.Lease {
		cfg.Lease, cfg.LeaseRenew = sc.lease, sc.lease/5
		cfg.progress("%s on %s: lease %v (renew %v) for this scenario", sc.Name, bus, cfg.Lease, cfg.LeaseRenew)
	}
	var up *upstream
	if sc.agent == "agui" {
		if up, err = startUpstream(cfg); err != nil {
			return row, err
		}
		defer up.close()
	}
	cfg.serveArgs = cfg.instanceArgs(sc, upURL(up))
	cl, err := StartCluster(ctx, cfg, bus, dir, j)
	if err != nil {
		return row, err
	}
	defer cl.Close()
	chats := make([]string, cfg.Threads)
	for i := range chats {
		chats[i] = fmt.Sprintf("%s-%s-%02d", sc.Name, bus, i+1)
	}
	var producers, big []string
	if sc.producers {
		for i := range cfg.Producers {
			producers = append(producers, fmt.Sprintf("%s-%s-p%02d", sc.Name, bus, i+1))
		}
	}
	for _, name := range sc.threads {
		big = append(big, fmt.Sprintf("%s-%s-%s", sc.Name, bus, name))
	}
	threads := slices.Concat(chats, producers, big)
	if err := createThreads(ctx, cl, threads); err != nil {
		return row, err
	}

	var followers []*follower
	fctx, stopFollowers := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	defer func() {
		stopFollowers()
		fwg.Wait()
	}()
	for i, th := range threads {
		for k := range 1 + rng.IntN(2) {
			c := check.NewClient(th, fmt.Sprintf("%s/c%d", th, k+1))
			c.Trace = cfg.Trace
			f := &follower{c: c, cl: cl, rng: rand.New(rand.NewPCG(seed, uint64(1000+10*i+k))), move: make(chan struct{}, 1)}
			followers = append(followers, f)
			fwg.Go(func() { f.run(fctx) })
		}
	}
	ld := startLoad(ctx, cl, chats, producers, seed, j)
	loadStopped := false
	defer func() {
		if !loadStopped {
			ld.stop()
		}
	}()
	sleep(ctx, cfg.Warmup)

	e := &env{ctx: ctx, cfg: cfg, cl: cl, rng: rng, j: j, halt: ld.halt, up: up, big: big, over: &oversizedRecord{}}
	var faults []check.Fault
	until := time.Now().Add(cfg.Duration)
	took := sc.nominal(cfg)
	for !e.final {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		// The last injection is the one the load's time ends in.
		e.final = !time.Now().Add(took + cfg.Recovery).Before(until)
		began := time.Now()
		fs, err := sc.inject(e)
		faults = append(faults, fs...)
		if err != nil {
			return row, err
		}
		took = time.Since(began)
		if !e.final {
			sleep(ctx, cfg.Recovery)
		}
	}
	cl.HealAll()
	cfg.progress("%s on %s: %d faults; waiting for the chats under way", sc.Name, bus, len(faults))
	ld.stop()
	loadStopped = true
	j.printf("the chats under way are over")
	for _, in := range cl.Instances {
		if !in.Running() {
			if err := in.Start(ctx); err != nil {
				return row, err
			}
		}
	}
	quietBound := 2*cfg.Lease + 15*time.Second
	if took, ok := waitQuiet(ctx, cl, quietBound); ok {
		cfg.progress("%s on %s: quiet after %v", sc.Name, bus, took.Round(time.Millisecond))
		j.printf("quiet after %v", took.Round(time.Millisecond))
	} else {
		cfg.progress("%s on %s: not quiet after %v; checking anyway", sc.Name, bus, quietBound)
		j.printf("not quiet after %v; checking anyway", quietBound)
	}
	observed, err := catchUp(ctx, cl, threads, followers, cfg.CatchUp)
	if err != nil {
		return row, err
	}
	j.printf("catch-up over: %d clients stranded or behind", len(observed))
	stopFollowers()
	fwg.Wait()

	log, err := check.ReadLog(ctx, cl.DB, threads)
	if err != nil {
		return row, err
	}
	in := check.Input{Log: log, Faults: faults}
	in.Observed = append(in.Observed, cl.Observed()...)
	in.Observed = append(in.Observed, observed...)
	in.Observed = append(in.Observed, ld.observed...)
	in.Started, in.Cancels, in.Acked = ld.started, ld.cancels, ld.acked
	in.Oversized, in.Memory, in.MaxRSS = e.over.runs, e.over.memory, cfg.MaxRSS
	in.Bounds = cfg.bounds()
	row.Stats = ld.stats
	row.Stats.Acked = len(ld.acked)
	row.Memory, row.Upstream = e.over.memory, e.over.streams
	for _, f := range followers {
		in.Clients = append(in.Clients, f.c)
		in.Observed = append(in.Observed, f.unexpected...)
		row.Stats.ClientFrames += f.frames
		row.Stats.Reconnects += f.conns
	}
	res := check.Check(in)
	row.fill(res)
	if cfg.Dir != "" && len(row.Anomalies) > 0 {
		if cfg.Trace {
			writeTraces(dir, followers, row.Anomalies)
		}
		if err := dumpDatabase(ctx, cl.DB, dir); err != nil {
			j.printf("dump the database: %v", err)
		}
	}
	cfg.progress("%s on %s: %d runs, %d faults, %d anomalies", sc.Name, bus, row.Runs, row.Faults, len(row.Anomalies))
	return row, nil
}

func writeJSON(path string, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		_ = os.WriteFile(path, data, 0o644)
	}
}

// writeTraces writes the frames of each client an anomaly names into
// dir/clients.
func writeTraces(dir string, followers []*follower, anomalies []check.Anomaly) {
	named := map[string]bool{}
	for _, a := range anomalies {
		named[a.Client] = true
	}
	for _, f := range followers {
		if !named[f.c.Name] {
			continue
		}
		path := filepath.Join(dir, "clients", strings.ReplaceAll(f.c.Name, "/", "-")+".trace")
		if os.MkdirAll(filepath.Dir(path), 0o755) != nil {
			return
		}
		if out, err := os.Create(path); err == nil {
			_ = f.c.WriteTrace(out)
			out.Close()
		}
	}
}

func upURL(up *upstream) string {
	if up == nil {
		return ""
	}
	return up.URL
}

// createThreads creates the threads through the instances.
func createThreads(ctx context.Context, cl *Cluster, threads []string) error {
	a := newAPI(cl.cfg.RequestTimeout)
	for i, th := range threads {
		in := cl.Instances[i%len(cl.Instances)]
		code, text, err := a.do(ctx, http.MethodPost, in.URL+"/instance-ai/threads", `{"id":"`+th+`"}`, nil)
		if err != nil {
			return fmt.Errorf("create thread %s: %w", th, err)
		}
		if code != http.StatusOK && code != http.StatusCreated {
			return fmt.Errorf("create thread %s: %d %s", th, code, text)
		}
	}
	return nil
}

// waitQuiet waits until no run is active, no background agent works and
// every run-start has its run-finish, up to bound.
func waitQuiet(ctx context.Context, cl *Cluster, bound time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		var busy int
		err := cl.DB.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM active_runs) + (SELECT count(*) FROM background_agents) +
			(SELECT count(*) FROM events s WHERE s.type = 'run-start' AND NOT EXISTS
				(SELECT 1 FROM events f WHERE f.type = 'run-finish' AND f.thread_id = s.thread_id AND f.run_id = s.run_id))`).Scan(&busy)
		if err == nil && busy == 0 {
			return time.Since(start), true
		}
		if time.Since(start) > bound || ctx.Err() != nil {
			return time.Since(start), false
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// catchUp stops the clients' random moves and waits until each has been
// sent what the log holds. A client whose live connection does not get
// there within bound is stranded; it is then moved to another connection
// (which replays from its cursor), and one that still cannot get there is
// behind.
func catchUp(ctx context.Context, cl *Cluster, threads []string, followers []*follower, bound time.Duration) ([]check.Anomaly, error) {
	for _, f := range followers {
		f.settled.Store(true)
	}
	log, err := check.ReadLog(ctx, cl.DB, threads)
	if err != nil {
		return nil, err
	}
	waiting := func(fs []*follower) []*follower {
		deadline := time.Now().Add(bound)
		for {
			var left []*follower
			for _, f := range fs {
				if f.c.Pending(log.Threads[f.c.Thread]) != nil {
					left = append(left, f)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
				return left
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	describe := func(f *follower) string {
		rows := log.Threads[f.c.Thread]
		r := f.c.Pending(rows)
		if r == nil {
			return "caught up meanwhile"
		}
		return fmt.Sprintf("%s; the log's head is %d; first event not sent: seq %d (%s of run %s), written %s, %v before the check",
			f.c.Where(), rows[len(rows)-1].Seq, r.Seq, r.Event.Type, r.Event.RunID, r.At.Format("15:04:05.000"),
			time.Since(r.At).Round(time.Millisecond))
	}
	var out []check.Anomaly
	stranded := waiting(followers)
	for _, f := range stranded {
		out = append(out, check.Anomaly{Kind: check.Stranded, Thread: f.c.Thread, Client: f.c.Name,
			Detail: fmt.Sprintf("not sent the log's events within %v of the cluster being quiet: %s", bound, describe(f))})
		select {
		case f.move <- struct{}{}:
		default:
		}
	}
	for _, f := range waiting(stranded) {
		out = append(out, check.Anomaly{Kind: check.ClientBehind, Thread: f.c.Thread, Client: f.c.Name,
			Detail: fmt.Sprintf("still short of the log %v after reconnecting: %s", bound, describe(f))})
	}
	slices.SortFunc(out, func(a, b check.Anomaly) int {
		if a.Client < b.Client {
			return -1
		}
		if a.Client > b.Client {
			return 1
		}
		return 0
	})
	return out, nil
}
