package builderapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// project is a ProjectResponse as a client reads it.
type projResp struct {
	Name          string         `json:"name"`
	Path          string         `json:"path"`
	Description   string         `json:"description"`
	CreatedDate   time.Time      `json:"created_date"`
	LastModified  time.Time      `json:"last_modified"`
	WorkflowCount int            `json:"workflow_count"`
	Workflows     []string       `json:"workflows"`
	Settings      map[string]any `json:"settings"`
}

type projFile struct {
	Filename     string          `json:"filename"`
	WorkflowData json.RawMessage `json:"workflow_data"`
	Size         int64           `json:"size"`
}

type projSaved struct {
	Project        string   `json:"project"`
	Filename       string   `json:"filename"`
	Created        bool     `json:"created"`
	RestoredFrom   string   `json:"restored_from"`
	BackupFilename *string  `json:"backup_filename"`
	VersionsPruned int      `json:"versions_pruned"`
	Workflow       projFile `json:"workflow"`
}

type projVersion struct {
	Filename     string   `json:"filename"`
	FileSize     int64    `json:"file_size"`
	WorkflowName string   `json:"workflow_name"`
	NodeCount    int      `json:"node_count"`
	Tags         []string `json:"tags"`
	IsBackup     bool     `json:"is_backup"`
}

var projBackupName = regexp.MustCompile(`^flow_backup_\d{8}_\d{6}(_\d+)?\.json$`)

