// Command chaos runs the fault harness (package chaos) against real
// threadline processes and prints its report; it exits 1 when it found
// anomalies, 2 when it could not run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/threadline/threadline/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// -short picks the defaults of every other flag, so it is looked for
	// before they are defined.
	fs.Bool("short", false, "start from the short version's settings (as the test runs them) instead of the long one's")
	preset := chaos.Long()
	for _, a := range args {
		if a == "-short" || a == "--short" || a == "-short=true" || a == "--short=true" {
			preset = chaos.Short()
		}
	}
	cfg := preset
	scenarios := fs.String("scenarios", strings.Join(cfg.Scenarios, ","), "scenarios to run, comma-separated: "+strings.Join(chaos.ScenarioNames(), ", "))
	buses := fs.String("buses", strings.Join(cfg.Buses, ","), "buses to run each scenario on: redis, postgres")
	fs.StringVar(&cfg.DatabaseURL, "database-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL admin DSN; each scenario creates and drops a database there (env TEST_DATABASE_URL)")
	fs.StringVar(&cfg.RedisURL, "redis-url", envOr("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis for the redis bus; each scenario uses a channel of its own (env TEST_REDIS_URL)")
	fs.StringVar(&cfg.Binary, "binary", "", "threadline binary to test (default: build ./cmd/threadline)")
	fs.IntVar(&cfg.Instances, "instances", cfg.Instances, "serve processes per cluster")
	fs.IntVar(&cfg.Threads, "threads", cfg.Threads, "threads under load (each followed by one or two clients)")
	fs.IntVar(&cfg.Producers, "producers", cfg.Producers, "publish API producers in the load of the scenarios that take them, each on a thread of its own")
	maxRSS := fs.Int64("max-rss-mb", cfg.MaxRSS/1e6, "bound in MB (10^6 bytes) on each instance's peak resident memory while it takes the oversized producers (0 = not judged)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "load per scenario after the warm-up; the fault repeats within it")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "the instances' --lease")
	fs.DurationVar(&cfg.LeaseRenew, "lease-renew", cfg.LeaseRenew, "the instances' --lease-renew")
	fs.DurationVar(&cfg.ScriptDelay, "script-delay", cfg.ScriptDelay, "the reference agent's --script-delay")
	fs.IntVar(&cfg.LongDeltas, "long-deltas", cfg.LongDeltas, "largest N of the load's `long N` chats")
	fs.IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "scenarios run at once (each is a cluster of its own)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the harness's choices")
	fs.StringVar(&cfg.Dir, "out", "chaos-out", "directory for the logs of scenarios with anomalies, and report.json")
	fs.BoolVar(&cfg.Trace, "trace", cfg.Trace, "keep every frame the clients are sent, and write those of clients with anomalies next to the logs")
	format := fs.String("format", "text", "report format: text or json")
	perKind := fs.Int("show", 5, "anomalies shown per kind and scenario in the text report (0 = all)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected arguments %v\n", fs.Args())
		return 2
	}
	cfg.MaxRSS = *maxRSS * 1e6
	cfg.Scenarios = splitList(*scenarios)
	cfg.Buses = splitList(*buses)
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "chaos: -format %q: use text or json\n", *format)
		return 2
	}
	// Names are checked before the build, which takes a while.
	for _, name := range cfg.Scenarios {
		if !slices.Contains(chaos.ScenarioNames(), name) {
			fmt.Fprintf(stderr, "chaos: unknown scenario %q; the scenarios are %s\n", name, strings.Join(chaos.ScenarioNames(), ", "))
			return 2
		}
	}
	for _, bus := range cfg.Buses {
		if bus != "redis" && bus != "postgres" {
			fmt.Fprintf(stderr, "chaos: unknown bus %q; the buses are redis, postgres\n", bus)
			return 2
		}
	}
	if !*quiet {
		cfg.Progress = stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Binary == "" {
		dir, err := os.MkdirTemp("", "chaos-bin-")
		if err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return 2
		}
		defer os.RemoveAll(dir)
		if cfg.Binary, err = chaos.Build(ctx, dir); err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return 2
		}
	}
	start := time.Now()
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		if *format == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			rep.WriteText(stdout, *perKind)
		}
		if cfg.Dir != "" {
			if data, err := json.MarshalIndent(rep, "", "  "); err == nil && os.MkdirAll(cfg.Dir, 0o755) == nil {
				_ = os.WriteFile(cfg.Dir+"/report.json", data, 0o644)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "chaos: after %v: %v\n", time.Since(start).Round(time.Second), err)
		return 2
	}
	if rep.Anomalies() > 0 {
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
