// Command loadclient runs the peer comparison: every figure for Threadline,
// a go-sse Joe server and Centrifugo, servers interleaved within each
// repeat (A, B, C, A, B, C, …) so that load from elsewhere on the machine
// hits all three alike, and prints each server's median with Threadline's
// ratio to each peer. With -mode growth it measures instead how
// Threadline's throughput and memory grow with subscribers and threads.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/threadline/threadline/bench/internal/figures"
	"github.com/threadline/threadline/bench/internal/servers"
)

type figure struct {
	name, unit string
	// run measures the figure of one server in repeat r (from 1).
	run func(e *figures.Env, k servers.Kind, r int) (figures.Result, error)
	// goal, for a paired figure, is the least with/without ratio it aims
	// at; a paired figure has its own table.
	goal float64
}

// each is a figure measured the same way in every repeat.
func each(f func(*figures.Env, servers.Kind) (figures.Result, error)) func(*figures.Env, servers.Kind, int) (figures.Result, error) {
	return func(e *figures.Env, k servers.Kind, _ int) (figures.Result, error) { return f(e, k) }
}

var allFigures = []figure{
	{name: "fanout", unit: "deliveries/s", run: each((*figures.Env).Fanout)},
	{name: "latency", unit: "p99 ms, lower is better", run: each((*figures.Env).Latency)},
	{name: "fanout-published", unit: "deliveries/s, one publisher", run: each((*figures.Env).FanoutPublished)},
	{name: "latency-published", unit: "p99 ms, lower is better", run: each((*figures.Env).LatencyPublished)},
	{name: "idle", unit: "KB per idle connection, lower is better", run: each((*figures.Env).Idle)},
	{name: "firstbyte", unit: "p50 ms, lower is better", run: each((*figures.Env).FirstByte)},
	{name: "replay", unit: "replay events/s", run: each((*figures.Env).Replay)},
	{name: "replay-postgres", unit: "replay events/s, Threadline on PostgreSQL", run: each((*figures.Env).ReplayPostgres)},
	// The two measurements of a pair go in turns: without the stalled
	// subscriber first in odd repeats, with it first in even ones.
	{name: "stall", unit: "healthy deliveries/s with/without one stalled subscriber", goal: 0.95,
		run: func(e *figures.Env, k servers.Kind, r int) (figures.Result, error) { return e.Stall(k, r%2 == 0) }},
}

