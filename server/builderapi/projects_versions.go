package builderapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/diff"
)

func (a *API) listVersions(ctx context.Context, loc pathNames) ([]builder.Version, error) {
	versions, err := a.store.ListVersions(ctx, loc.owner, loc.project, loc.filename)
	if versions == nil {
		versions = []builder.Version{}
	}
	return versions, err
}

func (a *API) getVersion(ctx context.Context, loc pathNames) (builder.Version, error) {
	return a.store.GetVersion(ctx, loc.owner, loc.project, loc.filename, loc.version)
}

// getVersionContent answers the version's workflow document itself, byte
// for byte as it was saved.
func (a *API) getVersionContent(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atVersion)
	if err != nil {
		return err
	}
	data, err := a.store.GetVersionContent(r.Context(), loc.owner, loc.project, loc.filename, loc.version)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}

// restoreRequest is the body of a restore; without a body no backup is
// asked for (the project's auto_backup still makes one).
type restoreRequest struct {
	CreateBackup bool `json:"create_backup"`
}

func (a *API) restoreVersion(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atVersion)
	if err != nil {
		return err
	}
	var req restoreRequest
	if err := a.decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	res, err := a.store.RestoreVersion(r.Context(), loc.owner, loc.project, loc.filename, loc.version, req.CreateBackup)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	out := saveView(loc, res)
	out.RestoredFrom = loc.version
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

func (a *API) deleteVersion(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atVersion)
	if err != nil {
		return err
	}
	if _, err := a.store.GetVersion(r.Context(), loc.owner, loc.project, loc.filename, loc.version); err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	if err := deleteConfirmed(r, "the version %s", loc.version); err != nil {
		return err
	}
	if err := a.store.DeleteVersion(r.Context(), loc.owner, loc.project, loc.filename, loc.version); err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	httpjson.Write(w, http.StatusOK, deletedResponse{Deleted: true, Project: loc.project, Filename: loc.filename, Version: loc.version})
	return nil
}

// cleanupRequest is the body of a cleanup; without keep_versions the
// project's version_limit is kept.
type cleanupRequest struct {
	KeepVersions *int `json:"keep_versions"`
}

type cleanupResponse struct {
	Removed int `json:"removed"`
	Kept    int `json:"kept"`
}

func (a *API) cleanupVersions(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atFile)
	if err != nil {
		return err
	}
	var req cleanupRequest
	if err := a.decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	var keep int
	if req.KeepVersions != nil {
		keep = *req.KeepVersions
		if keep == 0 {
			// Every version goes: as sure a deletion as a single one's,
			// so it asks for the same confirmation (once the file is
			// known to be the caller's, as a single delete does).
			if _, err := a.store.ListVersions(r.Context(), loc.owner, loc.project, loc.filename); err != nil {
				return a.projectStoreError(r.Context(), loc, err)
			}
			if err := deleteConfirmed(r, "every version of %s (keep_versions is 0)", loc.filename); err != nil {
				return err
			}
		}
	} else {
		p, err := a.store.GetProject(r.Context(), loc.owner, loc.project)
		if err != nil {
			return a.projectStoreError(r.Context(), loc, err)
		}
		keep = p.Settings.VersionLimit
	}
	removed, err := a.store.CleanupVersions(r.Context(), loc.owner, loc.project, loc.filename, keep)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	left, err := a.store.ListVersions(r.Context(), loc.owner, loc.project, loc.filename)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	httpjson.Write(w, http.StatusOK, cleanupResponse{Removed: removed, Kept: len(left)})
	return nil
}

// currentVersion names, in a compare, the workflow file's content itself
// rather than one of its versions (which all end in .json).
const currentVersion = "current"

// compareSide is one of the two documents compared.
type compareSide struct {
	Version      string          `json:"version"`
	WorkflowData json.RawMessage `json:"workflow_data"`
}

// compareResponse is the seed's comparison: the two documents, what kind
// of change there is and how many of each.
type compareResponse struct {
	Version1 compareSide `json:"version1"`
	Version2 compareSide `json:"version2"`
	diff.Comparison
}

// compareVersions compares version1 (the older, say) with version2, each a
// version filename or "current".
func (a *API) compareVersions(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atFile)
	if err != nil {
		return err
	}
	var sides [2]compareSide
	var docs [2]*workflow.Workflow
	for i, field := range []string{"version1", "version2"} {
		sides[i], docs[i], err = a.compareSide(r, loc.withVersion(field, mux.Vars(r)[field]))
		if err != nil {
			return err
		}
	}
	httpjson.Write(w, http.StatusOK, compareResponse{Version1: sides[0], Version2: sides[1], Comparison: diff.Compare(docs[0], docs[1])})
	return nil
}

// compareSide loads and parses the document loc.version names.
func (a *API) compareSide(r *http.Request, loc pathNames) (compareSide, *workflow.Workflow, error) {
	side := compareSide{Version: loc.version}
	var err error
	if loc.version == currentVersion {
		var f builder.WorkflowFile
		f, err = a.store.GetWorkflow(r.Context(), loc.owner, loc.project, loc.filename)
		side.WorkflowData = f.WorkflowData
	} else if err = builder.CheckVersionName(loc.version); err == nil {
		side.WorkflowData, err = a.store.GetVersionContent(r.Context(), loc.owner, loc.project, loc.filename, loc.version)
	}
	if err != nil {
		return side, nil, a.projectStoreError(r.Context(), loc, err)
	}
	doc, err := workflow.Parse(side.WorkflowData)
	if err != nil {
		return side, nil, httpjson.NewError(http.StatusUnprocessableEntity, "invalid_workflow", loc.versionField,
			"%s %q is not a workflow that can be compared: %v", loc.versionField, loc.version, err)
	}
	return side, doc, nil
}
