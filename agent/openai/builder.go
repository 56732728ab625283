package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/workflow"
)

// maxCompletion bounds a non-streamed answer: a large workflow is some
// hundred kilobytes.
const maxCompletion = 8 << 20

// BuildWorkflow is the agent's builder (op.Builder): it asks the model for
// the workflow as one JSON object, reads it out of the answer, and while
// check finds errors sends them back for a fix, at most BuilderRepairs
// times. It returns the last workflow the model sent (the operation
// reports its validation beside it), or an ErrorDetail when none came:
// llm_service when the model server failed, validation when the model
// answered without a workflow.
//
// The call is not streamed: the builder has no run to show partial text
// in, and only the whole answer can be parsed. A non-streamed answer also
// carries finish_reason and usage in one object, with no stream_options to
// negotiate. RequestTimeout then bounds the whole answer, not each
// silence; the operation's own timeout (45 s) is tighter anyway.
func (a *Agent) BuildWorkflow(ctx context.Context, req op.Request, check op.Validator) (json.RawMessage, error) {
	ask, err := buildRequest(req)
	if err != nil {
		return nil, err
	}
	msgs := []instanceai.HistoryMessage{
		{Role: instanceai.RoleSystem, Content: builderPrompt},
		{Role: instanceai.RoleUser, Content: ask},
	}
	var last json.RawMessage
	for turn := 0; ; turn++ {
		ans, err := a.complete(ctx, msgs)
		if err != nil {
			if last != nil && ctx.Err() == nil {
				// A repair that failed leaves the last workflow the
				// best there is; its findings go to the client.
				a.log.Warn("the model failed while repairing a workflow; keeping the last one", "url", a.chatURL, "err", err)
				return last, nil
			}
			return nil, a.providerDetail(err)
		}
		doc, problem := extractWorkflow(ans.content)
		var followUp string
		if doc != nil {
			last = doc
			_, errs := check(doc)
			if len(errs) == 0 {
				return doc, nil
			}
			followUp = repairMessage(errs)
		} else {
			if ans.finish == "length" {
				if last != nil {
					return last, nil
				}
				return nil, a.llmDetail(CodeMaxTokens, "The model's answer was cut off at its output token limit before the workflow was complete.",
					fmt.Sprintf("finish_reason length after %d output tokens; answer starts: %s", ans.outputTokens, excerpt(ans.content, 300)), nil)
			}
			followUp = "Your answer did not contain a workflow: " + problem + ". Answer with the whole workflow as one JSON object only, no other text."
		}
		if turn >= a.cfg.BuilderRepairs {
			if last != nil {
				return last, nil
			}
			return nil, nonsense(problem, ans.content, turn+1)
		}
		msgs = append(msgs,
			instanceai.HistoryMessage{Role: instanceai.RoleAssistant, Content: ans.content},
			instanceai.HistoryMessage{Role: instanceai.RoleUser, Content: followUp})
	}
}

// builderPrompt tells the model the shape of an n8n workflow and to answer
// with it alone. Connections keyed by node name, and sub-nodes connected
// towards their agent, are what models most often get wrong.
const builderPrompt = `You are an n8n workflow builder. Answer with exactly one JSON object: the complete n8n workflow. No explanations, no Markdown, no code fences, no comments.

The workflow object has:
- "name": a short descriptive name.
- "nodes": an array of nodes, each {"id": a unique UUID string, "name": a unique display name, "type": the n8n node type (e.g. "n8n-nodes-base.webhook", "n8n-nodes-base.scheduleTrigger", "n8n-nodes-base.httpRequest", "n8n-nodes-base.if", "n8n-nodes-base.set", "@n8n/n8n-nodes-langchain.agent"), "typeVersion": the node type's version number, "position": [x, y] (left to right, about 220 apart), "parameters": an object with the node's settings}.
- "connections": an object keyed by the SOURCE node's name (never its id). Each value maps a connection type to an array with one entry per output index; each entry is the array of inputs that output feeds, {"node": target node name, "type": connection type, "index": input index}.
  Ordinary data flows on "main". AI sub-nodes connect FROM the sub-node TO the agent or chain that uses them, on their own type: a chat model on "ai_languageModel", memory on "ai_memory", a tool on "ai_tool", an output parser on "ai_outputParser" (the same type as the key and as the target's "type").
- "settings": {"executionOrder": "v1"}.

Rules: start with a trigger node (manual trigger, webhook, schedule, form, chat, or an app trigger); connect every other node; use node names exactly as written in "nodes" inside "connections".

Example:
{"name":"Daily report","nodes":[{"id":"5f0d3c52-1b7e-4a8e-9a51-1c2d3e4f5a60","name":"Every Day","type":"n8n-nodes-base.scheduleTrigger","typeVersion":1.2,"position":[0,0],"parameters":{"rule":{"interval":[{"field":"days"}]}}},{"id":"0b6a8e2e-7c1d-4f3a-8e9b-2a3b4c5d6e7f","name":"Fetch Report","type":"n8n-nodes-base.httpRequest","typeVersion":4.2,"position":[220,0],"parameters":{"url":"https://example.com/report","options":{}}}],"connections":{"Every Day":{"main":[[{"node":"Fetch Report","type":"main","index":0}]]}},"settings":{"executionOrder":"v1"}}`

