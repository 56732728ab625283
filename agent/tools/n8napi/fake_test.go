// The fake below reproduces the wire format of n8n's public REST API (v1) as
// n8n's own source defines it (repository n8n-io/n8n):
//
//   - routes, verbs and query parameters:
//     packages/cli/src/public-api/v1/openapi.yml,
//     packages/cli/src/public-api/v1/handlers/workflows/spec/paths/{workflows,workflows.id,workflows.id.activate,workflows.id.deactivate,workflows.id.archive}.yml,
//     packages/cli/src/public-api/v1/handlers/executions/spec/paths/executions.yml;
//   - request body rules (required name/nodes/connections/settings,
//     additionalProperties: false, readOnly id/active/tags/…):
//     packages/cli/src/public-api/v1/handlers/workflows/spec/schemas/{workflow,workflowCreate}.yml;
//   - responses and their messages ({"message": "Not Found"}, archive's
//     "Workflow Not Found", the list handler's {"data", "nextCursor"}):
//     packages/cli/src/public-api/v1/handlers/workflows/workflows.handler.ts,
//     packages/cli/src/public-api/v1/handlers/executions/executions.handler.ts;
//   - nextCursor as base64 JSON {limit, offset}:
//     packages/cli/src/public-api/v1/shared/services/pagination.service.ts;
//   - errors as {"message": ...} with the validator's status, 401
//     "'X-N8N-API-KEY' header required" without the header and "unauthorized"
//     for a key the security handler refuses, 404 "not found" for an unknown
//     route: packages/cli/src/public-api/index.ts and
//     packages/cli/src/services/public-api-key.service.ts.
//
// Where recordings of a real n8n 1.123.81 (testdata/real/) show otherwise,
// the fake follows them, and real_test.go checks that it does: execution ids
// are strings and execution cursors base64 JSON {lastId, limit}; the status
// filter's allowed values and message are 1.123's; create answers 200
// without tags or shared, activate and deactivate without tags; and a
// release without the archive endpoint answers 405 "POST method not
// allowed".

package n8napi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// recorded is one request the fake received.
type recorded struct {
	Method string
	Path   string // escaped
	Query  string // raw
	Body   []byte
	Header http.Header
}

type fakeN8N struct {
	t   *testing.T
	key string
	// noArchive makes the fake an n8n release without the public archive
	// endpoint, as 1.123 is: its POST matches the GET
	// /workflows/{id}/{versionId} route and is answered 405.
	noArchive bool

	mu         sync.Mutex
	requests   []recorded
	workflows  map[string]map[string]any
	order      []string
	executions []map[string]any
	nextID     int
}

const (
	testKey    = "n8n_api_S3CRET-test-key-0123456789"
	workflowA  = "2tUt1wbLX592XDdX"
	workflowB  = "VzqKEW0ShTXA5vPj"
	missingID  = "DoesNotExist0000"
	createdAt  = "2026-01-02T03:04:05.000Z"
	laterStamp = "2026-02-03T04:05:06.000Z"
)

func newFake(t *testing.T) *fakeN8N {
	f := &fakeN8N{t: t, key: testKey, workflows: map[string]map[string]any{}}
	f.put(map[string]any{
		"id": workflowA, "name": "Billing sync", "active": true, "isArchived": false,
		"createdAt": createdAt, "updatedAt": createdAt, "versionId": "v-a",
		"nodes": []any{map[string]any{
			"id": "n1", "name": "Webhook", "type": "n8n-nodes-base.webhook", "typeVersion": 2,
			"position": []any{0, 0}, "parameters": map[string]any{"path": "billing"},
		}},
		"connections": map[string]any{},
		"settings":    map[string]any{"executionOrder": "v1"},
		"staticData":  nil,
		"pinData":     map[string]any{"Webhook": []any{map[string]any{"json": map[string]any{"big": "sample"}}}},
		"tags": []any{map[string]any{
			"id": "tag1", "name": "production", "createdAt": createdAt, "updatedAt": createdAt,
		}},
		"shared": []any{map[string]any{"role": "workflow:owner", "projectId": "p1"}},
	})
	f.put(map[string]any{
		"id": workflowB, "name": "Lead intake", "active": false, "isArchived": false,
		"createdAt": createdAt, "updatedAt": createdAt, "versionId": "v-b",
		"nodes": []any{}, "connections": map[string]any{}, "settings": map[string]any{},
		"tags": []any{},
	})
	// Newest first, as n8n lists them.
	f.executions = []map[string]any{
		{"id": "1003", "finished": true, "mode": "manual", "retryOf": nil, "retrySuccessId": nil,
			"status": "success", "startedAt": createdAt, "stoppedAt": createdAt, "workflowId": workflowB, "waitTill": nil},
		{"id": "1002", "finished": false, "mode": "trigger", "retryOf": nil, "retrySuccessId": nil,
			"status": "error", "startedAt": createdAt, "stoppedAt": createdAt, "workflowId": workflowA, "waitTill": nil},
		{"id": "1001", "finished": true, "mode": "webhook", "retryOf": nil, "retrySuccessId": nil,
			"status": "success", "startedAt": createdAt, "stoppedAt": createdAt, "workflowId": workflowA, "waitTill": nil},
	}
	return f
}

