package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/threadline/threadline/agent/conversation"
	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/tracing"
)

// loop is one run's conversation with the model.
type loop struct {
	a    *Agent
	run  *instanceai.Run
	msgs []instanceai.HistoryMessage
	// tools is what the request offers; client names the client's tools.
	tools  []wireTool
	client map[string]bool
	// server holds the registry's tools as they were when the run began:
	// the registry's changing tools (an MCP server's) may come and go
	// meanwhile, and a call is run by the tool the model was offered.
	server map[string]tools.Tool
	// seen holds the tool call ids of the conversation: a server that
	// repeats one (some number calls per response) gets a fresh id, as the
	// log and the tree key calls by id.
	seen map[string]bool
	// steps counts the model calls made for the run.
	steps int
	// resuming is set when continuing after a restart: the client's tools
	// are not known then, so a call to a tool outside the registry is taken
	// for a client tool and left open.
	resuming bool
	// attached are the files the step's tools handed the model
	// (tools.Call.Attach), sent after the step's tool messages.
	attachedMu sync.Mutex
	attached   []instanceai.Attachment
}

func (a *Agent) newLoop(run *instanceai.Run, history []instanceai.HistoryMessage, clientTools []instanceai.ToolSpec) *loop {
	l := &loop{a: a, run: run, client: map[string]bool{}, seen: map[string]bool{}, server: map[string]tools.Tool{}}
	if a.cfg.SystemPrompt != "" {
		l.msgs = append(l.msgs, instanceai.HistoryMessage{Role: instanceai.RoleSystem, Content: a.cfg.SystemPrompt})
	}
	if c := contextMessage(run.Context); c != "" {
		l.msgs = append(l.msgs, instanceai.HistoryMessage{Role: instanceai.RoleSystem, Content: c})
	}
	l.msgs = append(l.msgs, history...)
	for _, m := range history {
		for _, c := range m.ToolCalls {
			l.seen[c.ID] = true
		}
	}
	for _, t := range a.cfg.Tools.List() {
		l.server[t.Name] = t
		l.tools = append(l.tools, functionTool(t.Name, t.Description, t.Parameters))
	}
	for _, t := range clientTools {
		if _, server := l.server[t.Name]; server || l.client[t.Name] || t.Name == "" {
			// The server's tool of that name wins: the model cannot say
			// which one it means.
			a.log.Warn("ignoring a client tool that repeats a tool name", "tool", t.Name, "run", run.ID)
			continue
		}
		l.client[t.Name] = true
		l.tools = append(l.tools, functionTool(t.Name, t.Description, t.Parameters))
	}
	return l
}

// loop calls the model until it answers without tool calls.
func (l *loop) loop(ctx context.Context) error {
	for {
		if l.steps >= l.a.cfg.MaxSteps {
			return l.a.failure(CodeStepLimit, 0,
				fmt.Sprintf("The agent stopped after %d model calls without a final answer (the step limit). The tool results so far are kept: send a message such as \"continue\" to let it go on, or raise the agent's step limit.", l.a.cfg.MaxSteps),
				fmt.Sprintf("MaxSteps %d reached; the last step made tool calls", l.a.cfg.MaxSteps))
		}
		l.steps++
		res, err := l.a.modelCall(ctx, l)
		if err != nil {
			return err
		}
		switch res.finish {
		case "length":
			return l.a.failure(CodeMaxTokens, 0,
				"The model's answer was cut off at its output token limit. Ask for a shorter answer, or raise the model's max tokens on the server.",
				fmt.Sprintf("finish_reason length after %d tokens of output", res.usage.CompletionTokens))
		case "content_filter":
			return l.a.failure(CodeContentFilter, 0,
				"The model server's content filter stopped the answer. Rephrase the request.",
				"finish_reason content_filter")
		}
		if len(res.calls) == 0 {
			return nil
		}
		msg := instanceai.HistoryMessage{Role: instanceai.RoleAssistant, Content: res.text}
		for _, c := range res.calls {
			if c.name == "" {
				continue // unanswerable: OpenAI needs a function name
			}
			args := c.args
			if args == nil {
				args = json.RawMessage(`{}`) // the model's text was not JSON; echoing it could be refused
			}
			msg.ToolCalls = append(msg.ToolCalls, instanceai.HistoryToolCall{ID: c.id, Name: c.name, Arguments: args})
		}
		l.msgs = append(l.msgs, msg)
		stop, err := l.settle(ctx, res.calls, nil)
		if err != nil || stop {
			return err
		}
	}
}

