package n8napi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// maxLimit is the public API's page-size ceiling (shared/spec/parameters/limit.yml).
const maxLimit = 250

// executionStatuses are the status filters of list_executions: the values
// every public-API release accepts (1.123 also takes canceled and running,
// testdata/real/rest-list-executions-badstatus.json; newer ones add
// crashed, new and unknown).
var executionStatuses = []string{"success", "error", "waiting"}

func notFoundWorkflow(id string) string {
	return fmt.Sprintf("the workflow id %q does not exist, or the API key's user cannot see it; find ids with list_workflows", id)
}

// notFoundAPI is what a 404 on a collection means: the route is missing.
const notFoundAPI = "the public API was not found at BaseURL: check the URL, and that the API is enabled on the instance (N8N_PUBLIC_API_DISABLED, or a plan without API access)"

// fail prefixes an argument error with the tool name.
func fail(tool string, err error) error { return fmt.Errorf("%s: %w", tool, err) }

func (cl *client) listWorkflows(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	const tool = "list_workflows"
	a, err := decodeArgs(raw)
	if err != nil {
		return nil, fail(tool, err)
	}
	q := url.Values{}
	if v, ok, err := a.boolean("active"); err != nil {
		return nil, fail(tool, err)
	} else if ok {
		q.Set("active", strconv.FormatBool(v))
	}
	for _, name := range []string{"name", "tags"} {
		if v, ok, err := a.str(name, false); err != nil {
			return nil, fail(tool, err)
		} else if ok {
			q.Set(name, v)
		}
	}
	if err := setPage(a, q); err != nil {
		return nil, fail(tool, err)
	}
	// The summaries below drop pinned data anyway; not fetching it saves
	// transfer and the response bound.
	q.Set("excludePinnedData", "true")

	body, err := cl.do(ctx, call{tool: tool, method: http.MethodGet, path: "/workflows", query: q, notFound: notFoundAPI})
	if err != nil {
		return nil, err
	}
	return summariseWorkflows(tool, body)
}

// workflowSummary is the part of a workflow list_workflows returns. Raw
// values keep n8n's JSON as it was; omitempty drops fields n8n did not send.
type workflowSummary struct {
	ID         json.RawMessage `json:"id,omitempty"`
	Name       json.RawMessage `json:"name,omitempty"`
	Active     json.RawMessage `json:"active,omitempty"`
	IsArchived json.RawMessage `json:"isArchived,omitempty"`
	CreatedAt  json.RawMessage `json:"createdAt,omitempty"`
	UpdatedAt  json.RawMessage `json:"updatedAt,omitempty"`
	Tags       []tagSummary    `json:"tags,omitempty"`
}

type tagSummary struct {
	ID   json.RawMessage `json:"id,omitempty"`
	Name json.RawMessage `json:"name,omitempty"`
}

func summariseWorkflows(tool string, body json.RawMessage) (json.RawMessage, error) {
	var page struct {
		Data       []workflowSummary `json:"data"`
		NextCursor json.RawMessage   `json:"nextCursor"`
	}
	if err := json.Unmarshal(body, &page); err != nil || page.Data == nil {
		return nil, fmt.Errorf("%s: n8n's response is not a workflow list ({\"data\": [...], \"nextCursor\": ...})", tool)
	}
	if len(page.NextCursor) == 0 {
		page.NextCursor = json.RawMessage("null")
	}
	out, err := json.Marshal(page)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding the result: %w", tool, err)
	}
	return out, nil
}

// workflowArgs decodes the arguments of a tool on one workflow and its
// required id.
func workflowArgs(raw json.RawMessage) (args, string, error) {
	a, err := decodeArgs(raw)
	if err != nil {
		return nil, "", err
	}
	id, err := a.id("id", true)
	return a, id, err
}

func (cl *client) getWorkflow(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	const tool = "get_workflow"
	_, id, err := workflowArgs(raw)
	if err != nil {
		return nil, fail(tool, err)
	}
	return cl.do(ctx, call{
		tool: tool, method: http.MethodGet, path: "/workflows/" + url.PathEscape(id),
		query:    url.Values{"excludePinnedData": {"true"}},
		notFound: notFoundWorkflow(id),
	})
}

// workflowBody is what create and update send: exactly the writable fields
// every public-API release accepts. The request schema has
// additionalProperties: false and readOnly id/active/tags/…, so echoing a
// workflow read back from n8n would be rejected; the order matches n8n's.
type workflowBody struct {
	Name        string          `json:"name"`
	Nodes       json.RawMessage `json:"nodes"`
	Connections json.RawMessage `json:"connections"`
	Settings    json.RawMessage `json:"settings"`
}

