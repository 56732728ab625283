package server

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/server/httpmetrics"
	"github.com/threadline/threadline/server/publishapi"
)

// unmatched answers requests no route takes with the API's JSON error
// shape: 405 with an Allow header when the path exists under other
// methods, else 404. gorilla/mux answers a wrong method on a subrouter's
// route with its plain-text 404, so the decision is made here, from the
// routes' own path patterns and methods.
func unmatched(router *mux.Router) http.Handler {
	// The routes are all registered before the first request: their
	// patterns are compiled once, then.
	var once sync.Once
	var routes []routeMethods
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { routes = collectRoutes(router) })
		var allow []string
		for _, rt := range routes {
			if !rt.path.MatchString(r.URL.Path) {
				continue
			}
			for _, m := range rt.methods {
				if m != r.Method && m != http.MethodOptions && !slices.Contains(allow, m) {
					allow = append(allow, m)
				}
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httpjson.WriteError(w, httpjson.NewError(http.StatusMethodNotAllowed, "method_not_allowed", "",
				"%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
			return
		}
		httpjson.WriteError(w, httpjson.NewError(http.StatusNotFound, "not_found", "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
}

// routeMethods is a route's path pattern, template and methods.
type routeMethods struct {
	path     *regexp.Regexp
	template string
	methods  []string
}

// Route is one method on one path template, as registered ("/instance-ai/chat/{threadId}").
type Route struct {
	Method, Path string
}

// Routes lists every method and path template the server serves, for the
// checks that the API's documents name each of them. A variable's pattern
// is left out ("/console/{file:.+}" is "/console/{file}"), as OpenAPI
// writes templates.
func (s *Server) Routes() []Route {
	var out []Route
	for _, rt := range collectRoutes(s.router) {
		for _, m := range rt.methods {
			out = append(out, Route{Method: m, Path: variablePattern.ReplaceAllString(rt.template, "{$1}")})
		}
	}
	return out
}

// variablePattern matches a mux path variable that carries a pattern.
var variablePattern = regexp.MustCompile(`\{([^:}]+):[^}]*\}`)

// collectRoutes lists the routes that have both a path and methods.
func collectRoutes(router *mux.Router) []routeMethods {
	var out []routeMethods
	_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		pattern, err := route.GetPathRegexp()
		if err != nil {
			return nil // a route without a path (a subrouter)
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil
		}
		template, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		if re, err := regexp.Compile(pattern); err == nil {
			out = append(out, routeMethods{path: re, template: template, methods: methods})
		}
		return nil
	})
	return out
}

// surfaces names the surface of a route template for the metrics' surface
// label: the API it belongs to, from the prefixes each API registers.
func surfaces(copilotKitBase string) func(template string) string {
	builder := []string{"/generate", "/modify", "/iterate", "/validate", "/iterations/", "/feedback/", "/projects"}
	return func(t string) string {
		switch {
		case strings.HasPrefix(t, "/instance-ai/"):
			return "native"
		case t == "/run-agent" || strings.HasPrefix(t, "/agui/"):
			return "agui"
		case t == copilotKitBase || strings.HasPrefix(t, copilotKitBase+"/"):
			return "copilotkit"
		case t == publishapi.Prefix || strings.HasPrefix(t, publishapi.Prefix+"/"):
			return "publish"
		case t == "/" || strings.HasPrefix(t, "/console/"):
			return "console"
		}
		for _, p := range builder {
			if t == p || strings.HasPrefix(t, p) && (strings.HasSuffix(p, "/") || t[len(p)] == '/') {
				return "builder"
			}
		}
		return httpmetrics.Other
	}
}
