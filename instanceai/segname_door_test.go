package instanceai_test

import (
	"context"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// The run's door names the segments of deltas that came without a
// responseId, for every producer, so that their blocks can be told apart
// and matched with the deltas a client holds: "{runId}:p:{n}", n the
// events the door took before the segment's first delta. Named deltas keep
// their id.
func TestTheDoorNamesUnnamedSegments(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		return emitAll(run,
			textDelta("", "a"),
			textDelta("", "b"),
			toolCall("c1"),
			textDelta("", "c"),
			spawned("sub1", "", "helper"),
			as("sub1", textDelta("", "d")),
			textDelta("r1", "e"),
			toolResult("c1", `1`),
		)
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	l.name("sub1", "sub1")
	l.settle(run)
	var got []string
	for _, r := range l.rows("t") {
		if r.Event.Type == instanceai.TypeTextBlock {
			got = append(got, r.Event.ResponseID+"="+r.Event.Payload.(*instanceai.Text).Text)
		}
	}
	p := run.ID + ":p:"
	// sub1's block closes with the run, after the orchestrator's last.
	want := []string{p + "0=ab", p + "3=c", "r1=e", p + "5=d"}
	if len(got) != len(want) {
		t.Fatalf("blocks %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("blocks %q, want %q", got, want)
		}
	}
}