func main() {
	var p figures.Params
	var bin servers.Binaries
	flag.StringVar(&bin.Threadline, "threadline", "bin/threadline", "the Threadline binary under test")
	flag.StringVar(&bin.Joe, "joeserver", "bench/.cache/bin/joeserver", "the joeserver binary")
	flag.StringVar(&bin.CentrifugoExec, "centrifugo", "bench/centrifugo.sh", "centrifugo.sh")
	flag.IntVar(&p.FanoutSubscribers, "fanout-subscribers", 1000, "fan-out: subscribers of the one thread")
	flag.IntVar(&p.FanoutMessages, "fanout-messages", 1000, "fan-out: messages (Threadline: deltas of a `long N` run; keep below --subscriber-queue, 8192, or subscribers are dropped)")
	flag.IntVar(&p.Publishers, "publishers", 4, "fan-out: concurrent publishers to Joe and Centrifugo")
	flag.IntVar(&p.LatencySubscribers, "latency-subscribers", 100, "latency: subscribers")
	flag.IntVar(&p.LatencyRate, "latency-rate", 2000, "latency: messages per second")
	flag.DurationVar(&p.LatencyDuration, "latency-duration", 5*time.Second, "latency: how long to publish")
	flag.IntVar(&p.IdleConnections, "idle-connections", 5000, "memory: idle SSE connections")
	flag.IntVar(&p.FirstByteConns, "firstbyte-connections", 200, "first byte: connections, one after another")
	flag.IntVar(&p.ReplayEvents, "replay-events", 100000, "replay: events in the history")
	flag.StringVar(&p.PostgresURL, "postgres-url", os.Getenv("TEST_DATABASE_URL"), "replay-postgres: the PostgreSQL database Threadline's replay thread is written to (and deleted from afterwards); without one the figure is skipped")
	flag.IntVar(&p.StallDeltas, "stall-deltas", 12000, "stall: Threadline's deltas (long N): past its --subscriber-queue (8192) plus what the stalled socket buffers, so the stalled subscriber is dropped, and few enough that no healthy one is")
	flag.IntVar(&p.StallPublishes, "stall-publishes", 2000, "stall: messages published to Joe and Centrifugo, a few times what the stalled socket buffers")
	repeats := flag.Int("repeats", 3, "repeats of every figure")
	only := flag.String("figures", "fanout,latency,fanout-published,latency-published,idle,firstbyte,replay,replay-postgres,stall", "figures to run, comma-separated")
	serverList := flag.String("servers", "threadline,joe,centrifugo", "servers, comma-separated, Threadline first")
	mode := flag.String("mode", "peers", "peers: every figure side by side; growth: Threadline's cost growth with subscribers and threads (the -growth-* flags); nonreading: what streams that read nothing cost (the -nonreading-* flags)")
	gp := growthParams{subscribers: intList{10, 100, 1000, 5000}, threads: intList{1, 100, 1000}}
	flag.Var(&gp.subscribers, "growth-subscribers", "growth: subscriber counts of the one-thread rows")
	flag.IntVar(&gp.messages, "growth-messages", 1000, "growth: deltas of the one thread's run (the agent's long N)")
	flag.Var(&gp.threads, "growth-threads", "growth: thread counts of the many-thread rows")
	flag.IntVar(&gp.threadSubscribers, "growth-thread-subscribers", 10, "growth: subscribers of each thread in the many-thread rows")
	flag.IntVar(&gp.threadMessages, "growth-thread-messages", 100, "growth: deltas of each thread's run (long N) in the many-thread rows")
	np := figures.NonReadingParams{Hold: 6 * time.Second}
	nonReadingCounts := intList{60, 300}
	flag.Var(&nonReadingCounts, "nonreading-conns", "nonreading: counts of streams that read nothing, one row each")
	flag.IntVar(&np.Chats, "nonreading-chats", 40, "nonreading: `simple` runs written to the thread")
	flag.IntVar(&np.MessageBytes, "nonreading-message", 1<<20, "nonreading: bytes of each run's message")
	flag.IntVar(&np.Healthy, "nonreading-healthy", 4, "nonreading: healthy readers replaying the thread beside them")
	flag.Parse()

	var err error
	switch *mode {
	case "peers":
		err = run(bin, p, *repeats, strings.Split(*only, ","), strings.Split(*serverList, ","))
	case "growth":
		err = runGrowth(bin, gp, *repeats)
	case "nonreading":
		err = runNonReading(bin, np, nonReadingCounts, *repeats)
	default:
		err = fmt.Errorf("unknown -mode %q (peers, growth or nonreading)", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(1)
	}
}

func run(bin servers.Binaries, p figures.Params, repeats int, only, serverNames []string) error {
	raiseFileLimit(p.IdleConnections + 1000)
	work, err := os.MkdirTemp("", "bench-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	hook, err := figures.StartWebhook()
	if err != nil {
		return err
	}
	defer hook.Close()
	env := &figures.Env{Bin: bin, Params: p, WorkDir: work, Webhook: hook}
	defer func() {
		if err := env.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "loadclient: cleaning up:", err)
		}
	}()
	kinds := make([]servers.Kind, len(serverNames))
	for i, n := range serverNames {
		kinds[i] = servers.Kind(n)
	}

	type key struct {
		fig  string
		kind servers.Kind
	}
	results := map[key][]figures.Result{}
	for _, f := range allFigures {
		if !slices.Contains(only, f.name) {
			continue
		}
		for r := 1; r <= repeats; r++ {
			for _, k := range kinds {
				res, err := f.run(env, k, r)
				if errors.Is(err, figures.ErrNotApplicable) {
					continue
				}
				if err != nil {
					return fmt.Errorf("%s, %s, repeat %d: %w", f.name, k, r, err)
				}
				results[key{f.name, k}] = append(results[key{f.name, k}], res)
				fmt.Fprintf(os.Stderr, "%-9s %-10s #%d  %12.2f %s  (%s)\n", f.name, k, r, res.Value, f.unit, res.Note)
			}
		}
	}

	header := false
	for _, f := range allFigures {
		if !slices.Contains(only, f.name) || f.goal > 0 {
			continue
		}
		if !header {
			header = true
			fmt.Printf("\n| figure | %s |", strings.Join(serverNames, " | "))
			for _, k := range kinds[1:] {
				fmt.Printf(" %s/%s |", kinds[0], k)
			}
			fmt.Printf("\n|%s\n", strings.Repeat(" --- |", 1+2*len(kinds)-1))
		}
		fmt.Printf("| %s (%s) |", f.name, f.unit)
		med := map[servers.Kind]float64{}
		for _, k := range kinds {
			v := valuesOf(results[key{f.name, k}])
			if len(v) == 0 {
				fmt.Print(" — |")
				continue
			}
			med[k] = median(v)
			fmt.Printf(" %s |", format(med[k]))
		}
		for _, k := range kinds[1:] {
			a, okA := med[kinds[0]]
			b, okB := med[k]
			if !okA || !okB || b == 0 {
				fmt.Print(" — |")
				continue
			}
			fmt.Printf(" **%.2f** |", a/b)
		}
		fmt.Println()
	}
	for _, f := range allFigures {
		if !slices.Contains(only, f.name) || f.goal == 0 {
			continue
		}
		fmt.Printf("\n| %s (%s) | without | with | with/without | goal | server CPU per delivery, with/without | stalled subscriber |\n| --- | --- | --- | --- | --- | --- | --- |\n", f.name, f.unit)
		for _, k := range kinds {
			rs := results[key{f.name, k}]
			if len(rs) == 0 {
				continue
			}
			p := summarize(rs)
			fmt.Printf("| %s | %s | %s | **%.3f** (%s) | %s | %.3f | %s |\n", k, format(p.base), format(p.under), p.ratio, p.ratios, p.verdict(f.goal), p.cpu, p.outcomes)
		}
	}
	return nil
}

