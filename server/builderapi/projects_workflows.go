package builderapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/server/httpjson"
)

func (a *API) listWorkflows(ctx context.Context, loc pathNames) ([]builder.WorkflowFile, error) {
	files, err := a.store.ListWorkflows(ctx, loc.owner, loc.project)
	if files == nil {
		files = []builder.WorkflowFile{}
	}
	return files, err
}

func (a *API) getWorkflow(ctx context.Context, loc pathNames) (builder.WorkflowFile, error) {
	return a.store.GetWorkflow(ctx, loc.owner, loc.project, loc.filename)
}

// saveRequest is the body of a save.
type saveRequest struct {
	WorkflowData json.RawMessage `json:"workflow_data"`
	// CreateBackup asks for a backup of the content replaced even when
	// the project does not back up automatically.
	CreateBackup bool `json:"create_backup"`
}

// saveResponse answers a save or a restore.
type saveResponse struct {
	Project  string `json:"project"`
	Filename string `json:"filename"`
	// Created is true when the save made the file.
	Created bool `json:"created"`
	// RestoredFrom is the version a restore took the content from.
	RestoredFrom string `json:"restored_from,omitempty"`
	// BackupFilename is the version the replaced content was kept as,
	// null when none was made.
	BackupFilename *string `json:"backup_filename"`
	// VersionsPruned is how many of the oldest versions the project's
	// version_limit removed.
	VersionsPruned int `json:"versions_pruned"`
	// Workflow is the file as saved, without its data.
	Workflow builder.WorkflowFile `json:"workflow"`
}

func saveView(loc pathNames, res builder.SaveResult) saveResponse {
	out := saveResponse{Project: loc.project, Filename: loc.filename, Created: res.Created,
		VersionsPruned: res.Pruned, Workflow: res.Workflow}
	out.Workflow.WorkflowData = nil
	if res.Backup != "" {
		out.BackupFilename = &res.Backup
	}
	return out
}

func (a *API) saveWorkflow(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atFile)
	if err != nil {
		return err
	}
	var req saveRequest
	if err := httpjson.Decode(w, r, a.cfg.MaxBody, &req); err != nil {
		return err
	}
	if err := checkWorkflowText(req.WorkflowData); err != nil {
		return err
	}
	res, err := a.store.SaveWorkflow(r.Context(), loc.owner, loc.project, loc.filename, req.WorkflowData, req.CreateBackup)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	httpjson.Write(w, status, saveView(loc, res))
	return nil
}

// deleteWorkflow deletes a file with its versions, after the same confirm
// guard as a project.
func (a *API) deleteWorkflow(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atFile)
	if err != nil {
		return err
	}
	versions, err := a.store.ListVersions(r.Context(), loc.owner, loc.project, loc.filename)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	n := len(versions)
	if err := deleteConfirmed(r, "the workflow %s and its %d versions", loc.filename, n); err != nil {
		return err
	}
	if err := a.store.DeleteWorkflow(r.Context(), loc.owner, loc.project, loc.filename); err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	httpjson.Write(w, http.StatusOK, deletedResponse{Deleted: true, Project: loc.project, Filename: loc.filename, VersionsDeleted: &n})
	return nil
}
