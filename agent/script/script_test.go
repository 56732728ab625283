package script_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// play runs one message through the agent and returns everything published
// on the thread, as a live subscriber sees it, up to the run-finish.
func play(t *testing.T, message string) []instanceai.Event {
	t.Helper()
	store := memory.New(memory.WithMaxEvents(1 << 20))
	ctx := context.Background()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(1 << 20)
	writer := instanceai.NewWriter(store, hub, instanceai.WriterConfig{})
	defer writer.Close(ctx)
	runs := instanceai.NewRuns(writer, &script.Agent{}, instanceai.RunsConfig{})
	sub, _ := hub.Subscribe("t")
	defer sub.Close()
	run, err := runs.Start(instanceai.StartRequest{ThreadID: "t", UserID: "u", Message: message})
	if err != nil {
		t.Fatal(err)
	}
	var out []instanceai.Event
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		frames, err := sub.Next(tctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		for _, f := range frames {
			if f.Hidden {
				continue
			}
			out = append(out, *f.Event)
			if f.Event.Type == instanceai.TypeRunFinish && f.Event.RunID == run.ID {
				return out
			}
		}
	}
}

func types(events []instanceai.Event) string {
	var b []string
	for i, e := range events {
		if i > 0 && e.Type == events[i-1].Type && (e.Type == instanceai.TypeTextDelta || e.Type == instanceai.TypeReasoningDelta) {
			continue // a run of deltas counts once
		}
		b = append(b, string(e.Type))
	}
	return strings.Join(b, " ")
}

func text(events []instanceai.Event, typ instanceai.EventType) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == typ {
			b.WriteString(e.Payload.(*instanceai.Text).Text)
		}
	}
	return b.String()
}

func TestScenarios(t *testing.T) {
	cases := []struct {
		message string
		shape   string
		check   func(t *testing.T, events []instanceai.Event)
	}{
		{"simple", "run-start reasoning-delta tool-call tool-result text-delta run-finish", nil},
		{"Hello there", "run-start reasoning-delta tool-call tool-result text-delta run-finish", func(t *testing.T, ev []instanceai.Event) {
			if got := text(ev, instanceai.TypeTextDelta); !strings.HasSuffix(got, "You said: Hello there") {
				t.Errorf("text does not echo the message: %q", got)
			}
		}},
		{"tools", "run-start text-delta tool-call tool-result tool-input-start tool-call tool-result tool-call tool-error text-delta run-finish", nil},
		{"tasks", "run-start tasks-update tasks-update status tasks-update tasks-update status tasks-update tasks-update status tasks-update status text-delta run-finish",
			func(t *testing.T, ev []instanceai.Event) {
				var last *instanceai.TasksUpdate
				for _, e := range ev {
					if p, ok := e.Payload.(*instanceai.TasksUpdate); ok {
						last = p
					}
				}
				for _, task := range last.Tasks.Tasks {
					if task.Status != instanceai.TaskDone {
						t.Errorf("task %s ends %s", task.ID, task.Status)
					}
				}
			}},
		{"error", "run-start reasoning-delta error run-finish", func(t *testing.T, ev []instanceai.Event) {
			e := ev[len(ev)-2].Payload.(*instanceai.ErrorPayload)
			if e.StatusCode != 503 || e.Provider == "" || e.Code == "" {
				t.Errorf("error payload = %+v", e)
			}
			if f := ev[len(ev)-1].Payload.(*instanceai.RunFinish); f.Status != instanceai.RunError {
				t.Errorf("run-finish = %+v", f)
			}
		}},
		{"long 250", "run-start text-delta run-finish", func(t *testing.T, ev []instanceai.Event) {
			if n := len(ev) - 2; n != 250 {
				t.Errorf("%d deltas, want 250", n)
			}
			want := ""
			for i := range 250 {
				want += fmt.Sprintf("chunk %d. ", i)
			}
			if text(ev, instanceai.TypeTextDelta) != want {
				t.Error("long text differs")
			}
		}},
		{"long abc", "run-start error run-finish", nil},
		{"frontend-tool", "run-start text-delta run-finish", func(t *testing.T, ev []instanceai.Event) {
			if got := text(ev, instanceai.TypeTextDelta); !strings.HasPrefix(got, "No frontend tool was offered") {
				t.Errorf("text without tools: %q", got)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.message, func(t *testing.T) {
			events := play(t, c.message)
			if got := types(events); got != c.shape {
				t.Fatalf("shape:\n got %s\nwant %s", got, c.shape)
			}
			for _, e := range events {
				if (e.Type == instanceai.TypeTextDelta || e.Type == instanceai.TypeReasoningDelta) && e.ResponseID == "" {
					t.Fatalf("delta without responseId: %+v", e)
				}
			}
			if c.check != nil {
				c.check(t, events)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	strip := func(events []instanceai.Event) string {
		var b strings.Builder
		for _, e := range events {
			fmt.Fprintf(&b, "%s|", e.Type)
			if p, ok := e.Payload.(*instanceai.Text); ok {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	for _, m := range []string{"simple", "tools", "tasks"} {
		if a, b := strip(play(t, m)), strip(play(t, m)); a != b {
			t.Fatalf("%s differs between runs", m)
		}
	}
}
