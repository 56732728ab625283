package copilotkitapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

// envelopeSlack is what the single route's envelope may add to the body
// it carries.
const envelopeSlack = 64 << 10

// single serves the runtime's single-route transport (runtimeTransport:
// "single"): POST {base} with {method, params, body}, each method answered
// by the handler of its REST route, with the runtime's errors for a bad
// envelope: {"error": "invalid_request", "message"} and 400. (A body that
// does not say it is JSON never gets here: the server refuses every such
// POST with a 415.)
func (h *Handler) single(w http.ResponseWriter, r *http.Request) {
	data, err := httpjson.ReadBody(w, r, h.cfg.MaxBody+envelopeSlack)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	var env struct {
		Method string                     `json:"method"`
		Params map[string]json.RawMessage `json:"params"`
		Body   json.RawMessage            `json:"body"`
	}
	if json.Unmarshal(data, &env) != nil {
		invalidRequest(w, http.StatusBadRequest, "Invalid JSON payload")
		return
	}
	vars := map[string]string{}
	need := func(keys ...string) bool {
		for _, k := range keys {
			var v string
			if json.Unmarshal(env.Params[k], &v) != nil || strings.TrimSpace(v) == "" {
				invalidRequest(w, http.StatusBadRequest, fmt.Sprintf("Missing or invalid parameter '%s'", k))
				return false
			}
			vars[k] = v
		}
		return true
	}
	var next http.Handler
	// What the method needs of the token, decided here because the route
	// alone does not say (see the server's route table).
	perm := auth.PermWrite
	switch env.Method {
	case "":
		invalidRequest(w, http.StatusBadRequest, "Missing method field")
		return
	case "info":
		next, perm = http.HandlerFunc(h.info), auth.PermRead
	case "agent/run", "agent/connect":
		if !need("agentId") {
			return
		}
		if len(env.Body) == 0 || string(env.Body) == "null" {
			invalidRequest(w, http.StatusBadRequest, "Missing request body for JSON handler")
			return
		}
		next = h.run
		if env.Method == "agent/connect" {
			next, perm = h.knownAgent(http.HandlerFunc(h.connect)), auth.PermRead
		}
	case "agent/stop":
		if !need("agentId", "threadId") {
			return
		}
		next = h.knownAgent(http.HandlerFunc(h.stop))
	case "transcribe":
		next = http.HandlerFunc(transcribe)
	default:
		invalidRequest(w, http.StatusBadRequest, fmt.Sprintf("Unsupported method '%s'", env.Method))
		return
	}
	if err := auth.Require(r, perm); err != nil {
		auth.Deny(w, err)
		return
	}
	inner := mux.SetURLVars(r, vars)
	inner.Body = io.NopCloser(bytes.NewReader(env.Body))
	inner.ContentLength = int64(len(env.Body))
	next.ServeHTTP(w, inner)
}

func invalidRequest(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, map[string]string{"error": "invalid_request", "message": message})
}
