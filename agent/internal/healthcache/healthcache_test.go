package healthcache

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Callers that come while a probe runs share its answer; the next probe
// runs only once that answer is older than the TTL.
func TestOneProbeForAllCallers(t *testing.T) {
	var c Cache[int]
	var probes atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	probe := func() int {
		if probes.Add(1) == 1 {
			close(started)
			<-release
		}
		return int(probes.Load())
	}
	first := make(chan int)
	go func() { first <- c.Get(time.Hour, probe) }()
	<-started
	// The probe under way is the first caller's: these wait for it,
	// whether they arrive before it ends or after.
	var wg sync.WaitGroup
	answers := make([]int, 40)
	for i := range answers {
		wg.Go(func() { answers[i] = c.Get(time.Hour, probe) })
	}
	close(release)
	wg.Wait()
	if got := <-first; got != 1 {
		t.Fatalf("the first caller got %d", got)
	}
	for i, a := range answers {
		if a != 1 {
			t.Fatalf("caller %d got the answer of probe %d, want 1", i, a)
		}
	}
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes for 41 callers, want 1", n)
	}
	// A TTL the answer is past: the next caller probes.
	if got := c.Get(0, probe); got != 2 || probes.Load() != 2 {
		t.Fatalf("past the TTL: answer %d after %d probes, want a second probe", got, probes.Load())
	}
}

// A probe that panics keeps no answer: the next caller probes again.
func TestAPanickingProbeKeepsNoAnswer(t *testing.T) {
	var c Cache[string]
	func() {
		defer func() { _ = recover() }()
		c.Get(time.Hour, func() string { panic("probe failed") })
	}()
	if got := c.Get(time.Hour, func() string { return "ok" }); got != "ok" {
		t.Fatalf("after a panic: %q", got)
	}
}
