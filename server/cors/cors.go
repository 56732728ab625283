// Package cors answers browsers' cross-origin requests for the allowed
// origins, before routing and authentication.
package cors

import (
	"net/http"
	"slices"
	"strings"
)

// maxAge is how long (seconds) a browser may cache a preflight answer.
const maxAge = "600"

// ParseOrigins splits a comma-separated origin list, dropping blanks and
// trailing slashes.
func ParseOrigins(list string) []string {
	var out []string
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimRight(strings.TrimSpace(o), "/")
		if o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// Middleware lets browsers on the allowed origins ("*" allows any) call next. It
// answers preflight requests itself, before routing and authentication, so
// an OPTIONS request never reaches a method-restricted route. With no
// allowed origins it adds nothing.
func Middleware(allowed []string, next http.Handler) http.Handler {
	if len(allowed) == 0 {
		return next
	}
	anyOrigin := slices.Contains(allowed, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
		h := w.Header()
		h.Add("Vary", "Origin")
		ok := origin != "" && (anyOrigin || slices.Contains(allowed, origin))
		if ok {
			if anyOrigin {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
			}
		}
		if !preflight {
			if ok {
				h.Set("Access-Control-Expose-Headers", "Content-Type")
			}
			next.ServeHTTP(w, r)
			return
		}
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		if ok {
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, PATCH, OPTIONS")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			} else {
				h.Set("Access-Control-Allow-Headers", "Content-Type, Accept, Authorization, Last-Event-ID")
			}
			h.Set("Access-Control-Max-Age", maxAge)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
