package mapping

import (
	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// FoldRun pushes one run's stored events through m, in log order, and
// returns what m emitted. An interrupt that later events go on past is
// resumed as the AG-UI run runID, as the run itself went on once the
// interrupt was answered; events stored after the run's end (a client's
// result for a call to one of its tools, which the next request carries)
// emit nothing. m is left as the last event left it, for the caller to go
// on from: Resume it, Close it, or push it the events that follow.
func FoldRun(m *InstanceToAGUI, runID string, events []instanceai.Event) []agui.Event {
	var out []agui.Event
	for _, ev := range events {
		if m.Suspended() {
			out = append(out, m.Resume(runID)...)
		}
		if m.Finished() {
			break
		}
		out = append(out, m.Push(ev)...)
	}
	return out
}
