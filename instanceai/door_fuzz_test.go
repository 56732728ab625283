package instanceai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// FuzzEscapedLength holds the door's measure of a segment's text to what
// the log stores: encoding/json's string, less its quotes, and a cut that
// fits its room and ends on a character.
func FuzzEscapedLength(f *testing.F) {
	for _, s := range []string{"", "plain", `"quoted" \ back`, "<a&b>", "\x00\x1f\t\n", "é漢😀", "\u2028\u2029", "\xff\xfe bad", "a\xc3"} {
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, room int) {
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := instanceai.EscapedLen(s); got != len(enc)-2 {
			t.Fatalf("EscapedLen(%q) = %d, json takes %d", s, got, len(enc)-2)
		}
		room = max(0, room%(len(enc)+4))
		cut := instanceai.CutEscaped(s, room)
		if !strings.HasPrefix(s, cut) || instanceai.EscapedLen(cut) > room {
			t.Fatalf("CutEscaped(%q, %d) = %q", s, room, cut)
		}
		if rest := s[len(cut):]; rest != "" && instanceai.EscapedLen(cut+firstChar(rest)) <= room {
			t.Fatalf("CutEscaped(%q, %d) = %q stops short", s, room, cut)
		}
	})
}

func firstChar(s string) string {
	for i := range s {
		if i > 0 {
			return s[:i]
		}
	}
	return s
}

// FuzzDoorKeepsTheLogsRules drives a run's door with arbitrary events of
// a few agents and calls, and holds the stored log to the rules the door
// promises, whatever the producer tried: every event's agent is the
// orchestrator or spawned before it, under a parent that worked then; no
// agent speaks after its agent-completed, which it has exactly once; every
// outcome answers an open call; nothing is left open at the end; and no
// block is the producer's.
func FuzzDoorKeepsTheLogsRules(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 0x11, 0x21, 4, 0x14, 5, 3, 0x23, 9, 0x19})
	f.Add([]byte{7, 7, 8, 8, 9, 2, 0x12, 0x22, 6})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
			agents := []string{"", "a1", "a2", "a3"}
			for _, op := range ops {
				who := agents[int(op>>4)%len(agents)]
				other := agents[int(op>>6)%len(agents)]
				call := fmt.Sprintf("c%d", op>>5)
				var ev instanceai.Event
				switch op % 10 {
				case 0:
					ev = spawned(who, other, "r")
					if who == "" {
						ev = spawned("a1", "", "r")
					}
				case 1:
					ev = completed(who, "r")
				case 2:
					ev = as(who, textDelta("r-"+who, "t"))
				case 3:
					ev = as(who, toolCall(call))
				case 4:
					ev = as(who, toolResult(call, `1`))
				case 5:
					ev = as(who, instanceai.Event{Type: instanceai.TypeToolError, Payload: &instanceai.ToolError{ToolCallID: call, Error: "e"}})
				case 6:
					ev = as(who, instanceai.Event{Type: instanceai.TypeTextBlock, ResponseID: "x", Payload: &instanceai.Text{Text: "b"}})
				case 7:
					ev = as("orchestrator-run_other", toolCall(call))
				case 8:
					ev = as(who, mark(call))
				case 9:
					ev = as(who, instanceai.Event{Type: instanceai.TypeToolInputStart, Payload: &instanceai.ToolInputStart{ToolCallID: call, ToolName: "x"}})
				}
				_ = run.Emit(ev) // refusals are the point
			}
			return nil
		})
		l := newLifecycle(t, agent, "t")
		run := l.start("t", "go")
		l.settle(run)
		checkRunRules(t, l.rows("t"), run)
	})
}

func checkRunRules(t *testing.T, rows []instanceai.StoredEvent, run *instanceai.Run) {
	t.Helper()
	working := map[string]bool{run.AgentID: true}
	done := map[string]bool{}
	open := map[string]bool{}
	for _, r := range rows {
		ev := r.Event
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seq %d %s @%s: %s\nlog: %v", r.Seq, ev.Type, ev.AgentID, fmt.Sprintf(format, args...), types(rows))
		}
		switch p := ev.Payload.(type) {
		case *instanceai.AgentSpawned:
			if ev.AgentID == run.AgentID || !working[p.ParentID] || done[ev.AgentID] {
				fail("spawned under %q", p.ParentID)
			}
			working[ev.AgentID] = true
			continue
		case *instanceai.AgentCompleted:
			if ev.AgentID == run.AgentID || !working[ev.AgentID] {
				fail("completes an agent that does not work")
			}
			working[ev.AgentID], done[ev.AgentID] = false, true
			continue
		case *instanceai.ToolCall:
			open[p.ToolCallID] = true
		case *instanceai.ToolInputStart:
			open[p.ToolCallID] = true
		case *instanceai.ToolResult:
			if !open[p.ToolCallID] {
				fail("answers no open call")
			}
			delete(open, p.ToolCallID)
		case *instanceai.ToolError:
			if !open[p.ToolCallID] {
				fail("answers no open call")
			}
			delete(open, p.ToolCallID)
		case *instanceai.Text:
			if ev.Type == instanceai.TypeTextBlock && ev.ResponseID == "x" {
				fail("a producer's block was stored")
			}
		}
		if ev.Type != instanceai.TypeRunStart && ev.Type != instanceai.TypeRunFinish && !working[ev.AgentID] {
			fail("the agent does not work")
		}
	}
	for a, w := range working {
		if w && a != run.AgentID {
			t.Fatalf("agent %s still works at the end: %v", a, types(rows))
		}
	}
	if len(open) > 0 {
		t.Fatalf("calls left open: %v\nlog: %v", open, types(rows))
	}
}

// The same rules hold when the run is cancelled in the middle of it.
func TestTheDoorsRulesHoldThroughACancel(t *testing.T) {
	emitted := make(chan struct{})
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		_ = emitAll(run, spawned("a1", "", "r"), spawned("a2", "a1", "r"), as("a2", toolCall("c1")), as("a1", toolCall("c2")))
		close(emitted)
		<-ctx.Done()
		return ctx.Err()
	})
	l := newLifecycleOn(t, memory.New(), agent, instanceai.CoreConfig{}, "t")
	run := l.start("t", "go")
	<-emitted
	if _, _, err := l.core.Runs().Cancel("t", "user_cancelled"); err != nil {
		t.Fatal(err)
	}
	l.settle(run)
	checkRunRules(t, l.rows("t"), run)
}
