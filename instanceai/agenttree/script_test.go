package agenttree_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/storage/memory"
)

var updateScript = flag.Bool("update", false, "rewrite testdata/fixtures/script-*.json from the reference agent")

// scriptScenarios are the reference agent's scenarios recorded as fixtures:
// the message that picks the scenario and the fixture's base name.
var scriptScenarios = []struct{ name, message string }{
	{"simple", "Hello there"},
	{"tools", "tools"},
	{"tasks", "tasks"},
	{"error", "error"},
	{"long", "long 25"},
}

// scriptStreams plays one message through the reference agent on a real
// writer, hub and in-memory log, with a clock that ticks 7 ms per reading,
// and returns what a live subscriber receives (deltas and structural
// events) and what the log holds afterwards (blocks and structural events),
// with the random run and message ids replaced by fixed ones.
func scriptStreams(t *testing.T, message string) (live, log []byte) {
	t.Helper()
	ctx := context.Background()
	store := memory.New(memory.WithMaxEvents(1 << 20))
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "thread_1", OwnerID: "user_1"}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(1 << 20)
	writer := instanceai.NewWriter(store, hub, instanceai.WriterConfig{})
	defer writer.Close(ctx)
	var tick atomic.Int64
	clock := func() time.Time {
		return time.UnixMilli(1767225600000 + 7*tick.Add(1)).UTC()
	}
	runs := instanceai.NewRuns(writer, &script.Agent{}, instanceai.RunsConfig{Now: clock, Logger: slog.New(slog.DiscardHandler)})
	sub, _ := hub.Subscribe("thread_1")
	defer sub.Close()
	run, err := runs.Start(instanceai.StartRequest{ThreadID: "thread_1", UserID: "user_1", Message: message})
	if err != nil {
		t.Fatal(err)
	}
	var liveEvents []instanceai.Event
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for done := false; !done; {
		frames, err := sub.Next(tctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(liveEvents), err)
		}
		for _, f := range frames {
			if f.Hidden {
				continue // a block: the log has it, live clients never see it
			}
			liveEvents = append(liveEvents, *f.Event)
			done = done || f.Event.Type == instanceai.TypeRunFinish
		}
	}
	<-run.Done()
	stored, err := store.ReadAfter(ctx, "thread_1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	logEvents := make([]instanceai.Event, len(stored))
	for i, se := range stored {
		logEvents[i] = se.Event
	}
	return normalizeStream(t, liveEvents, run.ID), normalizeStream(t, logEvents, run.ID)
}

var messageIDPattern = regexp.MustCompile(`"msg_[0-9a-f]+"`)

// normalizeStream writes a stream in the fixtures' layout, one event a line,
// with fixed ids.
func normalizeStream(t *testing.T, events []instanceai.Event, runID string) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString("[\n")
	for i, ev := range events {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(line), runID, "run_script")
		s = messageIDPattern.ReplaceAllString(s, `"msg_script"`)
		buf.WriteString("  " + s)
		if i < len(events)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	return buf.Bytes()
}

func decodeStream(t *testing.T, data []byte) []instanceai.Event {
	t.Helper()
	var events []instanceai.Event
	if err := json.Unmarshal(data, &events); err != nil {
		t.Fatal(err)
	}
	return events
}

// TestScriptFixtures records the reference agent's streams and checks that
// the script-*.json fixtures are current, so the equivalence test (which
// reads only the fixtures) covers what the agent really emits; -update
// rewrites them. It also checks what the folded trees say, and that the live
// stream and the log fold to the same tree.
func TestScriptFixtures(t *testing.T) {
	for _, sc := range scriptScenarios {
		t.Run(sc.name, func(t *testing.T) {
			live, log := scriptStreams(t, sc.message)
			for file, got := range map[string][]byte{
				"script-" + sc.name + ".json":     live,
				"script-" + sc.name + "-log.json": log,
			} {
				path := filepath.Join("testdata", "fixtures", file)
				if *updateScript {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (record it with -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s is not what the reference agent emits now; rerun with -update and check the diff", file)
				}
			}

			liveTree := agenttree.Fold(decodeStream(t, live))
			logTree := agenttree.Fold(decodeStream(t, log))
			a, err := json.Marshal(liveTree)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(logTree)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("live and log fold differently:\nlive %s\nlog  %s", a, b)
			}
			checkScriptTree(t, sc.name, liveTree)
		})
	}
}

func checkScriptTree(t *testing.T, scenario string, tree *agenttree.AgentNode) {
	t.Helper()
	if tree.AgentID != "orchestrator-run_script" {
		t.Errorf("root = %s", tree.AgentID)
	}
	wantStatus := agenttree.StatusCompleted
	if scenario == "error" {
		wantStatus = agenttree.StatusError
	}
	if tree.Status != wantStatus {
		t.Errorf("status = %s, want %s", tree.Status, wantStatus)
	}
	var summary []string
	for _, tc := range tree.ToolCalls {
		outcome := "result"
		switch {
		case tc.IsLoading:
			outcome = "loading"
		case tc.Error != nil:
			outcome = "error"
		}
		summary = append(summary, tc.ToolName+":"+outcome)
	}
	var entries []string
	for _, e := range tree.Timeline {
		entries = append(entries, e.Type)
	}
	got := fmt.Sprintf("text=%q reasoning=%q tools=%v timeline=%v", tree.TextContent, tree.Reasoning, summary, entries)
	long := ""
	for i := range 25 {
		long += fmt.Sprintf("chunk %d. ", i)
	}
	want := map[string]string{
		"simple": fmt.Sprintf("text=%q reasoning=%q tools=[workflows:result] timeline=[reasoning tool-call text]",
			"You have 2 workflows. You said: Hello there", "Let me look up the workflows first."),
		"tools": fmt.Sprintf("text=%q reasoning=\"\" tools=[workflows:result build-workflow:result executions:error] timeline=[text tool-call tool-call tool-call text]",
			"Checking a few things.The workflow is built, but the test run needs a Slack credential."),
		"tasks": `text="All three tasks are done." reasoning="" tools=[] timeline=[text]`,
		"error": fmt.Sprintf("text=%q reasoning=%q tools=[] timeline=[reasoning text]",
			"\n\n*Error: The model provider is unavailable (HTTP 503). Try again in a minute, or check the provider's status page.*",
			"Calling the model provider."),
		"long": fmt.Sprintf("text=%q reasoning=\"\" tools=[] timeline=[text]", long),
	}[scenario]
	if got != want {
		t.Errorf("tree summary:\n got %s\nwant %s", got, want)
	}
	if scenario == "tasks" {
		if tree.Tasks == nil || len(tree.Tasks.Tasks) != 3 || tree.StatusMessage != "" {
			t.Fatalf("tasks = %+v, status message %q", tree.Tasks, tree.StatusMessage)
		}
		for _, task := range tree.Tasks.Tasks {
			if task.Status != instanceai.TaskDone {
				t.Errorf("task %s is %s", task.ID, task.Status)
			}
		}
	}
}
