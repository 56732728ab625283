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
	r.Handle(ProjectsRoot, serve(a.listProjects)).Methods(http.MethodGet)
	r.Handle(ProjectsRoot+"/"+statsName, serve(a.projectStats)).Methods(http.MethodGet)

	p := ProjectsRoot + "/{name}"
	r.Handle(p, serve(a.createProject)).Methods(http.MethodPost)
	r.Handle(p, serve(a.getProject)).Methods(http.MethodGet)
	r.Handle(p, serve(a.deleteProject)).Methods(http.MethodDelete)
	r.Handle(p+"/settings", serve(a.putSettings)).Methods(http.MethodPut)

	r.Handle(p+"/workflows", serve(a.listWorkflows)).Methods(http.MethodGet)
	f := p + "/workflows/{filename}"
	r.Handle(f, serve(a.getWorkflow)).Methods(http.MethodGet)
	r.Handle(f, serve(a.saveWorkflow)).Methods(http.MethodPut)
	r.Handle(f, serve(a.deleteWorkflow)).Methods(http.MethodDelete)

	r.Handle(f+"/versions", serve(a.listVersions)).Methods(http.MethodGet)
	v := f + "/versions/{version_filename}"
	r.Handle(v, serve(a.getVersion)).Methods(http.MethodGet)
	r.Handle(v, serve(a.deleteVersion)).Methods(http.MethodDelete)
	r.Handle(v+"/content", serve(a.getVersionContent)).Methods(http.MethodGet)
	r.Handle(v+"/restore", serve(a.restoreVersion)).Methods(http.MethodPost)
	r.Handle(f+"/cleanup-versions", serve(a.cleanupVersions)).Methods(http.MethodPost)
	r.Handle(f+"/compare/{version1}/{version2}", serve(a.compareVersions)).Methods(http.MethodGet)
}
