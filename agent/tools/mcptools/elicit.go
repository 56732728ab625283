package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/instanceai"
)

// elicit answers a server's elicitation/create: it asks the person of the
// run whose call is in flight on this server, with a confirmation-request.
//
// The request names no call over stdio (the protocol has no field for
// it), so it is attributed to the call whose context it arrives in when
// the SDK relays it inside the call (multi round-trip requests), else to
// the one call in flight on the server. With several calls in flight it
// cannot be told whose person should answer, and it is refused with that
// reason. The call's timeout is paused while the person answers.
func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	in, _ := ctx.Value(inflightKey{}).(*inflight)
	if in == nil {
		s.mu.Lock()
		n := len(s.calls)
		for _, c := range s.calls {
			in = c
		}
		s.mu.Unlock()
		if n != 1 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: fmt.Sprintf("Threadline cannot tell which person to ask: %d tool calls are in flight on this server, and an elicitation names none", n)}
		}
	}
	if in.call == nil || in.call.Confirm == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the call was not made by a run with a person to ask"}
	}
	p := req.Params
	if p.Mode == "url" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Threadline does not support URL elicitation"}
	}
	form, err := elicitForm(p.RequestedSchema)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	cr := instanceai.ConfirmationRequest{
		Severity: instanceai.SeverityInfo,
		Message:  fmt.Sprintf("The tool %s asks: %s", in.call.ToolName, strings.TrimSpace(p.Message)),
	}
	switch {
	case len(form.props) == 0:
		cr.InputType = instanceai.InputApproval
	case form.text != "":
		cr.InputType = instanceai.InputText
		cr.Message += "\n" + form.props[0].question
	default:
		cr.InputType = instanceai.InputQuestions
		for _, q := range form.props {
			cr.Questions = append(cr.Questions, instanceai.Question{ID: q.name, Question: q.question, Type: q.kind, Options: q.options})
		}
	}
	if in.pause != nil {
		in.pause()
		defer in.resume()
	}
	// The question ends with the call, with the call's cause: a run
	// suspended at shutdown keeps its question open for the next process.
	wait, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if in.ctx != nil {
		stop := context.AfterFunc(in.ctx, func() { cancel(context.Cause(in.ctx)) })
		defer stop()
	}
	answer, err := in.call.Confirm(wait, cr)
	if err != nil {
		if wait.Err() != nil {
			return &mcp.ElicitResult{Action: "cancel"}, nil
		}
		return nil, fmt.Errorf("asking the person failed: %w", err)
	}
	return form.result(answer), nil
}

// formProp is one field of an elicitation form.
type formProp struct {
	name     string
	typ      string // string, number, integer, boolean, array
	kind     string // the question type: single, multi, text
	question string
	options  []string
	// values are the enum values by option, when they differ from the
	// options (titled enums).
	values   []any
	required bool
}

type form struct {
	props []formProp
	// text is set when the form is one free-text field: asked as text
	// input rather than as one question.
	text string
}

type schemaProp struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Enum        []any    `json:"enum"`
	EnumNames   []string `json:"enumNames"`
	OneOf       []struct {
		Const any    `json:"const"`
		Title string `json:"title"`
	} `json:"oneOf"`
	Items *struct {
		Enum  []any `json:"enum"`
		AnyOf []struct {
			Const any    `json:"const"`
			Title string `json:"title"`
		} `json:"anyOf"`
	} `json:"items"`
	Default any `json:"default"`
}

