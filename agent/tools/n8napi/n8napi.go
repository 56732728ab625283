// Package n8napi is a tool set over an n8n instance's public REST API (v1):
// list, read, create, update, activate, deactivate and archive workflows, and
// list executions. Each tool is a tools.Tool whose Execute makes one request
// to the instance, authenticated with the X-N8N-API-KEY header.
//
// The endpoints, verbs and wire shapes were checked against n8n's own source
// (repository n8n-io/n8n):
//
//   - packages/cli/src/public-api/v1/openapi.yml — the API is served under
//     /api/v1 and authenticated by the ApiKeyAuth scheme, header X-N8N-API-KEY.
//   - packages/cli/src/public-api/index.ts — every error leaves as
//     {"message": "..."} with the error's status (400 when it has none).
//   - packages/cli/src/services/public-api-key.service.ts — an unknown or
//     invalid key fails the security handler, which the OpenAPI validator
//     answers with 401 (a missing header with "'X-N8N-API-KEY' header
//     required").
//   - packages/cli/src/public-api/v1/handlers/workflows/spec/paths/
//     workflows.yml (GET and POST /workflows), workflows.id.yml (GET, PUT and
//     DELETE /workflows/{id}), workflows.id.activate.yml,
//     workflows.id.deactivate.yml and workflows.id.archive.yml (POST
//     /workflows/{id}/activate, /deactivate, /archive).
//   - packages/cli/src/public-api/v1/handlers/workflows/spec/schemas/
//     workflow.yml, workflowCreate.yml and workflowSettings.yml — the request
//     body is validated with additionalProperties: false, and id, active,
//     createdAt, updatedAt, tags, versionId … are readOnly (rejected in a
//     request); name, nodes, connections and settings are required.
//   - packages/cli/src/public-api/v1/handlers/workflows/workflows.handler.ts
//     and packages/cli/src/public-api/v1/controllers/workflows.public.controller.ts
//     (newer releases route the same paths through decorator controllers) —
//     the list filters active, name, tags (comma-separated tag names),
//     excludePinnedData, limit and cursor; 404 {"message": "Not Found"} for an
//     id the key's user cannot see; the archive handler.
//   - packages/cli/src/workflows/workflow.service.ts — archive unpublishes an
//     active workflow and sets isArchived; for the public API it is idempotent
//     (archiveForPublicApi passes skipArchived). DELETE, by contrast, removes
//     the workflow and its executions for good (deleteForPublicApi).
//   - packages/cli/src/public-api/v1/handlers/executions/spec/paths/
//     executions.yml, spec/schemas/executionList.yml and executions.handler.ts
//     — GET /executions with status, workflowId, limit and cursor.
//   - packages/cli/src/public-api/v1/shared/spec/parameters/limit.yml (at most
//     250) and packages/cli/src/public-api/v1/shared/services/pagination.service.ts
//     — list responses are {"data": [...], "nextCursor": string|null}.
//
// Archive: recent n8n has POST /workflows/{id}/archive in the public API, a
// soft delete — the workflow is deactivated and hidden, and can be restored
// (POST /workflows/{id}/unarchive, or from the UI). archive_workflow calls
// exactly that. On an n8n release that predates the endpoint the request
// fails — n8n 1.123 answers 405 "POST method not allowed"
// (testdata/real/rest-archive-workflow.json), others may answer 404 — and
// the tool says so; it never falls back to DELETE, which destroys the
// workflow and its execution history rather than archiving it. It still needs
// a person's approval, because it takes a running workflow out of service.
//
// Results are n8n's JSON as returned, with two deliberate reductions to keep
// the model's context small: list_workflows trims each workflow to id, name,
// active, isArchived, createdAt, updatedAt and tags (id and name), because a
// full workflow carries all its nodes; and workflow reads ask n8n to leave out
// pinned sample data (excludePinnedData=true). get_workflow returns the whole
// workflow otherwise.
//
// Arguments are decoded strictly by field: a missing or mistyped field is an
// error naming it ("id: required"), unknown fields are ignored, and JSON null
// for an optional field means the field is absent.
package n8napi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/threadline/threadline/agent/tools"
)

// Config says which n8n instance the tools talk to.
type Config struct {
	// BaseURL is the n8n instance URL, e.g. http://localhost:5678. A trailing
	// slash or /api/v1 is accepted; n8n under a sub-path (N8N_PATH) works too.
	BaseURL string
	// APIKey is an n8n API key (Settings > n8n API). It is sent only in the
	// X-N8N-API-KEY header and never appears in an error.
	APIKey string
	// HTTPClient makes the requests; nil is a client that does not follow
	// redirects (so the key is never re-sent to another host).
	HTTPClient *http.Client
	// Timeout bounds each request; 0 means 30s.
	Timeout time.Duration
}

