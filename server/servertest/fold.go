package servertest

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// Folder folds a thread's native event stream as n8n's browser does, also
// across reconnections: each run's events into that run's agent-run state,
// a run-sync frame replacing the run's state with the tree it carries, and
// a reset frame dropping every run. Tests compare what a client ends up
// showing with the log's fold (LogTexts).
type Folder struct {
	runs  map[string]*agenttree.State
	order []string
}

// Frame folds one frame.
func (f *Folder) Frame(fr Frame) error {
	switch fr.Event {
	case "reset":
		f.runs, f.order = nil, nil
		return nil
	case "run-sync":
		var sync struct {
			RunID     string               `json:"runId"`
			AgentTree *agenttree.AgentNode `json:"agentTree"`
		}
		if err := json.Unmarshal([]byte(fr.Data), &sync); err != nil {
			return fmt.Errorf("run-sync: %w", err)
		}
		st := agenttree.StateFromAgentTree(sync.AgentTree)
		if st == nil {
			return fmt.Errorf("run-sync of %s: no tree", sync.RunID)
		}
		f.set(sync.RunID, st)
		return nil
	case "":
	default:
		return nil
	}
	ev := fr.Decoded
	if ev.Type == "" || ev.RunID == "" {
		return nil
	}
	st := f.runs[ev.RunID]
	if ev.Type == instanceai.TypeRunStart || st == nil {
		st = agenttree.New()
		f.set(ev.RunID, st)
	}
	st.Apply(ev)
	return nil
}

func (f *Folder) set(runID string, st *agenttree.State) {
	if f.runs == nil {
		f.runs = map[string]*agenttree.State{}
	}
	if _, ok := f.runs[runID]; !ok {
		f.order = append(f.order, runID)
	}
	f.runs[runID] = st
}

// Texts returns, by run, each agent's text and reasoning as the fold
// holds them ("agentId text" and "agentId reasoning" keys).
func (f *Folder) Texts() map[string]map[string]string {
	out := map[string]map[string]string{}
	for id, st := range f.runs {
		out[id] = treeTexts(st.Tree())
	}
	return out
}

// LogTexts is Texts of the log's own fold: what a client that received the
// stored events only would show.
func LogTexts(rows []instanceai.StoredEvent) map[string]map[string]string {
	runs := agenttree.FoldRuns(rows, rows[len(rows)-1].Seq)
	out := map[string]map[string]string{}
	for _, ev := range rows {
		if r := runs.Get(ev.Event.RunID); r != nil && out[r.ID] == nil {
			out[r.ID] = treeTexts(r.State.Tree())
		}
	}
	return out
}

func treeTexts(n *agenttree.AgentNode) map[string]string {
	out := map[string]string{}
	var walk func(n *agenttree.AgentNode)
	walk = func(n *agenttree.AgentNode) {
		if n.TextContent != "" {
			out[n.AgentID+" text"] = n.TextContent
		}
		if n.Reasoning != "" {
			out[n.AgentID+" reasoning"] = n.Reasoning
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(n)
	return out
}

// TextDiff describes the first difference between a client's texts and the
// log's, "" when they are the same.
func TextDiff(client, log map[string]map[string]string) string {
	runs := make([]string, 0, len(log))
	for id := range log {
		runs = append(runs, id)
	}
	slices.Sort(runs)
	for _, run := range runs {
		want, got := log[run], client[run]
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if w, g := want[k], got[k]; w != g {
				return fmt.Sprintf("run %s, %s: the client has %d bytes, the log %d; first difference at byte %d",
					run, k, len(g), len(w), firstDiff(g, w))
			}
		}
	}
	return ""
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}
