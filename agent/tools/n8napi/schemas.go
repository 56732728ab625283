package n8napi

import (
	"encoding/json"
	"strconv"
)

// The JSON Schemas the model sees. Each describes exactly what the tool's
// Execute accepts; n8napi_test checks that they parse and agree with the
// argument decoding.

var idProperty = map[string]any{
	"type":      "string",
	"pattern":   idPattern.String(),
	"minLength": 1,
	"maxLength": 128,
}

func withDescription(p map[string]any, d string) map[string]any {
	out := make(map[string]any, len(p)+1)
	for k, v := range p {
		out[k] = v
	}
	out["description"] = d
	return out
}

func mustSchema(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("n8napi: schema: " + err.Error())
	}
	return b
}

func schemaID(description string) json.RawMessage {
	return mustSchema(map[string]any{
		"type":       "object",
		"properties": map[string]any{"id": withDescription(idProperty, description)},
		"required":   []string{"id"},
	})
}

var limitProperty = map[string]any{
	"type":        "integer",
	"minimum":     1,
	"maximum":     maxLimit,
	"description": "Page size, 1-" + strconv.Itoa(maxLimit) + " (n8n's default is 100).",
}

var cursorProperty = map[string]any{
	"type":        "string",
	"minLength":   1,
	"description": "The nextCursor of the previous page; omit for the first page.",
}

var schemaListWorkflows = mustSchema(map[string]any{
	"type": "object",
	"properties": map[string]any{
		"active": map[string]any{
			"type":        "boolean",
			"description": "Only active (true) or only inactive (false) workflows.",
		},
		"name": map[string]any{
			"type":        "string",
			"minLength":   1,
			"description": "Only workflows whose name contains this text.",
		},
		"tags": map[string]any{
			"type":        "string",
			"minLength":   1,
			"description": "Comma-separated tag names, e.g. \"production,billing\": only workflows with these tags.",
		},
		"limit":  limitProperty,
		"cursor": cursorProperty,
	},
})

// workflowProperties are the writable workflow fields create and update send.
var workflowProperties = map[string]any{
	"name": map[string]any{
		"type":        "string",
		"minLength":   1,
		"description": "The workflow name.",
	},
	"nodes": map[string]any{
		"type":        "array",
		"items":       map[string]any{"type": "object"},
		"description": "n8n nodes, each {name, type, typeVersion, position, parameters, …} as in n8n's workflow JSON.",
	},
	"connections": map[string]any{
		"type":        "object",
		"description": "n8n connections keyed by source node name, e.g. {\"Webhook\": {\"main\": [[{\"node\": \"Set\", \"type\": \"main\", \"index\": 0}]]}}.",
	},
	"settings": map[string]any{
		"type":        "object",
		"description": "Workflow settings, e.g. {\"executionOrder\": \"v1\", \"timezone\": \"Europe/Berlin\"}; n8n rejects unknown keys.",
	},
}

var schemaCreateWorkflow = mustSchema(map[string]any{
	"type":       "object",
	"properties": workflowProperties,
	// settings may be omitted: it is then sent as {}.
	"required": []string{"name", "nodes", "connections"},
})

var schemaUpdateWorkflow = mustSchema(map[string]any{
	"type": "object",
	"properties": func() map[string]any {
		p := map[string]any{"id": withDescription(idProperty, "The id of the workflow to replace.")}
		for k, v := range workflowProperties {
			p[k] = v
		}
		return p
	}(),
	"required": []string{"id", "name", "nodes", "connections", "settings"},
})

var schemaListExecutions = mustSchema(map[string]any{
	"type": "object",
	"properties": map[string]any{
		"workflowId": withDescription(idProperty, "Only executions of this workflow."),
		"status": map[string]any{
			"type":        "string",
			"enum":        executionStatuses,
			"description": "Only executions that ended with this status.",
		},
		"limit":  limitProperty,
		"cursor": cursorProperty,
	},
})
