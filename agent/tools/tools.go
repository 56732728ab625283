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

// Registry is an ordered set of tools, looked up by name.
type Registry struct {
	tools  []Tool
	byName map[string]int
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

// With returns a registry with the tools of r followed by more.
func (r *Registry) With(more ...Tool) (*Registry, error) {
	var base []Tool
	if r != nil {
		base = r.tools
	}
	return NewRegistry(append(slices.Clone(base), more...)...)
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
	i, ok := r.byName[name]
	if !ok {
		return Tool{}, false
	}
	return r.tools[i], true
}

// List returns the tools in registration order.
func (r *Registry) List() []Tool {
	if r == nil {
		return nil
	}
	return slices.Clone(r.tools)
}

// Len is the number of tools.
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	return len(r.tools)
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
