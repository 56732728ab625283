package mapping

import (
	"testing"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// TestUsageReachesTheTerminalEvent checks that the tokens a run-finish
// carries are reported on AG-UI's RUN_FINISHED, and on RUN_ERROR when the
// run failed after spending them.
func TestUsageReachesTheTerminalEvent(t *testing.T) {
	usage := []instanceai.TokenUsage{
		{Provider: "openai", Model: "gpt-4o-mini", InputTokens: 120, OutputTokens: 30, TotalTokens: 150},
		{Provider: "ollama", Model: "qwen3", InputTokens: 7, OutputTokens: 2, TotalTokens: 9},
	}
	want := []agui.Usage{
		{Provider: "openai", Model: "gpt-4o-mini", InputTokens: 120, OutputTokens: 30, TotalTokens: 150},
		{Provider: "ollama", Model: "qwen3", InputTokens: 7, OutputTokens: 2, TotalTokens: 9},
	}
	for _, status := range []string{instanceai.RunCompleted, instanceai.RunCancelled, instanceai.RunError} {
		fin := finish(status, "")
		fin.Payload.(*instanceai.RunFinish).Usage = usage
		m := NewInstanceToAGUI("th", "run1")
		var out []agui.Event
		for _, ev := range []instanceai.Event{runStart(), fin} {
			out = append(out, m.Push(ev)...)
		}
		var got []agui.Usage
		switch e := out[len(out)-1].(type) {
		case *agui.RunFinished:
			got = e.Usage
		case *agui.RunError:
			got = e.Usage
		default:
			t.Fatalf("%s: ends with %T", status, e)
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("%s: usage %+v, want %+v", status, got, want)
		}
	}

	m := NewInstanceToAGUI("th", "run1")
	out := append(m.Push(runStart()), m.Push(finish(instanceai.RunCompleted, ""))...)
	if u := out[len(out)-1].(*agui.RunFinished).Usage; u != nil {
		t.Fatalf("a run without usage reports %+v", u)
	}
}
