package builderapi

import "github.com/gorilla/mux"

// registerOperations mounts generate, modify, iterate, validate and the
// history routes.
func (a *API) registerOperations(r *mux.Router) {}
