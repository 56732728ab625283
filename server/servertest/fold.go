package servertest

import (
	"fmt"
	"slices"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
)

// Folder folds a thread's native event stream as n8n's browser does, with
// the protocol's client fold (agenttree.Client): each run's events into
// that run's agent-run state, a run-sync frame replacing the run's state
// with the tree it carries, and a reset frame dropping every run. Tests
// compare what a client ends up showing with the log's fold (LogTexts).
type Folder struct {
	client agenttree.Client
}

// Connect starts a new connection's frames (see agenttree.Client.Connect).
func (f *Folder) Connect() { f.client.Connect() }

// Frame folds one frame.
func (f *Folder) Frame(fr Frame) error {
	switch fr.Event {
	case instanceai.ResetFrameType:
		f.client.Reset()
		return nil
	case agenttree.RunSyncFrameType:
		rs, err := agenttree.DecodeRunSync([]byte(fr.Data))
		if err != nil {
			return err
		}
		return f.client.RunSync(rs)
	case "":
	default:
		return nil
	}
	if fr.Decoded.Type != "" {
		f.client.Event(fr.Decoded)
	}
	return nil
}

// Texts returns, by run, each agent's text and reasoning as the fold
// holds them ("agentId text" and "agentId reasoning" keys).
func (f *Folder) Texts() map[string]map[string]string {
	out := map[string]map[string]string{}
	for id, st := range f.client.Runs() {
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
