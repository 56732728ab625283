package mapping

import (
	"slices"
	"testing"

	"github.com/threadline/threadline/agui"
	verify "github.com/threadline/threadline/conformance/aguiverify"
	"github.com/threadline/threadline/instanceai"
)

func pendingOf(t *testing.T, out []agui.Event) []string {
	t.Helper()
	rf, ok := out[len(out)-1].(*agui.RunFinished)
	if !ok || rf.Outcome == nil || rf.Outcome.Type != agui.OutcomeSuccess {
		t.Fatalf("last event %s", summary(out[len(out)-1]))
	}
	return rf.Outcome.PendingToolCallIDs
}

func TestClientToolCallsStayPending(t *testing.T) {
	events := []instanceai.Event{runStart(),
		toolCall(orch, "tc1", "workflows", `{}`), toolResult(orch, "tc1", `1`),
		toolCall(orch, "tc2", "pickColor", `{}`),
		toolInputStart(orch, "tc3", "confirmInBrowser"), toolCall(orch, "tc3", "confirmInBrowser", `{"q":1}`),
		toolCall(orch, "tc4", "pickColor", `{}`), toolResult(orch, "tc4", `"red"`),
		finish(instanceai.RunCompleted, "")}

	m := NewInstanceToAGUI("t", "r").ClientTools("pickColor", "confirmInBrowser")
	out := feed(m, events...)
	if err := verify.Stream(out); err != nil {
		t.Fatal(err)
	}
	if got := pendingOf(t, out); !slices.Equal(got, []string{"tc2", "tc3"}) {
		t.Fatalf("pendingToolCallIds %v, want [tc2 tc3]", got)
	}
	for _, e := range out {
		if r, ok := e.(*agui.ToolCallResult); ok && (r.ToolCallID == "tc2" || r.ToolCallID == "tc3") {
			t.Fatalf("result for a pending client call: %s", summary(e))
		}
	}

	// Without ClientTools nothing is reported pending.
	plain := feed(NewInstanceToAGUI("t", "r"), events...)
	if got := pendingOf(t, plain); got != nil {
		t.Fatalf("pendingToolCallIds %v without client tools", got)
	}
}