// buildRequest is the user message of an operation.
func buildRequest(req op.Request) (string, error) {
	switch req.Kind {
	case op.Generate:
		return "Build an n8n workflow for this description:\n\n" + req.Description, nil
	case op.Modify:
		return "Here is an existing n8n workflow:\n\n" + strings.TrimSpace(req.Existing) +
			"\n\nModify it as follows: " + req.Description +
			"\n\nAnswer with the whole modified workflow. Keep the nodes, names, ids, parameters and connections the change does not touch exactly as they are.", nil
	case op.Iterate:
		var b strings.Builder
		b.WriteString("Here is an n8n workflow that was tested:\n\n")
		b.WriteString(strings.TrimSpace(req.Existing))
		b.WriteString("\n\nFeedback from testing it: ")
		b.WriteString(req.Feedback)
		if req.Additional != "" {
			b.WriteString("\n\nAdditional requirements: ")
			b.WriteString(req.Additional)
		}
		b.WriteString("\n\nAnswer with the whole improved workflow, addressing the feedback. Keep what the feedback does not concern exactly as it is.")
		return b.String(), nil
	}
	return "", fmt.Errorf("unknown builder operation %q", req.Kind)
}

// repairMessage lists the validation errors of the model's workflow, each
// with its fix suggestions, and asks for the corrected whole.
func repairMessage(errs []workflow.ErrorDetail) string {
	var b strings.Builder
	b.WriteString("The workflow you sent does not pass validation:\n")
	for i, e := range errs {
		fmt.Fprintf(&b, "%d. %s\n", i+1, e.Message)
		for _, f := range e.FixSuggestions {
			fmt.Fprintf(&b, "   - fix: %s\n", f)
		}
	}
	b.WriteString("\nAnswer with the whole corrected workflow as one JSON object only, no other text.")
	return b.String()
}

// nonsense is the error of a model that never sent a workflow.
func nonsense(problem, content string, answers int) *workflow.ErrorDetail {
	return &workflow.ErrorDetail{Category: workflow.CategoryValidation, Severity: workflow.SeverityError,
		Title:   "The Model Did Not Return a Workflow",
		Message: fmt.Sprintf("The model answered %d time(s) without a workflow JSON object: %s.", answers, problem),
		UserGuidance: "The model did not produce n8n workflow JSON. Describe the workflow more concretely (trigger, steps, services), " +
			"or use a larger or instruction-tuned model that follows JSON instructions.",
		FixSuggestions: []string{"Name the trigger and each step of the workflow", "Try again: models do not answer the same way twice",
			"Use a larger or instruction-tuned model", "Enable JSON mode or structured output on the LLM service"},
		TechnicalDetails: "last answer: " + excerpt(content, 500),
	}
}

// completion is a non-streamed answer.
type completion struct {
	content      string
	finish       string
	outputTokens int
}

// complete asks the model once, not streamed, in JSON mode unless the
// server refused it, with the agent's retry policy.
func (a *Agent) complete(ctx context.Context, msgs []instanceai.HistoryMessage) (*completion, error) {
	return withRetries(ctx, a, func() (*completion, error) {
		req := chatRequest{Model: a.cfg.Model, Messages: wireMessages(msgs)}
		var optional []string
		if _, set := a.options[fieldResponseFormat]; !set && !a.noResponseFormat.Load() {
			// OpenAI, vLLM, Ollama and llama-server accept json_object;
			// LM Studio refuses it (400 naming response_format), which
			// drops it for the agent's later requests.
			req.ResponseFormat = &responseFormat{Type: "json_object"}
			optional = append(optional, fieldResponseFormat)
		}
		x, err := a.post(ctx, req, "application/json", optional...)
		if err != nil {
			return nil, err
		}
		defer x.close()
		body, err := io.ReadAll(io.LimitReader(x.resp.Body, maxCompletion))
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if errors.Is(context.Cause(x.ctx), errIdleTimeout) {
				return nil, a.transportFailure(errIdleTimeout)
			}
			pe := a.failure(CodeStreamInterrupted, 0,
				fmt.Sprintf("The connection to the model server at %s broke while the answer was arriving; try again.", a.cfg.BaseURL),
				fmt.Sprintf("reading the answer of POST %s: %v", a.chatURL, err))
			if retryableTransport(err) {
				return nil, &retryable{err: pe}
			}
			return nil, pe
		}
		return a.readCompletion(body)
	})
}

