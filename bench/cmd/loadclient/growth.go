package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/threadline/threadline/bench/internal/figures"
	"github.com/threadline/threadline/bench/internal/servers"
)

// growthParams are the rows of the cost-growth tables: one thread with each
// of subscribers, and each of threads with threadSubscribers each.
type growthParams struct {
	subscribers       intList
	messages          int
	threads           intList
	threadSubscribers int
	threadMessages    int
}

// intList is a comma-separated list of counts as a flag.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive count", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// growthRow is one row's measurement in every repeat.
type growthRow struct {
	threads, subscribers, messages int
	runs                           []figures.Growth
}

// runGrowth measures every row once per repeat, the rows taking turns
// within a repeat, and prints two tables of medians: cost against
// subscribers of one thread, and cost against threads.
func runGrowth(bin servers.Binaries, gp growthParams, repeats int) error {
	var rows []*growthRow
	most := 0
	for _, n := range gp.subscribers {
		rows = append(rows, &growthRow{threads: 1, subscribers: n, messages: gp.messages})
		most = max(most, n)
	}
	for _, n := range gp.threads {
		rows = append(rows, &growthRow{threads: n, subscribers: gp.threadSubscribers, messages: gp.threadMessages})
		most = max(most, n*gp.threadSubscribers)
	}
	raiseFileLimit(most + 1000)
	env := &figures.Env{Bin: bin}
	for r := 1; r <= repeats; r++ {
		for _, row := range rows {
			g, err := env.Growth(row.threads, row.subscribers, row.messages)
			if err != nil {
				return fmt.Errorf("%d threads × %d subscribers, repeat %d: %w", row.threads, row.subscribers, r, err)
			}
			row.runs = append(row.runs, g)
			fmt.Fprintf(os.Stderr, "growth %5d threads × %4d subscribers #%d  %12.0f deliveries/s  %8.0f runs/s  %6.0f ms  RSS %d → %d → %d MB  (%d short)\n",
				g.Threads, g.Subscribers, r, g.Deliveries, g.Runs, float64(g.Elapsed.Microseconds())/1000, g.Before>>20, g.Idle>>20, g.After>>20, g.Short)
		}
	}

	fmt.Printf("\nThreadline %s, medians of %d repeats (each repeat in brackets).\n", strings.Join(figures.GrowthArgs, " "), repeats)
	fmt.Printf("\n| subscribers of 1 thread | deliveries/s, long %d | RSS per idle subscriber, KB | RSS before / idle / after the run, MB | short |\n| --- | --- | --- | --- | --- |\n", gp.messages)
	for _, row := range rows[:len(gp.subscribers)] {
		fmt.Printf("| %s | %s | %s | %s | %d |\n", count(row.subscribers),
			withValues(row.runs, func(g figures.Growth) float64 { return g.Deliveries }),
			withValues(row.runs, func(g figures.Growth) float64 { return perKB(g.Idle-g.Before, g.Subscribers) }),
			rssMB(row.runs), shortTotal(row.runs))
	}
	fmt.Printf("\n| threads × %d subscribers | deliveries/s, long %d per thread | runs/s | RSS per thread with its idle subscribers, KB | RSS per thread after its run, KB | RSS before / idle / after the runs, MB | short |\n| --- | --- | --- | --- | --- | --- | --- |\n",
		gp.threadSubscribers, gp.threadMessages)
	for _, row := range rows[len(gp.subscribers):] {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %d |\n", count(row.threads),
			withValues(row.runs, func(g figures.Growth) float64 { return g.Deliveries }),
			format(median(values(row.runs, func(g figures.Growth) float64 { return g.Runs }))),
			withValues(row.runs, func(g figures.Growth) float64 { return perKB(g.Idle-g.Before, g.Threads) }),
			withValues(row.runs, func(g figures.Growth) float64 { return perKB(g.After-g.Before, g.Threads) }),
			rssMB(row.runs), shortTotal(row.runs))
	}
	return nil
}

// count writes n with thousands separators.
func count(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	return format(float64(n))
}

func perKB(bytes int64, n int) float64 { return float64(bytes) / float64(n) / 1024 }

func values(runs []figures.Growth, of func(figures.Growth) float64) []float64 {
	v := make([]float64, len(runs))
	for i, g := range runs {
		v[i] = of(g)
	}
	return v
}

// withValues is the median followed by every repeat's value in brackets.
func withValues(runs []figures.Growth, of func(figures.Growth) float64) string {
	v := values(runs, of)
	each := make([]string, len(v))
	for i, x := range v {
		each[i] = format(x)
	}
	return fmt.Sprintf("%s (%s)", format(median(v)), strings.Join(each, " / "))
}

func rssMB(runs []figures.Growth) string {
	mb := func(of func(figures.Growth) int64) string {
		return fmt.Sprintf("%.0f", median(values(runs, func(g figures.Growth) float64 { return float64(of(g)) / (1 << 20) })))
	}
	return mb(func(g figures.Growth) int64 { return g.Before }) + " / " +
		mb(func(g figures.Growth) int64 { return g.Idle }) + " / " +
		mb(func(g figures.Growth) int64 { return g.After })
}

func shortTotal(runs []figures.Growth) int {
	n := 0
	for _, g := range runs {
		n += g.Short
	}
	return n
}
