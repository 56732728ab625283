// Package guard refuses requests a browser can be tricked into sending:
// cross-site form posts and bodiless fetches that change state, and, in
// single-user mode, requests through a name that is not this machine's (DNS
// rebinding). Bearer tokens already stop both where they are configured: a
// browser attaches no token a page does not know. Without tokens the only
// protection is that the server listens on loopback, and a page on any
// site can reach loopback through the user's browser; these checks close
// that.
package guard

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/threadline/threadline/server/httpjson"
)

// Config says what the guard admits.
type Config struct {
	// CheckHost refuses requests whose Host is not a loopback name or one of
	// AllowedHosts: set in single-user mode, where the server is on
	// loopback and unauthenticated.
	CheckHost bool
	// AllowedHosts are further host names (without port) to admit; "*"
	// admits any.
	AllowedHosts []string
	// AnyHostPaths are paths whose GETs any Host may reach: the
	// orchestrator's probes, which address the pod by its IP and whose
	// answers hold nothing a page could misuse.
	AnyHostPaths []string
	// AllowedOrigins are the browser origins (--allowed-origins, "*" for
	// any) whose state-changing requests are admitted besides same-origin
	// ones.
	AllowedOrigins []string
}

// ParseHosts splits a comma-separated host list, dropping blanks and ports.
func ParseHosts(list string) []string {
	var out []string
	for _, h := range strings.Split(list, ",") {
		h = strings.ToLower(strings.TrimSpace(h))
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		h = strings.Trim(h, "[]")
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// Middleware applies both checks, Hosts then Requests, before next.
func Middleware(cfg Config, next http.Handler) http.Handler {
	return Hosts(cfg, Requests(cfg)(next))
}

// Hosts refuses, when cfg.CheckHost is set, requests addressed to a name
// that is not this machine's: for every route, before anything else.
func Hosts(cfg Config, next http.Handler) http.Handler {
	if !cfg.CheckHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		anyHost := (r.Method == http.MethodGet || r.Method == http.MethodHead) && slices.Contains(cfg.AnyHostPaths, r.URL.Path)
		if !anyHost && !cfg.hostAllowed(r.Host) {
			httpjson.WriteError(w, httpjson.NewError(http.StatusForbidden, "host_not_allowed", "Host",
				"Host %q is not this machine: a server without tokens answers only loopback names (localhost, 127.0.0.1, [::1]); "+
					"add the name with --allowed-hosts (THREADLINE_ALLOWED_HOSTS), or configure tokens", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Requests refuses state-changing requests from other sites' pages and
// bodies that are not JSON (see checkRequest). It goes after
// authentication, so a caller without a token hears 401 first.
func Requests(cfg Config) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := cfg.checkRequest(r); err != nil {
				httpjson.WriteError(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (cfg Config) checkRequest(r *http.Request) error {
	if safeMethod(r.Method) {
		return nil
	}
	if origin := r.Header.Get("Origin"); origin != "" && !cfg.originAllowed(origin, r.Host) {
		return httpjson.NewError(http.StatusForbidden, "cross_site_request", "Origin",
			"a %s from origin %s is not allowed: only same-origin requests and --allowed-origins may change state", r.Method, origin)
	}
	return checkContentType(r)
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkContentType requires application/json on a request that declares a
// type or carries a body: an HTML form can send only form and text types,
// and no page can send JSON to another origin without a CORS preflight.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return nil // no body, no type: a cancel, a delete
	}
	mt, _, err := mime.ParseMediaType(ct)
	// NDJSON (the publish API's streamed append) is no more a form's type
	// than JSON is.
	if err == nil && (mt == "application/json" || mt == "application/x-ndjson") {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return httpjson.NewError(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type",
		"the body must be JSON, sent with Content-Type: application/json (got %s)", ct)
}

// hostAllowed reports whether host (a Host header, with or without port)
// is a loopback name or an allowed one.
func (cfg Config) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return slices.Contains(cfg.AllowedHosts, "*") || slices.Contains(cfg.AllowedHosts, host)
}

// originAllowed reports whether a request from origin may change state: an
// allowed origin, or the server's own (the origin's host is the request's
// Host).
func (cfg Config) originAllowed(origin, host string) bool {
	if slices.Contains(cfg.AllowedOrigins, "*") || slices.Contains(cfg.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}
