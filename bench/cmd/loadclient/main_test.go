package main

import (
	"testing"

	"github.com/threadline/threadline/bench/internal/figures"
)

// The ratio of a paired figure is the median of each repeat's own ratio:
// here the medians of the two columns (100 and 90) would give 0.90, while
// every repeat but the noisy one is at 0.98 or better.
func TestSummarizeTakesTheMedianOfEachRepeatsRatio(t *testing.T) {
	rs := []figures.Result{
		{Base: 100, Under: 98, Value: 0.98, CPURatio: 1.01, Outcome: "dropped by the hub"},
		{Base: 200, Under: 90, Value: 0.45, CPURatio: 1.20, Outcome: "closed by the server"},
		{Base: 50, Under: 50, Value: 1.00, CPURatio: 0.99, Outcome: "dropped by the hub"},
	}
	p := summarize(rs)
	if p.base != 100 || p.under != 90 || p.ratio != 0.98 || p.cpu != 1.01 {
		t.Fatalf("got %+v", p)
	}
	if p.ratios != "0.98 / 0.45 / 1.00" {
		t.Fatalf("ratios %q", p.ratios)
	}
	if want := "dropped by the hub (2/3); closed by the server (1/3)"; p.outcomes != want {
		t.Fatalf("outcomes %q, want %q", p.outcomes, want)
	}
	if got := p.verdict(0.95); got != "≥ 0.95: met" {
		t.Fatalf("verdict %q", got)
	}
	if got := summarize(rs[1:2]).verdict(0.95); got != "≥ 0.95: missed" {
		t.Fatalf("verdict %q", got)
	}
}