func (f *fakeN8N) put(w map[string]any) {
	id := w["id"].(string)
	if _, ok := f.workflows[id]; !ok {
		f.order = append(f.order, id)
	}
	f.workflows[id] = w
}

func (f *fakeN8N) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		f.t.Fatal("the fake n8n received no request")
	}
	return f.requests[len(f.requests)-1]
}

func (f *fakeN8N) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func message(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

func (f *fakeN8N) handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h func(w http.ResponseWriter, r *http.Request, body []byte)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.requests = append(f.requests, recorded{
				Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Body: body, Header: r.Header.Clone(),
			})
			f.mu.Unlock()
			// The security handler runs after the route matched.
			switch key, ok := r.Header["X-N8n-Api-Key"]; {
			case !ok:
				message(w, 401, "'X-N8N-API-KEY' header required")
				return
			case len(key) != 1 || key[0] != f.key:
				message(w, 401, "unauthorized")
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			h(w, r, body)
		})
	}

	route("GET /api/v1/workflows", f.listWorkflows)
	route("POST /api/v1/workflows", func(w http.ResponseWriter, r *http.Request, body []byte) {
		wf, ok := f.validWorkflowBody(w, body, true)
		if !ok {
			return
		}
		f.nextID++
		id := fmt.Sprintf("NewWorkflow%05d", f.nextID)
		wf["id"], wf["active"], wf["isArchived"] = id, false, false
		wf["createdAt"], wf["updatedAt"], wf["versionId"] = createdAt, createdAt, "v-new"
		f.put(wf)
		writeJSON(w, 200, wf)
	})
	route("GET /api/v1/workflows/{id}", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		wf, ok := f.workflows[r.PathValue("id")]
		if !ok {
			message(w, 404, "Not Found")
			return
		}
		out := clone(wf)
		if r.URL.Query().Get("excludePinnedData") == "true" {
			delete(out, "pinData")
		}
		writeJSON(w, 200, out)
	})
	route("PUT /api/v1/workflows/{id}", func(w http.ResponseWriter, r *http.Request, body []byte) {
		wf, ok := f.workflows[r.PathValue("id")]
		if !ok {
			message(w, 404, "Not Found")
			return
		}
		upd, ok := f.validWorkflowBody(w, body, false)
		if !ok {
			return
		}
		for k, v := range upd {
			wf[k] = v
		}
		wf["updatedAt"], wf["versionId"] = laterStamp, "v-updated"
		writeJSON(w, 200, wf)
	})
	route("DELETE /api/v1/workflows/{id}", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		f.t.Errorf("DELETE %s: a tool deleted a workflow", r.URL.Path)
		message(w, 500, "DELETE is never expected")
	})
	action := func(name string, apply func(map[string]any), notFound string) {
		route("POST /api/v1/workflows/{id}/"+name, func(w http.ResponseWriter, r *http.Request, _ []byte) {
			wf, ok := f.workflows[r.PathValue("id")]
			if !ok {
				message(w, 404, notFound)
				return
			}
			apply(wf)
			// n8n 1.123 answers activate and deactivate without tags
			// (testdata/real/rest-activate-workflow.json).
			out := clone(wf)
			delete(out, "tags")
			writeJSON(w, 200, out)
		})
	}
	action("activate", func(wf map[string]any) { wf["active"] = true }, "Not Found")
	action("deactivate", func(wf map[string]any) { wf["active"] = false }, "Not Found")
	if f.noArchive {
		route("POST /api/v1/workflows/{id}/archive", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			message(w, 405, "POST method not allowed")
		})
	} else {
		action("archive", func(wf map[string]any) { wf["active"], wf["isArchived"] = false, true }, "Workflow Not Found")
	}
	route("GET /api/v1/executions", f.listExecutions)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone()})
		f.mu.Unlock()
		message(w, 404, "not found")
	})
	return mux
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// validWorkflowBody applies the request schema: the required fields, no
// additional properties, no readOnly ones.
func (f *fakeN8N) validWorkflowBody(w http.ResponseWriter, body []byte, create bool) (map[string]any, bool) {
	var wf map[string]any
	if err := json.Unmarshal(body, &wf); err != nil {
		message(w, 400, "Invalid JSON in request body")
		return nil, false
	}
	readOnly := []string{"id", "active", "createdAt", "updatedAt", "isArchived", "versionId", "triggerCount", "tags", "meta"}
	writable := []string{"name", "description", "externalId", "nodes", "connections", "nodeGroups", "settings", "staticData", "pinData", "shared", "activeVersion"}
	if create {
		writable = append(writable, "projectId")
	}
	for k := range wf {
		if slices.Contains(readOnly, k) {
			message(w, 400, "request/body/"+k+" is read-only")
			return nil, false
		}
		if !slices.Contains(writable, k) {
			message(w, 400, "request/body must NOT have additional properties")
			return nil, false
		}
	}
	for _, k := range []string{"name", "nodes", "connections", "settings"} {
		if _, ok := wf[k]; !ok {
			message(w, 400, "request/body must have required property '"+k+"'")
			return nil, false
		}
	}
	// workflowSettings.yml: additionalProperties: false.
	settingsKeys := []string{"saveExecutionProgress", "saveManualExecutions", "saveDataErrorExecution", "saveDataSuccessExecution",
		"executionTimeout", "errorWorkflow", "timezone", "executionOrder", "callerPolicy", "callerIds", "timeSavedPerExecution",
		"redactionPolicy", "availableInMCP", "customTelemetryTags"}
	settings, ok := wf["settings"].(map[string]any)
	if !ok {
		message(w, 400, "request/body/settings must be object")
		return nil, false
	}
	for k := range settings {
		if !slices.Contains(settingsKeys, k) {
			message(w, 400, "request/body/settings must NOT have additional properties")
			return nil, false
		}
	}
	return wf, true
}

