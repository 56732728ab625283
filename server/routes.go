package server

import (
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/httpjson"
)

// unmatched answers requests no route takes with the API's JSON error
// shape: 405 with an Allow header when the path exists under other
// methods, else 404. gorilla/mux answers a wrong method on a subrouter's
// route with its plain-text 404, so the decision is made here, from the
// routes' own path patterns and methods.
func unmatched(router *mux.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
			pattern, err := route.GetPathRegexp()
			if err != nil {
				return nil // a route without a path (a subrouter)
			}
			methods, err := route.GetMethods()
			if err != nil {
				return nil
			}
			if re, err := regexp.Compile(pattern); err == nil && re.MatchString(r.URL.Path) {
				for _, m := range methods {
					if m != r.Method && m != http.MethodOptions && !slices.Contains(allow, m) {
						allow = append(allow, m)
					}
				}
			}
			return nil
		})
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httpjson.WriteError(w, httpjson.NewError(http.StatusMethodNotAllowed, "method_not_allowed", "",
				"%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
			return
		}
		httpjson.WriteError(w, httpjson.NewError(http.StatusNotFound, "not_found", "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
}
