package builderapi

import "github.com/gorilla/mux"

// registerProjects mounts the project, workflow file and version routes.
func (a *API) registerProjects(r *mux.Router) {}