type cursor struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

func (f *fakeN8N) listWorkflows(w http.ResponseWriter, r *http.Request, _ []byte) {
	q := r.URL.Query()
	limit, offset := 100, 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n > 250 {
			message(w, 400, "request/query/limit must be <= 250")
			return
		}
		limit = n
	}
	if s := q.Get("cursor"); s != "" {
		var c cursor
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || json.Unmarshal(raw, &c) != nil {
			message(w, 400, "An invalid cursor was provided")
			return
		}
		limit, offset = c.Limit, c.Offset
	}
	var all []map[string]any
	for _, id := range f.order {
		wf := f.workflows[id]
		if a := q.Get("active"); a != "" && strconv.FormatBool(wf["active"].(bool)) != a {
			continue
		}
		if n := q.Get("name"); n != "" && !strings.Contains(wf["name"].(string), n) {
			continue
		}
		if tags := q.Get("tags"); tags != "" {
			want := strings.Split(tags, ",")
			var have []string
			tagList, _ := wf["tags"].([]any)
			for _, t := range tagList {
				have = append(have, t.(map[string]any)["name"].(string))
			}
			if !slices.ContainsFunc(want, func(t string) bool { return slices.Contains(have, t) }) {
				continue
			}
		}
		out := clone(wf)
		if q.Get("excludePinnedData") == "true" {
			delete(out, "pinData")
		}
		all = append(all, out)
	}
	page := []map[string]any{}
	if offset < len(all) {
		page = all[offset:min(offset+limit, len(all))]
	}
	var next any
	if len(all) > offset+limit {
		b, _ := json.Marshal(cursor{Limit: limit, Offset: offset + limit})
		next = base64.StdEncoding.EncodeToString(b)
	}
	writeJSON(w, 200, map[string]any{"data": page, "nextCursor": next})
}

func (f *fakeN8N) listExecutions(w http.ResponseWriter, r *http.Request, _ []byte) {
	q := r.URL.Query()
	if s := q.Get("status"); s != "" && !slices.Contains([]string{"canceled", "error", "running", "success", "waiting"}, s) {
		message(w, 400, "request/query/status must be equal to one of the allowed values: canceled, error, running, success, waiting")
		return
	}
	limit, lastID := 100, ""
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n > 250 {
			message(w, 400, "request/query/limit must be <= 250")
			return
		}
		limit = n
	}
	if s := q.Get("cursor"); s != "" {
		var c struct {
			LastID string `json:"lastId"`
			Limit  int    `json:"limit"`
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || json.Unmarshal(raw, &c) != nil {
			message(w, 400, "An invalid cursor was provided")
			return
		}
		limit, lastID = c.Limit, c.LastID
	}
	older := func(id string) bool {
		a, _ := strconv.Atoi(id)
		b, _ := strconv.Atoi(lastID)
		return a < b
	}
	data := []map[string]any{}
	var next any
	for _, e := range f.executions {
		if id := q.Get("workflowId"); id != "" && e["workflowId"] != id {
			continue
		}
		if s := q.Get("status"); s != "" && e["status"] != s {
			continue
		}
		if lastID != "" && !older(e["id"].(string)) {
			continue
		}
		if len(data) == limit {
			b, _ := json.Marshal(map[string]any{"lastId": data[len(data)-1]["id"], "limit": limit})
			next = base64.StdEncoding.EncodeToString(b)
			break
		}
		data = append(data, e)
	}
	writeJSON(w, 200, map[string]any{"data": data, "nextCursor": next})
}
