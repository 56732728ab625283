package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/threadline/threadline/chaos/check"
)

// Report is the outcome of a run: one row per scenario and bus.
type Report struct {
	Config ConfigSummary `json:"config"`
	Rows   []Row         `json:"rows"`
	Took   time.Duration `json:"took"`
}

// ConfigSummary is what a report says of its configuration.
type ConfigSummary struct {
	Instances   int    `json:"instances"`
	Threads     int    `json:"threads"`
	Producers   int    `json:"producers"`
	MaxRSS      int64  `json:"maxRss,omitempty"`
	Duration    string `json:"duration"`
	Lease       string `json:"lease"`
	LeaseRenew  string `json:"leaseRenew"`
	ScriptDelay string `json:"scriptDelay"`
	Seed        uint64 `json:"seed"`
}

func summary(c *Config) ConfigSummary {
	return ConfigSummary{Instances: c.Instances, Threads: c.Threads, Producers: c.Producers, MaxRSS: c.MaxRSS, Duration: c.Duration.String(), Lease: c.Lease.String(),
		LeaseRenew: c.LeaseRenew.String(), ScriptDelay: c.ScriptDelay.String(), Seed: c.Seed}
}

// Row is one scenario on one bus.
type Row struct {
	Scenario string `json:"scenario"`
	Bus      string `json:"bus"`
	// Runs is how many runs the log holds, Faults how many faults were
	// injected.
	Runs   int                `json:"runs"`
	Faults int                `json:"faults"`
	Counts map[check.Kind]int `json:"counts"`
	// Anomalies holds every anomaly with its evidence.
	Anomalies []check.Anomaly `json:"anomalies"`
	// Documented holds the losses the guides document (see
	// check.Result.Documented), which are no anomaly.
	Documented []check.Anomaly `json:"documented,omitempty"`
	// Settled is how many runs and background agents a fault hit;
	// SettleP50 and SettleMax the time from the fault's start to their
	// ending.
	Settled   int           `json:"settled"`
	SettleP50 time.Duration `json:"settleP50"`
	SettleMax time.Duration `json:"settleMax"`
	Stats     LoadStats     `json:"stats"`
	Took      time.Duration `json:"took"`
	// LogDir keeps the instances' logs of a scenario with anomalies.
	LogDir string `json:"logDir,omitempty"`
	// Memory holds the instances' peaks while they took oversized
	// producers; Upstream says what the upstream wrote of each oversized
	// message before the instance closed its stream.
	Memory   []check.Memory `json:"memory,omitempty"`
	Upstream []string       `json:"upstream,omitempty"`
}

func (r *Row) fill(res check.Result) {
	r.Runs, r.Faults, r.Anomalies, r.Counts = res.Runs, res.Faults, res.Anomalies, res.Counts()
	r.Documented = res.Documented
	r.Settled = len(res.Settle)
	if n := len(res.Settle); n > 0 {
		r.SettleP50, r.SettleMax = res.Settle[(n-1)/2], res.Settle[n-1]
	}
}

// Anomalies counts the anomalies of every row.
func (rep *Report) Anomalies() int {
	n := 0
	for _, r := range rep.Rows {
		n += len(r.Anomalies)
	}
	return n
}

// writeMemory writes the instances' peak memory over each oversized
// producer, and what the upstream wrote.
func (r *Row) writeMemory(w io.Writer, bound int64) {
	if len(r.Memory) == 0 && len(r.Upstream) == 0 {
		return
	}
	limit := "not judged"
	if bound > 0 {
		limit = "bound " + check.MB(bound)
	}
	fmt.Fprintf(w, "\n%s on %s: peak resident memory (VmHWM) of each instance (%s)\n", r.Scenario, r.Bus, limit)
	phase := ""
	for _, m := range r.Memory {
		if m.Phase != phase {
			phase = m.Phase
			fmt.Fprintf(w, "  while %s:\n", phase)
		}
		owner := ""
		if m.Owner {
			owner = " (the run's instance)"
		}
		fmt.Fprintf(w, "    %s %s%s\n", m.Instance, check.MB(m.Peak), owner)
	}
	for _, u := range r.Upstream {
		fmt.Fprintf(w, "  %s\n", u)
	}
}

func kindsWords(counts map[check.Kind]int) string {
	var parts []string
	for _, k := range check.Kinds {
		if n := counts[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// WriteText writes the report as a table, the totals, and then up to
// perKind anomalies of each kind per row with their evidence (0 = all).
func (rep *Report) WriteText(w io.Writer, perKind int) {
	c := rep.Config
	fmt.Fprintf(w, "%d instances, %d threads and %d producers, %s of load per scenario, lease %s (renew %s), script delay %s, seed %d; took %s\n\n",
		c.Instances, c.Threads, c.Producers, c.Duration, c.Lease, c.LeaseRenew, c.ScriptDelay, c.Seed, rep.Took.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tbus\truns\tfaults\tanomalies\tsettle p50/max\tby kind")
	total := Row{Counts: map[check.Kind]int{}}
	var settles []time.Duration
	for _, r := range rep.Rows {
		settle := "-"
		if r.Settled > 0 {
			settle = seconds(r.SettleP50) + " / " + seconds(r.SettleMax)
			settles = append(settles, r.SettleP50)
			total.SettleMax = max(total.SettleMax, r.SettleMax)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Scenario, r.Bus, r.Runs, r.Faults, len(r.Anomalies), settle, kindsWords(r.Counts))
		total.Runs += r.Runs
		total.Faults += r.Faults
		total.Anomalies = append(total.Anomalies, r.Anomalies...)
		for k, n := range r.Counts {
			total.Counts[k] += n
		}
	}
	settle := "-"
	if len(settles) > 0 {
		slices.Sort(settles)
		settle = "max " + seconds(total.SettleMax)
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%s\t%s\n", total.Runs, total.Faults, len(total.Anomalies), settle, kindsWords(total.Counts))
	tw.Flush()
	var published, appends, acked, retries int
	for _, r := range rep.Rows {
		published += r.Stats.Published
		appends += r.Stats.Appends
		acked += r.Stats.Acked
		retries += r.Stats.Retries
	}
	if published > 0 {
		fmt.Fprintf(w, "\nproducers: %d runs published, %d appends answered 200 (%d events acknowledged, each looked for in the log), %d requests sent again for want of an answer\n",
			published, appends, acked, retries)
	}
	for _, r := range rep.Rows {
		r.writeMemory(w, c.MaxRSS)
	}
	for _, r := range rep.Rows {
		if len(r.Documented) > 0 {
			fmt.Fprintf(w, "\n%s on %s: %d documented losses, not anomalies (text a killed or paused instance's own clients were shown as it stopped, which its bus had not carried):\n", r.Scenario, r.Bus, len(r.Documented))
			for _, a := range r.Documented {
				fmt.Fprintf(w, "  %s\n", a)
			}
		}
		if len(r.Anomalies) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s on %s", r.Scenario, r.Bus)
		if r.LogDir != "" {
			fmt.Fprintf(w, " (logs in %s)", r.LogDir)
		}
		fmt.Fprintln(w, ":")
		shown := map[check.Kind]int{}
		for _, a := range r.Anomalies {
			shown[a.Kind]++
			switch n := shown[a.Kind]; {
			case perKind > 0 && n == perKind+1:
				fmt.Fprintf(w, "  … %d more %s\n", r.Counts[a.Kind]-perKind, a.Kind)
				continue
			case perKind > 0 && n > perKind:
				continue
			}
			fmt.Fprintf(w, "  %s\n", a)
		}
	}
}
