package server_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/ssestream"
	"github.com/threadline/threadline/workflow"
)

// builderStream posts an operation to the process and returns its events'
// data, in order, up to the terminal one.
func builderStream(t *testing.T, p *process, path, body string) []map[string]any {
	t.Helper()
	res, err := http.Post(p.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", path, res.StatusCode)
	}
	rd := ssestream.NewReader(res.Body)
	var out []map[string]any
	for {
		f, err := rd.Next()
		if err != nil {
			t.Fatalf("%s: stream ended after %d events: %v", path, len(out), err)
		}
		if f.IsComment() {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		if typ, _ := ev["type"].(string); strings.HasSuffix(typ, "_FINISHED") || typ == "RUN_ERROR" || typ == "MODIFICATION_ERROR" {
			return out
		}
	}
}

// workflowOf returns the workflow JSON text of the stream's typ event.
func workflowOf(t *testing.T, events []map[string]any, typ string) (string, string) {
	t.Helper()
	for _, ev := range events {
		if ev["type"] == typ {
			data, _ := ev["data"].(map[string]any)
			doc, _ := data["workflow_json"].(string)
			if _, err := workflow.Parse([]byte(doc)); err != nil {
				t.Fatalf("%s: workflow_json: %v", typ, err)
			}
			id, _ := ev["workflow_id"].(string)
			return doc, id
		}
	}
	t.Fatalf("no %s among %v", typ, events)
	return "", ""
}

// The seed's "Complete Workflow Lifecycle", step by step against the
// binary on its embedded default store (SQLite), as `make run` serves it:
// create a project, generate a workflow, save it to the project, modify it
// after testing, check the iteration history; then save the change with a
// backup and compare the two versions.
func TestBuilderLifecycle(t *testing.T) {
	p := launch(t, "sqlite:"+filepath.Join(t.TempDir(), "threadline.db"), 0)
	api := p.API

	// 1. Create a project.
	if code := api.DoInto(http.MethodPost, "/projects/my-automation",
		`{"name": "my-automation", "description": "Customer automation workflows"}`, nil); code != http.StatusCreated {
		t.Fatalf("create project: %d", code)
	}
	// 2. Generate the initial workflow.
	events := builderStream(t, p, "/generate", `{"description": "Send welcome email to new customers"}`)
	generated, workflowID := workflowOf(t, events, "WORKFLOW_GENERATED")
	// 3. Save it to the project.
	save, _ := json.Marshal(map[string]any{"workflow_data": json.RawMessage(generated), "create_backup": true})
	if code := api.DoInto(http.MethodPut, "/projects/my-automation/workflows/welcome-email.json", string(save), nil); code != http.StatusCreated {
		t.Fatalf("save: %d", code)
	}
	// 4. Modify it based on testing.
	modify, _ := json.Marshal(map[string]string{"existing_workflow_json": generated,
		"modification_description": "Add error handling for invalid emails", "workflow_id": workflowID})
	events = builderStream(t, p, "/modify", string(modify))
	modified, _ := workflowOf(t, events, "WORKFLOW_MODIFIED")
	if events[len(events)-1]["type"] != "MODIFICATION_FINISHED" {
		t.Fatalf("modify ended %v", events[len(events)-1])
	}
	// 5. Check the iteration history.
	var iterations []struct {
		WorkflowID     string          `json:"workflow_id"`
		Description    string          `json:"description"`
		ChangesSummary json.RawMessage `json:"changes_summary"`
	}
	if code := api.DoInto(http.MethodGet, "/iterations/"+workflowID, "", &iterations); code != http.StatusOK || len(iterations) != 1 ||
		iterations[0].Description != "Add error handling for invalid emails" || !strings.Contains(string(iterations[0].ChangesSummary), `"nodes_added":`) {
		t.Fatalf("iterations: %d %+v", code, iterations)
	}

	// The modified workflow replaces the saved one, keeping a backup.
	save, _ = json.Marshal(map[string]any{"workflow_data": json.RawMessage(modified), "create_backup": true})
	var saved struct {
		BackupFilename string `json:"backup_filename"`
	}
	if code := api.DoInto(http.MethodPut, "/projects/my-automation/workflows/welcome-email.json", string(save), &saved); code != http.StatusOK ||
		!strings.HasPrefix(saved.BackupFilename, "welcome-email_backup_") {
		t.Fatalf("replace: %d %+v", code, saved)
	}
	var cmp struct {
		Summary struct {
			NodesAdded int `json:"nodes_added"`
		} `json:"summary"`
	}
	if code := api.DoInto(http.MethodGet, "/projects/my-automation/workflows/welcome-email.json/compare/"+saved.BackupFilename+"/current", "", &cmp); code != http.StatusOK ||
		cmp.Summary.NodesAdded == 0 {
		t.Fatalf("compare: %d %+v", code, cmp)
	}
	// The builder's runs are threads like any other, and survive a restart.
	p.Stop()
	p.Start()
	if code := api.DoInto(http.MethodGet, "/iterations/"+workflowID, "", &iterations); code != http.StatusOK || len(iterations) != 1 {
		t.Fatalf("iterations after a restart: %d %+v", code, iterations)
	}
}