// TestProjectLifecycle drives every project endpoint over HTTP on every
// store: create (and its refusals), read, list, settings, statistics,
// workflow files, and the confirm guards of the deletions.
func TestProjectLifecycle(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s, _ := projUsers(t, store)
		var list []projResp
		projWant(t, s, http.MethodGet, "/projects", "", http.StatusOK, &list)
		if list == nil || len(list) != 0 {
			t.Fatalf("no projects listed as %v", list)
		}
		var stats map[string]any
		projWant(t, s, http.MethodGet, "/projects/stats", "", http.StatusOK, &stats)
		if stats["total_projects"] != 0.0 || stats["projects_root"] != "/projects" || !reflect.DeepEqual(stats["project_names"], []any{}) {
			t.Fatalf("empty stats %v", stats)
		}

		var p projResp
		projWant(t, s, http.MethodPost, "/projects/shop",
			`{"name":"shop","description":"E-commerce","initial_workflows":["welcome.json"]}`, http.StatusCreated, &p)
		if p.Name != "shop" || p.Path != "/projects/shop" || p.Description != "E-commerce" || p.WorkflowCount != 1 ||
			!slices.Equal(p.Workflows, []string{"welcome.json"}) || p.CreatedDate.IsZero() ||
			p.Settings["auto_backup"] != true || p.Settings["version_limit"] != 10.0 {
			t.Fatalf("created %+v", p)
		}
		projWantError(t, s, http.MethodPost, "/projects/shop", `{}`, http.StatusConflict, "project_exists", "name")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"name":"else"}`, http.StatusBadRequest, "invalid_field", "name")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"description":7}`, http.StatusBadRequest, "invalid_field", "description")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"initial_workflows":["a.txt"]}`, http.StatusBadRequest, "invalid_field", "initial_workflows")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"initial_workflows":["a.json","a.json"]}`, http.StatusBadRequest, "invalid_field", "initial_workflows")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"settings":{"version_limit":0}}`, http.StatusBadRequest, "invalid_field", "settings.version_limit")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"description":"a\u0000b"}`, http.StatusBadRequest, "invalid_field", "description")
		projWantError(t, s, http.MethodPost, "/projects/other", `{"name":`, http.StatusBadRequest, "invalid_json", "")
		projWantError(t, s, http.MethodPost, "/projects/stats", `{}`, http.StatusBadRequest, "invalid_field", "name")
		if got := projNames(t, s); !slices.Equal(got, []string{"shop"}) {
			t.Fatalf("refused creations left %v", got)
		}
		// No body is a project with the defaults.
		projWant(t, s, http.MethodPost, "/projects/crm", "", http.StatusCreated, &p)
		if p.Description != "" || p.WorkflowCount != 0 || p.Workflows == nil {
			t.Fatalf("created without a body: %+v", p)
		}

		var got projResp
		projWant(t, s, http.MethodGet, "/projects/shop", "", http.StatusOK, &got)
		if got.Name != "shop" || got.WorkflowCount != 1 {
			t.Fatalf("got %+v", got)
		}
		projWantError(t, s, http.MethodGet, "/projects/nope", "", http.StatusNotFound, "project_not_found", "name")

		// Settings: replaced as a whole, extra keys kept, refusals change
		// nothing.
		projWant(t, s, http.MethodPut, "/projects/shop/settings", `{"auto_backup":false,"version_limit":4,"color":"blue"}`, http.StatusOK, &got)
		want := map[string]any{"auto_backup": false, "version_limit": 4.0, "color": "blue"}
		if !reflect.DeepEqual(got.Settings, want) {
			t.Fatalf("settings %v, want %v", got.Settings, want)
		}
		projWantError(t, s, http.MethodPut, "/projects/shop/settings", `{"version_limit":0}`, http.StatusBadRequest, "invalid_field", "version_limit")
		projWantError(t, s, http.MethodPut, "/projects/shop/settings", `{"version_limit":"3"}`, http.StatusBadRequest, "invalid_field", "version_limit")
		projWantError(t, s, http.MethodPut, "/projects/shop/settings", `{"auto_backup":"yes"}`, http.StatusBadRequest, "invalid_field", "auto_backup")
		projWantError(t, s, http.MethodPut, "/projects/shop/settings", `[1]`, http.StatusBadRequest, "invalid_field", "settings")
		projWantError(t, s, http.MethodPut, "/projects/shop/settings", `null`, http.StatusBadRequest, "invalid_field", "settings")
		projWantError(t, s, http.MethodPut, "/projects/nope/settings", `{}`, http.StatusNotFound, "project_not_found", "name")
		projWant(t, s, http.MethodGet, "/projects/shop", "", http.StatusOK, &got)
		if !reflect.DeepEqual(got.Settings, want) {
			t.Fatalf("refused settings changed them to %v", got.Settings)
		}

		// Workflow files.
		var files []projFile
		projWant(t, s, http.MethodGet, "/projects/shop/workflows", "", http.StatusOK, &files)
		if len(files) != 1 || files[0].Filename != "welcome.json" || files[0].WorkflowData != nil || files[0].Size == 0 {
			t.Fatalf("files %+v", files)
		}
		var f projFile
		projWant(t, s, http.MethodGet, "/projects/shop/workflows/welcome.json", "", http.StatusOK, &f)
		if !projSameJSON(t, f.WorkflowData, []byte(`{"name":"welcome","nodes":[],"connections":{}}`)) {
			t.Fatalf("initial workflow %s", f.WorkflowData)
		}
		projWantError(t, s, http.MethodGet, "/projects/shop/workflows/nope.json", "", http.StatusNotFound, "workflow_not_found", "filename")
		projWantError(t, s, http.MethodGet, "/projects/nope/workflows/nope.json", "", http.StatusNotFound, "project_not_found", "name")
		projWantError(t, s, http.MethodGet, "/projects/nope/workflows", "", http.StatusNotFound, "project_not_found", "name")

		var sv projSaved
		projWant(t, s, http.MethodPut, "/projects/shop/workflows/flow.json", projSaveBody(projRecorded(t), false), http.StatusCreated, &sv)
		if !sv.Created || sv.BackupFilename != nil || sv.VersionsPruned != 0 || sv.Filename != "flow.json" || sv.Project != "shop" ||
			sv.Workflow.Size != int64(len(projRecorded(t))) || sv.Workflow.WorkflowData != nil {
			t.Fatalf("first save %+v", sv)
		}
		projWant(t, s, http.MethodPut, "/projects/shop/workflows/flow.json", projSaveBody(projChanged(t), false), http.StatusOK, &sv)
		if sv.Created || sv.BackupFilename != nil {
			t.Fatalf("a save without backup (auto_backup off) %+v", sv)
		}
		projWant(t, s, http.MethodGet, "/projects/shop/workflows/flow.json", "", http.StatusOK, &f)
		if !projSameJSON(t, f.WorkflowData, projChanged(t)) {
			t.Fatalf("saved %s", f.WorkflowData)
		}
		for _, bad := range []struct{ body, field string }{
			{`{"workflow_data":[1]}`, "workflow_data"},
			{`{"workflow_data":"{}"}`, "workflow_data"},
			{`{"workflow_data":null}`, "workflow_data"},
			{`{}`, "workflow_data"},
			{`{"workflow_data":{},"create_backup":"yes"}`, "create_backup"},
			{"{\"workflow_data\":{\"name\":\"\xff\"}}", "workflow_data"},
		} {
			projWantError(t, s, http.MethodPut, "/projects/shop/workflows/flow.json", bad.body, http.StatusBadRequest, "invalid_field", bad.field)
		}
		projWantError(t, s, http.MethodPut, "/projects/shop/workflows/flow.json", "", http.StatusBadRequest, "invalid_json", "")
		projWantError(t, s, http.MethodPut, "/projects/nope/workflows/flow.json", `{"workflow_data":{}}`, http.StatusNotFound, "project_not_found", "name")
		projWant(t, s, http.MethodGet, "/projects/shop/workflows/flow.json", "", http.StatusOK, &f)
		if !projSameJSON(t, f.WorkflowData, projChanged(t)) {
			t.Fatalf("refused saves changed the file to %s", f.WorkflowData)
		}

		// Statistics over both projects.
		projWant(t, s, http.MethodGet, "/projects/stats", "", http.StatusOK, &stats)
		if stats["total_projects"] != 2.0 || stats["total_workflows"] != 2.0 || stats["largest_project"] != "shop" ||
			stats["average_workflows_per_project"] != 1.0 || !reflect.DeepEqual(stats["project_names"], []any{"crm", "shop"}) ||
			stats["most_recent_project"] != "shop" || stats["projects_root"] != "/projects" {
			t.Fatalf("stats %v", stats)
		}

		// Deleting a workflow file, then the project, each guarded.
		msg := projWantError(t, s, http.MethodDelete, "/projects/shop/workflows/flow.json", "", http.StatusBadRequest, "confirmation_required", "confirm")
		if !strings.Contains(msg, "add ?confirm=true to delete the workflow flow.json and its 0 versions") {
			t.Fatalf("guidance %q", msg)
		}
		projWantError(t, s, http.MethodDelete, "/projects/shop/workflows/flow.json?confirm=yes", "", http.StatusBadRequest, "confirmation_required", "confirm")
		projWant(t, s, http.MethodGet, "/projects/shop/workflows/flow.json", "", http.StatusOK, nil)
		var del map[string]any
		projWant(t, s, http.MethodDelete, "/projects/shop/workflows/flow.json?confirm=true", "", http.StatusOK, &del)
		if del["deleted"] != true || del["filename"] != "flow.json" || del["versions_deleted"] != 0.0 {
			t.Fatalf("deleted %v", del)
		}
		projWantError(t, s, http.MethodGet, "/projects/shop/workflows/flow.json", "", http.StatusNotFound, "workflow_not_found", "filename")
		projWantError(t, s, http.MethodDelete, "/projects/shop/workflows/flow.json?confirm=true", "", http.StatusNotFound, "workflow_not_found", "filename")

		msg = projWantError(t, s, http.MethodDelete, "/projects/shop", "", http.StatusBadRequest, "confirmation_required", "confirm")
		if !strings.Contains(msg, "add ?confirm=true to delete the project and its 1 workflows") {
			t.Fatalf("guidance %q", msg)
		}
		projWant(t, s, http.MethodGet, "/projects/shop", "", http.StatusOK, nil)
		projWant(t, s, http.MethodDelete, "/projects/shop?confirm=true", "", http.StatusOK, &del)
		if del["deleted"] != true || del["project"] != "shop" || del["workflows_deleted"] != 1.0 {
			t.Fatalf("deleted %v", del)
		}
		projWantError(t, s, http.MethodGet, "/projects/shop", "", http.StatusNotFound, "project_not_found", "name")
		projWantError(t, s, http.MethodGet, "/projects/shop/workflows/welcome.json", "", http.StatusNotFound, "project_not_found", "name")
		projWantError(t, s, http.MethodDelete, "/projects/shop?confirm=true", "", http.StatusNotFound, "project_not_found", "name")
		if got := projNames(t, s); !slices.Equal(got, []string{"crm"}) {
			t.Fatalf("left %v", got)
		}
	})
}