// DefaultTimeout is the per-request bound when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// MaxResponseBytes bounds how much of a response is read. A bigger response
// is an error rather than a truncated result: cut JSON is useless to a model,
// and an unbounded read lets a misbehaving server exhaust memory.
const MaxResponseBytes = 8 << 20

// Tools returns the n8n tools for cfg, in a fixed order: list_workflows,
// get_workflow, create_workflow, update_workflow, activate_workflow,
// deactivate_workflow, archive_workflow, list_executions.
func Tools(cfg Config) ([]tools.Tool, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return []tools.Tool{
		{
			Name: "list_workflows",
			Description: "List the workflows of the n8n instance, newest first as n8n orders them. " +
				"Each workflow is summarised (id, name, active, isArchived, createdAt, updatedAt, tags); " +
				"use get_workflow for its nodes. Returns {data, nextCursor}: pass nextCursor back as cursor " +
				"for the next page; null means there are no more.",
			Parameters: schemaListWorkflows,
			Execute:    c.listWorkflows,
		},
		{
			Name: "get_workflow",
			Description: "Get one workflow of the n8n instance by id: name, nodes, connections, settings, " +
				"active state and tags (pinned sample data is left out).",
			Parameters: schemaID("The workflow id."),
			Execute:    c.getWorkflow,
		},
		{
			Name: "create_workflow",
			Description: "Create a workflow in the n8n instance from n8n workflow JSON (name, nodes, connections, " +
				"settings). The new workflow is inactive; use activate_workflow to start it. Returns the created workflow with its id.",
			Parameters: schemaCreateWorkflow,
			Execute:    c.createWorkflow,
		},
		{
			Name: "update_workflow",
			Description: "Replace a workflow of the n8n instance: n8n's update is a full replacement, so send the " +
				"complete name, nodes, connections and settings (read them with get_workflow first and change what you need). " +
				"An active workflow is re-published with the new version. Returns the updated workflow.",
			Parameters: schemaUpdateWorkflow,
			Execute:    c.updateWorkflow,
		},
		{
			Name:        "activate_workflow",
			Description: "Activate (publish) a workflow of the n8n instance so its triggers run. Returns the workflow.",
			Parameters:  schemaID("The id of the workflow to activate."),
			Execute:     c.activateWorkflow,
		},
		{
			Name:        "deactivate_workflow",
			Description: "Deactivate (unpublish) a workflow of the n8n instance so its triggers stop. Returns the workflow.",
			Parameters:  schemaID("The id of the workflow to deactivate."),
			Execute:     c.deactivateWorkflow,
		},
		{
			Name: "archive_workflow",
			Description: "Archive a workflow of the n8n instance: n8n deactivates it and moves it to the archive " +
				"(a soft delete; it can be restored in n8n, and its executions are kept). " +
				"Archiving an archived workflow changes nothing. Needs approval. Returns the archived workflow.",
			Parameters:    schemaID("The id of the workflow to archive."),
			NeedsApproval: true,
			// It takes a running workflow out of service, though n8n can
			// unarchive it.
			Severity: "destructive",
			Execute:  c.archiveWorkflow,
		},
		{
			Name: "list_executions",
			Description: "List executions (runs) of the n8n instance's workflows, newest first, without their run data. " +
				"Filter by workflowId and status. Returns {data, nextCursor}: pass nextCursor back as cursor for the next page.",
			Parameters: schemaListExecutions,
			Execute:    c.listExecutions,
		},
	}, nil
}

// normaliseBaseURL turns the configured instance URL into the API root
// (…/api/v1, no trailing slash).
func normaliseBaseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("n8napi: BaseURL is empty; set it to the n8n instance URL, e.g. http://localhost:5678")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error would quote the input, which may hold credentials.
		return "", errors.New("n8napi: BaseURL is not a valid URL; expected e.g. http://localhost:5678")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("n8napi: BaseURL must be an absolute http or https URL (got scheme %q); expected e.g. http://localhost:5678", u.Scheme)
	}
	if u.Host == "" {
		return "", errors.New("n8napi: BaseURL has no host; expected e.g. http://localhost:5678")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", errors.New("n8napi: BaseURL must not have a query or fragment")
	}
	p := strings.TrimRight(u.EscapedPath(), "/")
	p = strings.TrimSuffix(p, "/api/v1")
	p = strings.TrimRight(p, "/")
	u.RawPath = ""
	u.Path = ""
	return u.String() + p + "/api/v1", nil
}