// stepCall is one tool call of a model response.
type stepCall struct {
	id, name string
	args     json.RawMessage // nil when the arguments were not a JSON object
	argsErr  string          // the translator's tool-error, already emitted
}

// decided is an answer already given for one call (Resume).
type decided struct {
	toolCallID string
	answer     instanceai.Answer
	// asked is set when the answer is to a question the tool asked while
	// it ran (an MCP elicitation), not to its approval: the process that
	// ran it is gone, so the call is reported interrupted, not run again.
	asked bool
}

// settle gives each call of a step its outcome and the model its tool
// message: bad arguments and unknown tools first (they are instant), then
// the server tools in call order (asking for approval where needed); client
// tools are left open for the client. It reports whether the run must stop
// here because a client tool is open.
func (l *loop) settle(ctx context.Context, calls []stepCall, pre *decided) (stop bool, err error) {
	results := map[string]string{}
	var pending []stepCall
	for _, c := range calls {
		switch {
		case c.name == "":
			// The translator reported it; there is no call to answer.
		case c.argsErr != "":
			results[c.id] = conversation.ErrorText(c.argsErr + ". Call the tool again with arguments that are a JSON object matching its parameters.")
		case l.isClient(c.name):
			stop = true
		default:
			if _, ok := l.server[c.name]; ok {
				pending = append(pending, c)
				continue
			}
			msg := fmt.Sprintf("There is no tool named %q. %s", c.name, l.toolNames())
			if err := l.emit(ctx, instanceai.Event{Type: instanceai.TypeToolError,
				Payload: &instanceai.ToolError{ToolCallID: c.id, Error: msg}}); err != nil {
				return false, err
			}
			results[c.id] = conversation.ErrorText(msg)
		}
	}
	for _, c := range pending {
		t := l.server[c.name]
		if pre != nil && pre.asked && pre.toolCallID == c.id {
			msg := "The tool was interrupted by a server restart while it waited for the person's answer to its question, so it did not finish. Call it again if it is still needed."
			if err := l.emit(ctx, instanceai.Event{Type: instanceai.TypeToolError,
				Payload: &instanceai.ToolError{ToolCallID: c.id, Error: msg}}); err != nil {
				return false, err
			}
			results[c.id] = conversation.ErrorText(msg)
			continue
		}
		var answer *instanceai.Answer
		if pre != nil && pre.toolCallID == c.id {
			answer = &pre.answer
		}
		content, err := l.runTool(ctx, t, c, answer)
		if err != nil {
			return false, err
		}
		results[c.id] = content
	}
	for _, c := range calls {
		if content, ok := results[c.id]; ok {
			l.msgs = append(l.msgs, instanceai.HistoryMessage{Role: instanceai.RoleTool, ToolCallID: c.id, Content: content})
		}
	}
	l.attachedMu.Lock()
	attached := l.attached
	l.attached = nil
	l.attachedMu.Unlock()
	if len(attached) > 0 && !stop {
		// Chat Completions tool messages carry text only: the images a
		// tool returned follow as a user message with content parts.
		l.msgs = append(l.msgs, instanceai.HistoryMessage{Role: instanceai.RoleUser,
			Content: "The tool results above returned these files.", Attachments: attached})
	}
	return stop, nil
}

// call is what the tool t may do with the run while it runs c.
func (l *loop) call(t tools.Tool, c stepCall) *tools.Call {
	return &tools.Call{
		ToolCallID: c.id, ToolName: t.Name,
		Confirm: func(ctx context.Context, req instanceai.ConfirmationRequest) (instanceai.Answer, error) {
			req.ToolCallID = cmp.Or(req.ToolCallID, c.id)
			req.ToolName = cmp.Or(req.ToolName, t.Name)
			if req.Args == nil {
				req.Args = c.args
			}
			req.Severity = cmp.Or(req.Severity, instanceai.SeverityInfo)
			return l.run.Confirm(ctx, "", req)
		},
		Status: func(message string) error {
			return l.run.Emit(instanceai.Event{Type: instanceai.TypeStatus, Payload: &instanceai.Status{Message: message}})
		},
		Attach: func(a instanceai.Attachment) {
			l.attachedMu.Lock()
			l.attached = append(l.attached, a)
			l.attachedMu.Unlock()
		},
	}
}

