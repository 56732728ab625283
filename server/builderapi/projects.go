package builderapi

import (
	"net/http"

	"github.com/gorilla/mux"
)

// ProjectsRoot is the path the projects are served under, the seed's
// projects_root.
const ProjectsRoot = "/projects"

// statsName is the path segment of the statistics, which no project may
// take: GET /projects/stats could not reach it.
const statsName = "stats"

// registerProjects mounts the project, workflow file and version routes.
// /projects/stats comes before /projects/{name}, which would take "stats"
// as a project name.
func (a *API) registerProjects(r *mux.Router) {
	r.Handle(ProjectsRoot, projectRoute(a.listProjects)).Methods(http.MethodGet)
	r.Handle(ProjectsRoot+"/"+statsName, projectRoute(a.projectStats)).Methods(http.MethodGet)

	p := ProjectsRoot + "/{name}"
	r.Handle(p, projectRoute(a.createProject)).Methods(http.MethodPost)
	r.Handle(p, projectRead(a, atProject, a.getProject)).Methods(http.MethodGet)
	r.Handle(p, projectRoute(a.deleteProject)).Methods(http.MethodDelete)
	r.Handle(p+"/settings", projectRoute(a.putSettings)).Methods(http.MethodPut)

	r.Handle(p+"/workflows", projectRead(a, atProject, a.listWorkflows)).Methods(http.MethodGet)
	f := p + "/workflows/{filename}"
	r.Handle(f, projectRead(a, atFile, a.getWorkflow)).Methods(http.MethodGet)
	r.Handle(f, projectRoute(a.saveWorkflow)).Methods(http.MethodPut)
	r.Handle(f, projectRoute(a.deleteWorkflow)).Methods(http.MethodDelete)

	r.Handle(f+"/versions", projectRead(a, atFile, a.listVersions)).Methods(http.MethodGet)
	v := f + "/versions/{version_filename}"
	r.Handle(v, projectRead(a, atVersion, a.getVersion)).Methods(http.MethodGet)
	r.Handle(v, projectRoute(a.deleteVersion)).Methods(http.MethodDelete)
	r.Handle(v+"/content", projectRoute(a.getVersionContent)).Methods(http.MethodGet)
	r.Handle(v+"/restore", projectRoute(a.restoreVersion)).Methods(http.MethodPost)
	r.Handle(f+"/cleanup-versions", projectRoute(a.cleanupVersions)).Methods(http.MethodPost)
	r.Handle(f+"/compare/{version1}/{version2}", projectRoute(a.compareVersions)).Methods(http.MethodGet)
}
