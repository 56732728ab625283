package server

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/publishapi"
)

// routeNeed returns what each authenticated route needs of a token's
// scope: publish under the publish API; read for what only reads (GETs,
// and the POSTs that only open a stream or check a document); write for
// everything that starts, stops, answers or changes something. The
// CopilotKit single endpoint, whose body names the method, is decided by
// its handler (0 here). Every route is listed by the scope test, so a new
// route is classified on purpose.
func routeNeed(copilotKitBase string) func(*http.Request) auth.Perm {
	// POSTs that change nothing: a stream's (re)connection, CopilotKit's
	// realtime thread channel (refused), a workflow's validation.
	reads := map[string]bool{
		copilotKitBase + "/agent/{agentId}/connect": true,
		copilotKitBase + "/threads/subscribe":       true,
		"/validate":                                 true,
	}
	return func(r *http.Request) auth.Perm {
		template := r.URL.Path
		if route := mux.CurrentRoute(r); route != nil {
			if t, err := route.GetPathTemplate(); err == nil {
				template = t
			}
		}
		switch {
		case template == publishapi.Prefix || strings.HasPrefix(template, publishapi.Prefix+"/"):
			return auth.PermPublish
		case template == copilotKitBase && r.Method == http.MethodPost:
			return 0
		case r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions:
			return auth.PermRead
		case reads[template]:
			return auth.PermRead
		}
		return auth.PermWrite
	}
}