func (l *loop) isClient(name string) bool {
	if l.client[name] {
		return true
	}
	_, server := l.server[name]
	return l.resuming && !server
}

// toolNames lists the callable tools for an unknown-tool message.
func (l *loop) toolNames() string {
	var names []string
	for _, t := range l.tools {
		names = append(names, t.Function.Name)
	}
	if len(names) == 0 {
		return "No tools are available."
	}
	return "Available tools: " + strings.Join(names, ", ") + "."
}

// deniedResult is the tool-result of a call a person refused.
type deniedResult struct {
	Denied    bool   `json:"denied"`
	Message   string `json:"message"`
	UserInput string `json:"userInput,omitempty"`
}

// runTool runs one server tool, after approval when it needs one, emits its
// outcome and returns the tool message content.
func (l *loop) runTool(ctx context.Context, t tools.Tool, c stepCall, answer *instanceai.Answer) (string, error) {
	// The span names the tool, never its arguments or result.
	ctx, span := tracing.Start(ctx, "tool.call", attribute.String("tool.name", t.Name))
	defer span.End()
	if t.NeedsApproval {
		if answer == nil {
			a, err := l.run.Confirm(ctx, "", instanceai.ConfirmationRequest{
				ToolCallID: c.id, ToolName: c.name, Args: c.args,
				Severity: cmp.Or(t.Severity, instanceai.SeverityWarning),
				Message:  approvalMessage(t, c.args),
			})
			if err != nil {
				if ctx.Err() != nil {
					return "", context.Cause(ctx)
				}
				return "", fmt.Errorf("tool %q needs approval, which failed: %w", c.name, err)
			}
			answer = &a
		}
		if !answer.Approved {
			res := deniedResult{Denied: true, Message: "The person did not approve this call, so it was not run. Do not retry it unless they ask."}
			if answer.UserInput != "" {
				res.UserInput = answer.UserInput
			}
			raw, _ := json.Marshal(res)
			if err := l.emit(ctx, instanceai.Event{Type: instanceai.TypeToolResult,
				Payload: &instanceai.ToolResult{ToolCallID: c.id, Result: raw}}); err != nil {
				return "", err
			}
			return string(raw), nil
		}
	}
	result, err := execute(tools.WithCall(ctx, l.call(t, c)), t, c.args)
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	if err != nil {
		span.SetStatus(codes.Error, "tool failed")
		msg := err.Error()
		if msg == "" {
			msg = "the tool failed"
		}
		if e := l.emit(ctx, instanceai.Event{Type: instanceai.TypeToolError,
			Payload: &instanceai.ToolError{ToolCallID: c.id, Error: msg}}); e != nil {
			return "", e
		}
		return conversation.ErrorText(msg), nil
	}
	ev := instanceai.Event{Type: instanceai.TypeToolResult, Payload: &instanceai.ToolResult{ToolCallID: c.id, Result: result}}
	if size := l.eventSize(ev); size > l.a.cfg.MaxEventBytes {
		// Stored, the result would be refused and end the run; handed to
		// the model whole, it would not be what the log says it saw. The
		// model is told instead, and may ask for less.
		span.SetStatus(codes.Error, "tool result too large")
		msg := fmt.Sprintf("The tool's result was %d bytes (%s), over %s, so it was neither kept nor given to you. "+
			"Call the tool again asking for less: a narrower query, fewer fields, a smaller page.",
			len(result), bound.Size(len(result)), bound.Named(l.a.cfg.MaxEventBytes))
		if e := l.emit(ctx, instanceai.Event{Type: instanceai.TypeToolError,
			Payload: &instanceai.ToolError{ToolCallID: c.id, Error: msg}}); e != nil {
			return "", e
		}
		return conversation.ErrorText(msg), nil
	}
	if e := l.emit(ctx, ev); e != nil {
		return "", e
	}
	return conversation.ResultText(result), nil
}

// stampRoom is what the core adds to an event when it is handed over (the
// user id, the time), beside what eventSize counts.
const stampRoom = 256

// eventSize is the size of ev's JSON as the log will hold it, give or take
// stampRoom: what the core measures against the bound on one event.
func (l *loop) eventSize(ev instanceai.Event) int {
	ev.RunID, ev.AgentID = l.run.ID, l.run.AgentID
	raw, err := json.Marshal(ev)
	if err != nil {
		return 0 // the core reports what it cannot encode
	}
	return len(raw) + len(l.run.UserID) + stampRoom
}