// decodeWorkflow reads the workflow fields. settingsRequired is false for
// create, where a missing settings is sent as {} (n8n requires the key but
// accepts it empty), and true for update, where a silent {} would wipe the
// workflow's settings.
func decodeWorkflow(a args, settingsRequired bool) (workflowBody, error) {
	var w workflowBody
	var err error
	if w.Name, _, err = a.str("name", true); err != nil {
		return w, err
	}
	if w.Nodes, err = a.objects("nodes"); err != nil {
		return w, err
	}
	if w.Connections, err = a.object("connections"); err != nil {
		return w, err
	}
	if !settingsRequired && !a.present("settings") {
		w.Settings = json.RawMessage("{}")
		return w, nil
	}
	if w.Settings, err = a.object("settings"); err != nil {
		return w, err
	}
	return w, nil
}

func (cl *client) createWorkflow(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	const tool = "create_workflow"
	a, err := decodeArgs(raw)
	if err != nil {
		return nil, fail(tool, err)
	}
	w, err := decodeWorkflow(a, false)
	if err != nil {
		return nil, fail(tool, err)
	}
	return cl.do(ctx, call{tool: tool, method: http.MethodPost, path: "/workflows", body: w, notFound: notFoundAPI})
}

func (cl *client) updateWorkflow(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	const tool = "update_workflow"
	a, id, err := workflowArgs(raw)
	if err != nil {
		return nil, fail(tool, err)
	}
	w, err := decodeWorkflow(a, true)
	if err != nil {
		return nil, fail(tool, err)
	}
	return cl.do(ctx, call{
		tool: tool, method: http.MethodPut, path: "/workflows/" + url.PathEscape(id),
		body: w, notFound: notFoundWorkflow(id),
	})
}

// emptyObject is activate's body: its request body (versionId, name,
// description) is optional, and {} asks for the current version.
var emptyObject = struct{}{}

func (cl *client) activateWorkflow(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	return cl.workflowAction(ctx, raw, "activate_workflow", "/activate", emptyObject, "", "")
}

func (cl *client) deactivateWorkflow(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	return cl.workflowAction(ctx, raw, "deactivate_workflow", "/deactivate", nil, "", "")
}

// noArchiveEndpoint is what archive_workflow says when the release has no
// public archive endpoint.
const noArchiveEndpoint = "this n8n version has no archive endpoint in its public API " +
	"(POST /api/v1/workflows/{id}/archive; n8n added it after 1.123): archive the workflow in the n8n UI, or upgrade n8n"

// archiveWorkflow calls POST /workflows/{id}/archive, n8n's soft delete. It
// never falls back to DELETE /workflows/{id}, which destroys the workflow
// and its executions: on a release without the endpoint the call fails.
// n8n 1.123 answers that POST with 405 {"message":"POST method not allowed"},
// whatever the id, because the path matches its GET
// /workflows/{id}/{versionId} route (testdata/real/rest-archive-*.json);
// other releases without the endpoint may answer 404.
func (cl *client) archiveWorkflow(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	return cl.workflowAction(ctx, raw, "archive_workflow", "/archive", nil, "; or "+noArchiveEndpoint, noArchiveEndpoint)
}

func (cl *client) workflowAction(ctx context.Context, raw json.RawMessage, tool, suffix string, body any, notFoundExtra, notAllowed string) (json.RawMessage, error) {
	_, id, err := workflowArgs(raw)
	if err != nil {
		return nil, fail(tool, err)
	}
	return cl.do(ctx, call{
		tool: tool, method: http.MethodPost, path: "/workflows/" + url.PathEscape(id) + suffix,
		body: body, notFound: notFoundWorkflow(id) + notFoundExtra, notAllowed: notAllowed,
	})
}

func (cl *client) listExecutions(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	const tool = "list_executions"
	a, err := decodeArgs(raw)
	if err != nil {
		return nil, fail(tool, err)
	}
	q := url.Values{}
	if id, err := a.id("workflowId", false); err != nil {
		return nil, fail(tool, err)
	} else if id != "" {
		q.Set("workflowId", id)
	}
	if v, ok, err := a.enum("status", executionStatuses...); err != nil {
		return nil, fail(tool, err)
	} else if ok {
		q.Set("status", v)
	}
	if err := setPage(a, q); err != nil {
		return nil, fail(tool, err)
	}
	// includeData is left at n8n's default (false): run data can be huge.
	return cl.do(ctx, call{tool: tool, method: http.MethodGet, path: "/executions", query: q, notFound: notFoundAPI})
}

// setPage copies the optional pagination arguments of a list tool, limit
// and cursor, into the query.
func setPage(a args, q url.Values) error {
	if v, ok, err := a.integer("limit", 1, maxLimit); err != nil {
		return err
	} else if ok {
		q.Set("limit", strconv.FormatInt(v, 10))
	}
	if v, ok, err := a.str("cursor", false); err != nil {
		return err
	} else if ok {
		q.Set("cursor", v)
	}
	return nil
}
