package builderapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

// projectResponse is the seed's ProjectResponse.
type projectResponse struct {
	Name          string           `json:"name"`
	Path          string           `json:"path"`
	Description   string           `json:"description"`
	CreatedDate   time.Time        `json:"created_date"`
	LastModified  time.Time        `json:"last_modified"`
	WorkflowCount int              `json:"workflow_count"`
	Workflows     []string         `json:"workflows"`
	Settings      builder.Settings `json:"settings"`
}

func projectView(p builder.Project) projectResponse {
	workflows := p.Workflows
	if workflows == nil {
		workflows = []string{}
	}
	return projectResponse{Name: p.Name, Path: ProjectsRoot + "/" + p.Name, Description: p.Description,
		CreatedDate: p.CreatedDate, LastModified: p.LastModified, WorkflowCount: p.WorkflowCount,
		Workflows: workflows, Settings: p.Settings}
}

// statsResponse is the seed's project statistics.
type statsResponse struct {
	builder.Stats
	ProjectsRoot string `json:"projects_root"`
}

func (a *API) listProjects(w http.ResponseWriter, r *http.Request) error {
	projects, err := a.store.ListProjects(r.Context(), auth.UserFrom(r.Context()))
	if err != nil {
		return err
	}
	out := make([]projectResponse, 0, len(projects))
	for _, p := range projects {
		out = append(out, projectView(p))
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

func (a *API) projectStats(w http.ResponseWriter, r *http.Request) error {
	st, err := a.store.ProjectStats(r.Context(), auth.UserFrom(r.Context()))
	if err != nil {
		return err
	}
	if st.ProjectNames == nil {
		st.ProjectNames = []string{}
	}
	httpjson.Write(w, http.StatusOK, statsResponse{Stats: st, ProjectsRoot: ProjectsRoot})
	return nil
}

// createProjectRequest is the body of POST /projects/{name}. Name, when given,
// must be the path's; Settings, when given, replace the defaults.
type createProjectRequest struct {
	Name             string          `json:"name"`
	Description      string          `json:"description"`
	InitialWorkflows []string        `json:"initial_workflows"`
	Settings         json.RawMessage `json:"settings"`
}

func (a *API) createProject(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atProject)
	if err != nil {
		return err
	}
	var req createProjectRequest
	if err := a.decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	if loc.project == statsName {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "name",
			"project name %q is reserved: %s/%s serves the statistics", statsName, ProjectsRoot, statsName)
	}
	if req.Name != "" && req.Name != loc.project {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", "name",
			"name %q in the body differs from the project name %q in the path", req.Name, loc.project)
	}
	if err := checkStoredText("description", req.Description); err != nil {
		return err
	}
	np := builder.NewProject{Name: loc.project, Description: req.Description, InitialWorkflows: req.InitialWorkflows}
	if len(req.Settings) > 0 && string(req.Settings) != "null" {
		s, err := parseSettings(req.Settings, false)
		if err != nil {
			return err
		}
		np.Settings = &s
	}
	// The store names a bad file name "filename"; here it is an entry of
	// initial_workflows.
	for _, f := range req.InitialWorkflows {
		if err := builder.CheckFilename(f); err != nil {
			return httpjson.NewError(http.StatusBadRequest, "invalid_field", "initial_workflows", "initial_workflows: %v", err)
		}
	}
	p, err := a.store.CreateProject(r.Context(), loc.owner, np)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	w.Header().Set("Location", ProjectsRoot+"/"+p.Name)
	httpjson.Write(w, http.StatusCreated, projectView(p))
	return nil
}

func (a *API) getProject(ctx context.Context, loc pathNames) (projectResponse, error) {
	p, err := a.store.GetProject(ctx, loc.owner, loc.project)
	return projectView(p), err
}

// deletedResponse answers a deletion.
type deletedResponse struct {
	Deleted bool   `json:"deleted"`
	Project string `json:"project"`
	// Filename and Version name the workflow file or version deleted.
	Filename string `json:"filename,omitempty"`
	Version  string `json:"version_filename,omitempty"`
	// WorkflowsDeleted and VersionsDeleted count what went with it.
	WorkflowsDeleted *int `json:"workflows_deleted,omitempty"`
	VersionsDeleted  *int `json:"versions_deleted,omitempty"`
}

func (a *API) deleteProject(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atProject)
	if err != nil {
		return err
	}
	p, err := a.store.GetProject(r.Context(), loc.owner, loc.project)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	if err := deleteConfirmed(r, "the project and its %d workflows", p.WorkflowCount); err != nil {
		return err
	}
	if err := a.store.DeleteProject(r.Context(), loc.owner, loc.project); err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	httpjson.Write(w, http.StatusOK, deletedResponse{Deleted: true, Project: p.Name, WorkflowsDeleted: &p.WorkflowCount})
	return nil
}

// putSettings replaces the project's settings with the body, a settings
// object: keys it leaves out take their defaults.
func (a *API) putSettings(w http.ResponseWriter, r *http.Request) error {
	loc, err := readPath(r, atProject)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := httpjson.Decode(w, r, a.cfg.MaxBody, &raw); err != nil {
		return err
	}
	s, err := parseSettings(raw, true)
	if err != nil {
		return err
	}
	p, err := a.store.UpdateProjectSettings(r.Context(), loc.owner, loc.project, s)
	if err != nil {
		return a.projectStoreError(r.Context(), loc, err)
	}
	httpjson.Write(w, http.StatusOK, projectView(p))
	return nil
}