// execute runs a tool, turning a panic into an error and a result that is
// not JSON into a JSON string.
func execute(ctx context.Context, t tools.Tool, args json.RawMessage) (result json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the tool %q failed unexpectedly: %v", t.Name, p)
		}
	}()
	if args == nil {
		args = json.RawMessage(`{}`)
	}
	result, err = t.Execute(ctx, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(result) == 0:
		result = json.RawMessage(`null`)
	case !json.Valid(result):
		result, _ = json.Marshal(string(result))
	}
	return result, nil
}

// approvalMessage is the question a person sees before an approval tool
// runs: what will run, with which arguments.
func approvalMessage(t tools.Tool, args json.RawMessage) string {
	what := t.Name
	if d := strings.TrimSpace(strings.SplitN(t.Description, "\n", 2)[0]); d != "" {
		what += " (" + excerpt(d, 160) + ")"
	}
	a := "{}"
	if len(args) > 0 {
		a = excerpt(string(args), 300)
	}
	return fmt.Sprintf("Allow the assistant to run %s with %s?", what, a)
}

// emit publishes one event of the run; after a cancel it returns the cause.
func (l *loop) emit(ctx context.Context, ev instanceai.Event) error {
	if err := l.run.Emit(ev); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	return nil
}

// remapID gives a call id repeated from earlier in the conversation a fresh
// one; byCall keeps the choice for the rest of the response.
func (l *loop) remapID(id string, byCall map[string]string) string {
	if got, ok := byCall[id]; ok {
		return got
	}
	out := id
	if l.seen[id] {
		out = instanceai.NewID("call_")
	}
	l.seen[out] = true
	byCall[id] = out
	return out
}

// wireMessages renders the conversation for the request.
func wireMessages(msgs []instanceai.HistoryMessage) []wireMessage {
	out := make([]wireMessage, 0, len(msgs))
	for _, m := range msgs {
		w := wireMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		content := m.Content
		w.Content = &content
		if m.Role == instanceai.RoleUser && len(m.Attachments) > 0 {
			w.Content = userParts(content, m.Attachments)
		}
		if m.Role == instanceai.RoleAssistant && len(m.ToolCalls) > 0 {
			if content == "" {
				w.Content = nil // null, as OpenAI sends it back
			}
			for _, c := range m.ToolCalls {
				args := string(c.Arguments)
				if args == "" {
					args = "{}"
				}
				wc := wireToolCall{ID: c.ID, Type: "function"}
				wc.Function.Name, wc.Function.Arguments = c.Name, args
				w.ToolCalls = append(w.ToolCalls, wc)
			}
		}
		out = append(out, w)
	}
	return out
}

// Wire types of the Chat Completions request.
type (
	chatRequest struct {
		Model         string         `json:"model"`
		Messages      []wireMessage  `json:"messages"`
		Stream        bool           `json:"stream"`
		StreamOptions *streamOptions `json:"stream_options,omitempty"`
		Tools         []wireTool     `json:"tools,omitempty"`
		// ResponseFormat is the builder's JSON mode.
		ResponseFormat *responseFormat `json:"response_format,omitempty"`
	}
	responseFormat struct {
		Type string `json:"type"`
	}
	streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	wireMessage struct {
		Role string `json:"role"`
		// Content is a *string, []wirePart (a user message with
		// attachments) or nil (null).
		Content    any            `json:"content"`
		ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	wireToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	wireTool struct {
		Type     string       `json:"type"`
		Function wireFunction `json:"function"`
	}
	wireFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}
)

func functionTool(name, description string, params json.RawMessage) wireTool {
	if len(params) == 0 || !json.Valid(params) {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return wireTool{Type: "function", Function: wireFunction{Name: name, Description: description, Parameters: params}}
}

// contextMessage renders the client's context (AG-UI input.context) as a
// system message: what the user's screen shows, which the model should
// take into account.
func contextMessage(items []instanceai.ContextItem) string {
	if len(items) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Context shared by the user's application:")
	for _, c := range items {
		b.WriteString("\n- ")
		if c.Description != "" {
			b.WriteString(c.Description)
			b.WriteString(": ")
		}
		b.WriteString(c.Value)
	}
	return b.String()
}