// elicitForm reads a requested schema (a flat object of primitive
// properties, as the spec limits it) into questions: booleans and enums
// become choices, the rest free text. Properties come required first, then
// by name (the schema's own order is lost in decoding).
func elicitForm(schema any) (form, error) {
	if schema == nil {
		return form{}, nil
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return form{}, err
	}
	var s struct {
		Properties map[string]schemaProp `json:"properties"`
		Required   []string              `json:"required"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return form{}, fmt.Errorf("requestedSchema: %w", err)
	}
	var f form
	for name, p := range s.Properties {
		fp := formProp{name: name, typ: p.Type, kind: instanceai.QuestionText, required: slices.Contains(s.Required, name)}
		q := p.Title
		if q == "" {
			q = name
		}
		if p.Description != "" {
			q += ": " + p.Description
		}
		switch {
		case p.Type == "boolean":
			fp.kind, fp.options, fp.values = instanceai.QuestionSingle, []string{"Yes", "No"}, []any{true, false}
		case len(p.OneOf) > 0:
			fp.kind = instanceai.QuestionSingle
			for _, o := range p.OneOf {
				fp.options = append(fp.options, cmpStr(o.Title, fmt.Sprint(o.Const)))
				fp.values = append(fp.values, o.Const)
			}
		case len(p.Enum) > 0:
			fp.kind = instanceai.QuestionSingle
			for i, v := range p.Enum {
				label := fmt.Sprint(v)
				if i < len(p.EnumNames) {
					label = p.EnumNames[i]
				}
				fp.options = append(fp.options, label)
				fp.values = append(fp.values, v)
			}
		case p.Type == "array" && p.Items != nil:
			fp.kind = instanceai.QuestionMulti
			for _, v := range p.Items.Enum {
				fp.options = append(fp.options, fmt.Sprint(v))
				fp.values = append(fp.values, v)
			}
			for _, o := range p.Items.AnyOf {
				fp.options = append(fp.options, cmpStr(o.Title, fmt.Sprint(o.Const)))
				fp.values = append(fp.values, o.Const)
			}
		case p.Type == "array":
			return form{}, fmt.Errorf("requestedSchema.properties.%s: an array needs enum items", name)
		}
		if fp.required {
			q += " (required)"
		} else if p.Default != nil {
			q += fmt.Sprintf(" (default: %v)", p.Default)
		}
		fp.question = q
		f.props = append(f.props, fp)
	}
	slices.SortFunc(f.props, func(a, b formProp) int {
		if a.required != b.required {
			if a.required {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(f.props) == 1 && f.props[0].kind == instanceai.QuestionText && f.props[0].typ == "string" {
		f.text = f.props[0].name
	}
	return f, nil
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// result turns the person's answer into the elicitation's result: an
// approval denied is decline; an answer that leaves a required field
// empty, or gives a number that is none, is decline too (the server then
// knows the person did not give what it asked).
func (f form) result(a instanceai.Answer) *mcp.ElicitResult {
	decline := &mcp.ElicitResult{Action: "decline"}
	if !a.Approved {
		return decline
	}
	content := map[string]any{}
	switch {
	case len(f.props) == 0:
	case f.text != "":
		if a.UserInput != "" {
			content[f.text] = a.UserInput
		}
	default:
		for _, qa := range a.Answers {
			i := slices.IndexFunc(f.props, func(p formProp) bool { return p.name == qa.QuestionID })
			if i < 0 || qa.Skipped {
				continue
			}
			v, err := f.props[i].value(qa)
			if err != nil {
				return decline
			}
			if v != nil {
				content[qa.QuestionID] = v
			}
		}
	}
	for _, p := range f.props {
		if _, ok := content[p.name]; p.required && !ok {
			return decline
		}
	}
	return &mcp.ElicitResult{Action: "accept", Content: content}
}

var errBadValue = errors.New("bad value")

// value reads one answer into the property's type; nil for none.
func (p formProp) value(qa instanceai.QuestionAnswer) (any, error) {
	pick := func(label string) (any, bool) {
		i := slices.Index(p.options, label)
		if i < 0 {
			return nil, false
		}
		return p.values[i], true
	}
	switch p.kind {
	case instanceai.QuestionSingle:
		if len(qa.SelectedOptions) == 0 {
			return nil, nil
		}
		v, ok := pick(qa.SelectedOptions[0])
		if !ok {
			return nil, errBadValue
		}
		return v, nil
	case instanceai.QuestionMulti:
		out := []any{}
		for _, o := range qa.SelectedOptions {
			v, ok := pick(o)
			if !ok {
				return nil, errBadValue
			}
			out = append(out, v)
		}
		if len(out) == 0 {
			return nil, nil
		}
		return out, nil
	}
	text := strings.TrimSpace(qa.CustomText)
	if text == "" && len(qa.SelectedOptions) > 0 {
		text = strings.TrimSpace(qa.SelectedOptions[0])
	}
	if text == "" {
		return nil, nil
	}
	switch p.typ {
	case "integer":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, errBadValue
		}
		return n, nil
	case "number":
		n, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, errBadValue
		}
		return n, nil
	}
	return text, nil
}