// TestVersions drives the version endpoints on every store: a backup
// made by a save, read as information and as content, restored, compared,
// cleaned up and deleted behind its guard.
func TestVersions(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s, _ := projUsers(t, store)
		projWant(t, s, http.MethodPost, "/projects/shop", `{}`, http.StatusCreated, nil)
		const flow = "/projects/shop/workflows/flow.json"
		var none []projVersion
		projWant(t, s, http.MethodPut, flow, projSaveBody(projRecorded(t), true), http.StatusCreated, nil)
		projWant(t, s, http.MethodGet, flow+"/versions", "", http.StatusOK, &none)
		if none == nil || len(none) != 0 {
			t.Fatalf("versions of a new file %v", none)
		}
		var sv projSaved
		projWant(t, s, http.MethodPut, flow, projSaveBody(projChanged(t), true), http.StatusOK, &sv)
		if sv.BackupFilename == nil || !projBackupName.MatchString(*sv.BackupFilename) || sv.VersionsPruned != 0 {
			t.Fatalf("replacing save %+v", sv)
		}
		backup := *sv.BackupFilename

		var vs []projVersion
		projWant(t, s, http.MethodGet, flow+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 1 || vs[0].Filename != backup || !vs[0].IsBackup || vs[0].NodeCount != 5 ||
			vs[0].WorkflowName == "" || vs[0].FileSize != int64(len(projRecorded(t))) || vs[0].Tags == nil {
			t.Fatalf("versions %+v", vs)
		}
		var v projVersion
		projWant(t, s, http.MethodGet, flow+"/versions/"+backup, "", http.StatusOK, &v)
		if !reflect.DeepEqual(v, vs[0]) {
			t.Fatalf("version %+v, listed %+v", v, vs[0])
		}
		if code, raw := projRaw(t, s, http.MethodGet, flow+"/versions/"+backup+"/content", ""); code != http.StatusOK || !bytes.Equal(raw, projRecorded(t)) {
			t.Fatalf("content: %d %.200s; want the recorded workflow byte for byte", code, raw)
		}
		projWantError(t, s, http.MethodGet, flow+"/versions/nope.json", "", http.StatusNotFound, "version_not_found", "version_filename")
		projWantError(t, s, http.MethodGet, flow+"/versions/nope.json/content", "", http.StatusNotFound, "version_not_found", "version_filename")
		projWantError(t, s, http.MethodGet, "/projects/shop/workflows/nope.json/versions/"+backup, "", http.StatusNotFound, "workflow_not_found", "filename")
		projWantError(t, s, http.MethodGet, "/projects/nope/workflows/flow.json/versions", "", http.StatusNotFound, "project_not_found", "name")

		// Restore: the content comes back, the replaced one is kept, the
		// restored version stays.
		projWantError(t, s, http.MethodPost, flow+"/versions/"+backup+"/restore", `{"create_backup":1}`, http.StatusBadRequest, "invalid_field", "create_backup")
		projWantError(t, s, http.MethodPost, flow+"/versions/nope.json/restore", `{}`, http.StatusNotFound, "version_not_found", "version_filename")
		projWant(t, s, http.MethodPost, flow+"/versions/"+backup+"/restore", `{"create_backup":true}`, http.StatusOK, &sv)
		if sv.RestoredFrom != backup || sv.Created || sv.BackupFilename == nil || *sv.BackupFilename == backup {
			t.Fatalf("restore %+v", sv)
		}
		var f projFile
		projWant(t, s, http.MethodGet, flow, "", http.StatusOK, &f)
		if !projSameJSON(t, f.WorkflowData, projRecorded(t)) {
			t.Fatalf("restored %s", f.WorkflowData)
		}
		projWant(t, s, http.MethodGet, flow+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 2 || vs[0].Filename != *sv.BackupFilename || vs[1].Filename != backup || vs[0].NodeCount != 5 {
			t.Fatalf("versions after the restore %+v", vs)
		}
		// A restore without a body still backs up: auto_backup is on.
		projWant(t, s, http.MethodPost, flow+"/versions/"+backup+"/restore", "", http.StatusOK, &sv)
		if sv.BackupFilename == nil {
			t.Fatalf("restore without a body %+v", sv)
		}

		// Cleanup: refusals remove nothing.
		projWantError(t, s, http.MethodPost, flow+"/cleanup-versions", `{"keep_versions":-1}`, http.StatusBadRequest, "invalid_field", "keep_versions")
		projWantError(t, s, http.MethodPost, flow+"/cleanup-versions", `{"keep_versions":"1"}`, http.StatusBadRequest, "invalid_field", "keep_versions")
		projWantError(t, s, http.MethodPost, flow+"/cleanup-versions", `{"keep_versions":1.5}`, http.StatusBadRequest, "invalid_field", "keep_versions")
		projWantError(t, s, http.MethodPost, "/projects/shop/workflows/nope.json/cleanup-versions", `{"keep_versions":1}`, http.StatusNotFound, "workflow_not_found", "filename")
		var cleaned map[string]any
		projWant(t, s, http.MethodPost, flow+"/cleanup-versions", "", http.StatusOK, &cleaned)
		if cleaned["removed"] != 0.0 || cleaned["kept"] != 3.0 {
			t.Fatalf("cleanup to the version limit (10) %v", cleaned)
		}
		projWant(t, s, http.MethodPost, flow+"/cleanup-versions", `{"keep_versions":1}`, http.StatusOK, &cleaned)
		if cleaned["removed"] != 2.0 || cleaned["kept"] != 1.0 {
			t.Fatalf("cleanup to 1 %v", cleaned)
		}
		projWant(t, s, http.MethodGet, flow+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 1 || vs[0].Filename != *sv.BackupFilename {
			t.Fatalf("cleanup kept %+v, want the newest", vs)
		}
		// Keeping none deletes every version: confirmed as a delete is.
		msg := projWantError(t, s, http.MethodPost, flow+"/cleanup-versions", `{"keep_versions":0}`, http.StatusBadRequest, "confirmation_required", "confirm")
		if !strings.Contains(msg, "add ?confirm=true to delete every version of") {
			t.Fatalf("guidance %q", msg)
		}
		projWant(t, s, http.MethodGet, flow+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 1 {
			t.Fatalf("an unconfirmed cleanup to 0 left %+v", vs)
		}

		// Delete, guarded.
		last := vs[0].Filename
		msg = projWantError(t, s, http.MethodDelete, flow+"/versions/"+last, "", http.StatusBadRequest, "confirmation_required", "confirm")
		if !strings.Contains(msg, "add ?confirm=true to delete the version "+last) {
			t.Fatalf("guidance %q", msg)
		}
		projWant(t, s, http.MethodGet, flow+"/versions/"+last, "", http.StatusOK, nil)
		var del map[string]any
		projWant(t, s, http.MethodDelete, flow+"/versions/"+last+"?confirm=true", "", http.StatusOK, &del)
		if del["deleted"] != true || del["version_filename"] != last {
			t.Fatalf("deleted %v", del)
		}
		projWantError(t, s, http.MethodDelete, flow+"/versions/"+last+"?confirm=true", "", http.StatusNotFound, "version_not_found", "version_filename")
		projWant(t, s, http.MethodGet, flow+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 0 {
			t.Fatalf("versions after the delete %+v", vs)
		}
	})
}

// TestCompareVersions compares the recorded workflow with a changed copy
// on every store: the counts are the change's, both ways, and "current"
// names the file itself.
func TestCompareVersions(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s, _ := projUsers(t, store)
		projWant(t, s, http.MethodPost, "/projects/shop", `{}`, http.StatusCreated, nil)
		const flow = "/projects/shop/workflows/flow.json"
		projWant(t, s, http.MethodPut, flow, projSaveBody(projRecorded(t), false), http.StatusCreated, nil)
		var sv projSaved
		projWant(t, s, http.MethodPut, flow, projSaveBody(projChanged(t), true), http.StatusOK, &sv)
		old := *sv.BackupFilename

		type side struct {
			Version      string          `json:"version"`
			WorkflowData json.RawMessage `json:"workflow_data"`
		}
		var cmp struct {
			Version1    side            `json:"version1"`
			Version2    side            `json:"version2"`
			Differences map[string]bool `json:"differences"`
			Summary     map[string]int  `json:"summary"`
		}
		projWant(t, s, http.MethodGet, flow+"/compare/"+old+"/current", "", http.StatusOK, &cmp)
		if cmp.Version1.Version != old || cmp.Version2.Version != "current" ||
			!projSameJSON(t, cmp.Version1.WorkflowData, projRecorded(t)) || !projSameJSON(t, cmp.Version2.WorkflowData, projChanged(t)) {
			t.Fatalf("compared %s with %s", cmp.Version1.Version, cmp.Version2.Version)
		}
		wantDiff := map[string]bool{"nodes_changed": true, "connections_changed": true, "settings_changed": true}
		wantSum := map[string]int{"nodes_added": 1, "nodes_removed": 1, "nodes_modified": 1, "connections_added": 1, "connections_removed": 1}
		if !reflect.DeepEqual(cmp.Differences, wantDiff) || !reflect.DeepEqual(cmp.Summary, wantSum) {
			t.Fatalf("differences %v summary %v; want %v %v", cmp.Differences, cmp.Summary, wantDiff, wantSum)
		}

		// The other way round, with a second version that only moves the
		// change back: one node added, the Respond node removed.
		projWant(t, s, http.MethodPut, flow, projSaveBody(projRecorded(t), true), http.StatusOK, &sv)
		projWant(t, s, http.MethodGet, flow+"/compare/"+*sv.BackupFilename+"/"+old, "", http.StatusOK, &cmp)
		if !reflect.DeepEqual(cmp.Summary, wantSum) || !cmp.Differences["settings_changed"] {
			t.Fatalf("reverse summary %v", cmp.Summary)
		}
		projWant(t, s, http.MethodGet, flow+"/compare/current/current", "", http.StatusOK, &cmp)
		if cmp.Differences["nodes_changed"] || cmp.Differences["connections_changed"] || cmp.Differences["settings_changed"] {
			t.Fatalf("current with itself %v %v", cmp.Differences, cmp.Summary)
		}

		projWantError(t, s, http.MethodGet, flow+"/compare/nope.json/current", "", http.StatusNotFound, "version_not_found", "version1")
		projWantError(t, s, http.MethodGet, flow+"/compare/current/nope.json", "", http.StatusNotFound, "version_not_found", "version2")
		projWantError(t, s, http.MethodGet, flow+"/compare/latest/current", "", http.StatusBadRequest, "invalid_field", "version1")
		projWantError(t, s, http.MethodGet, flow+"/compare/current/a..json", "", http.StatusBadRequest, "invalid_field", "version2")
		projWantError(t, s, http.MethodGet, "/projects/shop/workflows/nope.json/compare/current/current", "", http.StatusNotFound, "workflow_not_found", "filename")

		// A stored object that is no workflow cannot be compared.
		projWant(t, s, http.MethodPut, "/projects/shop/workflows/odd.json", `{"workflow_data":{"nodes":"none"}}`, http.StatusCreated, nil)
		projWantError(t, s, http.MethodGet, "/projects/shop/workflows/odd.json/compare/current/current", "", http.StatusUnprocessableEntity, "invalid_workflow", "version1")
	})
}