// readCompletion reads a chat.completion object.
func (a *Agent) readCompletion(body []byte) (*completion, error) {
	var resp struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
				Refusal *string `json:"refusal"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) == 0 {
		if up := upstreamMessage(body); up.msg != "" {
			// Some servers answer an error with 200.
			return nil, a.failure(CodeUpstreamError, 0,
				fmt.Sprintf("The model server at %s reported an error: %q.", a.cfg.BaseURL, excerpt(up.msg, 300)),
				fmt.Sprintf("200 from POST %s: %s", a.chatURL, body))
		}
		return nil, a.failure(CodeInvalidResponse, 0,
			fmt.Sprintf("The model server at %s sent an answer this agent cannot read. Check that %s is an OpenAI-compatible API.", a.cfg.BaseURL, a.cfg.BaseURL),
			fmt.Sprintf("200 from POST %s without choices: %s", a.chatURL, body))
	}
	c := resp.Choices[0]
	out := &completion{finish: c.FinishReason, outputTokens: resp.Usage.CompletionTokens}
	if c.Message.Content != nil {
		out.content = *c.Message.Content
	}
	if out.content == "" && c.Message.Refusal != nil && *c.Message.Refusal != "" {
		out.content = *c.Message.Refusal
	}
	if c.FinishReason == "content_filter" {
		return nil, a.failure(CodeContentFilter, 0, "The model server's content filter stopped the answer. Rephrase the request.", "finish_reason content_filter")
	}
	return out, nil
}

// thinking matches the reasoning some local models write before their
// answer (Qwen, DeepSeek R1 through servers that do not split it off).
var thinking = regexp.MustCompile(`(?s)<think>.*?</think>`)

// extractWorkflow reads the workflow out of a model's answer: the first
// JSON object in it that has nodes (or holds one under "workflow"), else
// the first JSON object of any kind (validation will say what it lacks).
// Code fences and text around the object do not matter. problem says why
// nothing was found: for a workflow that is not valid JSON (a trailing
// comma, a cut-off answer) it is the syntax error with its line and
// column, which is what the model needs to fix it.
func extractWorkflow(content string) (doc json.RawMessage, problem string) {
	text := thinking.ReplaceAllString(content, "")
	if strings.TrimSpace(text) == "" {
		return nil, "the answer was empty"
	}
	var first json.RawMessage
	broken := "" // the syntax error of a malformed workflow
	inside := 0  // objects before this offset are parts of a malformed one
	for i := 0; i < len(text); i++ {
		if text[i] != '{' {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(text[i:]))
		var obj json.RawMessage
		if err := dec.Decode(&obj); err != nil {
			var se *json.SyntaxError
			end := len(text) // unexpected EOF: it runs to the end
			if errors.As(err, &se) {
				end = i + int(se.Offset)
			}
			if span := text[i:end]; broken == "" && strings.Contains(span, `"nodes"`) {
				if _, perr := workflow.Parse([]byte(text[i:])); perr != nil {
					broken = "the workflow is not valid JSON (" + perr.Error() + ")"
				}
			}
			inside = max(inside, end)
			continue
		}
		if w := workflowIn(obj); w != nil {
			return w, ""
		}
		if first == nil && i >= inside {
			first = obj
		}
		i += int(dec.InputOffset()) - 1
	}
	switch {
	case broken != "":
		return nil, broken
	case first != nil:
		return compact(first), ""
	case strings.Contains(text, "{"):
		return nil, "the JSON in the answer is incomplete or malformed"
	}
	return nil, fmt.Sprintf("the answer was text without any JSON object (%q)", excerpt(text, 80))
}

// workflowIn returns obj when it is a workflow (has nodes), or the
// workflow it wraps under "workflow", else nil.
func workflowIn(obj json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(obj, &fields) != nil {
		return nil
	}
	if _, ok := fields["nodes"]; ok {
		if _, err := workflow.Parse(obj); err == nil {
			return compact(obj)
		}
		return nil
	}
	if inner, ok := fields["workflow"]; ok {
		return workflowIn(inner)
	}
	return nil
}

// compact drops the insignificant white space a model pretty-prints with.
func compact(obj json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, obj) != nil {
		return obj
	}
	return b.Bytes()
}