func valuesOf(rs []figures.Result) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.Value
	}
	return v
}

// paired is a paired figure's medians over the repeats. ratio is the
// median of each repeat's own ratio, not the ratio of the medians: the two
// measurements of a repeat ran back to back, so noise that hit one most
// likely hit the other too.
type paired struct {
	base, under, ratio float64
	cpu                float64 // median of each repeat's CPURatio
	ratios             string  // each repeat's ratio, in order
	outcomes           string  // each distinct outcome and in how many repeats
}

func summarize(rs []figures.Result) paired {
	var base, under, ratio, cpu []float64
	var each, seen []string
	times := map[string]int{}
	for _, r := range rs {
		base, under, ratio = append(base, r.Base), append(under, r.Under), append(ratio, r.Value)
		cpu = append(cpu, r.CPURatio)
		each = append(each, fmt.Sprintf("%.2f", r.Value))
		if times[r.Outcome]++; times[r.Outcome] == 1 {
			seen = append(seen, r.Outcome)
		}
	}
	outcomes := make([]string, len(seen))
	for i, o := range seen {
		outcomes[i] = fmt.Sprintf("%s (%d/%d)", o, times[o], len(rs))
	}
	return paired{base: median(base), under: median(under), ratio: median(ratio), cpu: median(cpu),
		ratios: strings.Join(each, " / "), outcomes: strings.Join(outcomes, "; ")}
}

func (p paired) verdict(goal float64) string {
	if p.ratio >= goal {
		return fmt.Sprintf("≥ %.2f: met", goal)
	}
	return fmt.Sprintf("≥ %.2f: missed", goal)
}

// raiseFileLimit lifts the soft limit on open files towards want (the
// hard limit caps it), because every idle connection is a descriptor.
func raiseFileLimit(want int) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	if l.Cur >= uint64(want) {
		return
	}
	l.Cur = min(uint64(want), l.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur < uint64(want) {
		fmt.Fprintf(os.Stderr, "loadclient: open files capped at %d (want %d): the idle figure will fail\n", l.Cur, want)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func format(v float64) string {
	if v >= 1000 {
		s := fmt.Sprintf("%.0f", v)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	return fmt.Sprintf("%.2f", v)
}
