package mapping

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/instanceai"
)

// stateUpdate is one tasks-update: its tasks and plan items.
type stateUpdate struct {
	tasks []instanceai.Task
	plan  []instanceai.PlannedTask
}

// wantState is the shared state a tasks-update should leave the client with.
func wantState(t *testing.T, u stateUpdate) []byte {
	t.Helper()
	doc := map[string]any{"tasks": u.tasks}
	if u.tasks == nil {
		doc["tasks"] = []any{}
	}
	if len(u.plan) > 0 {
		doc["planItems"] = u.plan
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// checkStatePatches maps the updates and applies every STATE_DELTA to the
// state the STATE_SNAPSHOT began with, using an independent RFC 6902
// implementation; after each update the state must equal that update's.
func checkStatePatches(t *testing.T, updates []stateUpdate) {
	t.Helper()
	m := NewInstanceToAGUI("t", "r")
	var state []byte
	for i, u := range updates {
		p := &instanceai.TasksUpdate{Tasks: instanceai.TaskList{Tasks: u.tasks}, PlanItems: u.plan}
		out := m.Push(ev(instanceai.TypeTasksUpdate, orch, "", p))
		for _, e := range out {
			switch e := e.(type) {
			case *agui.StateSnapshot:
				if state != nil {
					t.Fatalf("update %d: a second STATE_SNAPSHOT", i)
				}
				state = e.Snapshot
			case *agui.StateDelta:
				if state == nil {
					t.Fatalf("update %d: STATE_DELTA before any STATE_SNAPSHOT", i)
				}
				if len(e.Delta) == 0 {
					t.Fatalf("update %d: empty STATE_DELTA", i)
				}
				raw, err := json.Marshal(e.Delta)
				if err != nil {
					t.Fatal(err)
				}
				patch, err := jsonpatch.DecodePatch(raw)
				if err != nil {
					t.Fatalf("update %d: %v: %s", i, err, raw)
				}
				if state, err = patch.Apply(state); err != nil {
					t.Fatalf("update %d: applying %s: %v", i, raw, err)
				}
			}
		}
		if want := wantState(t, u); !jsonpatch.Equal(state, want) {
			t.Fatalf("update %d: state\n  %s\nwant\n  %s", i, state, want)
		}
	}
}

func TestStateDeltasApplyToTheSnapshot(t *testing.T) {
	task := func(id, status string) instanceai.Task {
		return instanceai.Task{ID: id, Description: "task " + id, Status: status}
	}
	plan := func(ids ...string) []instanceai.PlannedTask {
		var out []instanceai.PlannedTask
		for _, id := range ids {
			out = append(out, instanceai.PlannedTask{ID: id, Title: "plan " + id, Kind: "build", Spec: "s"})
		}
		return out
	}
	checkStatePatches(t, []stateUpdate{
		{tasks: []instanceai.Task{task("1", instanceai.TaskTodo), task("2", instanceai.TaskTodo)}},
		{tasks: []instanceai.Task{task("1", instanceai.TaskDone), task("2", instanceai.TaskInProgress)}},
		// Inserted in the middle, then a middle one removed.
		{tasks: []instanceai.Task{task("1", instanceai.TaskDone), task("1b", instanceai.TaskTodo), task("2", instanceai.TaskInProgress)}},
		{tasks: []instanceai.Task{task("1", instanceai.TaskDone), task("2", instanceai.TaskInProgress)}},
		// Reordered, with a detail added.
		{tasks: []instanceai.Task{{ID: "2", Description: "task 2", Detail: "more", Status: instanceai.TaskFailed}, task("1", instanceai.TaskDone)}},
		{tasks: []instanceai.Task{task("1", instanceai.TaskDone)}, plan: plan("p1")},
		{tasks: []instanceai.Task{task("1", instanceai.TaskDone)}, plan: plan("p2", "p1")},
		{tasks: nil, plan: plan("p2")},
		{tasks: []instanceai.Task{task("3", instanceai.TaskCancelled)}},
	})
}

func TestStateDeltasApplyToTheSnapshotRandom(t *testing.T) {
	statuses := []string{instanceai.TaskTodo, instanceai.TaskInProgress, instanceai.TaskDone, instanceai.TaskFailed, instanceai.TaskCancelled}
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			var tasks []instanceai.Task
			var plan []instanceai.PlannedTask
			var updates []stateUpdate
			n := 0
			for range 2 + r.IntN(12) {
				for range 1 + r.IntN(3) {
					switch k := r.IntN(6); {
					case k == 0 || len(tasks) == 0:
						n++
						at := r.IntN(len(tasks) + 1)
						tasks = slices.Insert(tasks, at, instanceai.Task{ID: fmt.Sprint("t", n), Description: "do", Status: instanceai.TaskTodo})
					case k == 1:
						i := r.IntN(len(tasks))
						tasks = slices.Delete(tasks, i, i+1)
					case k == 2:
						i, j := r.IntN(len(tasks)), r.IntN(len(tasks))
						tasks[i], tasks[j] = tasks[j], tasks[i]
					case k == 3:
						tasks[r.IntN(len(tasks))].Detail = fmt.Sprint("detail ", r.IntN(3))
					case k == 4:
						if r.IntN(2) == 0 {
							plan = nil
						} else {
							n++
							plan = append(slices.Clone(plan), instanceai.PlannedTask{ID: fmt.Sprint("p", n), Title: "plan", Kind: "build", Spec: "s"})
						}
					default:
						tasks[r.IntN(len(tasks))].Status = statuses[r.IntN(len(statuses))]
					}
				}
				updates = append(updates, stateUpdate{tasks: slices.Clone(tasks), plan: slices.Clone(plan)})
			}
			checkStatePatches(t, updates)
		})
	}
}
