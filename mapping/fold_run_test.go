package mapping

import (
	"slices"
	"strings"
	"testing"

	verify "github.com/threadline/threadline/conformance/aguiverify"
	"github.com/threadline/threadline/instanceai"
)

// A stored run that went on past an answered interrupt folds as the run
// the client followed: the interrupt's RUN_FINISHED, then the run resumed
// under the given id; what was stored after the run's end emits nothing.
func TestFoldRunResumesPastInterrupts(t *testing.T) {
	sub := "agent_b1"
	m := NewInstanceToAGUI("t", "r1")
	out := FoldRun(m, "r1", []instanceai.Event{runStart(), spawned(sub, orch, "builder"), toolCall(sub, "tc5", "delete", `{}`),
		confirm(sub, "req1", "tc5"), toolResult(sub, "tc5", `"deleted"`), completed(sub, instanceai.RunCompleted, "ok", ""),
		finish(instanceai.RunCompleted, ""), toolResult(orch, "late", `1`)})
	got := summaries(out)
	interrupt := slices.IndexFunc(got, func(s string) bool { return strings.HasPrefix(s, "RUN_FINISHED outcome=interrupt") })
	if interrupt < 0 || interrupt+1 >= len(got) || got[interrupt+1] != "RUN_STARTED" {
		t.Fatalf("want the interrupt's finish, then the run resumed:\n  %s", strings.Join(got, "\n  "))
	}
	if last := got[len(got)-1]; last != "RUN_FINISHED outcome=success" {
		t.Fatalf("last %q, want the run's own finish (the late result emits nothing):\n  %s", last, strings.Join(got, "\n  "))
	}
	if !m.Finished() || m.Suspended() {
		t.Fatal("the mapper is not left at the run's end")
	}
	if err := verify.Stream(out); err != nil {
		t.Fatal(err)
	}
}

// A run stored up to its interrupt leaves the mapper suspended, for the
// caller to resume when the answer comes.
func TestFoldRunLeavesAnOpenInterrupt(t *testing.T) {
	m := NewInstanceToAGUI("t", "r1")
	out := FoldRun(m, "r1", []instanceai.Event{runStart(), toolCall(orch, "tc5", "delete", `{}`), confirm(orch, "req1", "tc5")})
	if got := summaries(out); !strings.HasPrefix(got[len(got)-1], "RUN_FINISHED outcome=interrupt") {
		t.Fatalf("got:\n  %s", strings.Join(got, "\n  "))
	}
	if !m.Suspended() {
		t.Fatal("not suspended")
	}
}
