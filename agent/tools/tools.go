// Package tools is the registry of tools an LLM agent may call: each tool
// has a name, a description and JSON-Schema parameters the model sees, says
// whether a person must approve a call before it runs, and executes with a
// context that ends when the run is cancelled.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/threadline/threadline/instanceai"
)

// Tool is one callable tool.
type Tool struct {
	// Name is what the model calls (OpenAI allows [a-zA-Z0-9_-]{1,64}).
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments (an object schema).
	Parameters json.RawMessage
	// NeedsApproval makes the agent ask a person before executing a call.
	NeedsApproval bool
	// Severity is how the approval request is shown: "destructive",
	// "warning" (the default) or "info", as n8n's confirmation-request has it.
	Severity string
	// Execute runs a call with the model's arguments (a JSON object) and
	// returns its result as JSON. It must return promptly once ctx ends.
	// An error is reported to the model as the call's failure.
	Execute func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Registry is an ordered set of tools, looked up by name: fixed ones, and
// optionally those a source lists at each use (tools that come and go while
// the process runs, as an MCP server's do when it starts late, restarts or
// changes its list).
type Registry struct {
	tools  []Tool
	byName map[string]int
	// source lists the changing tools, after the fixed ones; a name a
	// fixed tool (or an earlier listed one) has, an invalid name, or a
	// tool without Execute is left out.
	source func() []Tool
}

// NewRegistry checks the tools and returns them as a registry: names must be
// valid and unique, parameters a JSON object, Execute set.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{byName: map[string]int{}}
	for _, t := range tools {
		if err := r.add(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// With returns a registry with the tools of r followed by more (and r's
// source, if it has one).
func (r *Registry) With(more ...Tool) (*Registry, error) {
	var base []Tool
	var source func() []Tool
	if r != nil {
		base, source = r.tools, r.source
	}
	out, err := NewRegistry(append(slices.Clone(base), more...)...)
	if err != nil {
		return nil, err
	}
	out.source = source
	return out, nil
}

// WithSource returns a registry with r's tools followed by those src lists
// each time the registry is read (List, Get, Len). src must be safe for
// concurrent use and cheap: it is called for every lookup.
func (r *Registry) WithSource(src func() []Tool) *Registry {
	out := &Registry{byName: map[string]int{}}
	var prev func() []Tool
	if r != nil {
		out.tools, out.byName, prev = r.tools, r.byName, r.source
	}
	out.source = src
	if prev != nil {
		out.source = func() []Tool { return append(prev(), src()...) }
	}
	return out
}

// changing returns the source's tools that the registry offers: valid,
// and named as no fixed or earlier tool is.
func (r *Registry) changing() []Tool {
	if r == nil || r.source == nil {
		return nil
	}
	var out []Tool
	seen := map[string]bool{}
	for _, t := range r.source() {
		if _, fixed := r.byName[t.Name]; fixed || seen[t.Name] || !toolName.MatchString(t.Name) || t.Execute == nil {
			continue
		}
		seen[t.Name] = true
		if len(t.Parameters) == 0 {
			t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, t)
	}
	return out
}

func (r *Registry) add(t Tool) error {
	if !toolName.MatchString(t.Name) {
		return fmt.Errorf("tool name %q: must be 1-64 letters, digits, _ or -", t.Name)
	}
	if _, dup := r.byName[t.Name]; dup {
		return fmt.Errorf("tool %q is registered twice", t.Name)
	}
	if t.Execute == nil {
		return fmt.Errorf("tool %q has no Execute", t.Name)
	}
	switch t.Severity {
	case "", "destructive", "warning", "info":
	default:
		return fmt.Errorf("tool %q: severity %q must be destructive, warning or info", t.Name, t.Severity)
	}
	if len(t.Parameters) == 0 {
		t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	var schema map[string]any
	if err := json.Unmarshal(t.Parameters, &schema); err != nil {
		return fmt.Errorf("tool %q: parameters must be a JSON Schema object: %w", t.Name, err)
	}
	r.byName[t.Name] = len(r.tools)
	r.tools = append(r.tools, t)
	return nil
}

// Get returns the named tool.
func (r *Registry) Get(name string) (Tool, bool) {
	if r == nil {
		return Tool{}, false
	}
	if i, ok := r.byName[name]; ok {
		return r.tools[i], true
	}
	for _, t := range r.changing() {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// List returns the tools in registration order.
func (r *Registry) List() []Tool {
	if r == nil {
		return nil
	}
	return append(slices.Clone(r.tools), r.changing()...)
}

// Len is the number of tools.
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	return len(r.tools) + len(r.changing())
}

// Call is what a running tool may do with the run that called it, beyond
// returning a result: ask the person something, report progress, hand the
// model images. The agent puts it in the context Execute gets (WithCall);
// a tool called outside a run finds none (CallFrom's ok is false).
type Call struct {
	// ToolCallID and ToolName identify the call in the run's events.
	ToolCallID string
	ToolName   string
	// Confirm publishes a confirmation-request for this call and waits
	// for the person's answer or ctx's end (instanceai.Run.Confirm). The
	// request's ToolCallID and ToolName are filled in when empty.
	Confirm func(ctx context.Context, req instanceai.ConfirmationRequest) (instanceai.Answer, error)
	// Status emits a status event of the run (progress of a long call).
	Status func(message string) error
	// Attach hands the model a file the tool produced (an image), sent
	// after the step's tool messages as a user message with content
	// parts: Chat Completions tool messages carry text only. Attachments
	// are not stored; the tool's result should say they were sent.
	Attach func(a instanceai.Attachment)
}

type callKey struct{}

// WithCall returns ctx carrying c for the tool's Execute.
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the call ctx carries.
func CallFrom(ctx context.Context) (*Call, bool) {
	c, ok := ctx.Value(callKey{}).(*Call)
	return c, ok && c != nil
}
