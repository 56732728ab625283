package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/threadline/threadline/bench/internal/figures"
	"github.com/threadline/threadline/bench/internal/servers"
)

// nonReadingGoal is the RSS growth per non-reading stream the server aims
// to stay under, in KB.
const nonReadingGoal = 256

// runNonReading measures, for each count of non-reading streams, what
// they cost the server and whether they slow healthy readers down, once
// per repeat, and prints the medians.
func runNonReading(bin servers.Binaries, p figures.NonReadingParams, counts intList, repeats int) error {
	raiseFileLimit(slices.Max(counts) + p.Healthy + 1000)
	work, err := os.MkdirTemp("", "bench-nonreading-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	env := &figures.Env{Bin: bin, WorkDir: work}
	rows := make([][]figures.NonReading, len(counts))
	for r := 1; r <= repeats; r++ {
		for i, n := range counts {
			p.Conns = n
			m, err := env.MeasureNonReading(p)
			if err != nil {
				return fmt.Errorf("%d non-reading streams, repeat %d: %w", n, r, err)
			}
			rows[i] = append(rows[i], m)
			fmt.Fprintf(os.Stderr, "nonreading %4d streams #%d  log %d MB  RSS %d → %d (peak) → %d MB  %.0f KB each at the peak  live %d → %d MB  %.1f KB held each  healthy replay %.0f → %.0f ms  closed %d/%d\n",
				n, r, m.LogBytes>>20, m.Before>>20, m.Peak>>20, m.Held>>20, m.PerConn(), m.LiveBefore>>20, m.LiveHeld>>20, m.HeldPerConn(),
				msOf(m.Alone), msOf(m.Beside), m.Closed, n)
		}
	}
	fmt.Printf("\nNon-reading streams on one thread of %d × `simple` with a %d KB message, %d healthy readers replaying it whole; medians of %d repeats (each in brackets).\n\n",
		p.Chats, p.MessageBytes>>10, p.Healthy, repeats)
	fmt.Println("| non-reading streams | thread (replay bytes) | held per stream (goal ≤ 256 KB) | RSS before → peak | RSS growth per stream at the peak | healthy replay alone → beside | closed at the write deadline |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i, runs := range rows {
		med := medianBy(runs, figures.NonReading.HeldPerConn)
		peak := medianBy(runs, figures.NonReading.PerConn)
		fmt.Printf("| %d | %.1f MB | **%.1f KB** %s [%s] | %d → %d MB | %.0f KB [%s] | %.0f → %.0f ms (%.2f×) | %d/%d |\n",
			counts[i], float64(med.LogBytes)/(1<<20), med.HeldPerConn(), verdict(med.HeldPerConn()),
			joinf(runs, figures.NonReading.HeldPerConn), peak.Before>>20, peak.Peak>>20, peak.PerConn(),
			joinf(runs, figures.NonReading.PerConn), msOf(med.Alone), msOf(med.Beside),
			med.Beside.Seconds()/med.Alone.Seconds(), med.Closed, med.Conns)
	}
	return nil
}

func verdict(perConn float64) string {
	if perConn <= nonReadingGoal {
		return "✓"
	}
	return "✗"
}

// medianBy is the run whose key is the median.
func medianBy(runs []figures.NonReading, key func(figures.NonReading) float64) figures.NonReading {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b figures.NonReading) int {
		ka, kb := key(a), key(b)
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	return sorted[len(sorted)/2]
}

func joinf(runs []figures.NonReading, key func(figures.NonReading) float64) string {
	s := ""
	for i, m := range runs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.1f", key(m))
	}
	return s
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
